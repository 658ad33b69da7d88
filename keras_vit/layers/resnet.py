"""The ResNet stem of the paper's hybrid models (R50+ViT-B/16; paper sections 3.1 "Hybrid Architecture"
and 4.1, appendix D.2): a ResNet v1 with Group Normalization and Weight Standardization (as in BiT),
whose feature map the patch embedding cuts (1x1 patches for R50+ViT-B/16, 8x8 for R+ViT-Ti/16's root alone;
the stems by name: `keras_vit.variants.RESNET_STEMS`).

Written from the official code, google-research/vision_transformer:

- `vit_jax/models_resnet.py`: `weight_standardize(w, axis=[0, 1, 2], eps=1e-5)` is
  `(w - mean) / (std + eps)` (population std, eps added to the std, not the variance); `StdConv` is a Flax
  `nn.Conv` (default padding "SAME", here without bias) over the standardised kernel; `ResidualUnit` is a
  bottleneck: conv1 1x1 -> gn1 -> relu -> conv2 3x3 (stride) -> gn2 -> relu -> conv3 1x1 (4x features)
  -> gn3 (scale initialised to zero), plus a `conv_proj` 1x1 (stride) -> `gn_proj` shortcut when the
  channels or the stride change, then relu(residual + y); `ResNetStage` names its units `unit1..unitN`,
  the first carrying the stage's stride.
- `vit_jax/models_vit.py` (`VisionTransformer.__call__`): width = 64 * width_factor; root block
  `conv_root` (StdConv 7x7, stride 2) -> `gn_root` -> relu -> `nn.max_pool(3x3, stride 2, "SAME")`; stages
  `block1` (stride 1, width) and `block{i+1}` (stride 2, width * 2**i); then the `embedding` conv with the
  config's patch size.
- `vit_jax/configs/models.py` (`get_r50_b16_config`): `resnet.num_layers = (3, 4, 9)`, width factor 1,
  `patches.size = (1, 1)`: a 2**(1 + 3) = 16 downscaling, so the effective patch size is 16.
- Flax `nn.GroupNorm` defaults: 32 groups of consecutive channels, epsilon 1e-6.

"SAME" padding is the TensorFlow/XLA convention (pad total max((out - 1) * stride + k - in, 0), the
smaller half before), which Keras' `padding="same"` follows on every backend.

Example:
    >>> import numpy as np
    >>> stem = ResNetStem(block_units=(1, 1, 1), width=8, groups=4)
    >>> tuple(stem(np.zeros((1, 32, 32, 3), "float32")).shape)
    (1, 2, 2, 128)
"""

import math

import keras
from keras import ops

from keras_vit.variants import stem_stride

WEIGHT_STANDARDIZATION_EPSILON = 1e-5
"""Added to the kernel's standard deviation (`models_resnet.weight_standardize`)."""

GROUP_NORM_EPSILON = 1e-6
"""Flax `nn.GroupNorm` default epsilon."""

def _check_positive_ints(**values):
    for arg, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"`{arg}` must be a positive integer. Received: {arg}={value!r}")


def _check_groups(arg, channels, groups):
    if channels % groups:
        raise ValueError(
            f"`{arg}` must be divisible by `groups` for GroupNorm. Received: {arg}={channels}, groups={groups}"
        )


def _same_output_size(size, stride):
    return None if size is None else math.ceil(size / stride)


