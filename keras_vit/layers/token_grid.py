"""`TokenGrid`: a sequence of patch tokens back on the image's patch grid, for dense heads.

Example:
    >>> import numpy as np
    >>> tokens = np.zeros((2, 1 + 4 * 6, 8), "float32")  # [class] + a 4 x 6 grid of 8-wide tokens
    >>> features = np.zeros((2, 32, 48, 3), "float32")    # what the tokenizer read, patch size 8
    >>> tuple(TokenGrid(num_prefix_tokens=1, patch_size=8)([tokens, features]).shape)
    (2, 4, 6, 8)
"""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_vit")
class TokenGrid(keras.layers.Layer):
    """(B, prefix + h*w, D) tokens -> (B, h, w, D): the prefix tokens dropped, the rest in row-major patch order
    (as `Patches` cuts them), with h, w = the tokenized feature map's height and width over `patch_size`.

    Args:
        num_prefix_tokens: tokens before the patch tokens ([class]: 1).
        patch_size: the tokenizer's patch size on the feature map it reads (a hybrid's: on the stem's output).

    Called on `[tokens, features]`, where `features` is the map the tokenizer cut (its shape alone is read).
    """

    def __init__(self, num_prefix_tokens: int, patch_size: int, **kwargs):
        super().__init__(**kwargs)
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.patch_size = int(patch_size)

    def call(self, inputs):
        tokens, features = inputs
        height, width = features.shape[1], features.shape[2]
        if height is None or width is None:
            shape = ops.shape(features)
            height, width = shape[1], shape[2]
        rows, cols = height // self.patch_size, width // self.patch_size
        return ops.reshape(tokens[:, self.num_prefix_tokens:, :], (-1, rows, cols, tokens.shape[-1]))

    def compute_output_shape(self, input_shape):
        tokens, features = input_shape
        rows, cols = (None if size is None else size // self.patch_size for size in features[1:3])
        return (tokens[0], rows, cols, tokens[-1])

    def get_config(self):
        return {**super().get_config(), "num_prefix_tokens": self.num_prefix_tokens, "patch_size": self.patch_size}
