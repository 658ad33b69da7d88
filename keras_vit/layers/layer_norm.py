"""`LayerNormalization`: Keras' layer of that name, written as TensorFlow runs it fastest."""

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
    inference on an Intel AMX host (benchmarks/README.md). While training on TensorFlow, the forward pass and
    its gradient are each one XLA-compiled float32 function (`keras_vit.xla_training.layer_norm`), which keeps only
    the input for the backward pass: ViT-S/16's `mixed_bfloat16` step at batch 16 on an Intel AMX host took
    about 4% less time and 200 MiB less memory than with Keras' op. Other backends, other axes, RMS scaling
    and float64 run Keras' own op (PyTorch's fused `layer_norm`, XLA's fusion on JAX).

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
        if keras.config.backend() != "tensorflow" or not plain:
            return super().call(inputs)
        if training and keras.backend.standardize_dtype(inputs.dtype) != "float64":
            from keras_vit import xla_training

            y = xla_training.layer_norm(self.epsilon)(inputs, self.gamma.value, self.beta.value)
            return ops.cast(y, self.compute_dtype)
        dtype = keras.backend.result_type(inputs.dtype, "float32")
        x = ops.cast(inputs, dtype)
        centered = x - ops.mean(x, axis=-1, keepdims=True)
        variance = ops.mean(ops.square(centered), axis=-1, keepdims=True)
        y = centered * ops.rsqrt(variance + self.epsilon) * ops.cast(self.gamma, dtype) + ops.cast(self.beta, dtype)
        return ops.cast(y, self.compute_dtype)

