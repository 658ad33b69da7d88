"""`DropPath`: stochastic depth (Huang et al. 2016), as used by DeiT/AugReg ViT training."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_vit")
class DropPath(keras.layers.Layer):
    """Drops a whole residual branch per example with probability `rate` while training.

    Kept examples are scaled by 1 / (1 - rate) so that the expected output is unchanged; at inference
    the layer is the identity.

    Args:
        rate: probability of dropping the branch, in [0, 1).
        seed: optional integer seed.
        **kwargs: base `keras.layers.Layer` arguments.

    Example:
        >>> import numpy as np
        >>> tuple(DropPath(0.1)(np.ones((2, 3, 4), "float32"), training=False).shape)
        (2, 3, 4)
    """

    def __init__(self, rate: float, seed: int | None = None, **kwargs):
        super().__init__(**kwargs)
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 <= rate < 1.0:
            raise ValueError(f"`rate` must be in [0, 1). Received: rate={rate!r}")
        self.rate = rate
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    def call(self, x, training=None):
        if not training or self.rate == 0.0:
            return x
        keep = 1.0 - self.rate
        shape = (ops.shape(x)[0],) + (1,) * (len(x.shape) - 1)
        random = keras.random.uniform(shape, seed=self.seed_generator, dtype=x.dtype)
        mask = ops.floor(random + ops.cast(keep, x.dtype))
        return x * mask / ops.cast(keep, x.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "rate": self.rate, "seed": self.seed}
