"""`VisionTransformer`: the Vision Transformer as a Keras model whose config is its arguments; `build(...)`: its pure
builder, one line per stage of the paper's data path (the layer names are those of `keras_vit.model_parts`).

    image (B,H,W,C) -> Patches -> PatchEncoder -> TransformerBlock x L -> encoder_norm
        -> pooling ([class] token | mean) -> [pre_logits Dense + tanh] -> head
    DeiT (`distillation_token=True`): [class] and distillation tokens -> head, head_dist -> mean -> activation

`keras_vit.ViT` (in `keras_vit.applications`) flows one way: (a checkpoint's shapes -> the arguments left at None,
`keras_vit.checkpoints.architecture`) -> `build` (arguments -> model, no loading; defaults from
`keras_vit.variants`) -> load (`keras_vit.loading`). Nothing here reads a file.
"""

import types

import keras
import numpy as np

from keras_vit import initialization as initialization_lib
from keras_vit import lora, model_config, model_parts, preprocessing, validation, variants
from keras_vit.layers import LayerNormalization, Patches, PatchEncoder, TokenPooling, TransformerBlock
from keras_vit.layers.patch_encoder import check_position_embedding
from keras_vit.layers.resnet import ResNetStem
from keras_vit.layers.tokenizers import ConvStem, ShiftedPatches, check_shifted_patch_size, conv_stem_widths

TOKENIZERS = variants.choices("tokenizer")


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
                                           arguments.get("patch_size") or variants.DEFAULTS["patch_size"],
                                           any_size=True)
    vit = VisionTransformer(**{**arguments, "input_shape": shape})
    return keras.Model(keras.utils.get_source_inputs(input_tensor), vit(input_tensor), name=vit.name)


def _model_input(input_tensor):
    if input_tensor is not None and not keras.backend.is_keras_tensor(input_tensor):
        raise ValueError(
            "`input_tensor` must be a Keras tensor, e.g. `keras.Input(shape=(224, 224, 3))`. "
            f"Received: input_tensor of type {type(input_tensor).__name__}"
        )
    return input_tensor


ARGUMENTS = {name: argument.default for name, argument in variants.ARGUMENTS.items()
             if name not in ("weights", "input_tensor", "name")}
"""The arguments a `VisionTransformer` is made of, with `keras_vit.ViT`'s defaults (`keras_vit.variants.ARGUMENTS`)."""


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
                                                           a["patch_size"], any_size=True)
        if validation.is_any_size(a["input_shape"]):  # image_size: what the position table covers
            _check_any_size(a)
            a["image_size"] = validation.nominal_size(a["input_shape"], a["image_size"], a["patch_size"])
        else:
            a["image_size"] = None  # resolved into input_shape
        with model_config.dtype_policy(dtype) as policy_name:
            inputs = input_tensor if input_tensor is not None else keras.Input(shape=a["input_shape"], name="images")
            outputs = _graph(inputs, types.SimpleNamespace(**a))
        self._finish(inputs, outputs, name=name or "vit", trainable=trainable, arguments=a, policy_name=policy_name)
        initialization_lib.initialize(self, a["initialization"] or "scratch")
        self._lora = None

    def get_config(self):
        config = super().get_config()
        if self._lora:
            config["lora"] = dict(self._lora)  # rebuilt by from_config: a LoRA model round-trips through .keras
        return config

    @classmethod
    def from_config(cls, config):
        record = config.get("lora")
        model = super().from_config({key: value for key, value in config.items() if key != "lora"})
        if record is not None:
            model.enable_lora(record["rank"], tuple(record["targets"]), alpha=record.get("alpha"))
        return model

    def enable_lora(self, rank, targets=lora.DEFAULT_TARGETS, alpha=None):
        """LoRA adapters of `rank` on the encoder's `targets` projections, the rest of the encoder frozen
        (`keras_vit.lora`); `alpha` scales them by `alpha / rank` (default: `rank`, i.e. 1).

        Called after `compile`, `fit` or `predict`, it drops Keras' traced functions and gives the model a fresh
        optimizer of the same config (`keras_vit.lora.fresh_optimizer`): the next `fit` trains the adapters.

        Raises:
            ValueError: LoRA already enabled, a rank outside 1..hidden_size, an unknown target, an alpha that is not
                a finite positive number, a quantized model, or a compiled optimizer that cannot be rebuilt from
                its config; nothing is changed then.
        """
        self._lora = lora.enable(self, rank, targets, alpha)

    def merge_lora(self):
        """A plain copy of this model (no adapters, every weight trainable) whose kernels hold the adapters
        folded in: what to export, quantize or fine-tune again. This model is unchanged."""
        return lora.merged(self, type(self).from_config)

    def save_lora_weights(self, filepath, include_head=True):
        """Writes the adapters (a few MB for ViT-B) to `filepath` (`*.lora.h5`) with the task head trained beside
        them (PEFT's `modules_to_save`): loaded on a fresh base they reproduce the task. `include_head=False`
        writes the adapters alone."""
        lora.save(self, getattr(self, "_lora", None), filepath, include_head)

    def load_lora_weights(self, filepath, include_head=True):
        """Reads adapters written by `save_lora_weights` on this architecture, enabling LoRA as the file says if
        it is not enabled yet, and replacing the adapters it has; with `include_head`, the file's task head too.

        Raises:
            ValueError: a file of another architecture, rank, targets or head shape, or damaged; nothing is
                assigned then.
        """
        lora.load(self, filepath, lambda rank, targets, alpha: self.enable_lora(rank, targets, alpha), include_head)


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
    validation.check_interpolation(a["position_embedding_interpolation"])
    check_position_embedding(a["position_embedding"], a["hidden_size"])
    validation.check_choice("initialization", a["initialization"], (None, *initialization_lib.SCHEMES))
    validation.check_choice("tokenizer", a["tokenizer"], TOKENIZERS)
    validation.check_bool("locality_attention", a["locality_attention"])
    validation.check_bool("distillation_token", a["distillation_token"])
    if a["distillation_token"]:
        _check_distillation(a)
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


