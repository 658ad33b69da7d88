"""Initializers of the official code that Keras' fan computation does not give for multi-axis kernels."""

import math

import keras


def glorot_uniform(fan_in: int, fan_out: int) -> keras.initializers.Initializer:
    """Xavier/Glorot uniform with explicit fans.

    Keras derives fans of a kernel with more than two axes as if it were a convolution, which is wrong
    for the (D, heads, head_dim) attention kernels; the official Flax code uses the fans of the
    equivalent (D, D) matrix. Returns a plain `RandomUniform`, so configs stay serializable.
    """
    limit = math.sqrt(6.0 / (fan_in + fan_out))
    return keras.initializers.RandomUniform(-limit, limit)
