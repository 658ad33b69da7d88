"""Named constructors (`ViT_B16`, ...), one per row of the variant table, and the paper's BiT ResNet baseline
(`BiT_R50x1`, from `keras_vit.bit`), with the Keras Applications contract: `include_top, weights,
input_tensor, input_shape, pooling, classes, classifier_activation`."""

from keras_vit import variants, vit
from keras_vit.bit import BiT_R50x1
from keras_vit.variants import VARIANTS, Variant
from keras_vit.weights import DEFAULT_WEIGHTS, IMAGENET_WEIGHTS

_DOCSTRING = """Instantiates {title} ({hybrid}paper Table 1: {layers} layers, D={hidden}, MLP {mlp}, {heads} heads).

    Args:
        include_top: add the [class]-token pooling and the classification `head`.
        weights: {default_weights} (default: its best published checkpoint, downloaded once into the Keras
            cache), another published name, `"imagenet"` (its best ImageNet-1k fine-tune: {imagenet}), None
            (random initialisation, no network), a path to a checkpoint, or one's own `.keras` / `.weights.h5`
            file or training run of this architecture (any classes and size; see `keras_vit.ViT` and
            `keras_vit.weights`).
        input_tensor: optional Keras tensor to use as image input.
        input_shape: (height, width, channels), multiples of {patch} (the pixels between tokens); default: the
            checkpoint's resolution
            ((224, 224, 3) without weights). Another size resamples the position embedding.
        pooling: with `include_top=False`: None (token sequence), "token", "avg" or "max".
        classes: number of classes of the head; default: the checkpoint's (1000 without weights). Other
            values give a new zero-initialised head for fine-tuning.
        classifier_activation: activation of the head ("softmax"; None for logits).
        name: model name.
        **kwargs: more `keras_vit.ViT` arguments: `dropout_rate`, `attention_dropout_rate`,
            `drop_path_rate`, `representation_size`, `classifier`, `gelu_approximate`,
            `include_preprocessing`, ...

    Returns:
        A `keras.Model`.

    Example:
        >>> import keras_vit
        >>> model = keras_vit.{constructor}(weights=None)
        >>> model.output_shape
        (None, 1000)
    """


def _stem_summary(variant: Variant) -> str:
    """For a hybrid: its ResNet stem and how the embedding cuts the stem's feature map."""
    if not variant.hybrid:
        return ""
    stem = variants.RESNET_STEMS[variant.hybrid]
    units = f"{stem['block_units']} units" if stem["block_units"] else "the root alone"
    p = variants.feature_patch_size(stem, variant.patch_size)
    return (f"ResNet stem {variant.hybrid!r}: {units}, stride {variants.stem_stride(stem['block_units'])}, its "
            f"feature map cut into {p}x{p} patches, tokens {variant.patch_size} pixels apart; Transformer of ")


def _constructor(variant: Variant):
    @vit.records_given
    def constructor(
        include_top=True,
        weights=DEFAULT_WEIGHTS.get(variant.name),
        input_tensor=None,
        input_shape=None,
        pooling=None,
        classes=None,
        classifier_activation="softmax",
        name=variant.model_name,
        _given=frozenset(),
        **kwargs,
    ):
        return vit.ViT(
            **variant.architecture(),
            include_top=include_top,
            weights=weights,
            input_tensor=input_tensor,
            input_shape=input_shape,
            pooling=pooling,
            classes=classes,
            classifier_activation=classifier_activation,
            name=name,
            **kwargs,
            _given=_given | set(variant.architecture()),
        )

    constructor.__name__ = constructor.__qualname__ = variant.constructor_name
    constructor.__doc__ = _DOCSTRING.format(
        title=variant.title,
        width=variant.width_name,
        patch=variant.patch_size,
        layers=variant.num_layers,
        hidden=variant.hidden_size,
        mlp=variant.mlp_dim,
        heads=variant.num_heads,
        constructor=variant.constructor_name,
        default_weights=repr(DEFAULT_WEIGHTS.get(variant.name)),
        imagenet=repr(IMAGENET_WEIGHTS[variant.name]) if variant.name in IMAGENET_WEIGHTS else "none published",
        hybrid=_stem_summary(variant),
    )
    return constructor


