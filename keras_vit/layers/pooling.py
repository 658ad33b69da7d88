"""`TokenPooling`: a token sequence becomes one vector ([class] token, mean or max)."""

import keras
from keras import ops

from keras_vit import variants

POOLING_MODES = variants.choices("pooling")


@keras.saving.register_keras_serializable(package="keras_vit")
class TokenPooling(keras.layers.Layer):
    """Pools encoded tokens (B, T, D) to (B, D).

    `"token"` takes token `token_index` (0: the [class] token, paper eq. 4; 1: DeiT's distillation token).
    `"avg"` and `"max"` reduce over the patch tokens, skipping the first `num_prefix_tokens` (the class token when
    there is one, and the distillation token), as the official GAP classifier (which has no class token) and timm's
    `global_pool="avg"` do.

    Args:
        mode: one of `"token"`, `"avg"`, `"max"`.
        num_prefix_tokens: tokens before the patch tokens (1 with a class token, 2 with DeiT's distillation token
            too, else 0).
        token_index: the token `"token"` takes, one of the prefix tokens (default 0, the [class] token).
        **kwargs: base `keras.layers.Layer` arguments.

    Example:
        >>> import numpy as np
        >>> tuple(TokenPooling("avg", num_prefix_tokens=1)(np.ones((2, 5, 8), "float32")).shape)
        (2, 8)
    """

    def __init__(self, mode: str, num_prefix_tokens: int = 1, token_index: int = 0, **kwargs):
        super().__init__(**kwargs)
        if mode not in POOLING_MODES:
            raise ValueError(f"`mode` must be one of {POOLING_MODES}. Received: mode={mode!r}")
        if mode == "token" and num_prefix_tokens < 1:
            raise ValueError(
                "`mode='token'` needs a [class] token (num_prefix_tokens >= 1). "
                f"Received: num_prefix_tokens={num_prefix_tokens}"
            )
        if mode == "token" and not 0 <= token_index < num_prefix_tokens:
            raise ValueError(f"`token_index` must name one of the {num_prefix_tokens} prefix tokens. "
                             f"Received: token_index={token_index}")
        self.mode = mode
        self.num_prefix_tokens = num_prefix_tokens
        self.token_index = int(token_index)

    def call(self, tokens):
        if self.mode == "token":
            return tokens[:, self.token_index]
        patch_tokens = tokens[:, self.num_prefix_tokens:]
        reduce = ops.mean if self.mode == "avg" else ops.max
        return reduce(patch_tokens, axis=1)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1])

    def get_config(self):
        return {**super().get_config(), "mode": self.mode, "num_prefix_tokens": self.num_prefix_tokens,
                "token_index": self.token_index}
