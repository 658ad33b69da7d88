"""Run-time assertions inside a TensorFlow graph traced for unknown sizes: the one TensorFlow-only piece the model
code calls (behind its backend check), since `keras.ops` has no assertion op. JAX and PyTorch trace with known
sizes, where the model's own checks run at trace time.

Example:
    >>> import numpy as np
    >>> tuple(assert_divisible(np.zeros((1, 32, 16, 3), "float32"), 8, "Image size").shape)
    (1, 32, 16, 3)
"""


def assert_divisible(images, patch_size: int, what: str):
    """`images` (B, H, W, C) after a graph assertion that H and W are multiples of `patch_size` (an
    InvalidArgumentError naming `what`, the patch size and the received height and width otherwise)."""
    import tensorflow as tf

    shape = tf.shape(images)
    check = tf.debugging.Assert(
        tf.logical_and(tf.equal(shape[1] % patch_size, 0), tf.equal(shape[2] % patch_size, 0)),
        [f"{what} must be divisible by the patch size {patch_size}. Received: image size (height, width):",
         shape[1], shape[2]])
    with tf.control_dependencies([check]):
        return tf.identity(images)
