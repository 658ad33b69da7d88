"""`PatchEncoder`: linear patch projection, [class] token and learned 1-D position embedding (eq. 1)."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_vit")
class PatchEncoder(keras.layers.Layer):
    """Projects flattened patches to D, prepends the [class] token, adds position embeddings.

    Implements z_0 = [x_class; x_p^1 E; ...; x_p^N E] + E_pos (paper eq. 1) followed by the embedding
    dropout of the official code. The sequence length T = N + 1 with the class token (token classifier)
    and T = N without it (GAP classifier); both the number of patches N and their width come from the
    input shape at build time.

    Weights: `projection` (kernel (P*P*C, D), bias (D,)), `class_token` (1, 1, D),
    `position_embedding` (1, T, D).

    Args:
        hidden_size: D, the token width.
        use_class_token: prepend a learnable [class] token.
        dropout_rate: dropout applied to the embedded sequence.
        **kwargs: base `keras.layers.Layer` arguments.

    Example:
        >>> import numpy as np
        >>> tuple(PatchEncoder(192)(np.zeros((2, 196, 768), "float32")).shape)
        (2, 197, 192)
    """

    def __init__(self, hidden_size: int, use_class_token: bool = True, dropout_rate: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.use_class_token = use_class_token
        self.dropout_rate = dropout_rate
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
        if self.use_class_token:
            batch = ops.shape(x)[0]
            cls = ops.cast(ops.broadcast_to(self.class_token, (batch, 1, self.hidden_size)), x.dtype)
            x = ops.concatenate([cls, x], axis=1)
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
        }
