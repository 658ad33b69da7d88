"""`training_gelu`: the MLP's GELU while training; on TensorFlow one compiled float32 kernel each way.

On TensorFlow it is `keras_vit.xla_training.gelu` (forward and gradient each an XLA-compiled function inside
the step's graph, instead of a dozen op-by-op passes). Inference does not use it (the oneDNN graph fuses
matmul, bias and GELU into one kernel there), nor do other backends (PyTorch and JAX fuse GELU and its
gradient themselves) or float64: they get `keras.activations.gelu`.
"""

import keras


def training_gelu(x, approximate: bool = True):
    """GELU of `x` (the tanh form when `approximate`, else the erf form) with a gradient fit for training.

    Same values as `keras.activations.gelu(x, approximate)` (float32 inside; within float32 rounding), and
    its exact derivative.

    Example:
        >>> import numpy as np
        >>> x = np.linspace(-4, 4, 9).astype("float32")
        >>> bool(np.allclose(training_gelu(x), keras.activations.gelu(x, approximate=True), atol=1e-6))
        True
    """
    if keras.config.backend() != "tensorflow" or keras.backend.standardize_dtype(x.dtype) == "float64":
        return keras.activations.gelu(x, approximate=approximate)
    from keras_vit import xla_training

    return xla_training.gelu(bool(approximate))(x)
