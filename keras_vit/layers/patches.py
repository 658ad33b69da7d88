"""`Patches`: an image becomes a sequence of flattened patches (paper section 3.1, eq. 1); `check_image_size`:
the run-time check that an image of a model of any size (`keras_vit.ViT(input_shape=(None, None, 3))`) is cut
into whole patches."""

import keras
from keras import ops


def check_image_size(images, patch_size: int):
    """`images` (B, H, W, C), refused when H or W is not a multiple of `patch_size` pixels: at once when the sizes
    are known (eagerly, or traced for one size), through a graph assertion on TensorFlow when they are not (a
    graph traced for any size); other backends trace with known sizes.

    Raises:
        ValueError: naming the size and the patch size (InvalidArgumentError from a TensorFlow graph).
    """
    height, width = images.shape[1], images.shape[2]
    if height is not None and width is not None:
        if height % patch_size or width % patch_size:
            raise ValueError(f"Image size must be divisible by the patch size {patch_size}. Received: image size "
                             f"({height}, {width}).")
        return images
    if keras.config.backend() != "tensorflow":
        return images
    from keras_vit import graph_assertions

    return graph_assertions.assert_divisible(images, patch_size, "Image size")


@keras.saving.register_keras_serializable(package="keras_vit")
class Patches(keras.layers.Layer):
    """Splits images (B, H, W, C) into N = HW/P^2 flattened patches (B, N, P*P*C).

    Patches run row-major over the (H/P, W/P) grid and each patch is flattened in (row, column, channel)
    order, so a Dense projection of the result equals the official convolution with kernel = stride = P.
    Channels-last only. With `flatten=False` the patches stay on their grid, (B, H/P, W/P, P*P*C): what a
    `PatchEncoder` of a model of any input size reads the grid from.

    Args:
        patch_size: P, the side of a square patch in pixels.
        flatten: return (B, N, P*P*C) (default) or (B, H/P, W/P, P*P*C).
        **kwargs: base `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Example:
        >>> import numpy as np
        >>> tuple(Patches(16)(np.zeros((2, 224, 224, 3), "float32")).shape)
        (2, 196, 768)
    """

    def __init__(self, patch_size: int, flatten: bool = True, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(patch_size, int) or patch_size < 1:
            raise ValueError(f"`patch_size` must be a positive integer. Received: patch_size={patch_size!r}")
        self.patch_size = patch_size
        self.flatten = bool(flatten)

    def _grid(self, height, width):
        p = self.patch_size
        if height is not None and width is not None and (height % p or width % p):
            raise ValueError(
                f"Image size must be divisible by the patch size {p}. Received: image size ({height}, {width})."
            )
        return (None if height is None else height // p, None if width is None else width // p)

    def build(self, input_shape):
        self._channels = input_shape[-1]  # what the projection after it was built for

    def call(self, images):
        height, width, channels = images.shape[1], images.shape[2], images.shape[3]
        expected = getattr(self, "_channels", None)
        if expected is not None and channels is not None and channels != expected:
            raise ValueError(
                f"The model takes images with {expected} channels; received a batch of shape {tuple(images.shape)} "
                f"with {channels} (channels last). Give it {expected}-channel images (grayscale to RGB: "
                f"np.repeat(images, 3, axis=-1)), or build the model with input_shape=(H, W, {channels}) (a "
                "checkpoint's patch kernel is then adapted, summed over its colour channels for one).")
        p = self.patch_size
        images = check_image_size(images, p)
        grid_h, grid_w = self._grid(height, width)
        if grid_h is None or grid_w is None:
            dynamic = ops.shape(images)
            grid_h, grid_w = dynamic[1] // p, dynamic[2] // p
        x = ops.reshape(images, (-1, grid_h, p, grid_w, p, channels))
        x = ops.transpose(x, (0, 1, 3, 2, 4, 5))
        if not self.flatten:
            return ops.reshape(x, (-1, grid_h, grid_w, p * p * channels))
        return ops.reshape(x, (-1, grid_h * grid_w, p * p * channels))

    def compute_output_shape(self, input_shape):
        grid_h, grid_w = self._grid(input_shape[1], input_shape[2])
        width = self.patch_size * self.patch_size * input_shape[3]
        if not self.flatten:
            return (input_shape[0], grid_h, grid_w, width)
        n = None if grid_h is None or grid_w is None else grid_h * grid_w
        return (input_shape[0], n, width)

    def get_config(self):
        return {**super().get_config(), "patch_size": self.patch_size, "flatten": self.flatten}
