"""Reads a Hugging Face `transformers` ViT (`ViTForImageClassification` or `ViTModel`) into a `Checkpoint`.

Accepts the model folder (`config.json` + `model.safetensors`, or a sharded
`model.safetensors.index.json`) or the `model.safetensors` file with its `config.json` beside it. Names
(`transformers/models/vit/modeling_vit.py`), with prefix `vit.` for ViTForImageClassification and none for
ViTModel:

    embeddings.cls_token, embeddings.position_embeddings         -> cls, posembed_input/pos_embedding
    embeddings.patch_embeddings.projection.weight (D,C,P,P)      -> embedding/kernel (P,P,C,D)
    encoder.layer.{i}.layernorm_before / layernorm_after         -> LayerNorm_0 / LayerNorm_2
    encoder.layer.{i}.attention.attention.{query,key,value}      -> MultiHeadDotProductAttention_1/{...}
    encoder.layer.{i}.attention.output.dense                     -> MultiHeadDotProductAttention_1/out
    encoder.layer.{i}.intermediate.dense / output.dense          -> MlpBlock_3/Dense_0 / Dense_1
    layernorm                                                    -> Transformer/encoder_norm
    pooler.dense (ViTModel; tanh of the class token)             -> pre_logits
    classifier (no prefix)                                       -> head

DeiT (`transformers/models/deit/modeling_deit.py`, model_type `"deit"`, prefix `deit.`) has the same names and
adds `embeddings.distillation_token` -> `dist` (after `cls`; `position_embeddings` has two prefix rows).
`DeiTForImageClassificationWithTeacher`'s `cls_classifier` -> `head` and `distillation_classifier` -> `head_dist`
(its `logits`, their mean, is keras_vit's output with `distillation_token=True`); `DeiTForImageClassification`'s
`classifier` reads the [class] token alone, so the file loads with `include_top=False` or new heads
(`keras_vit.loading` says so). The plain DeiT models on the Hub (`facebook/deit-*-patch16-*`) are ViT files.

The LayerNorm epsilon (`layer_norm_eps`, 1e-12 by default in transformers) and the GELU form
(`hidden_act`: `"gelu"` exact erf; `"gelu_new"`, `"gelu_pytorch_tanh"`, `"gelu_fast"` the tanh form) come from
config.json, so the Keras model reproduces the transformers logits. The number of heads is
`num_attention_heads`.

Example:
    >>> from keras_vit.checkpoints import huggingface
    >>> checkpoint = huggingface.read("vit-base-patch16-224")  # doctest: +SKIP
    >>> checkpoint.layer_norm_epsilon  # doctest: +SKIP
    1e-12
"""

import json
import os

from keras_vit import variants
from keras_vit.checkpoints import safetensors_file, torch_layout
from keras_vit.checkpoints.layouts import HF_PATCH as _PATCH
from keras_vit.checkpoints.layouts import CONFIG_NAME, looks_like_huggingface, resolve_files
from keras_vit.checkpoints.canonical import DISTILLATION_HEAD, DISTILLATION_TOKEN, Checkpoint
from keras_vit.checkpoints.torch_layout import ATTENTION, BLOCK, MLP, identity

SOURCE = "Hugging Face"
MODEL_TYPES = ("vit", "deit")
_PREFIXES = ("vit.", "deit.")
"""The base model's prefix in `*ForImageClassification*` files; a bare `ViTModel` / `DeiTModel` has none."""
_HEADS = (("head", "classifier"), ("head", "cls_classifier"), (DISTILLATION_HEAD, "distillation_classifier"))
"""(official, transformers) heads: ViT's and DeiTForImageClassification's `classifier`, and the two heads of
`DeiTForImageClassificationWithTeacher`."""
# hidden_act -> gelu_approximate
_GELU_FORMS = {"gelu": False, "gelu_new": True, "gelu_pytorch_tanh": True, "gelu_fast": True}


def read_config(config_path: str) -> dict:
    """The parts of config.json the translation needs: heads, epsilon, GELU form, layer count, width, qkv bias."""
    try:
        with open(config_path) as handle:
            config = json.load(handle)
    except (OSError, ValueError) as error:
        raise ValueError(f"Unreadable {CONFIG_NAME}: {error}. Received: path={config_path!r}") from error
    if not isinstance(config, dict):
        raise ValueError(f"{CONFIG_NAME} must hold a JSON object. Received: path={config_path!r}")
    model_type = config.get("model_type", "vit")
    if model_type not in MODEL_TYPES:
        raise ValueError(
            f"Only Hugging Face ViT and DeiT models (model_type {' or '.join(map(repr, MODEL_TYPES))}) are supported. "
            f"Received: model_type={model_type!r} in {config_path!r}"
        )
    act = config.get("hidden_act", "gelu")
    if act not in _GELU_FORMS:
        raise ValueError(
            f"Unsupported hidden_act in {config_path!r}; keras_vit supports {sorted(_GELU_FORMS)}. "
            f"Received: hidden_act={act!r}"
        )
    pooler_act = config.get("pooler_act", "tanh")
    if pooler_act != "tanh":
        raise ValueError(f"Only a tanh pooler is supported. Received: pooler_act={pooler_act!r} in {config_path!r}")
    try:
        return dict(
            num_heads=int(config["num_attention_heads"]),
            num_layers=int(config["num_hidden_layers"]),
            hidden_size=int(config["hidden_size"]),
            layer_norm_epsilon=float(config.get("layer_norm_eps", 1e-12)),
            gelu_approximate=_GELU_FORMS[act],
            qkv_bias=bool(config.get("qkv_bias", True)),
        )
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{CONFIG_NAME} lacks or mangles a ViT field: {error!r}. Received: path={config_path!r}") from error


