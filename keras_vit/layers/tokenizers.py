"""Tokenizers for small data, in place of the paper's linear patch projection (`keras_vit.ViT(tokenizer=...)`).

* `ConvStem`: a few stride-2 3x3 convolutions (BatchNorm, ReLU) down to the patch grid, whose feature map the
  `PatchEncoder` projects as 1x1 patches: the "convolutional stem" of Xiao et al. 2021 ("Early Convolutions
  Help Transformers See Better", arXiv 2106.14881), a stack of 3x3 convolutions and one 1x1 projection.
* `ShiftedPatches`: shifted patch tokenization of Lee, Lee and Song 2021 ("Vision Transformer for Small-Size
  Datasets", arXiv 2112.13492): the image and its four diagonal shifts by half a patch, concatenated along the
  channels, cut into patches and layer-normalised before the projection.
"""

import keras
from keras import ops

from keras_vit.layers.layer_norm import LayerNormalization
from keras_vit.layers.patches import Patches, check_image_size


def conv_stem_widths(patch_size: int, hidden_size: int) -> tuple[int, ...]:
    """The channels of `ConvStem`'s stride-2 convolutions for patch size P (a power of two) and width D: log2(P)
    convolutions whose channels double up to D at the last one, at least 16 (as Xiao et al.'s 1GF and 4GF stems).

    Raises:
        ValueError: for a patch size that is not a power of two of at least 2.

    Example:
        >>> conv_stem_widths(4, 64), conv_stem_widths(16, 384)
        ((32, 64), (48, 96, 192, 384))
    """
    if not isinstance(patch_size, int) or patch_size < 2 or patch_size & (patch_size - 1):
        raise ValueError(f"The convolutional stem halves the image once per 3x3 stride-2 convolution, so the patch "
                         f"size must be a power of two (2, 4, 8, 16, ...). Received: patch_size={patch_size!r}")
    count = patch_size.bit_length() - 1
    return tuple(max(16, hidden_size // 2 ** (count - 1 - i)) for i in range(count))


@keras.saving.register_keras_serializable(package="keras_vit")
class ConvStem(keras.layers.Layer):
    """3x3 stride-2 convolutions, each with BatchNorm and ReLU: (B, H, W, C) -> (B, H/P, W/P, widths[-1]).

    Weights: `conv_{i}` (kernel (3, 3, C_in, C_out), no bias) and `norm_{i}` (BatchNorm) for each width.

    Args:
        widths: the output channels of each convolution; P = 2 ** len(widths) (`conv_stem_widths`).
        **kwargs: base `keras.layers.Layer` arguments.

    Example:
        >>> import numpy as np
        >>> tuple(ConvStem((16, 32))(np.zeros((2, 28, 28, 1), "float32")).shape)
        (2, 7, 7, 32)
    """

    def __init__(self, widths, **kwargs):
        super().__init__(**kwargs)
        self.widths = tuple(int(w) for w in widths)
        if not self.widths or min(self.widths) < 1:
            raise ValueError(f"`widths` must be positive channel counts. Received: widths={widths!r}")
        self.convs = [keras.layers.Conv2D(w, 3, strides=2, padding="same", use_bias=False, kernel_initializer="he_normal",
                                          name=f"conv_{i}", dtype=self.dtype_policy) for i, w in enumerate(self.widths)]
        self.norms = [keras.layers.BatchNormalization(momentum=0.9, epsilon=1e-5, name=f"norm_{i}", dtype=self.dtype_policy)
                      for i in range(len(self.widths))]

    @property
    def stride(self) -> int:
        return 2 ** len(self.widths)

    def build(self, input_shape):
        shape = tuple(input_shape)
        for conv, norm in zip(self.convs, self.norms):
            conv.build(shape)
            shape = conv.compute_output_shape(shape)
            norm.build(shape)

    def call(self, images, training=None):
        x = check_image_size(images, self.stride)  # a model of any size: whole patches, not rounded up
        for conv, norm in zip(self.convs, self.norms):
            x = ops.relu(norm(conv(x), training=training))
        return x

    def compute_output_shape(self, input_shape):
        def down(size):
            return None if size is None else -(-size // self.stride)

        return (input_shape[0], down(input_shape[1]), down(input_shape[2]), self.widths[-1])

    def get_config(self):
        return {**super().get_config(), "widths": list(self.widths)}


def check_shifted_patch_size(patch_size) -> None:
    """Refuses a patch size that shifted patches cannot halve (an integer of at least 2 is needed)."""
    if not isinstance(patch_size, int) or patch_size < 2:
        raise ValueError(f"Shifted patches move the image by half a patch: `patch_size` must be an integer of at "
                         f"least 2. Received: patch_size={patch_size!r}")


@keras.saving.register_keras_serializable(package="keras_vit")
class ShiftedPatches(keras.layers.Layer):
    """Shifted patch tokenization: (B, H, W, C) -> (B, N, P*P*5C), layer-normalised patches.

    The image and its four diagonal shifts by P // 2 pixels (zero-filled: up-left, up-right, down-left,
    down-right) are concatenated along the channels, cut into P x P patches as `Patches` does, and each
    flattened patch is layer-normalised; the `PatchEncoder` projects them.

    Args:
        patch_size: P, at least 2.
        epsilon: the LayerNorm epsilon.
        flatten: return (B, N, P*P*5C) (default) or the patches on their grid, (B, H/P, W/P, P*P*5C) (`Patches`).
        **kwargs: base `keras.layers.Layer` arguments.

    Example:
        >>> import numpy as np
        >>> tuple(ShiftedPatches(4)(np.zeros((2, 28, 28, 1), "float32")).shape)
        (2, 49, 80)
    """

    def __init__(self, patch_size: int, epsilon: float = 1e-6, flatten: bool = True, **kwargs):
        super().__init__(**kwargs)
        check_shifted_patch_size(patch_size)
        self.patch_size = patch_size
        self.epsilon = epsilon
        self.flatten = bool(flatten)
        self.patches = Patches(patch_size, flatten=self.flatten, dtype=self.dtype_policy)
        self.norm = LayerNormalization(epsilon=epsilon, name="norm", dtype=self.dtype_policy)

    def build(self, input_shape):
        self.norm.build((None, None, self.patch_size * self.patch_size * 5 * input_shape[-1]))

    def call(self, images):
        s = self.patch_size // 2
        height = images.shape[1] if images.shape[1] is not None else ops.shape(images)[1]
        width = images.shape[2] if images.shape[2] is not None else ops.shape(images)[2]
        padded = ops.pad(images, ((0, 0), (s, s), (s, s), (0, 0)))
        shifts = [padded[:, s + dy:s + dy + height, s + dx:s + dx + width, :] for dy in (-s, s) for dx in (-s, s)]
        return self.norm(self.patches(ops.concatenate([images, *shifts], axis=-1)))

    def compute_output_shape(self, input_shape):
        return self.patches.compute_output_shape((*input_shape[:3], 5 * input_shape[3]))

    def get_config(self):
        return {**super().get_config(), "patch_size": self.patch_size, "epsilon": self.epsilon, "flatten": self.flatten}
