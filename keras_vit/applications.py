"""The Keras Applications functions: `ViT(...)` (any architecture; resolves and loads `weights`), the named
constructors (`ViT_B16`, ...), one per row of the variant table, and the paper's BiT ResNet baseline (`BiT_R50x1`,
from `keras_vit.bit`), with the Keras Applications contract: `include_top, weights, input_tensor, input_shape,
pooling, classes, classifier_activation`. The models themselves are `keras_vit.vit` and `keras_vit.bit`."""

import functools
import inspect

from keras_vit import validation, variants, vit
from keras_vit.bit import BiT_R50x1
from keras_vit.checkpoints import weights_files
from keras_vit.variants import VARIANTS, Variant
from keras_vit.weights import DEFAULT_WEIGHTS, IMAGENET_WEIGHTS

def records_given(function):
    """Gives `function` the names of the arguments its caller passed, as `_given` (a frozenset): `ViT(weights=
    <keras_vit file>)` takes from the file what the caller left out (`keras_vit.variants.SAVED_ARGUMENTS`), which a
    default value alone cannot tell. A caller that forwards arguments (a named constructor) passes `_given` itself.
    The signature shown (`help`, `inspect.signature`) is the function's without `_given`."""
    signature = inspect.signature(function)
    public = signature.replace(parameters=[p for p in signature.parameters.values() if p.name != "_given"])

    var_keyword = [p.name for p in public.parameters.values() if p.kind is inspect.Parameter.VAR_KEYWORD]

    @functools.wraps(function)
    def call(*args, _given=None, **kwargs):
        if _given is None:
            bound = public.bind(*args, **kwargs).arguments
            _given = {*bound, *(bound.pop(var_keyword[0], {}) if var_keyword else {})} - set(var_keyword)
        return function(*args, _given=frozenset(_given), **kwargs)

    call.__signature__ = public
    return call


