"""Optimizers and learning-rate schedules of the paper's recipes (Tables 3 and 4, Appendix B.1).

* `adam`: Adam(beta_1, beta_2); with `weight_decay` > 0 Keras applies it decoupled (as `adamw`).
* `adamw`: AdamW, decoupled weight decay.
* `sgd`: SGD with momentum (fine-tuning: 0.9).

Weight decay applies to kernels only (not biases, LayerNorm scales, class token, position embedding), as
big_vision's `wd` rule `.*/kernel$`; the kernels are found by layer type (the `kernel` of every Dense,
EinsumDense and convolution, including the hybrid's `StdConv2D`), not by variable name. The schedule is a linear warm-up from 0 to `learning_rate` over
`warmup_steps`, then linear decay to 0 or cosine decay to 0 (or constant); a warm-up longer than a quarter
of the run is clamped to a tenth of it (`fitted_warmup`), so a short run still decays. Gradient clipping by global norm
is done by the training loop after the cross-replica sum (Keras' `global_clipnorm` would clip each
replica's partial gradient). float16 training wraps the optimizer in `LossScaleOptimizer`.

Example:
    >>> schedule = WarmupSchedule(1.0, total_steps=10, warmup_steps=2, decay="linear")
    >>> [round(float(schedule(s)), 3) for s in (0, 1, 2, 6, 10)]
    [0.0, 0.5, 1.0, 0.5, 0.0]
"""

from __future__ import annotations

import math

import keras

from keras_vit.layers import StdConv2D

# Layers whose `kernel` weight decays (every matmul / convolution of ViT and its ResNet stem).
DECAYED_KERNEL_LAYERS = (keras.layers.Dense, keras.layers.EinsumDense, keras.layers.Conv2D, StdConv2D)


# Registered under the app's own package name: "keras_vit>" is the library's (keras_vit.layers), and the app is
# not part of the installed package.
@keras.saving.register_keras_serializable(package="keras_vit_training")
class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up to `peak`, then `decay` ("linear" | "cosine" | "constant") to 0 at `total_steps`.

    Args:
        peak: the learning rate reached at the end of the warm-up.
        total_steps: total number of optimizer steps.
        warmup_steps: steps of the linear warm-up from 0.
        decay: the shape after the warm-up.
    """

    def __init__(self, peak, total_steps, warmup_steps=0, decay="cosine"):
        if decay not in ("linear", "cosine", "constant"):
            raise ValueError(f"`decay` must be linear, cosine or constant. Received: decay={decay!r}")
        if total_steps <= 0 or warmup_steps < 0:
            raise ValueError(
                f"Need total_steps > 0 and warmup_steps >= 0. Received: total_steps={total_steps}, "
                f"warmup_steps={warmup_steps}"
            )
        self.peak = float(peak)
        self.total_steps = int(total_steps)
        self.warmup_steps = int(warmup_steps)
        self.decay = decay

    def __call__(self, step):
        step = keras.ops.cast(step, "float32")
        warmup = float(max(self.warmup_steps, 1))
        progress = (step - self.warmup_steps) / float(max(self.total_steps - self.warmup_steps, 1))
        progress = keras.ops.clip(progress, 0.0, 1.0)
        if self.decay == "linear":
            after = self.peak * (1.0 - progress)
        elif self.decay == "cosine":
            after = self.peak * 0.5 * (1.0 + keras.ops.cos(math.pi * progress))
        else:
            after = self.peak * keras.ops.ones_like(progress)
        if self.warmup_steps == 0:
            return after
        return keras.ops.where(step < self.warmup_steps, self.peak * step / warmup, after)

    def get_config(self):
        return dict(peak=self.peak, total_steps=self.total_steps, warmup_steps=self.warmup_steps, decay=self.decay)



MAX_WARMUP_SHARE = 0.25  # a longer warm-up leaves too little of the run to decay in
CLAMPED_WARMUP_SHARE = 0.1


def fitted_warmup(warmup_steps: int, total_steps: int) -> tuple[int, str | None]:
    """The warm-up a run of `total_steps` gets, and a note to print when it is not `warmup_steps`.

    Example:
        >>> fitted_warmup(100, 2000)
        (100, None)
        >>> fitted_warmup(100, 75)[0]
        7
    """
    if warmup_steps <= MAX_WARMUP_SHARE * total_steps:
        return warmup_steps, None
    clamped = max(1, int(CLAMPED_WARMUP_SHARE * total_steps))
    return clamped, (f"warm-up of {warmup_steps} steps is over {MAX_WARMUP_SHARE:.0%} of this {total_steps}-step run: "
                     f"clamped to {clamped} steps ({CLAMPED_WARMUP_SHARE:.0%}); pass a smaller --warmup_steps to choose")


def decayed_variables(model: keras.Model) -> list:
    """The kernels of `model`'s Dense, EinsumDense and convolution layers, found by walking its layers."""
    return [layer.kernel for layer in model._flatten_layers(include_self=True, recursive=True)
            if isinstance(layer, DECAYED_KERNEL_LAYERS)]


def make_optimizer(cfg, total_steps: int, model: keras.Model) -> keras.optimizers.Optimizer:
    """The optimizer of `cfg` (a `training.config.Config`) for `model`, built on its trainable variables.

    Call it inside the strategy scope. Returns a `LossScaleOptimizer` for float16.
    """
    schedule = WarmupSchedule(cfg.learning_rate, total_steps, fitted_warmup(cfg.warmup_steps, total_steps)[0],
                              cfg.schedule)
    weight_decay = cfg.weight_decay or None
    if cfg.optimizer == "sgd":
        optimizer = keras.optimizers.SGD(schedule, momentum=cfg.momentum, weight_decay=weight_decay)
    elif cfg.optimizer == "adamw":
        optimizer = keras.optimizers.AdamW(
            schedule, weight_decay=cfg.weight_decay, beta_1=cfg.beta_1, beta_2=cfg.beta_2
        )
    else:
        optimizer = keras.optimizers.Adam(schedule, beta_1=cfg.beta_1, beta_2=cfg.beta_2, weight_decay=weight_decay)
    if optimizer.weight_decay:
        kernels = {id(v) for v in decayed_variables(model)}
        optimizer.exclude_from_weight_decay(var_list=[v for v in model.trainable_variables if id(v) not in kernels])
    if cfg.mixed_precision == "float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    optimizer.build(model.trainable_variables)
    return optimizer
