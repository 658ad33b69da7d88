"""`ViT(...)`: the generic Vision Transformer; `build(...)`: its pure builder, one line per stage of the paper's
data path (the layer names are those of `keras_vit.model_parts`).

    image (B,H,W,C) -> Patches -> PatchEncoder -> TransformerBlock x L -> encoder_norm
        -> pooling ([class] token | mean) -> [pre_logits Dense + tanh] -> head

`ViT` flows one way: (a checkpoint's shapes -> the arguments left at None, `keras_vit.checkpoints.architecture`)
-> `build` (arguments -> model, no loading; defaults from `keras_vit.variants.DEFAULTS`) -> load
(`keras_vit.loading`).
"""

import functools
import inspect
import types

import keras
import numpy as np

from keras_vit import initialization as initialization_lib
from keras_vit import model_config, model_parts, preprocessing, validation, variants, weights_files
from keras_vit.layers import Patches, PatchEncoder, TokenPooling, TransformerBlock
from keras_vit.layers.patch_encoder import check_position_embedding
from keras_vit.layers.resnet import ResNetStem
from keras_vit.layers.tokenizers import ConvStem, ShiftedPatches, check_shifted_patch_size, conv_stem_widths

TOKENIZERS = variants.choices("tokenizer")


def head_dtype():
    """Logits in float32 under a mixed precision policy (as the Keras mixed-precision guide asks)."""
    policy = keras.config.dtype_policy()
    return "float32" if policy.compute_dtype in ("float16", "bfloat16") else policy


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
    pos_embed_interpolation="bilinear",
    qkv_bias=None,
    initialization=None,
    rematerialize=True,
    pos_embedding=None,
    tokenizer=None,
    locality_attention=None,
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
        image_size: int or (height, width); used when `input_shape` and `input_tensor` are None
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
        input_shape: (height, width, channels), channels last; overrides `image_size`.
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
        pos_embed_interpolation: how a checkpoint's position embedding is resampled to another input size:
            `"bilinear"` (the official corner-aligned method, as `scipy.ndimage.zoom(order=1)`) or
            `"bicubic"` (`keras_vit.pos_embed`).
        qkv_bias: whether the query, key and value projections have biases, as in the paper and every
            official checkpoint [the checkpoint's, else True]. A checkpoint with (non-zero) query/key/value
            biases is refused for `qkv_bias=False`, one without them for `qkv_bias=True`.
        initialization: how the weights start without a checkpoint (`keras_vit.initialization`): `"scratch"`
            (smaller patch and attention kernels, a Glorot head: better for training from scratch on small data) or
            `"official"` (the Flax code's, zero head) ["scratch" for `weights=None`; with `weights` the
            checkpoint's values, and a new head for other classes is zero, as the official fine-tuning].
        pos_embedding: `"learned"` (the paper's 1-D table, resampled for another resolution) or `"sincos2d"`
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
        return build(arguments)
    if initialization not in (None, "official"):
        raise ValueError(
            f"`initialization` applies to `weights=None`; a checkpoint sets every weight (a new head starts at "
            f"zero). Received: initialization={initialization!r}, weights={weights!r}. Leave it unset."
        )
    arguments["initialization"] = "official"  # loading overwrites it: no second random draw
    from keras_vit import loading
    from keras_vit.checkpoints import architecture, own

    validation.check_before_loading(arguments)  # before any download or read
    validation.check_choice("tokenizer", tokenizer, (None, *TOKENIZERS))
    if own.is_own(weights):  # a keras_vit file or run: its own arguments, or the architecture asked for
        source = own.open_model(weights)
        if source is None:
            model = build(arguments)
            loading.load_weights(_vision_transformer(model), weights)
            return model
        checkpoint, entry = own.to_checkpoint(source, weights), None
        arguments.update(saved_arguments(source, given))
    else:
        checkpoint, entry = loading.open_checkpoint(weights, variants.find_variant(arguments), num_heads)
    model = build(architecture.resolve_arguments(arguments, checkpoint, entry, label=weights))
    loading.load_checkpoint(_vision_transformer(model), checkpoint, interpolation=pos_embed_interpolation or "bilinear",
                            label=weights)
    return model


def saved_arguments(source, given) -> dict:
    """The `keras_vit.variants.SAVED_ARGUMENTS` of the keras_vit model `source` that the caller did not pass
    (`given`): what makes `ViT(weights=<its file>)` the saved model. A caller who asks for a head (`classes`,
    `classifier_activation`) on a file saved without one gets it (`include_top=True`)."""
    saved = {**source.arguments, "name": source.name}
    taken = {key: saved[key] for key in variants.SAVED_ARGUMENTS if key not in given}
    if "include_top" in taken and {"classes", "classifier_activation"} & given:
        taken["include_top"] = True
    return taken


def _vision_transformer(model) -> "VisionTransformer":
    """The `VisionTransformer` of a `build` result: itself, or the one layer of the model `build` wraps around it
    for an `input_tensor` computed by other layers (whose weights are not the checkpoint's)."""
    if isinstance(model, VisionTransformer):
        return model
    return next(layer for layer in model.layers if isinstance(layer, VisionTransformer))


def build(arguments: dict) -> "VisionTransformer":
    """The model of `ViT` arguments, randomly initialised: the pure builder (no file is read or loaded).

    Args:
        arguments: `ViT` keyword arguments without `weights`; missing ones take `ViT`'s defaults, and
            architecture ones missing or None those of `keras_vit.variants.DEFAULTS` (ViT-B/16 at 224).

    Returns:
        A `VisionTransformer` whose layers are named as `keras_vit.model_parts` says; with an `input_tensor`
        that is a layer's output (not a `keras.Input`), a `keras.Model` from that tensor's inputs calling it.

    Raises:
        TypeError: an argument `ViT` does not take.
        ValueError: an invalid value (each error quotes it).

    Example:
        >>> build(dict(image_size=32, patch_size=8, hidden_size=64, num_layers=2, num_heads=4, mlp_dim=128,
        ...            classes=10)).output_shape
        (None, 10)
    """
    arguments = dict(arguments)
    unknown = sorted(key for key in arguments if key not in ARGUMENTS and key not in ("input_tensor", "name"))
    if unknown:
        raise TypeError(f"`build` takes the arguments of `ViT` without `weights`. Received: {', '.join(unknown)}")
    input_tensor = _model_input(arguments.pop("input_tensor", None))
    if input_tensor is None or keras.utils.get_source_inputs(input_tensor) == [input_tensor]:
        return VisionTransformer(input_tensor=input_tensor, **arguments)
    # A tensor computed by other layers: the ViT is one layer of a model from that tensor's own inputs.
    shape = validation.resolve_input_shape(None, arguments.get("input_shape"), input_tensor,
                                           arguments.get("patch_size") or variants.DEFAULTS["patch_size"])
    vit = VisionTransformer(**{**arguments, "input_shape": shape})
    return keras.Model(keras.utils.get_source_inputs(input_tensor), vit(input_tensor), name=vit.name)


def _model_input(input_tensor):
    if input_tensor is not None and not keras.backend.is_keras_tensor(input_tensor):
        raise ValueError(
            "`input_tensor` must be a Keras tensor, e.g. `keras.Input(shape=(224, 224, 3))`. "
            f"Received: input_tensor of type {type(input_tensor).__name__}"
        )
    return input_tensor


ARGUMENTS = {name: p.default for name, p in inspect.signature(ViT).parameters.items()
             if name not in ("weights", "input_tensor", "name")}
"""The arguments a `VisionTransformer` is made of, with `ViT`'s defaults: its signature is their one declaration."""


@keras.saving.register_keras_serializable(package="keras_vit")
class VisionTransformer(model_config.ConfigModel):
    """A Vision Transformer whose config is its constructor's arguments, as keras-hub's backbones: a `.keras` file
    says exactly what the model is (`get_config()` is `ViT`'s arguments, resolved), and `from_config` rebuilds it.

    `keras_vit.ViT` (and the named constructors) build it and load weights; this class is the pure builder. Its
    arguments are those of `ViT` without `weights` (`ARGUMENTS`); every one is kept in `arguments`, with
    `image_size` resolved into `input_shape` and architecture defaults filled in (`keras_vit.variants.DEFAULTS`).
    `dtype` is the dtype policy the layers are built under (default: the global one).

    Example:
        >>> model = VisionTransformer(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=2,
        ...                           mlp_dim=64, classes=3)
        >>> config = model.get_config()
        >>> config["input_shape"], config["classes"], VisionTransformer.from_config(config).count_params()
        ((32, 32, 3), 3, 15459)
    """

    def __init__(self, input_tensor=None, name=None, dtype=None, trainable=True, **arguments):
        model_config.require_channels_last()
        unknown = sorted(set(arguments) - set(ARGUMENTS))
        if unknown:
            raise TypeError(f"`VisionTransformer` takes the arguments of `ViT` without `weights`. Received: "
                            f"{', '.join(unknown)}")
        a = variants.with_defaults({**ARGUMENTS, **{k: model_config.plain(v) for k, v in arguments.items()}})
        _check(a)
        a["input_shape"] = validation.resolve_input_shape(a["image_size"], a["input_shape"], input_tensor,
                                                           a["patch_size"])
        a["image_size"] = None  # resolved into input_shape
        with model_config.dtype_policy(dtype) as policy_name:
            inputs = input_tensor if input_tensor is not None else keras.Input(shape=a["input_shape"], name="images")
            outputs = _graph(inputs, types.SimpleNamespace(**a))
        self._finish(inputs, outputs, name=name or "vit", trainable=trainable, arguments=a, policy_name=policy_name)
        initialization_lib.initialize(self, a["initialization"] or "scratch")


def _check(a: dict) -> None:
    """Every check of the arguments that needs no graph (each error quotes the value)."""
    for arg in ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim"):
        validation.check_positive_int(arg, a[arg])
    if a["include_top"]:
        validation.check_positive_int("classes", a["classes"])
    validation.check_choice("classifier", a["classifier"], validation.CLASSIFIERS)
    validation.check_pooling(a["pooling"], a["classifier"])
    if a["representation_size"] is not None:
        validation.check_positive_int("representation_size", a["representation_size"])
    for arg in ("dropout_rate", "attention_dropout_rate", "drop_path_rate"):
        validation.check_rate(arg, a[arg])
    validation.check_bool("gelu_approximate", a["gelu_approximate"])
    validation.check_bool("qkv_bias", a["qkv_bias"])
    validation.check_positive_number("layer_norm_epsilon", a["layer_norm_epsilon"])
    validation.check_interpolation(a["pos_embed_interpolation"])
    check_position_embedding(a["pos_embedding"], a["hidden_size"])
    validation.check_choice("initialization", a["initialization"], (None, *initialization_lib.SCHEMES))
    validation.check_choice("tokenizer", a["tokenizer"], TOKENIZERS)
    validation.check_bool("locality_attention", a["locality_attention"])
    if a["tokenizer"] != "patches" and a["hybrid"] is not None:
        raise ValueError(f"A hybrid's ResNet stem is its tokenizer. Received: tokenizer={a['tokenizer']!r}, "
                         f"hybrid={a['hybrid']!r}. Leave `tokenizer` unset for a hybrid.")
    if a["tokenizer"] == "conv":
        conv_stem_widths(a["patch_size"], a["hidden_size"])
    if a["tokenizer"] == "shifted_patches":
        check_shifted_patch_size(a["patch_size"])
    if a["hidden_size"] % a["num_heads"]:
        raise ValueError(
            f"`hidden_size` must be divisible by `num_heads`. Received: hidden_size={a['hidden_size']}, "
            f"num_heads={a['num_heads']}"
        )
    variants.resolve_hybrid(a["hybrid"], a["patch_size"])


def _graph(inputs, a):
    """The paper's data path from `inputs` to the model's output, one line per stage."""
    stem = variants.resolve_hybrid(a.hybrid, a.patch_size)
    use_class_token = a.classifier == "token"
    drop_path_rates = np.linspace(0.0, a.drop_path_rate, a.num_layers) if a.num_layers > 1 else [a.drop_path_rate]
    x = inputs
    if a.include_preprocessing:
        x = preprocessing.rescaling_layer()(x)
    if stem is not None:
        x = ResNetStem(**stem, name=model_parts.RESNET_STEM)(x)
    elif a.tokenizer == "conv":
        x = ConvStem(conv_stem_widths(a.patch_size, a.hidden_size), name=model_parts.CONV_STEM)(x)
    if a.tokenizer == "shifted_patches":
        x = ShiftedPatches(a.patch_size, epsilon=a.layer_norm_epsilon, name=model_parts.PATCHES)(x)
    else:
        x = Patches(variants.feature_patch_size(stem, a.patch_size) if a.tokenizer == "patches" else 1,
                    name=model_parts.PATCHES)(x)
    grid = (a.input_shape[0] // a.patch_size, a.input_shape[1] // a.patch_size)
    x = PatchEncoder(a.hidden_size, use_class_token=use_class_token, dropout_rate=a.dropout_rate,
                     position_embedding=a.pos_embedding, grid=grid, name=model_parts.PATCH_ENCODER)(x)
    for i in range(a.num_layers):
        x = TransformerBlock(
            a.num_heads,
            a.mlp_dim,
            dropout_rate=a.dropout_rate,
            attention_dropout_rate=a.attention_dropout_rate,
            drop_path_rate=float(drop_path_rates[i]),
            layer_norm_epsilon=a.layer_norm_epsilon,
            gelu_approximate=a.gelu_approximate,
            qkv_bias=a.qkv_bias,
            rematerialize=a.rematerialize,
            locality_attention=a.locality_attention,
            name=model_parts.encoder_block_name(i),
        )(x)
    x = keras.layers.LayerNormalization(epsilon=a.layer_norm_epsilon, name=model_parts.ENCODER_NORM)(x)
    if a.include_top:
        x = TokenPooling("token" if use_class_token else "avg", int(use_class_token), name=model_parts.POOLING)(x)
        if a.representation_size:
            x = keras.layers.Dense(a.representation_size, activation="tanh", name=model_parts.PRE_LOGITS)(x)
        return keras.layers.Dense(
            a.classes,
            activation=a.classifier_activation,
            kernel_initializer="zeros",
            name=model_parts.HEAD,
            dtype=head_dtype(),
        )(x)
    if a.pooling:
        x = TokenPooling(a.pooling, int(use_class_token), name=model_parts.POOLING)(x)
    return x