@records_given
def ViT(
    image_size=None,
    patch_size=None,
    hidden_size=None,
    num_layers=None,
    num_heads=None,
    mlp_dim=None,
    classes=None,
    classifier=None,
    representation_size=None,
    include_top=True,
    weights=None,
    input_tensor=None,
    input_shape=None,
    pooling=None,
    classifier_activation="softmax",
    dropout_rate=0.0,
    attention_dropout_rate=0.0,
    drop_path_rate=0.0,
    gelu_approximate=None,
    layer_norm_epsilon=None,
    include_preprocessing=False,
    name=None,
    hybrid=None,
    position_embedding_interpolation="bilinear",
    qkv_bias=None,
    initialization=None,
    rematerialize=True,
    position_embedding=None,
    tokenizer=None,
    locality_attention=None,
    distillation_token=None,
    _given=frozenset(),
):
    """Builds a Vision Transformer (Dosovitskiy et al., ICLR 2021, arXiv 2010.11929, section 3.1).

    Arguments left at None take their value from the checkpoint when `weights` names one (a published
    name or a checkpoint file), else the ViT-B/16 default shown in brackets (`keras_vit.variants.DEFAULTS`).
    With one's own keras_vit file (a `.keras`, `.weights.h5` or training run), every argument not passed is the
    file's: `ViT(weights="run/model.keras")` is the saved model exactly (head activation, input scaling, dropout,
    `include_top`, pooling, name); what the caller passes wins where it applies (`classes=10`: a new head, said in
    one line). Each argument's role is declared once, in `keras_vit.variants.ARGUMENTS`.

    Args:
        image_size: int or (height, width); used when `input_shape` and `input_tensor` are None, and by a model
            of any size (`input_shape` with a None height or width) as the size its position table covers
            [the checkpoint's training resolution, else 224].
        patch_size: P; height and width must be multiples of it [16].
        hidden_size: D, the token width [768].
        num_layers: number of Transformer blocks [12].
        num_heads: attention heads per block [12].
        mlp_dim: hidden width of each block's MLP [3072].
        classes: number of classes of the head (with `include_top=True`) [the checkpoint's, else 1000].
            Different from the checkpoint's: a new zero-initialised head (reported, as resampling).
        classifier: `"token"` (prepend a [class] token and classify from it) or `"gap"` (no class token;
            classify the mean of the patch tokens) ["token"].
        representation_size: width of the tanh `pre_logits` layer before the head (the imagenet21k
            pre-training setup), or None for none [the checkpoint's; with a new head for other classes,
            none: fine-tuning drops pre_logits as the official code does].
        include_top: add pooling, `pre_logits` and the `head`. Without it the model returns the
            normalised tokens (B, T, D), or a (B, D) vector with `pooling`.
        weights: None or `"none"` (random initialisation, no network), a published name (`"imagenet21k"`,
            `"imagenet21k+imagenet2012"`, `"augreg_in21k"`, `"augreg_in21k_ft_in1k"`, ...; see
            `keras_vit.weights`; `"imagenet"` is the variant's best ImageNet-1k fine-tune), the path to an official `.npz`, a timm `.safetensors`, a Hugging Face ViT
            folder or `model.safetensors`, or one's own keras_vit model: a `.keras` or `.weights.h5` file or a
            training run's folder, whose arguments the file carries (docs/LOADING.md, "Fine-tune your own model";
            a Keras `.weights.h5` of another model loads into the very architecture it was saved from).
            Checkpoints are loaded strictly (see `keras_vit.loading`); a different input size resamples the position
            embedding (reported on the "keras_vit" logger at WARNING, printed to stderr by default). A failed
            download raises `keras_vit.WeightsDownloadError`.
        input_tensor: optional Keras tensor (`keras.Input(...)` or a layer output) to use as the image input.
        input_shape: (height, width, channels), channels last; overrides `image_size`. A None height or width
            (`(None, None, 3)`) takes any multiple of `patch_size` at run time: the position table (covering
            `image_size`) is resampled to each batch's patch grid in the graph with `position_embedding_interpolation`,
            as a model built at that size would be at load time (docs/MODEL.md, "Any image size at run time";
            not for hybrids) [the checkpoint's: a keras_vit file of a model of any size gives one again].
        pooling: with `include_top=False`: None (tokens), `"token"`, `"avg"` or `"max"` (over patch tokens).
        classifier_activation: activation of the head; None for logits.
        dropout_rate: dropout after the embeddings, the attention output and in the MLP.
        attention_dropout_rate: dropout on the attention probabilities.
        drop_path_rate: stochastic depth; block i uses drop_path_rate * i / (num_layers - 1).
        gelu_approximate: tanh-form GELU (official checkpoints) or exact erf GELU (timm, HF) [the
            checkpoint source's, else True].
        layer_norm_epsilon: epsilon of every LayerNorm [the checkpoint source's, else 1e-6 as the
            official code].
        include_preprocessing: put the official [0, 255] -> [-1, 1] scaling inside the model.
        name: model name.
        hybrid: None for the plain ViT, or a ResNet stem (section 3.1) by name (`keras_vit.variants.RESNET_STEMS`:
            `"r50"` for the paper's R50+ViT-B/16, `"r50_s32"`, `"r26"`, `"r"` the root alone) or as a dict of
            `keras_vit.layers.ResNetStem` arguments: the image goes through the stem `resnet_stem` (GroupNorm,
            weight standardisation) and its feature map is cut into patches of `patch_size / stride` features;
            `patch_size` (the pixels between tokens) must be a multiple of the stem's stride (16 for `"r50"`,
            32 for `"r26"` and `"r50_s32"`, 4 for `"r"`), and the image size a multiple of `patch_size`.
        position_embedding_interpolation: how a checkpoint's position embedding is resampled to another input size, at
            load time and, for a model of any size, at run time: `"bilinear"` (the official corner-aligned method,
            as `scipy.ndimage.zoom(order=1)`) or `"bicubic"` (`keras_vit.position_embedding`) [a keras_vit file of a
            model of any size: its own].
        qkv_bias: whether the query, key and value projections have biases, as in the paper and every
            official checkpoint [the checkpoint's, else True]. A checkpoint with (non-zero) query/key/value
            biases is refused for `qkv_bias=False`, one without them for `qkv_bias=True`.
        initialization: how the weights start without a checkpoint (`keras_vit.initialization`): `"scratch"`
            (smaller patch and attention kernels, a Glorot head: better for training from scratch on small data) or
            `"official"` (the Flax code's, zero head) ["scratch" for `weights=None`; with `weights` the
            checkpoint's values, and a new head for other classes is zero, as the official fine-tuning].
        position_embedding: `"learned"` (the paper's 1-D table, resampled for another resolution) or `"sincos2d"`
            (big_vision's fixed 2-D sin-cos table, no weights; `keras_vit.layers.patch_encoder.sincos_2d`). Checkpoints
            with a learned table load only into `"learned"` [the checkpoint's, else "learned"].
        tokenizer: how the image becomes tokens: `"patches"` (the paper's linear projection of P x P patches),
            `"conv"` (a convolutional stem: log2(P) stride-2 3x3 convolutions with BatchNorm and ReLU, then the
            projection; Xiao et al. 2021; P a power of two) or `"shifted_patches"` (shifted patch tokenization,
            Lee et al. 2021). The last two are options for training from scratch on small data
            (`keras_vit.layers.tokenizers`); published checkpoints load only into `"patches"` [a keras_vit
            file's own, else "patches"].
        locality_attention: locality self-attention in every block (no attention to oneself, a learned
            temperature; Lee et al. 2021), for small data [a keras_vit file's own, else False].
        distillation_token: DeiT's distillation token (Touvron et al. 2021, arXiv 2012.12877): a second learned
            token after [class], with its own position-embedding row, read by a second head `head_dist`; the
            output is the average of the two heads' logits, `classifier_activation` applied after the average.
            Needs the [class] token (`classifier="token"`) and no `representation_size`. Decided by a
            checkpoint's tensors: a file with the token (timm's `deit_*_distilled_*`, transformers'
            `DeiTForImageClassificationWithTeacher`) loads only with it, one without only without it
            [the checkpoint's, else False].
        rematerialize: while training, each block recomputes its MLP hidden layer and attention
            probabilities in the backward pass instead of storing them: the same gradients with less memory
            and some more compute (`TransformerBlock`); False stores them. No effect on inference or loading.

    Returns:
        A `keras.Model`.

    Example:
        >>> model = ViT(image_size=32, patch_size=8, hidden_size=64, num_layers=2, num_heads=4,
        ...             mlp_dim=128, classes=10)
        >>> model.output_shape
        (None, 10)
    """
    arguments = dict(locals())
    given = arguments.pop("_given")
    weights = weights_files.none_if_none(arguments.pop("weights"))
    if weights is None:
        return vit.build(arguments)
    if initialization not in (None, "official"):
        raise ValueError(
            f"`initialization` applies to `weights=None`; a checkpoint sets every weight (a new head starts at "
            f"zero). Received: initialization={initialization!r}, weights={weights!r}. Leave it unset."
        )
    arguments["initialization"] = "official"  # loading overwrites it: no second random draw
    from keras_vit.checkpoints import architecture, keras_names, loading, own, readers

    validation.check_before_loading(arguments)  # before any download or read
    validation.check_choice("tokenizer", tokenizer, (None, *vit.TOKENIZERS))
    variant = variants.find_variant(arguments)
    source = weights_files.resolve(weights, None if variant is None else variant.name)
    if source.is_keras:  # a keras_vit file or run: its own arguments, or the architecture asked for
        saved = own.open_model(source.path)
        if saved is None:  # a Keras file of another model: loads into the very architecture it was saved from
            model = vit.build(arguments)
            own.load_same_architecture(_vision_transformer(model), source.path)
            return model
        checkpoint = keras_names.to_checkpoint(saved, weights)
        arguments.update(saved_arguments(saved, given))
    else:
        checkpoint = readers.read_checkpoint(source.path, num_heads, source.format)
    model = vit.build(architecture.resolve_arguments(arguments, checkpoint, source.entry, label=weights))
    loading.load_checkpoint(_vision_transformer(model), checkpoint,
                            interpolation=arguments["position_embedding_interpolation"] or "bilinear", label=weights)
    return model


