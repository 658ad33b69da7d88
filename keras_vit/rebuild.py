"""The `keras_vit.ViT` arguments of a built keras_vit model, read from its layers' configurations by name.

One reader for everything that needs a built model's architecture: the converter prints the call that
rebuilds the model (`keras_vit.convert`), and `keras_vit.load_weights` looks up the model's variant to resolve
a published name. A hybrid (paper section 3.1) is recognised by its `resnet_stem` layer: its `patch_size` is
the stem's stride and `hybrid` is the stem's name (`"r50"`) or its `ResNetStem` arguments.

Example:
    >>> import keras_vit
    >>> from keras_vit.rebuild import architecture_of
    >>> args = architecture_of(keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=2,
    ...                                      num_heads=4, mlp_dim=64, classes=5))
    >>> args["patch_size"], args["num_layers"], args["hybrid"]
    (8, 2, None)
"""

import inspect

ARGUMENT_ORDER = ("image_size", "patch_size", "hybrid", "hidden_size", "num_layers", "num_heads", "mlp_dim",
                  "classes", "include_top", "classifier", "representation_size", "gelu_approximate",
                  "layer_norm_epsilon")
"""The keys `architecture_of` may return, in `keras_vit.ViT`'s argument order."""


def _hybrid_of(stem):
    """`"r50"` for the paper's stem with default GroupNorm groups, else the stem's `ResNetStem` arguments."""
    from keras_vit.checkpoints.architecture import _named_stem
    from keras_vit.layers.resnet import ResNetStem

    found = dict(block_units=tuple(stem.block_units), width=stem.width)
    if stem.groups != inspect.signature(ResNetStem).parameters["groups"].default:
        return {**found, "groups": stem.groups}
    return _named_stem(found)


def architecture_of(model) -> dict | None:
    """The `keras_vit.ViT` arguments that rebuild `model`'s architecture, or None for a non-keras_vit model.

    Args:
        model: a model built by `keras_vit.ViT` or a named constructor (possibly reloaded from `.keras`).

    Returns:
        A dict with the keys of `ARGUMENT_ORDER` (`classes` when the model has a head, else
        `include_top=False`); `hybrid` is None for a plain ViT. None when the model has no `encoder_block_0`.
    """
    from keras_vit.layers.resnet import stem_stride

    names = {layer.name for layer in model.layers}
    if "encoder_block_0" not in names:
        return None
    num_layers = 0
    while f"encoder_block_{num_layers}" in names:
        num_layers += 1
    encoder, block = model.get_layer("patch_encoder"), model.get_layer("encoder_block_0")
    args = dict(image_size=tuple(model.input_shape[1:3]), patch_size=model.get_layer("patches").patch_size,
                hybrid=None, hidden_size=encoder.hidden_size, num_layers=num_layers, num_heads=block.num_heads,
                mlp_dim=block.mlp_dim)
    if "resnet_stem" in names:
        stem = model.get_layer("resnet_stem")
        args["patch_size"] *= stem_stride(stem.block_units)
        args["hybrid"] = _hybrid_of(stem)
    if "head" in names:
        args["classes"] = model.get_layer("head").units
    else:
        args["include_top"] = False
    args.update(
        classifier="token" if encoder.use_class_token else "gap",
        representation_size=model.get_layer("pre_logits").units if "pre_logits" in names else None,
        gelu_approximate=block.gelu_approximate,
        layer_norm_epsilon=block.layer_norm_epsilon,
    )
    return args
