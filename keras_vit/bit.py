"""`BiT(...)` and `BiT_R50x1`: the paper's ResNet baseline, Big Transfer (Kolesnikov et al. 2020; ViT paper
section 4.1, "ResNet (BiT)"), as a Keras Applications style model.

A ResNet v2 (pre-activation bottlenecks) with Group Normalization and Weight Standardization, built from the
layers of `keras_vit.layers.resnet` that the hybrid's stem uses (`StdConv2D`, its GroupNorm settings) plus the
v2 unit `PreActResNetUnit`:

    image -> root_conv (StdConv 7x7, stride 2, 64*w channels) -> root_pool (max 3x3, stride 2, "SAME")
        -> stage s = 1..S of block_units[s-1] PreActResNetUnit `block{s}_unit{u}` (bottleneck 64*w*2**(s-1),
           stride 1 in stage 1 and 2 after) -> pre_head_norm (GroupNorm) -> relu -> pooling (global mean)
        -> head (Dense, zero-initialised as in BiT)

Differences from the published BiT code, which do not change the architecture or the parameter count: the
kernel standardisation adds its epsilon to the standard deviation (the ViT hybrid's `StdConv`, not BiT's
`sqrt(var + 1e-10)`), GroupNorm's epsilon is Flax's 1e-6 and the root's max pool pads as "SAME". BiT's
published checkpoints are not loaded (`weights` is None or a keras_vit BiT file: `.keras`, `.weights.h5` or a
training run, loaded under any head and input size).

Example:
    >>> model = BiT(block_units=(1, 1), width=8, groups=4, input_shape=(32, 32, 3), classes=10)
    >>> model.output_shape
    (None, 10)
"""

import logging

import keras

from keras_vit import model_config, model_parts, preprocessing, validation

from keras_vit.layers.resnet import BIT_STAGE_UNITS, PreActResNetUnit, StdConv2D, group_norm


_EXTRA_ARGUMENTS = ("image_size", "include_preprocessing", "groups")

_BODY = ("block_units", "width", "groups")
"""The arguments that shape a BiT body; from a keras_vit file when left at None, else ResNet-50's."""

_BODY_DEFAULTS = dict(block_units=BIT_STAGE_UNITS["r50"], width=64, groups=32)


def _check_extra_arguments(model, kwargs):
    """A named BiT constructor takes `_EXTRA_ARGUMENTS` beyond the Keras Applications ones; a ViT argument
    (`patch_size`, `num_heads`, `classifier`, `dropout_rate`, ...) gets a ValueError, not a TypeError."""
    unknown = sorted(set(kwargs) - set(_EXTRA_ARGUMENTS))
    if unknown:
        raise ValueError(
            f"{unknown[0]!r} is not an argument of the BiT ResNet {model!r} (a ViT argument has no meaning for "
            f"a ResNet: no patches, tokens or attention). It takes the Keras Applications arguments and "
            f"{', '.join(_EXTRA_ARGUMENTS)}. Received: {', '.join(f'{k}={kwargs[k]!r}' for k in unknown)}"
        )


@keras.saving.register_keras_serializable(package="keras_vit")
class BiTResNet(model_config.ConfigModel):
    """The BiT ResNet v2 of `BiT`, whose config is its arguments (`BiT`'s without `weights` and `input_tensor`,
    `image_size` resolved into `input_shape`): a `.keras` or `.weights.h5` file says what it is.

    Example:
        >>> model = BiTResNet(block_units=(1,), width=8, groups=4, image_size=16, classes=3)
        >>> BiTResNet.from_config(model.get_config()).output_shape
        (None, 3)
    """

    def __init__(self, block_units=BIT_STAGE_UNITS["r50"], width=64, groups=32, include_top=True, input_tensor=None,
                 input_shape=None, image_size=224, pooling=None, classes=1000, classifier_activation="softmax",
                 include_preprocessing=False, name=None, dtype=None, trainable=True):
        model_config.require_channels_last()
        units = tuple(block_units) if isinstance(block_units, (list, tuple)) else None
        if not units or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in units):
            raise ValueError(
                f"`block_units` must be a non-empty sequence of positive integers. Received: block_units={block_units!r}"
            )
        validation.check_positive_int("width", width)
        validation.check_positive_int("groups", groups)
        if width % groups:
            raise ValueError(f"`width` must be divisible by `groups` for GroupNorm. Received: width={width}, groups={groups}")
        if include_top:
            validation.check_positive_int("classes", classes)
        if pooling not in (None, "avg", "max"):
            raise ValueError(f"`pooling` must be None, 'avg' or 'max'. Received: pooling={pooling!r}")
        if input_tensor is not None and not keras.backend.is_keras_tensor(input_tensor):
            raise ValueError(
                "`input_tensor` must be a Keras tensor, e.g. `keras.Input(shape=(224, 224, 3))`. "
                f"Received: input_tensor of type {type(input_tensor).__name__}"
            )
        shape = validation.resolve_input_shape(model_config.plain(image_size), model_config.plain(input_shape),
                                               input_tensor, 1)
        with model_config.dtype_policy(dtype) as policy_name:
            inputs = input_tensor if input_tensor is not None else keras.Input(shape=shape, name="images")
            outputs = _graph(inputs, units, width, groups, include_top, pooling, classes, classifier_activation,
                             include_preprocessing)
        arguments = dict(block_units=units, width=width, groups=groups, include_top=include_top, input_shape=shape,
                         image_size=None, pooling=pooling, classes=classes,
                         classifier_activation=classifier_activation, include_preprocessing=include_preprocessing)
        self._finish(inputs, outputs, name=name or "bit", trainable=trainable, arguments=arguments,
                     policy_name=policy_name)


