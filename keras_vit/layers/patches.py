"""`Patches`: an image becomes a sequence of flattened patches (paper section 3.1, eq. 1)."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_vit")
class Patches(keras.layers.Layer):
    """Splits images (B, H, W, C) into N = HW/P^2 flattened patches (B, N, P*P*C).

    Patches run row-major over the (H/P, W/P) grid and each patch is flattened in (row, column, channel)
    order, so a Dense projection of the result equals the official convolution with kernel = stride = P.
    Channels-last only.

    Args:
        patch_size: P, the side of a square patch in pixels.
        **kwargs: base `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Example:
        >>> import numpy as np
        >>> tuple(Patches(16)(np.zeros((2, 224, 224, 3), "float32")).shape)
        (2, 196, 768)
    """

    def __init__(self, patch_size: int, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(patch_size, int) or patch_size < 1:
            raise ValueError(f"`patch_size` must be a positive integer. Received: patch_size={patch_size!r}")
        self.patch_size = patch_size

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
        grid_h, grid_w = self._grid(height, width)
        p = self.patch_size
        if grid_h is None or grid_w is None:
            dynamic = ops.shape(images)
            grid_h, grid_w = dynamic[1] // p, dynamic[2] // p
        x = ops.reshape(images, (-1, grid_h, p, grid_w, p, channels))
        x = ops.transpose(x, (0, 1, 3, 2, 4, 5))
        return ops.reshape(x, (-1, grid_h * grid_w, p * p * channels))

    def compute_output_shape(self, input_shape):
        grid_h, grid_w = self._grid(input_shape[1], input_shape[2])
        n = None if grid_h is None or grid_w is None else grid_h * grid_w
        return (input_shape[0], n, self.patch_size * self.patch_size * input_shape[3])

    def get_config(self):
        return {**super().get_config(), "patch_size": self.patch_size}
