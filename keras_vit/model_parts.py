"""The parts of a keras_vit model, by the layer names `keras_vit.ViT` gives them: the one home of that contract.

`keras_vit.ViT` names its stages with the constants below; everything else (the checkpoint loader, the
converter, the inspection tools, the export, the training app, the benchmarks) reaches a stage through the
accessors here, never by a layer-name string or a loop counting `encoder_block_{i}`:

    images -> [preprocessing] -> [resnet_stem] -> patches -> patch_encoder -> encoder_block_0 .. _{L-1}
        -> encoder_norm -> [pooling] -> [pre_logits] -> [head]
    a distilled ViT (DeiT): ... -> encoder_norm -> pooling, pooling_dist -> head, head_dist -> head_mean
        -> [head_activation]

Optional stages (in brackets) are None when the model lacks them; a missing required stage raises a
ValueError saying the model is not a keras_vit ViT. `architecture(model)` gives the `keras_vit.ViT`
arguments that rebuild the model, from its config (the converter prints them; `load_weights` resolves a
published name with them).

Example:
    >>> import keras_vit
    >>> from keras_vit import model_parts
    >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4,
    ...                       mlp_dim=64, classes=5)
    >>> len(model_parts.encoder_blocks(model)), model_parts.head(model).units
    (2, 5)
    >>> args = model_parts.architecture(model)
    >>> args["patch_size"], args["num_layers"], args["input_shape"]
    (8, 2, (32, 32, 3))
"""

PREPROCESSING = "preprocessing"
RESNET_STEM = "resnet_stem"
CONV_STEM = "conv_stem"
PATCHES = "patches"
PATCH_ENCODER = "patch_encoder"
ENCODER_NORM = "encoder_norm"
POOLING = "pooling"
PRE_LOGITS = "pre_logits"
HEAD = "head"
DISTILLATION_HEAD = "head_dist"
DISTILLATION_POOLING = "pooling_dist"
HEAD_MEAN = "head_mean"
HEAD_ACTIVATION = "head_activation"
"""A distilled ViT's heads give logits; their mean goes through `classifier_activation` in this layer (absent for
logits)."""


def encoder_block_name(index: int) -> str:
    """The name of Transformer block `index` (0-based): `encoder_block_{index}`."""
    return f"encoder_block_{index}"


def _optional(model, name: str):
    for layer in model.layers:
        if layer.name == name:
            return layer
    return None


def _required(model, name: str):
    layer = _optional(model, name)
    if layer is None:
        raise ValueError(
            f"The model has no layer named `{name}`; pass a keras_vit model (built by `keras_vit.ViT` or a named "
            f"constructor). Received: model {model.name!r} with layers {[layer.name for layer in model.layers][:8]}..."
        )
    return layer


def is_vit(model) -> bool:
    """Whether `model` has the stages of a keras_vit ViT (its first Transformer block)."""
    return _optional(model, encoder_block_name(0)) is not None


def preprocessing(model):
    """The model's own `[0, 255] -> [-1, 1]` `Rescaling` layer (`include_preprocessing=True`), or None."""
    return _optional(model, PREPROCESSING)


def resnet_stem(model):
    """The hybrid's `ResNetStem` (paper section 3.1), or None for a plain ViT."""
    return _optional(model, RESNET_STEM)


def patches(model):
    """The `Patches` layer (its `patch_size` is 1 in a hybrid, which cuts the stem's feature map)."""
    return _required(model, PATCHES)


def patch_encoder(model):
    """The `PatchEncoder`: patch projection, [class] token and position embedding."""
    return _required(model, PATCH_ENCODER)


def encoder_blocks(model) -> list:
    """The `TransformerBlock`s in order; raises a ValueError when there is none."""
    by_name = {layer.name: layer for layer in model.layers}
    blocks = []
    while (block := by_name.get(encoder_block_name(len(blocks)))) is not None:
        blocks.append(block)
    if not blocks:
        _required(model, encoder_block_name(0))
    return blocks


def encoder_norm(model):
    """The LayerNormalization after the last block."""
    return _required(model, ENCODER_NORM)


def pooling(model):
    """The `TokenPooling` layer (with `include_top`, or `include_top=False` with `pooling`), or None."""
    return _optional(model, POOLING)


def pre_logits(model):
    """The tanh `pre_logits` Dense (`representation_size`), or None."""
    return _optional(model, PRE_LOGITS)


def head(model):
    """The classification `head` Dense, or None (`include_top=False`)."""
    return _optional(model, HEAD)


def distillation_head(model):
    """The distillation token's `head_dist` Dense (DeiT, `distillation_token=True`), or None."""
    return _optional(model, DISTILLATION_HEAD)


def output_activation(model) -> str | None:
    """The name of the activation the model's head output goes through (`"softmax"`, `"linear"` for logits), or
    None without a head: the head's own, or for a distilled ViT (`head_dist`) that of its `head_activation` layer
    after the heads' mean (`"linear"` when it has none)."""
    layer = _optional(model, HEAD_ACTIVATION)
    if layer is None:
        layer = head(model)
        if layer is None:
            return None
        if distillation_head(model) is not None:
            return "linear"
    return getattr(layer.activation, "__name__", str(layer.activation))


def model_grid(model) -> tuple[int, int]:
    """The (rows, cols) patch grid the model's position embedding covers (a model of any input size: the grid of
    its `image_size`)."""
    grid = getattr(patch_encoder(model), "grid", None)
    if grid is not None:
        return tuple(grid)
    layer = patches(model)
    _, height, width, _ = layer.input.shape
    return height // layer.patch_size, width // layer.patch_size


def architecture(model) -> dict | None:
    """The `keras_vit.ViT` arguments that rebuild `model`, or None for a model that is not a keras_vit ViT.

    They are the model's own (`keras_vit.vit.VisionTransformer.arguments`, its config): nothing is read back from
    layers. `image_size` is resolved into `input_shape`.

    Args:
        model: a model built by `keras_vit.ViT` or a named constructor (possibly reloaded from `.keras`).

    Returns:
        A dict of `keras_vit.ViT` arguments (without `weights`, `input_tensor` and `name`), or None.
    """
    arguments = getattr(model, "arguments", None)
    if not is_vit(model) or not isinstance(arguments, dict):
        return None
    return arguments