def _graph(inputs, units, width, groups, include_top, pooling, classes, classifier_activation, include_preprocessing):
    x = inputs
    if include_preprocessing:
        x = preprocessing.rescaling_layer()(x)
    x = StdConv2D(width, 7, strides=2, name="root_conv")(x)
    x = keras.layers.MaxPooling2D(pool_size=3, strides=2, padding="same", name="root_pool")(x)
    for s, count in enumerate(units):
        for u in range(count):
            x = PreActResNetUnit(width * 2**s, strides=2 if (s > 0 and u == 0) else 1, groups=groups,
                                 name=f"block{s + 1}_unit{u + 1}")(x)
    x = group_norm("pre_head_norm", groups)(x)
    x = keras.layers.Activation("relu", name="pre_head_relu")(x)
    if include_top:
        x = keras.layers.GlobalAveragePooling2D(name="pooling")(x)
        return keras.layers.Dense(classes, activation=classifier_activation, kernel_initializer="zeros",
                                  name=model_parts.HEAD, dtype=model_config.head_dtype())(x)
    if pooling == "avg":
        return keras.layers.GlobalAveragePooling2D(name="pooling")(x)
    if pooling == "max":
        return keras.layers.GlobalMaxPooling2D(name="pooling")(x)
    return x


def BiT(
    block_units=None,
    width=None,
    groups=None,
    include_top=True,
    weights=None,
    input_tensor=None,
    input_shape=None,
    image_size=224,
    pooling=None,
    classes=None,
    classifier_activation="softmax",
    include_preprocessing=False,
    name=None,
):
    """Builds a BiT ResNet v2 (GroupNorm + Weight Standardization), the paper's CNN baseline.

    Args:
        block_units: pre-activation bottleneck units per stage; (3, 4, 6, 3) is ResNet-50 (`BIT_STAGE_UNITS`)
            [the file's with `weights`, else ResNet-50's].
        width: channels of the root convolution, 64 * the width factor (BiT-R50x1: 64, x3: 192) [the file's,
            else 64].
        groups: GroupNorm groups (32 in BiT); `width` must be divisible by it [the file's, else 32].
        include_top: add the pre-head norm, the global average `pooling` and the `head`.
        weights: None or `"none"` (random initialisation) or a keras_vit BiT file: a `.keras` or `.weights.h5` file, or a
            training run's workdir. Its body is loaded into any head, classes and input size (a new zero head for
            other classes; none with `include_top=False`); another body (`block_units`, `width`, `groups`) is
            refused. Published BiT checkpoints are refused with a `ValueError`.
        input_tensor: optional Keras tensor to use as image input.
        input_shape: (height, width, channels); overrides `image_size`.
        image_size: int or (height, width), used when `input_shape` and `input_tensor` are None.
        pooling: with `include_top=False`: None (the normalised feature map (B, h, w, C)), "avg" or "max".
        classes: classes of the head [the file's with `weights`, else 1000].
        classifier_activation: activation of the head ("softmax"; None for logits).
        include_preprocessing: put the [0, 255] -> [-1, 1] scaling inside the model.
        name: model name.

    Returns:
        A `BiTResNet`. With a head, its representation (for few-shot evaluation) is the output of the layer
        `pooling`, as for the ViT (`training.fewshot.representation_model`).

    Example:
        >>> model = BiT(block_units=(1,), width=8, groups=4, image_size=16, include_top=False, pooling="avg")
        >>> model.output_shape
        (None, 32)
    """
    from keras_vit.checkpoints.weights_files import none_if_none

    weights = none_if_none(weights)
    body = dict(block_units=block_units, width=width, groups=groups)
    source = _source(weights)
    if source is not None:
        _check_body(body, source.arguments, weights)
        body = {key: source.arguments[key] for key in _BODY}
        if classes is None and source.arguments["include_top"]:
            classes = source.arguments["classes"]
    body = {key: _BODY_DEFAULTS[key] if value is None else value for key, value in body.items()}
    model = BiTResNet(**body, include_top=include_top, input_tensor=input_tensor, input_shape=input_shape,
                      image_size=image_size, pooling=pooling, classes=1000 if classes is None else classes,
                      classifier_activation=classifier_activation, include_preprocessing=include_preprocessing,
                      name=name)
    if weights is not None and source is None:
        from keras_vit.checkpoints import own

        own.load_same_architecture(model, own.model_file(weights))  # a Keras file that carries no keras_vit model
    elif source is not None:
        _transfer(source, model, weights)
    return model