@keras.saving.register_keras_serializable(package="keras_vit")
class StdConv2D(keras.layers.Layer):
    """A bias-free 2-D convolution over a weight-standardised kernel, "SAME" padding (BiT, official StdConv).

    The kernel (k, k, C_in, filters), stored as trained, is standardised on every call over its first three
    axes: `(w - mean) / (std + 1e-5)`; the standardisation runs in float32 under mixed precision.

    Args:
        filters: output channels.
        kernel_size: side k of the square kernel.
        strides: stride of the convolution.
        **kwargs: base `keras.layers.Layer` arguments.

    Example:
        >>> import numpy as np
        >>> tuple(StdConv2D(16, 7, strides=2)(np.zeros((1, 224, 224, 3), "float32")).shape)
        (1, 112, 112, 16)
    """

    def __init__(self, filters: int, kernel_size: int, strides: int = 1, **kwargs):
        super().__init__(**kwargs)
        _check_positive_ints(filters=filters, kernel_size=kernel_size, strides=strides)
        self.filters = filters
        self.kernel_size = kernel_size
        self.strides = strides

    def build(self, input_shape):
        k = self.kernel_size
        # Flax nn.Conv's default initializer; autocast=False keeps the kernel float32 for standardisation.
        self.kernel = self.add_weight(
            name="kernel", shape=(k, k, input_shape[-1], self.filters), initializer="lecun_normal", autocast=False
        )

    def standardized_kernel(self):
        """The kernel after weight standardisation, in float32."""
        w = ops.cast(self.kernel, "float32")
        w = w - ops.mean(w, axis=(0, 1, 2), keepdims=True)
        std = ops.sqrt(ops.mean(ops.square(w), axis=(0, 1, 2), keepdims=True))
        return w / (std + WEIGHT_STANDARDIZATION_EPSILON)

    def call(self, inputs):
        kernel = ops.cast(self.standardized_kernel(), self.compute_dtype)
        return ops.conv(inputs, kernel, strides=self.strides, padding="same")

    def compute_output_shape(self, input_shape):
        s = self.strides
        return (input_shape[0], _same_output_size(input_shape[1], s), _same_output_size(input_shape[2], s), self.filters)

    def get_config(self):
        return {**super().get_config(), "filters": self.filters, "kernel_size": self.kernel_size,
                "strides": self.strides}


def _group_norm(name, groups, parent, zero_scale=False):
    return keras.layers.GroupNormalization(
        groups=groups,
        epsilon=GROUP_NORM_EPSILON,
        gamma_initializer="zeros" if zero_scale else "ones",
        name=name,
        dtype=parent.dtype_policy,
    )


@keras.saving.register_keras_serializable(package="keras_vit")
class ResNetUnit(keras.layers.Layer):
    """The bottleneck residual unit of the official `ResidualUnit` (ResNet v1, GroupNorm + StdConv).

    Sublayers carry the official names: `conv1`, `gn1`, `conv2`, `gn2`, `conv3`, `gn3` and, when the input
    has other than 4 * filters channels or the stride is not 1, the shortcut `conv_proj`, `gn_proj`.

    Args:
        filters: bottleneck width; the unit outputs 4 * filters channels.
        strides: stride of `conv2` and of the shortcut projection.
        groups: GroupNorm groups (32 in the official models).
        **kwargs: base `keras.layers.Layer` arguments.

    Example:
        >>> import numpy as np
        >>> tuple(ResNetUnit(8, strides=2, groups=4)(np.zeros((1, 16, 16, 8), "float32")).shape)
        (1, 8, 8, 32)
    """

    def __init__(self, filters: int, strides: int = 1, groups: int = 32, **kwargs):
        super().__init__(**kwargs)
        _check_positive_ints(filters=filters, strides=strides, groups=groups)
        _check_groups("filters", filters, groups)
        self.filters = filters
        self.strides = strides
        self.groups = groups
        policy = self.dtype_policy
        self.conv1 = StdConv2D(filters, 1, name="conv1", dtype=policy)
        self.gn1 = _group_norm("gn1", groups, self)
        self.conv2 = StdConv2D(filters, 3, strides=strides, name="conv2", dtype=policy)
        self.gn2 = _group_norm("gn2", groups, self)
        self.conv3 = StdConv2D(4 * filters, 1, name="conv3", dtype=policy)
        self.gn3 = _group_norm("gn3", groups, self, zero_scale=True)
        self.conv_proj = None
        self.gn_proj = None

    def needs_projection(self, input_channels) -> bool:
        """The official rule: project the shortcut when channels or resolution change."""
        return input_channels != 4 * self.filters or self.strides != 1

    def build(self, input_shape):
        if self.needs_projection(input_shape[-1]):
            self.conv_proj = StdConv2D(4 * self.filters, 1, strides=self.strides, name="conv_proj",
                                       dtype=self.dtype_policy)
            self.gn_proj = _group_norm("gn_proj", self.groups, self)
            self.conv_proj.build(input_shape)
            self.gn_proj.build(self.conv_proj.compute_output_shape(input_shape))
        self.conv1.build(input_shape)
        shape = self.conv1.compute_output_shape(input_shape)
        self.gn1.build(shape)
        self.conv2.build(shape)
        shape = self.conv2.compute_output_shape(shape)
        self.gn2.build(shape)
        self.conv3.build(shape)
        self.gn3.build(self.conv3.compute_output_shape(shape))

    def call(self, inputs):
        residual = inputs
        if self.conv_proj is not None:
            residual = self.gn_proj(self.conv_proj(inputs))
        y = ops.relu(self.gn1(self.conv1(inputs)))
        y = ops.relu(self.gn2(self.conv2(y)))
        y = self.gn3(self.conv3(y))
        return ops.relu(residual + y)

    def compute_output_shape(self, input_shape):
        s = self.strides
        return (input_shape[0], _same_output_size(input_shape[1], s), _same_output_size(input_shape[2], s),
                4 * self.filters)

    def get_config(self):
        return {**super().get_config(), "filters": self.filters, "strides": self.strides, "groups": self.groups}


