"""Official checkpoint keys <-> Keras variables of a keras_vit model, by explicit layer names.

The one place that knows which Keras variable holds which official array. Layers are found through
`keras_vit.model_parts` (`patch_encoder`, `encoder_block_{i}`, `encoder_norm`, `pre_logits`, `head`, DeiT's `dist`
token and `head_dist`, and
`resnet_stem` for the hybrid, whose keys come from `keras_vit.checkpoints.resnet_names.resnet_targets`), never
by position. A `qkv_bias=False` model has no query/key/value bias keys. A weight no published layout has (those of
keras_vit's own options, `keras_vit.variants.OWN_OPTIONS`: a convolutional stem, a locality temperature, ...) is
keyed by its Keras path (`conv_stem/conv_0/kernel`), so a new option's weights need no entry here.
Only one array changes shape on the way: the patch embedding kernel (P, P, C, D) becomes the Dense kernel
(P*P*C, D) of `patch_encoder.projection` (a C-order reshape, matching the (row, column, channel) order of
`Patches`). The position embedding may need resampling, which the loader does (`keras_vit.position_embedding`).
`to_checkpoint` reads a built ViT back into the canonical `Checkpoint`: how one's own file (its model rebuilt by
`keras_vit.checkpoints.own.open_model`) enters the loader as the published files do.

Example:
    >>> import keras_vit
    >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=4,
    ...                       mlp_dim=64, classes=5)
    >>> tuple(targets(model)["embedding/kernel"].shape)
    (192, 32)
    >>> checkpoint = to_checkpoint(model, "own.keras")
    >>> checkpoint.source, checkpoint.arguments["classes"], checkpoint.params["embedding/kernel"].shape
    ('keras_vit', 5, (8, 8, 3, 32))
"""

import os

import keras

from keras_vit import model_parts
from keras_vit.checkpoints.canonical import DISTILLATION_HEAD, DISTILLATION_TOKEN, Checkpoint

RESHAPED_KEYS = ("embedding/kernel",)
"""Keys whose array is reshaped (same element order) to the variable's shape."""

POSITION_EMBEDDING = "Transformer/posembed_input/pos_embedding"

_BLOCK = {
    "attention_norm": ("LayerNorm_0", {"gamma": "scale", "beta": "bias"}),
    "mlp_norm": ("LayerNorm_2", {"gamma": "scale", "beta": "bias"}),
    "mlp_dense_1": ("MlpBlock_3/Dense_0", {"kernel": "kernel", "bias": "bias"}),
    "mlp_dense_2": ("MlpBlock_3/Dense_1", {"kernel": "kernel", "bias": "bias"}),
}


def _dense(prefix: str, layer) -> dict:
    out = {f"{prefix}/kernel": layer.kernel}
    if layer.bias is not None:  # an EinsumDense built without bias (`qkv_bias=False`)
        out[f"{prefix}/bias"] = layer.bias
    return out


def block_targets(block, prefix: str) -> dict:
    """The official keys of one `TransformerBlock` (prefix `Transformer/encoderblock_{i}`)."""
    out = {}
    for sublayer, (official, names) in _BLOCK.items():
        layer = getattr(block, sublayer)
        for attr, leaf in names.items():
            out[f"{prefix}/{official}/{leaf}"] = getattr(layer, attr)
    for name in ("query", "key", "value", "out"):
        out.update(_dense(f"{prefix}/MultiHeadDotProductAttention_1/{name}", getattr(block.attention, name)))
    return out


def own_option_targets(model: keras.Model, official: dict) -> dict:
    """The model's weights that `official` (its published keys) does not hold, each under its Keras path: the
    weights of keras_vit's own options, which only keras_vit files carry.

    Raises:
        ValueError: a path that is already an official key (two variables under one key).
    """
    mapped = {id(variable) for variable in official.values()}
    out = {variable.path: variable for variable in model.weights if id(variable) not in mapped}
    if clash := sorted(set(out) & set(official)):
        raise ValueError(f"Weights of the model {model.name!r} have paths that are official keys: {clash}.")
    return out


def targets(model: keras.Model) -> dict:
    """Every official key the model holds, mapped to its Keras variable.

    Args:
        model: a model built by `keras_vit.ViT` (any options: token/gap, with or without top, hybrid).

    Returns:
        dict official key -> `keras.Variable`.
    """
    encoder = model_parts.patch_encoder(model)
    out = _dense("embedding", encoder.projection)
    if encoder.position_embedding is not None:  # a fixed position embedding has no weight
        out[POSITION_EMBEDDING] = encoder.position_embedding
    if encoder.use_class_token:
        out["cls"] = encoder.class_token
    if getattr(encoder, "use_distillation_token", False):
        out[DISTILLATION_TOKEN] = encoder.distillation_token
    for i, block in enumerate(model_parts.encoder_blocks(model)):
        out.update(block_targets(block, f"Transformer/encoderblock_{i}"))
    norm = model_parts.encoder_norm(model)
    out["Transformer/encoder_norm/scale"], out["Transformer/encoder_norm/bias"] = norm.gamma, norm.beta
    for name, layer in (("pre_logits", model_parts.pre_logits(model)), ("head", model_parts.head(model)),
                        (DISTILLATION_HEAD, model_parts.distillation_head(model))):
        if layer is not None:
            out.update(_dense(name, layer))
    if (stem := model_parts.resnet_stem(model)) is not None:
        from keras_vit.checkpoints.resnet_names import resnet_targets

        out.update(resnet_targets(stem))
    return {**out, **own_option_targets(model, out)}


def to_checkpoint(model, label) -> Checkpoint:
    """A keras_vit ViT's weights as a canonical checkpoint (official keys) that carries its `arguments`.

    Raises:
        ValueError: for a model that is not a ViT (a BiT ResNet transfers through `keras_vit.BiT`).
    """
    arguments = model_parts.architecture(model)
    if arguments is None:
        raise ValueError(
            f"{os.fspath(label)!r} holds a {type(model).__name__} ({model.name!r}), not a ViT: load it with the "
            "constructor of its kind (a BiT ResNet: `keras_vit.BiT(weights=...)` or `BiT_R50x1`). "
            f"Received: weights={os.fspath(label)!r}")
    params = {key: variable.numpy() for key, variable in targets(model).items()}
    size = model_parts.patches(model).patch_size  # the official (P, P, C, D) of the (P*P*C, D) projection
    kernel = params["embedding/kernel"]
    params["embedding/kernel"] = kernel.reshape(size, size, kernel.shape[0] // (size * size), kernel.shape[1])
    return Checkpoint(params, "keras_vit", os.fspath(label), arguments["gelu_approximate"],
                      arguments["layer_norm_epsilon"], arguments=arguments)