def saved_arguments(source, given) -> dict:
    """The `keras_vit.variants.SAVED_ARGUMENTS` of the keras_vit model `source` that the caller did not pass
    (`given`): what makes `ViT(weights=<its file>)` the saved model. A caller who asks for a head (`classes`,
    `classifier_activation`) on a file saved without one gets it (`include_top=True`); a model of any input size
    keeps the `position_embedding_interpolation` it runs with."""
    saved = {**source.arguments, "name": source.name}
    taken = {key: saved[key] for key in variants.SAVED_ARGUMENTS if key not in given}
    if validation.is_any_size(saved["input_shape"]) and "position_embedding_interpolation" not in given:
        # how it runs at other sizes
        taken["position_embedding_interpolation"] = saved["position_embedding_interpolation"]
    if "include_top" in taken and {"classes", "classifier_activation"} & given:
        taken["include_top"] = True
    return taken


def _vision_transformer(model) -> "vit.VisionTransformer":
    """The `VisionTransformer` of a `build` result: itself, or the one layer of the model `build` wraps around it
    for an `input_tensor` computed by other layers (whose weights are not the checkpoint's)."""
    if isinstance(model, vit.VisionTransformer):
        return model
    return next(layer for layer in model.layers if isinstance(layer, vit.VisionTransformer))


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
    @records_given
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
        return ViT(
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


def model_from_name(model: str, weights=None, **kwargs):
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
        >>> model_from_name("vit_ti16", weights=None, input_shape=(32, 32, 3), classes=3).output_shape
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
    from keras_vit.checkpoints import loading, own

    loaded = own.load_keras_model(model)
    if weights is not None:
        loading.load_weights(loaded, weights)
    return loaded