@keras.saving.register_keras_serializable(package="keras_vit")
class ResNetStem(keras.layers.Layer):
    """The ResNet (GroupNorm + Weight Standardization) that turns an image into the hybrid's feature map.

    root: `conv_root` (StdConv 7x7, stride 2) -> `gn_root` -> relu -> max pool 3x3, stride 2, "SAME";
    then stage s = 1..S of `block_units[s-1]` bottleneck units `block{s}_unit{u}` (the official
    `block{s}/unit{u}`) with bottleneck width `width * 2**(s-1)`, stride 1 in stage 1 and 2 after.
    The output has `width * 2**(S-1) * 4` channels at stride `2**(S+1)` (16 and 1024 channels for R50).

    Args:
        block_units: units per stage; (3, 4, 9) is the paper's R50 (`keras_vit.variants.RESNET_STEMS["r50"]`);
            () is the root alone (stride 4, `width` channels), as the official `resnet.num_layers = ()`.
        width: channels of the root convolution (64 * width_factor).
        groups: GroupNorm groups (32 in the official models).
        **kwargs: base `keras.layers.Layer` arguments.

    Example:
        >>> import numpy as np
        >>> tuple(ResNetStem()(np.zeros((1, 224, 224, 3), "float32")).shape)
        (1, 14, 14, 1024)
    """

    def __init__(self, block_units=(3, 4, 9), width: int = 64, groups: int = 32, **kwargs):
        super().__init__(**kwargs)
        units = tuple(block_units) if isinstance(block_units, (list, tuple)) else None
        if units is None or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in units):
            raise ValueError(
                f"`block_units` must be a sequence of positive integers. Received: block_units={block_units!r}"
            )
        _check_positive_ints(width=width, groups=groups)
        _check_groups("width", width, groups)
        self.block_units = units
        self.width = width
        self.groups = groups
        policy = self.dtype_policy
        self.conv_root = StdConv2D(width, 7, strides=2, name="conv_root", dtype=policy)
        self.gn_root = _group_norm("gn_root", groups, self)
        self.pool = keras.layers.MaxPooling2D(pool_size=3, strides=2, padding="same", name="pool", dtype=policy)
        self.units = [
            ResNetUnit(
                width * 2**s, strides=1 if (s == 0 or u > 0) else 2, groups=groups,
                name=f"block{s + 1}_unit{u + 1}", dtype=policy,
            )
            for s, n in enumerate(units)
            for u in range(n)
        ]

    @property
    def stride(self) -> int:
        """Total downscaling: 4 from the root, 2 per stage after the first (the hybrid's patch size)."""
        return stem_stride(self.block_units)

    @property
    def output_channels(self) -> int:
        return 4 * self.width * 2 ** (len(self.block_units) - 1) if self.block_units else self.width

    def unit(self, stage: int, index: int) -> ResNetUnit:
        """The unit the official code names `block{stage}/unit{index}` (both 1-based)."""
        name = f"block{stage}_unit{index}"
        for layer in self.units:
            if layer.name == name:
                return layer
        raise ValueError(f"No unit {name!r} in a stem with block_units={self.block_units}.")

    def build(self, input_shape):
        self.conv_root.build(input_shape)
        shape = self.conv_root.compute_output_shape(input_shape)
        self.gn_root.build(shape)
        shape = self.pool.compute_output_shape(shape)
        for unit in self.units:
            unit.build(shape)
            shape = unit.compute_output_shape(shape)

    def call(self, images):
        return self.stages(images)[-1]

    def stages(self, images) -> list:
        """The output of each stage (strides 4, 8, 16, ...), computed with this stem's layers: `call`'s last one.
        On symbolic inputs it gives a functional model the stages (`keras_vit.feature_extractor`)."""
        x = ops.relu(self.gn_root(self.conv_root(images)))
        x = self.pool(x)
        outputs, done = [], 0
        for count in self.block_units:
            for unit in self.units[done:done + count]:
                x = unit(x)
            done += count
            outputs.append(x)
        return outputs or [x]

    def compute_output_shape(self, input_shape):
        h, w = input_shape[1], input_shape[2]
        return (input_shape[0], _same_output_size(h, self.stride), _same_output_size(w, self.stride),
                self.output_channels)

    def get_config(self):
        return {**super().get_config(), "block_units": list(self.block_units), "width": self.width,
                "groups": self.groups}


