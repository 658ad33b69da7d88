"""`PatchEncoder`: linear patch projection, [class] token (and DeiT's distillation token) and position embedding
(eq. 1): learned 1-D, or fixed 2-D sin-cos (`sincos_2d`). The kinds of position embedding are this layer's:
`POSITION_EMBEDDINGS`, `check_position_embedding`. `resize_grid`: the learned table resampled to another patch
grid inside the graph (a model of any input size), as `keras_vit.checkpoints.position_embedding` does at load time."""

import keras
import numpy as np
from keras import ops

from keras_vit import variants

POSITION_EMBEDDINGS = variants.choices("position_embedding")
"""`keras_vit.ViT(position_embedding=...)`: the paper's learned 1-D table, or big_vision's fixed 2-D sin-cos one."""

INTERPOLATIONS = variants.choices("position_embedding_interpolation")


def _taps(size_in: int, size_out, method: str):
    """[(indices, weights)] of the input rows each of `size_out` output rows mixes: the rows of
    `keras_vit.checkpoints.position_embedding`'s interpolation matrices (corner-aligned bilinear, or Keys' cubic with
    half-pixel centres, taps outside the grid dropped and the rest renormalised), for a `size_out` that may be a
    tensor (a graph traced for any size). An output grid equal to the input's gives weights 1 and 0 exactly."""
    out = ops.cast(size_out, "float32")
    index = ops.cast(ops.arange(size_out), "float32")
    last = float(size_in - 1)
    if method == "bilinear":
        coords = index * (last / ops.maximum(out - 1.0, 1.0))
        low = ops.clip(ops.floor(coords), 0.0, last)
        high = ops.minimum(low + 1.0, last)
        frac = coords - low
        return [(low, 1.0 - frac), (high, frac)]
    coords = (index + 0.5) * float(size_in) / out - 0.5
    base = ops.floor(coords)
    taps = []
    for offset in (-1.0, 0.0, 1.0, 2.0):
        tap = base + offset
        inside = ops.logical_and(tap >= 0.0, tap <= last)
        taps.append((ops.clip(tap, 0.0, last), ops.where(inside, _keys_cubic(coords - tap), 0.0)))
    total = sum(weight for _, weight in taps)
    return [(tap, weight / total) for tap, weight in taps]


