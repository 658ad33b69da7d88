"""`LayerNormalization`: Keras' layer of that name, its inference written as TensorFlow runs it fastest."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_vit")
class LayerNormalization(keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization` (same arguments, weights and config) with a shorter TensorFlow graph.

    It keeps Keras' class name, so a `.keras` or `.weights.h5` file stores its weights under the same path
    (`layers/layer_normalization/...`) whichever of the two classes wrote it.

    Keras' op scales by `rsqrt(variance) * gamma` and shifts by `beta - mean * that`, two full-size products
    and sums, then casts; on the TensorFlow backend this layer computes `(x - mean) * rsqrt(variance + eps) *
    gamma + beta` in float32 and casts once to the compute dtype: the same values (float32 statistics, as
    Keras computes them for bf16 and float16 inputs) in fewer passes over the tokens, 7% of ViT-B/16's bf16
    inference on an Intel AMX host (benchmarks/README.md). Training, other backends, other axes and RMS
    scaling run Keras' own op (PyTorch's fused `layer_norm`, XLA's fusion on JAX; in a TensorFlow training
    step this form kept about 110 MiB more for ViT-S/16's backward pass at batch 16).

    Example:
        >>> import numpy as np
        >>> x = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
        >>> ours, theirs = LayerNormalization(epsilon=1e-6), keras.layers.LayerNormalization(epsilon=1e-6)
        >>> bool(np.allclose(ours(x), theirs(x), atol=1e-5))
        True
    """

    def call(self, inputs, training=None):
        axes = self.axis if isinstance(self.axis, list) else [self.axis]  # Keras keeps a list once built
        last_axis = len(axes) == 1 and axes[0] in (-1, len(inputs.shape) - 1)
        plain = last_axis and self.center and self.scale and not self.rms_scaling
        if training or keras.config.backend() != "tensorflow" or not plain:
            return super().call(inputs)
        dtype = keras.backend.result_type(inputs.dtype, "float32")
        x = ops.cast(inputs, dtype)
        centered = x - ops.mean(x, axis=-1, keepdims=True)
        variance = ops.mean(ops.square(centered), axis=-1, keepdims=True)
        y = centered * ops.rsqrt(variance + self.epsilon) * ops.cast(self.gamma, dtype) + ops.cast(self.beta, dtype)
        return ops.cast(y, self.compute_dtype)