BIT_STAGE_UNITS = {"r50": (3, 4, 6, 3), "r101": (3, 4, 23, 3), "r152": (3, 8, 36, 3)}
"""Units per stage of the BiT ResNet-v2 baselines (Kolesnikov et al. 2020, the paper's CNN, section 4.1)."""


@keras.saving.register_keras_serializable(package="keras_vit")
class PreActResNetUnit(ResNetUnit):
    """The pre-activation (ResNet v2) bottleneck unit of BiT, the paper's ResNet baseline (section 4.1).

    From google-research/big_transfer (`bit_tf2/models.py`, `BottleneckV2Unit`), with this module's
    `StdConv2D` and GroupNorm: `gn1` -> relu gives the pre-activated input, which feeds both the residual
    branch `conv1` 1x1 -> `gn2` -> relu -> `conv2` 3x3 (stride) -> `gn3` -> relu -> `conv3` 1x1 (4x filters) and,
    when the channels or the stride change, the shortcut projection `conv_proj` 1x1 (stride); the output is
    residual branch + shortcut, with no activation after the sum (the next unit, or BiT's pre-head norm,
    normalises it). Unlike the v1 `ResNetUnit` it derives from (arguments, projection rule, output shape,
    config), the norms come before the convolutions, `gn3` starts at scale one and the shortcut has no norm.

    Args:
        filters: bottleneck width; the unit outputs 4 * filters channels.
        strides: stride of `conv2` and of the shortcut projection.
        groups: GroupNorm groups (32 in BiT); the input channels and `filters` must be divisible by it.
        **kwargs: base `keras.layers.Layer` arguments.

    Example:
        >>> import numpy as np
        >>> tuple(PreActResNetUnit(8, strides=2, groups=4)(np.zeros((1, 16, 16, 8), "float32")).shape)
        (1, 8, 8, 32)
    """

    def __init__(self, filters: int, strides: int = 1, groups: int = 32, **kwargs):
        super().__init__(filters, strides=strides, groups=groups, **kwargs)
        self.gn3.gamma_initializer = keras.initializers.get("ones")  # v1 zero-initialises it; BiT does not

    def build(self, input_shape):
        _check_groups("input channels", input_shape[-1], self.groups)
        if self.needs_projection(input_shape[-1]):
            self.conv_proj = StdConv2D(4 * self.filters, 1, strides=self.strides, name="conv_proj",
                                       dtype=self.dtype_policy)
            self.conv_proj.build(input_shape)
        self.gn1.build(input_shape)
        self.conv1.build(input_shape)
        shape = self.conv1.compute_output_shape(input_shape)
        self.gn2.build(shape)
        self.conv2.build(shape)
        shape = self.conv2.compute_output_shape(shape)
        self.gn3.build(shape)
        self.conv3.build(shape)

    def call(self, inputs):
        preact = ops.relu(self.gn1(inputs))
        shortcut = inputs if self.conv_proj is None else self.conv_proj(preact)
        y = self.conv1(preact)
        y = self.conv2(ops.relu(self.gn2(y)))
        y = self.conv3(ops.relu(self.gn3(y)))
        return y + shortcut


def group_norm(name, groups, dtype=None):
    """The GroupNorm of these ResNets (Flax defaults: epsilon 1e-6) as a standalone layer, e.g. BiT's pre-head norm."""
    return keras.layers.GroupNormalization(groups=groups, epsilon=GROUP_NORM_EPSILON, name=name, dtype=dtype)