def _source(weights):
    """The keras_vit BiT model a `weights` file carries, None for `weights=None` or a file that carries none."""
    if weights is None:
        return None
    from keras_vit.checkpoints import own, weights_files

    if not weights_files.is_own(weights):
        raise ValueError(
            "BiT checkpoints are not supported: `weights` must be None (random initialisation), a Keras `.keras` or "
            f"`.weights.h5` file or a training run's folder of a BiT model. Received: weights={weights!r}"
        )
    source = own.open_model(weights)
    if source is not None and not isinstance(source, BiTResNet):
        raise ValueError(f"{weights!r} holds a {type(source).__name__}, not a BiT ResNet: load it with "
                         f"`keras_vit.ViT(weights=...)`. Received: weights={weights!r}")
    return source


def _check_body(body: dict, carried: dict, weights) -> None:
    conflicts = [f"{key}={value!r} (file: {carried[key]!r})" for key, value in body.items()
                 if value is not None and model_config.plain(value) != carried[key]]
    if conflicts:
        raise ValueError(f"The BiT file's body does not match the requested one: {'; '.join(conflicts)}. Leave these "
                         f"arguments unset to take the file's. Received: weights={weights!r}")


def _transfer(source, model, weights) -> None:
    """Every weight of `model` from the same-named layer of `source`, but a head for other classes (new, zero)."""
    log = logging.getLogger("keras_vit")
    head, source_head = model_parts.head(model), model_parts.head(source)
    new_head = head is not None and (source_head is None or source_head.units != head.units)
    by_name = {layer.name: layer for layer in source.layers}
    assignments = []
    for layer in model.layers:
        if not layer.weights or (new_head and layer is head):
            continue
        other = by_name[layer.name]
        assignments += [(variable, value.numpy()) for variable, value in zip(layer.weights, other.weights)]
    for variable, value in assignments:
        variable.assign(value)
    if new_head:
        found = f"has {source_head.units} classes" if source_head is not None else "has no head"
        log.warning("The BiT file %s and the model %d classes: the head is new and zero-initialised; train it "
                    "before use. Received: weights=%r", found, head.units, weights)


def BiT_R50x1(
    include_top=True,
    weights=None,
    input_tensor=None,
    input_shape=None,
    pooling=None,
    classes=None,
    classifier_activation="softmax",
    name="bit_r50x1",
    **kwargs,
):
    """Instantiates BiT-R50x1: ResNet-50 v2 with GroupNorm and Weight Standardization (the paper's baseline).

    About 25.5M parameters with a 1000-class head. Keras Applications arguments; `weights` is None or a Keras
    `.weights.h5` / `.keras` file (BiT's published checkpoints are not supported). `kwargs` go to `BiT`
    (`image_size`, `include_preprocessing`, `groups`).

    Example:
        >>> BiT_R50x1(input_shape=(64, 64, 3), classes=10).output_shape
        (None, 10)
    """
    _check_extra_arguments(name, kwargs)
    return BiT(
        block_units=BIT_STAGE_UNITS["r50"], width=64, include_top=include_top, weights=weights,
        input_tensor=input_tensor, input_shape=input_shape, pooling=pooling, classes=classes,
        classifier_activation=classifier_activation, name=name, **kwargs,
    )
