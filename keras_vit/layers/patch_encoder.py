"""`PatchEncoder`: linear patch projection, [class] token and position embedding (eq. 1): learned 1-D, or fixed
2-D sin-cos (`sincos_2d`). The kinds of position embedding are this layer's: `POSITION_EMBEDDINGS`,
`check_position_embedding`."""

import keras
import numpy as np
from keras import ops

from keras_vit import variants

POSITION_EMBEDDINGS = variants.choices("pos_embedding")
"""`keras_vit.ViT(pos_embedding=...)`: the paper's learned 1-D table, or big_vision's fixed 2-D sin-cos one."""


def check_position_embedding(kind, hidden_size: int, name: str = "pos_embedding") -> None:
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
    input shape at build time.

    Weights: `projection` (kernel (P*P*C, D), bias (D,)), `class_token` (1, 1, D), and for the learned
    embedding `position_embedding` (1, T, D). The fixed `"sincos2d"` embedding (`sincos_2d`)
    has no weight: it is added to the patch tokens before the [class] token is prepended, as in big_vision.

    Args:
        hidden_size: D, the token width.
        use_class_token: prepend a learnable [class] token.
        dropout_rate: dropout applied to the embedded sequence.
        position_embedding: `"learned"` (the paper's) or `"sincos2d"` (fixed; needs `grid` and D divisible by 4).
        grid: (rows, cols) of the patches, row-major as `Patches` cuts them; needed by `"sincos2d"` only.
        **kwargs: base `keras.layers.Layer` arguments.

    Example:
        >>> import numpy as np
        >>> tuple(PatchEncoder(192)(np.zeros((2, 196, 768), "float32")).shape)
        (2, 197, 192)
    """

    def __init__(self, hidden_size: int, use_class_token: bool = True, dropout_rate: float = 0.0,
                 position_embedding: str = "learned", grid=None, **kwargs):
        super().__init__(**kwargs)
        check_position_embedding(position_embedding, hidden_size, name="position_embedding")
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
        num_patches = input_shape[1]
        if num_patches is None:
            raise ValueError(
                "PatchEncoder needs a known number of patches to size its position embedding. "
                f"Received: input_shape={tuple(input_shape)}."
            )
        self.projection.build(input_shape)
        if self.use_class_token:
            self.class_token = self.add_weight(
                name="class_token", shape=(1, 1, self.hidden_size), initializer="zeros"
            )
        if self.position_embedding_kind == "sincos2d":
            if self.grid[0] * self.grid[1] != num_patches:
                raise ValueError(f"The patch grid {self.grid} does not cover the {num_patches} patches of the input.")
            self.position_embedding = None
            self._fixed_embedding = sincos_2d(self.grid, self.hidden_size)
            return
        self.position_embedding = self.add_weight(
            name="position_embedding",
            shape=(1, num_patches + int(self.use_class_token), self.hidden_size),
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
        """Tokens before the patch tokens (1 with a class token, else 0)."""
        return int(self.use_class_token)

    def call(self, patches, training=None):
        x = self.projection(patches)
        if self.position_embedding is None:  # fixed sin-cos, on the patch tokens only
            x = x + ops.cast(self._fixed_embedding, x.dtype)
        if self.use_class_token:
            batch = ops.shape(x)[0]
            cls = ops.cast(ops.broadcast_to(self.class_token, (batch, 1, self.hidden_size)), x.dtype)
            x = ops.concatenate([cls, x], axis=1)
        if self.position_embedding is not None:
            x = x + ops.cast(self.position_embedding, x.dtype)
        return self.dropout(x, training=training)

    def compute_output_shape(self, input_shape):
        n = input_shape[1]
        return (input_shape[0], None if n is None else n + int(self.use_class_token), self.hidden_size)

    def get_config(self):
        return {
            **super().get_config(),
            "hidden_size": self.hidden_size,
            "use_class_token": self.use_class_token,
            "dropout_rate": self.dropout_rate,
            "position_embedding": self.position_embedding_kind,
            "grid": self.grid,
        }