def _check_distillation(a: dict) -> None:
    """Refuses what DeiT's distillation token does not go with: no [class] token, a pre_logits layer."""
    if a["classifier"] != "token":
        raise ValueError(
            "DeiT's distillation token follows the [class] token, and its head reads the token itself: "
            f"`distillation_token=True` needs classifier=\"token\". Received: classifier={a['classifier']!r}, "
            "distillation_token=True")
    if a["representation_size"] is not None and a["include_top"]:
        raise ValueError(
            "A distilled ViT's two heads read the [class] and distillation tokens directly (DeiT has no pre_logits "
            f"layer). Received: representation_size={a['representation_size']!r}, distillation_token=True. Leave "
            "`representation_size` unset.")


def _check_any_size(a: dict) -> None:
    """Refuses what a model of any input size (`input_shape` with None height or width) cannot be."""
    if a["hybrid"] is not None:
        raise ValueError(
            "A hybrid's ResNet stem is built for one input size here: `input_shape` with a None height or width "
            f"takes a plain ViT. Received: input_shape={tuple(a['input_shape'])}, hybrid={a['hybrid']!r}. Pass "
            "`input_shape=(height, width, channels)` with integers (multiples of the patch size) for a hybrid.")


def _graph(inputs, a):
    """The paper's data path from `inputs` to the model's output, one line per stage."""
    stem = variants.resolve_hybrid(a.hybrid, a.patch_size)
    use_class_token = a.classifier == "token"
    num_prefix = int(use_class_token) + int(bool(a.distillation_token))
    drop_path_rates = np.linspace(0.0, a.drop_path_rate, a.num_layers) if a.num_layers > 1 else [a.drop_path_rate]
    x = inputs
    if a.include_preprocessing:
        x = preprocessing.rescaling_layer()(x)
    if stem is not None:
        x = ResNetStem(**stem, name=model_parts.RESNET_STEM)(x)
    elif a.tokenizer == "conv":
        x = ConvStem(conv_stem_widths(a.patch_size, a.hidden_size), name=model_parts.CONV_STEM)(x)
    any_size = validation.is_any_size(a.input_shape)  # the patches keep their grid, read at run time
    if a.tokenizer == "shifted_patches":
        x = ShiftedPatches(a.patch_size, epsilon=a.layer_norm_epsilon, flatten=not any_size,
                           name=model_parts.PATCHES)(x)
    else:
        x = Patches(variants.feature_patch_size(stem, a.patch_size) if a.tokenizer == "patches" else 1,
                    flatten=not any_size, name=model_parts.PATCHES)(x)
    height, width = a.image_size if any_size else a.input_shape[:2]
    x = PatchEncoder(a.hidden_size, use_class_token=use_class_token, dropout_rate=a.dropout_rate,
                     position_embedding=a.position_embedding, grid=(height // a.patch_size, width // a.patch_size),
                     interpolation=a.position_embedding_interpolation or "bilinear",
                     distillation_token=bool(a.distillation_token), name=model_parts.PATCH_ENCODER)(x)
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
    x = LayerNormalization(epsilon=a.layer_norm_epsilon, name=model_parts.ENCODER_NORM)(x)
    if a.include_top and a.distillation_token:
        return _distilled_heads(x, a, num_prefix)
    if a.include_top:
        x = TokenPooling("token" if use_class_token else "avg", int(use_class_token), name=model_parts.POOLING)(x)
        if a.representation_size:
            x = keras.layers.Dense(a.representation_size, activation="tanh", name=model_parts.PRE_LOGITS)(x)
        return keras.layers.Dense(
            a.classes,
            activation=a.classifier_activation,
            kernel_initializer="zeros",
            name=model_parts.HEAD,
            dtype=model_config.head_dtype(),
        )(x)
    if a.pooling:
        x = TokenPooling(a.pooling, num_prefix, name=model_parts.POOLING)(x)
    return x


def _distilled_heads(tokens, a, num_prefix):
    """DeiT's inference output: the mean of the [class] token's `head` and the distillation token's `head_dist`
    (both logits), then `classifier_activation` (timm's `VisionTransformerDistilled` in eval, transformers'
    `DeiTForImageClassificationWithTeacher.logits`)."""
    logits = []
    for index, pooling, head in ((0, model_parts.POOLING, model_parts.HEAD),
                                 (1, model_parts.DISTILLATION_POOLING, model_parts.DISTILLATION_HEAD)):
        token = TokenPooling("token", num_prefix, token_index=index, name=pooling)(tokens)
        logits.append(keras.layers.Dense(a.classes, kernel_initializer="zeros", name=head,
                                         dtype=model_config.head_dtype())(token))
    x = keras.layers.Average(name=model_parts.HEAD_MEAN, dtype=model_config.head_dtype())(logits)
    if a.classifier_activation is None:
        return x
    return keras.layers.Activation(a.classifier_activation, name=model_parts.HEAD_ACTIVATION,
                                   dtype=model_config.head_dtype())(x)
