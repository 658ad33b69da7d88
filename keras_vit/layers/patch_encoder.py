"""`PatchEncoder`: linear patch projection, [class] token and position embedding (eq. 1): learned 1-D, or fixed
2-D sin-cos."""

import keras
from keras import ops

from keras_vit import pos_embed


@keras.saving.register_keras_serializable(package="keras_vit")
class PatchEncoder(keras.layers.Layer):
    """Projects flattened patches to D, prepends the [class] token, adds position embeddings.

    Implements z_0 = [x_class; x_p^1 E; ...; x_p^N E] + E_pos (paper eq. 1) followed by the embedding
    dropout of the official code. The sequence length T = N + 1 with the class token (token classifier)
    and T = N without it (GAP classifier); both the number of patches N and their width come from the
    input shape at build time.

    Weights: `projection` (kernel (P*P*C, D), bias (D,)), `class_token` (1, 1, D), and for the learned
    embedding `position_embedding` (1, T, D). The fixed `"sincos2d"` embedding (`keras_vit.pos_embed.sincos_2d`)
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
        if position_embedding not in pos_embed.POSITION_EMBEDDINGS:
            raise ValueError(f"`position_embedding` must be one of {pos_embed.POSITION_EMBEDDINGS}. "
                             f"Received: position_embedding={position_embedding!r}")
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
            self._fixed_embedding = pos_embed.sincos_2d(self.grid, self.hidden_size)
            return
        self.position_embedding = self.add_weight(
            name="position_embedding",
            shape=(1, num_patches + int(self.use_class_token), self.hidden_size),
            initializer=keras.initializers.RandomNormal(stddev=0.02),
        )

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
