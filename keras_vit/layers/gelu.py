"""`training_gelu`: GELU for a training step, on TensorFlow one compiled float32 kernel each way.

A TensorFlow training step that runs as a graph without XLA (keras_vit's `mixed_bfloat16` training: XLA's
CPU dot is slow in bf16) computes GELU and its gradient op by op: the tanh form's gradient is about ten
full passes over the (B*T, mlp_dim) hidden layer, in bf16 through Eigen's emulated arithmetic, a quarter
of ViT-S/16's bf16 step on an Intel AMX host. Here the forward and the gradient are each one
XLA-compiled function (`jit_compile=True` inside the graph: one fused loop, in float32, cast back once),
joined by `tf.custom_gradient`; a step compiled whole by XLA inlines them. Inference does not use it (the
oneDNN graph fuses matmul, bias and GELU into one kernel there), nor do other backends (PyTorch and JAX
fuse GELU and its gradient themselves): they get `keras.activations.gelu`, as does float64.
"""

import functools
import math

import keras

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_CUBIC = 0.044715  # the tanh form's coefficient (flax.linen.gelu, tf.nn.gelu, PyTorch's "tanh")


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
    return _tensorflow_gelu(bool(approximate))(x)


@functools.cache
def _tensorflow_gelu(approximate):
    import tensorflow as tf

    def value_and_slope(x):
        if approximate:  # 0.5 (1 + tanh(u)) as sigmoid(2u): no cancellation where tanh(u) is near -1
            squared = x * x
            half = tf.sigmoid(2.0 * _SQRT_2_OVER_PI * x * (1.0 + _CUBIC * squared))
            value = x * half
            slope = half + x * half * (1.0 - half) * 2.0 * _SQRT_2_OVER_PI * (1.0 + 3.0 * _CUBIC * squared)
        else:
            cdf = 0.5 * (1.0 + tf.math.erf(x * (1.0 / math.sqrt(2.0))))
            value = x * cdf
            slope = cdf + x * tf.exp(-0.5 * x * x) * (1.0 / math.sqrt(2.0 * math.pi))
        return value, slope

    @tf.function(jit_compile=True, autograph=False, reduce_retracing=True)
    def forward(x):
        value, _ = value_and_slope(tf.cast(x, tf.float32))
        return tf.cast(value, x.dtype)

    @tf.function(jit_compile=True, autograph=False, reduce_retracing=True)
    def backward(x, upstream):
        _, slope = value_and_slope(tf.cast(x, tf.float32))
        return tf.cast(tf.cast(upstream, tf.float32) * slope, upstream.dtype)

    @tf.custom_gradient
    def gelu(x):
        return forward(x), lambda upstream: backward(x, upstream)

    return gelu
