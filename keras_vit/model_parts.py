"""The parts of a keras_vit model, by the layer names `keras_vit.ViT` gives them: the one home of that contract.

`keras_vit.ViT` names its stages with the constants below; everything else (the checkpoint loader, the
converter, the inspection tools, the export, the training app, the benchmarks) reaches a stage through the
accessors here, never by a layer-name string or a loop counting `encoder_block_{i}`:

    images -> [preprocessing] -> [resnet_stem] -> patches -> patch_encoder -> encoder_block_0 .. _{L-1}
        -> encoder_norm -> [pooling] -> [pre_logits] -> [head]

Optional stages (in brackets) are None when the model lacks them; a missing required stage raises a
ValueError saying the model is not a keras_vit ViT. `architecture(model)` reads back the `keras_vit.ViT`
arguments that rebuild the model (the converter prints them; `load_weights` resolves a published name with
them).

Example:
    >>> import keras_vit
    >>> from keras_vit import model_parts
    >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4,
    ...                       mlp_dim=64, classes=5)
    >>> len(model_parts.encoder_blocks(model)), model_parts.head(model).units
    (2, 5)
    >>> args = model_parts.architecture(model)
    >>> args["patch_size"], args["num_layers"], args["hybrid"]
    (8, 2, None)
"""

from keras_vit import variants

PREPROCESSING = "preprocessing"
RESNET_STEM = "resnet_stem"
PATCHES = "patches"
PATCH_ENCODER = "patch_encoder"
ENCODER_NORM = "encoder_norm"
POOLING = "pooling"
PRE_LOGITS = "pre_logits"
HEAD = "head"

ARGUMENT_ORDER = ("image_size", "patch_size", "hybrid", "hidden_size", "num_layers", "num_heads", "mlp_dim",
                  "classes", "include_top", "classifier", "representation_size", "gelu_approximate",
                  "layer_norm_epsilon", "qkv_bias")
"""The keys `architecture` may return, in `keras_vit.ViT`'s argument order."""


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


def model_grid(model) -> tuple[int, int]:
    """The (rows, cols) patch grid the model's position embedding covers."""
    layer = patches(model)
    _, height, width, _ = layer.input.shape
    return height // layer.patch_size, width // layer.patch_size


def _hybrid_of(stem):
    """`"r50"` for the paper's stem with default GroupNorm groups, else the stem's `ResNetStem` arguments."""
    import inspect

    from keras_vit.checkpoints.architecture import named_stem
    from keras_vit.layers.resnet import ResNetStem

    found = dict(block_units=tuple(stem.block_units), width=stem.width)
    if stem.groups != inspect.signature(ResNetStem).parameters["groups"].default:
        return {**found, "groups": stem.groups}
    return named_stem(found)


def architecture(model) -> dict | None:
    """The `keras_vit.ViT` arguments that rebuild `model`'s architecture, or None for a non-keras_vit model.

    A hybrid is recognised by its `resnet_stem` layer: its `patch_size` is the stem's stride and `hybrid` is
    the stem's name (`"r50"`) or its `ResNetStem` arguments.

    Args:
        model: a model built by `keras_vit.ViT` or a named constructor (possibly reloaded from `.keras`).

    Returns:
        A dict with the keys of `ARGUMENT_ORDER` (`classes` when the model has a head, else
        `include_top=False`; `qkv_bias=False` only for a model without query/key/value biases); `hybrid` is
        None for a plain ViT. None when the model has no `encoder_block_0`.
    """
    if not is_vit(model):
        return None
    blocks, encoder = encoder_blocks(model), patch_encoder(model)
    block = blocks[0]
    args = dict(image_size=tuple(model.input_shape[1:3]), patch_size=patches(model).patch_size, hybrid=None,
                hidden_size=encoder.hidden_size, num_layers=len(blocks), num_heads=block.num_heads,
                mlp_dim=block.mlp_dim)
    if (stem := resnet_stem(model)) is not None:
        args["patch_size"] *= variants.stem_stride(stem.block_units)
        args["hybrid"] = _hybrid_of(stem)
    if (top := head(model)) is not None:
        args["classes"] = top.units
    else:
        args["include_top"] = False
    representation = pre_logits(model)
    args.update(
        classifier="token" if encoder.use_class_token else "gap",
        representation_size=None if representation is None else representation.units,
        gelu_approximate=block.gelu_approximate,
        layer_norm_epsilon=block.layer_norm_epsilon,
    )
    if not block.qkv_bias:
        args["qkv_bias"] = False
    return args
