"""The TensorFlow-only training kernels the model code calls behind its backend check: the MLP's GELU and
LayerNorm, forward and gradient each one XLA-compiled float32 function.

A TensorFlow training step that runs as a graph without XLA (keras_vit's `mixed_bfloat16` training: XLA's
CPU dot is slow in bf16) computes these op by op: the tanh-GELU's gradient alone is about ten full passes
over the (B*T, mlp_dim) hidden layer, in bf16 through Eigen's emulated arithmetic. Here the forward and the
gradient are each a `tf.function(jit_compile=True)` (one fused loop inside the graph, in float32, cast back
once), joined by `tf.custom_gradient`; the backward keeps only the input. A step that XLA compiles whole
inlines them. Figures in benchmarks/README.md ("Training's GELU and LayerNorm as XLA-compiled functions").

Example:
    >>> import numpy as np
    >>> import tensorflow as tf
    >>> x = tf.constant(np.linspace(-4, 4, 9), tf.float32)
    >>> bool(np.allclose(gelu(approximate=True)(x), tf.nn.gelu(x, approximate=True), atol=1e-6))
    True
"""

import functools
import math

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_CUBIC = 0.044715  # the tanh form's coefficient (flax.linen.gelu, tf.nn.gelu, PyTorch's "tanh")


@functools.cache
def gelu(approximate: bool):
    """x -> GELU(x) (the tanh form when `approximate`, else the erf form) with its exact derivative, for a
    float32, float16 or bfloat16 tensor (computed in float32, returned in its dtype)."""
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
    def gelu_of(x):
        return forward(x), lambda upstream: backward(x, upstream)

    return gelu_of


@functools.cache
def layer_norm(epsilon: float):
    """(x, gamma, beta) -> LayerNorm over the last axis of x (any rank), float32 statistics, in x's dtype;
    `gamma` and `beta` may be variables (read here, so that their gradients reach them)."""
    import tensorflow as tf

    def normalized(x):
        mean = tf.reduce_mean(x, axis=-1, keepdims=True)
        centered = x - mean
        inverse = tf.math.rsqrt(tf.reduce_mean(centered * centered, axis=-1, keepdims=True) + epsilon)
        return centered * inverse, inverse

    @tf.function(jit_compile=True, autograph=False, reduce_retracing=True)
    def forward(x, gamma, beta):
        x_hat, _ = normalized(tf.cast(x, tf.float32))
        return tf.cast(x_hat * tf.cast(gamma, tf.float32) + tf.cast(beta, tf.float32), x.dtype)

    @tf.function(jit_compile=True, autograph=False, reduce_retracing=True)
    def backward(x, gamma, upstream):
        rows = tf.stack([-1, tf.shape(x)[-1]])  # any rank (one function serves every LayerNorm): as (rows, D)
        x_hat, inverse = normalized(tf.reshape(tf.cast(x, tf.float32), rows))
        upstream32 = tf.reshape(tf.cast(upstream, tf.float32), rows)
        d_gamma = tf.reduce_sum(upstream32 * x_hat, axis=0)
        d_beta = tf.reduce_sum(upstream32, axis=0)
        d_hat = upstream32 * tf.cast(gamma, tf.float32)
        d_x = inverse * (d_hat - tf.reduce_mean(d_hat, axis=-1, keepdims=True)
                         - x_hat * tf.reduce_mean(d_hat * x_hat, axis=-1, keepdims=True))
        return (tf.reshape(tf.cast(d_x, x.dtype), tf.shape(x)), tf.cast(d_gamma, gamma.dtype),
                tf.cast(d_beta, gamma.dtype))

    @tf.custom_gradient
    def norm(x, gamma, beta):
        return forward(x, gamma, beta), lambda upstream: backward(x, gamma, upstream)

    def read_and_norm(x, gamma, beta):
        return norm(x, tf.identity(gamma), tf.identity(beta))

    return read_and_norm