def read(path) -> Checkpoint:
    """Reads a Hugging Face ViT and translates it to the official layout.

    Args:
        path: the model folder, or its `model.safetensors` with config.json beside it.

    Returns:
        A `Checkpoint` with `source="huggingface"` and the epsilon and GELU form of config.json.

    Raises:
        ImportError: `safetensors` is not installed.
        ValueError: missing config.json, a truncated or corrupt file, names that are not a HF ViT, a config
            that disagrees with the weights, or tensors of the wrong shape.
    """
    path = os.fspath(path)
    weight_files, config_path = resolve_files(path)
    config = read_config(config_path)
    tensors = {}
    for weight_file in weight_files:
        tensors.update(safetensors_file.load(weight_file))
    if not looks_like_huggingface(tensors):
        raise ValueError(
            f"{path!r} is not a Hugging Face ViT checkpoint (no `{_PATCH}`). Received tensors: {sorted(tensors)[:10]}"
        )
    prefix = next((p for p in _PREFIXES if f"{p}{_PATCH}" in tensors), "")
    layers = torch_layout.count_blocks(tensors, f"{prefix}encoder.layer.", path)
    width = tensors[prefix + _PATCH].shape[0]
    if (layers, width) != (config["num_layers"], config["hidden_size"]):
        raise ValueError(
            f"{config_path!r} disagrees with the weights in {path!r}: config says num_hidden_layers="
            f"{config['num_layers']}, hidden_size={config['hidden_size']}; the weights have {layers} layers of "
            f"width {width}."
        )
    heads = variants.resolve_num_heads(config["num_heads"], width, config_path)
    has_bias = f"{prefix}encoder.layer.0.attention.attention.query.bias" in tensors
    if has_bias != config["qkv_bias"]:
        raise ValueError(
            f"{config_path!r} disagrees with the weights in {path!r}: config says qkv_bias={config['qkv_bias']}; the "
            f"weights {'have' if has_bias else 'have no'} query/key/value biases.")
    plan = _embedding_plan(prefix, tensors)
    for i in range(layers):
        plan += _block_plan(prefix, i, heads, tensors)
    plan += _linear_plan("Transformer/encoder_norm", prefix + "layernorm", norm=True)
    for official, hf_name in (("pre_logits", prefix + "pooler.dense"), *_HEADS):
        if f"{hf_name}.weight" in tensors:
            plan += _linear_plan(official, hf_name)
    params = torch_layout.translate(tensors, plan, path, SOURCE)
    return Checkpoint(
        params=params,
        source="huggingface",
        path=path,
        gelu_approximate=config["gelu_approximate"],
        layer_norm_epsilon=config["layer_norm_epsilon"],
    )


def _linear_plan(official: str, hf_name: str, norm: bool = False, kernel_fn=torch_layout.linear_kernel) -> list:
    """A LayerNorm (`weight` -> `scale`) or a Linear (`weight` -> `kernel`) with its bias."""
    if norm:
        return [(f"{official}/scale", (f"{hf_name}.weight",), identity), (f"{official}/bias", (f"{hf_name}.bias",), identity)]
    return [(f"{official}/kernel", (f"{hf_name}.weight",), kernel_fn), (f"{official}/bias", (f"{hf_name}.bias",), identity)]


def _embedding_plan(prefix: str, tensors: dict) -> list:
    e = prefix + "embeddings."
    plan = [
        ("embedding/kernel", (e + "patch_embeddings.projection.weight",), torch_layout.conv_kernel),
        ("embedding/bias", (e + "patch_embeddings.projection.bias",), identity),
        ("cls", (e + "cls_token",), identity),
        ("Transformer/posembed_input/pos_embedding", (e + "position_embeddings",), identity),
    ]
    if e + "distillation_token" in tensors:  # DeiT
        plan.append((DISTILLATION_TOKEN, (e + "distillation_token",), identity))
    return plan


def _block_plan(prefix: str, i: int, heads: int, tensors: dict) -> list:
    h = f"{prefix}encoder.layer.{i}."
    o = BLOCK.format(i)
    a = o + ATTENTION
    plan = _linear_plan(o + "LayerNorm_0", h + "layernorm_before", norm=True)
    plan += _linear_plan(o + "LayerNorm_2", h + "layernorm_after", norm=True)
    for name in ("query", "key", "value"):
        plan.append((a + f"{name}/kernel", (h + f"attention.attention.{name}.weight",),
                     lambda w: torch_layout.heads_kernel(w, heads)))
        if h + f"attention.attention.{name}.bias" in tensors:  # ViTConfig(qkv_bias=False) stores none
            plan.append((a + f"{name}/bias", (h + f"attention.attention.{name}.bias",),
                         lambda b: torch_layout.heads_bias(b, heads)))
    plan += _linear_plan(a + "out", h + "attention.output.dense", kernel_fn=lambda w: torch_layout.out_kernel(w, heads))
    plan += _linear_plan(o + MLP + "Dense_0", h + "intermediate.dense")
    plan += _linear_plan(o + MLP + "Dense_1", h + "output.dense")
    return plan