ViT_Ti16 = _constructor(VARIANTS["Ti16"])
ViT_S16 = _constructor(VARIANTS["S16"])
ViT_S32 = _constructor(VARIANTS["S32"])
ViT_B8 = _constructor(VARIANTS["B8"])
ViT_B16 = _constructor(VARIANTS["B16"])
ViT_B32 = _constructor(VARIANTS["B32"])
ViT_L16 = _constructor(VARIANTS["L16"])
ViT_L32 = _constructor(VARIANTS["L32"])
ViT_H14 = _constructor(VARIANTS["H14"])
ViT_R50_B16 = _constructor(VARIANTS["R50_B16"])
ViT_R_Ti16 = _constructor(VARIANTS["R_Ti16"])
ViT_R26_S32 = _constructor(VARIANTS["R26_S32"])
ViT_R26_B32 = _constructor(VARIANTS["R26_B32"])
ViT_R50_L32 = _constructor(VARIANTS["R50_L32"])

BIT_CONSTRUCTORS = {name: globals()[constructor] for name, constructor in variants.BIT_MODELS.items()}
"""The BiT ResNet constructors by lower-case model name (`"bit_r50x1"`): no patches, no published weights."""

CONSTRUCTORS = {**{v.model_name: globals()[v.constructor_name] for v in VARIANTS.values()}, **BIT_CONSTRUCTORS}
"""Constructors by lower-case model name (`"vit_b16"`, `"bit_r50x1"`), for the CLIs. The ViTs are the rows of
`keras_vit.variants.VARIANTS`; the BiT rows (`BIT_CONSTRUCTORS`) take no patch size and no published
checkpoint (`weights` is None or a Keras weights file of the same architecture)."""


def is_bit(model: str) -> bool:
    """Whether `model` names a BiT ResNet of `CONSTRUCTORS` (any case: `"bit_r50x1"`, `"BiT-R50x1"`)."""
    return variants.bit_name(model) is not None


def build_model(model: str, weights=None, **kwargs):
    """A keras_vit model from a constructor name (`"vit_b16"`) or a `.keras` file: the CLIs' `--model`.

    Args:
        model: a name of `CONSTRUCTORS` (any case) or a path to an existing `.keras` file (loaded in safe mode).
        weights: for a name, the constructor's `weights`; for a `.keras` file, optional weights (a checkpoint or
            `.weights.h5`) loaded into it with `keras_vit.loading.load_weights`.
        **kwargs: more constructor arguments (`input_shape`, `classes`, `include_top`, `pooling`, ...); a
            `.keras` file keeps its own architecture and ignores them.

    Returns:
        A `keras.Model`.

    Raises:
        ValueError: an unknown name, a missing or corrupt `.keras` file, a `.keras` file using a class Keras
            cannot find (a custom layer whose module was not imported), or weights that do not fit.

    Example:
        >>> build_model("vit_ti16", weights=None, input_shape=(32, 32, 3), classes=3).output_shape
        (None, 3)
    """
    if model.lower() in CONSTRUCTORS:
        return CONSTRUCTORS[model.lower()](weights=weights, **kwargs)
    if is_bit(model):
        return CONSTRUCTORS[variants.bit_name(model)](weights=weights, **kwargs)
    if not model.endswith(".keras"):
        raise ValueError(
            f"Unknown model. Received: {model!r}. Known: {', '.join(sorted(CONSTRUCTORS))}, or a `.keras` file."
        )
    from keras_vit import loading
    from keras_vit.checkpoints import own

    loaded = own.load_keras_model(model)
    if weights is not None:
        loading.load_weights(loaded, weights)
    return loaded