def _keys_cubic(t, a: float = -0.5):
    t = ops.abs(t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return ops.where(t <= 1.0, near, ops.where(t < 2.0, far, 0.0))


def _resize_axis(table, size_out, axis: int, method: str):
    shape = [1] * len(table.shape)
    shape[axis] = -1
    return sum(ops.take(table, ops.cast(tap, "int32"), axis=axis) * ops.reshape(weight, shape)
               for tap, weight in _taps(table.shape[axis], size_out, method))


def resize_grid(table, new_grid, method: str = "bilinear"):
    """Resizes a (g_h, g_w, D) float32 table to `new_grid` (rows, cols; ints or scalar tensors) with keras.ops, as
    `keras_vit.checkpoints.position_embedding.resize_grid` does in numpy: the same taps and weights (in float32),
    gathered and summed rather than multiplied by matrices (exact for an equal grid, and free of reduced-precision matmuls).

    Example:
        >>> import numpy as np
        >>> tuple(resize_grid(np.zeros((14, 14, 8), "float32"), (24, 20), "bicubic").shape)
        (24, 20, 8)
    """
    if method not in INTERPOLATIONS:
        raise ValueError(f"`method` must be one of {INTERPOLATIONS}. Received: method={method!r}")
    table = ops.convert_to_tensor(table, "float32")
    return _resize_axis(_resize_axis(table, new_grid[0], 0, method), new_grid[1], 1, method)


def _sincos_2d_in_graph(rows, cols, width: int, temperature: float = 10_000.0):
    """`sincos_2d` for a grid whose size is a tensor (a graph traced for any size), in float32."""
    quarter = width // 4
    omega = ops.convert_to_tensor(
        (1.0 / temperature ** (np.arange(quarter) / max(quarter - 1, 1))).astype("float32"))
    y, x = ops.meshgrid(ops.arange(rows), ops.arange(cols), indexing="ij")
    x_omega = ops.cast(ops.reshape(x, (-1, 1)), "float32") * omega[None]
    y_omega = ops.cast(ops.reshape(y, (-1, 1)), "float32") * omega[None]
    table = ops.concatenate([ops.sin(x_omega), ops.cos(x_omega), ops.sin(y_omega), ops.cos(y_omega)], axis=1)
    return table[None]


def _dim(tensor, axis: int):
    return tensor.shape[axis] if tensor.shape[axis] is not None else ops.shape(tensor)[axis]


def check_position_embedding(kind, hidden_size: int, name: str = "position_embedding") -> None:
    """Refuses an unknown kind (the argument called `name`), or a width the kind cannot fill (each error quotes
    the value)."""
    if kind not in POSITION_EMBEDDINGS:
        raise ValueError(f"`{name}` must be one of {POSITION_EMBEDDINGS}. Received: {name}={kind!r}")
    if kind == "sincos2d" and hidden_size % 4:
        raise ValueError(f"The sincos2d position embedding needs a `hidden_size` divisible by 4. "
                         f"Received: hidden_size={hidden_size}")


def sincos_2d(grid, width: int, temperature: float = 10_000.0) -> np.ndarray:
    """The fixed 2-D sin-cos position embedding (1, g_h * g_w, width) of big_vision's plain ViT baselines
    (`posemb_sincos_2d`, "Better plain ViT baselines", Beyer et al. 2022): a quarter of the channels each for
    sin(x w), cos(x w), sin(y w) and cos(y w), w = temperature ** -(k / (width / 4 - 1)), rows in (y, x) order;
    `grid` is (rows, cols) or an int for a square one.

    Example:
        >>> table = sincos_2d((2, 3), 8)
        >>> table.shape, table[0, 0].tolist()
        ((1, 6, 8), [0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0])
    """
    pair = (grid, grid) if isinstance(grid, (int, np.integer)) else tuple(grid)
    if len(pair) != 2 or not all(isinstance(n, (int, np.integer)) and n > 0 for n in pair):
        raise ValueError(f"`grid` must be a positive int or a (rows, cols) pair. Received: grid={grid!r}")
    rows, cols = int(pair[0]), int(pair[1])
    if width % 4:
        raise ValueError(f"The sin-cos position embedding needs a width divisible by 4. Received: width={width}")
    quarter = width // 4
    omega = 1.0 / temperature ** (np.arange(quarter) / max(quarter - 1, 1))
    y, x = np.mgrid[:rows, :cols]
    x_omega, y_omega = np.outer(x.ravel(), omega), np.outer(y.ravel(), omega)
    table = np.concatenate([np.sin(x_omega), np.cos(x_omega), np.sin(y_omega), np.cos(y_omega)], axis=1)
    return table[None].astype("float32")


@keras.saving.register_keras_serializable(package="keras_vit")
class PatchEncoder(keras.layers.Layer):
    """Projects flattened patches to D, prepends the [class] token, adds position embeddings.

    Implements z_0 = [x_class; x_p^1 E; ...; x_p^N E] + E_pos (paper eq. 1) followed by the embedding
    dropout of the official code. The sequence length T = N + 1 with the class token (token classifier)
    and T = N without it (GAP classifier); both the number of patches N and their width come from the
    input shape at build time. With `distillation_token` (DeiT, arXiv 2012.12877) a second learned token follows
    the [class] token, T = N + 2: [x_class; x_dist; patches] + E_pos, each prefix token with its own table row,
    as timm's `VisionTransformerDistilled` and transformers' `DeiTEmbeddings`.

    Weights: `projection` (kernel (P*P*C, D), bias (D,)), `class_token` (1, 1, D), `distillation_token`
    (1, 1, D) with `distillation_token=True`, and for the learned
    embedding `position_embedding` (1, T, D). The fixed `"sincos2d"` embedding (`sincos_2d`)
    has no weight: it is added to the patch tokens before the [class] token is prepended, as in big_vision.

    Patches on their grid, (B, rows, cols, P*P*C) (`Patches(flatten=False)`), may come on another grid than
    `grid` (a model of any input size): the learned table's patch rows are then resampled to it in the graph
    with `interpolation` (`resize_grid`, the load-time resampling of `keras_vit.checkpoints.position_embedding`; the
    prefix rows kept), the sin-cos table computed for it. On `grid` itself the table is added as it is.

    Args:
        hidden_size: D, the token width.
        use_class_token: prepend a learnable [class] token.
        distillation_token: a learnable distillation token after the [class] token (needs `use_class_token`).
        dropout_rate: dropout applied to the embedded sequence.
        position_embedding: `"learned"` (the paper's) or `"sincos2d"` (fixed; needs `grid` and D divisible by 4).
        grid: (rows, cols) of the patches, row-major as `Patches` cuts them, that the table covers; needed by
            `"sincos2d"` and by patches whose grid is unknown until run time.
        interpolation: how the learned table is resampled to another grid at run time: `"bilinear"` or
            `"bicubic"` (`keras_vit.checkpoints.position_embedding`'s methods).
        **kwargs: base `keras.layers.Layer` arguments.

    Example:
        >>> import numpy as np
        >>> tuple(PatchEncoder(192)(np.zeros((2, 196, 768), "float32")).shape)
        (2, 197, 192)
    """

    def __init__(self, hidden_size: int, use_class_token: bool = True, dropout_rate: float = 0.0,
                 position_embedding: str = "learned", grid=None, interpolation: str = "bilinear",
                 distillation_token: bool = False, **kwargs):
        super().__init__(**kwargs)
        if distillation_token and not use_class_token:
            raise ValueError("The distillation token follows the [class] token: `distillation_token=True` needs "
                             "`use_class_token=True`. Received: use_class_token=False")
        self.use_distillation_token = bool(distillation_token)
        check_position_embedding(position_embedding, hidden_size, name="position_embedding")
        if interpolation not in INTERPOLATIONS:
            raise ValueError(
                f"`interpolation` must be one of {INTERPOLATIONS}. Received: interpolation={interpolation!r}")
        self.interpolation = interpolation
        if position_embedding == "sincos2d" and grid is None:
            raise ValueError("The sincos2d position embedding needs the patch `grid` (rows, cols). Received: grid=None")
        self.hidden_size = hidden_size
        self.use_class_token = use_class_token
        self.dropout_rate = dropout_rate
        self.position_embedding_kind = position_embedding
        self.grid = None if grid is None else tuple(int(n) for n in grid)
        # Flax's Conv default (lecun_normal) for the patch embedding, as the official code.
        self.projection = keras.layers.Dense(
            hidden_size, kernel_initializer="lecun_normal", name="projection", dtype=self.dtype_policy
        )
        self.dropout = keras.layers.Dropout(dropout_rate, dtype=self.dtype_policy)

    def build(self, input_shape):
        on_grid = len(input_shape) == 4
        if on_grid and self.grid is None and None not in input_shape[1:3]:
            self.grid = (int(input_shape[1]), int(input_shape[2]))
        # On their grid, the patches may come on any grid at run time: the table covers `grid`.
        num_patches = (None if self.grid is None else self.grid[0] * self.grid[1]) if on_grid else input_shape[1]
        if num_patches is None:
            raise ValueError(
                "PatchEncoder needs a known number of patches to size its position embedding, or patches on "
                f"their grid (B, rows, cols, F) and the `grid` its table covers. Received: input_shape="
                f"{tuple(input_shape)}, grid={self.grid}."
            )
        self.projection.build((input_shape[0], None, input_shape[-1]))
        if self.use_class_token:
            self.class_token = self.add_weight(
                name="class_token", shape=(1, 1, self.hidden_size), initializer="zeros"
            )
        if self.use_distillation_token:  # DeiT draws it as its position rows (trunc_normal, std 0.02)
            self.distillation_token = self.add_weight(
                name="distillation_token", shape=(1, 1, self.hidden_size),
                initializer=keras.initializers.TruncatedNormal(stddev=0.02)
            )
        if self.position_embedding_kind == "sincos2d":
            if self.grid[0] * self.grid[1] != num_patches:
                raise ValueError(f"The patch grid {self.grid} does not cover the {num_patches} patches of the input.")
            self.position_embedding = None
            self._fixed_embedding = sincos_2d(self.grid, self.hidden_size)
            return
        self.position_embedding = self.add_weight(
            name="position_embedding",
            shape=(1, num_patches + self.num_prefix_tokens, self.hidden_size),
            initializer=keras.initializers.RandomNormal(stddev=0.02),
        )

    def patch_position_table(self) -> np.ndarray:
        """The position embedding each patch token gets, (1, N, D) as numpy: the learned table's patch rows, or
        the fixed table (what section 4.5's similarity figure reads, whatever the kind)."""
        if self.position_embedding is None:
            return np.asarray(self._fixed_embedding)
        return ops.convert_to_numpy(self.position_embedding)[:, self.num_prefix_tokens:]

    @property
    def num_prefix_tokens(self) -> int:
        """Tokens before the patch tokens (1 with a class token, 2 with the distillation token too, else 0)."""
        return int(self.use_class_token) + int(getattr(self, "use_distillation_token", False))

    def call(self, patches, training=None):
        grid = None
        if len(patches.shape) == 4:  # on their grid: flattened row-major, as `Patches` does
            grid = (_dim(patches, 1), _dim(patches, 2))
            patches = ops.reshape(patches, (-1, grid[0] * grid[1], patches.shape[-1]))
            if all(isinstance(n, int) for n in grid) and grid == self.grid:
                grid = None  # the table's own grid
        x = self.projection(patches)
        if self.position_embedding is None:  # fixed sin-cos, on the patch tokens only
            x = x + ops.cast(self._fixed_table(grid), x.dtype)
        if self.use_class_token:
            batch = ops.shape(x)[0]
            prefix = [self.class_token] + ([self.distillation_token] if self.use_distillation_token else [])
            x = ops.concatenate([ops.cast(ops.broadcast_to(token, (batch, 1, self.hidden_size)), x.dtype)
                                 for token in prefix] + [x], axis=1)
        if self.position_embedding is not None:
            x = x + ops.cast(self._learned_table(grid), x.dtype)
        return self.dropout(x, training=training)

    def _fixed_table(self, grid):
        if grid is None:
            return self._fixed_embedding
        if all(isinstance(n, int) for n in grid):
            return sincos_2d(grid, self.hidden_size)  # as a model built for that grid
        return _sincos_2d_in_graph(grid[0], grid[1], self.hidden_size)

    def _learned_table(self, grid):
        if grid is None:
            return self.position_embedding
        table, prefix = ops.convert_to_tensor(self.position_embedding), self.num_prefix_tokens
        patch_rows = ops.reshape(table[0, prefix:], (self.grid[0], self.grid[1], self.hidden_size))
        resized = ops.reshape(resize_grid(patch_rows, grid, self.interpolation), (1, -1, self.hidden_size))
        return ops.concatenate([ops.cast(table[:, :prefix], resized.dtype), resized], axis=1)

    def compute_output_shape(self, input_shape):
        if len(input_shape) == 4:
            n = None if None in input_shape[1:3] else input_shape[1] * input_shape[2]
        else:
            n = input_shape[1]
        return (input_shape[0], None if n is None else n + self.num_prefix_tokens, self.hidden_size)

    def get_config(self):
        return {
            **super().get_config(),
            "hidden_size": self.hidden_size,
            "use_class_token": self.use_class_token,
            "dropout_rate": self.dropout_rate,
            "position_embedding": self.position_embedding_kind,
            "grid": self.grid,
            "interpolation": self.interpolation,
            "distillation_token": self.use_distillation_token,
        }
