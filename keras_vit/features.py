"""`feature_extractor`: a keras_vit ViT's intermediate features for dense tasks (detection, segmentation), as
timm's `forward_intermediates` and keras-hub's `pyramid_outputs`.

The extractor is a Keras model on the same layers (shared weights: fine-tuning it fine-tunes them) whose outputs
are a dict: `block_{i}` for each chosen encoder block, as `(B, h, w, D)` grids of patch tokens (`output="grid"`,
prefix tokens dropped) or `(B, T, D)` token sequences (`output="tokens"`); for a hybrid with `stem_stages=True`
also `stem_stage_{s}`, its ResNet stages' feature maps (strides 4, 8, 16, ...). It takes the model's input (any
size the model takes).

Example:
    >>> import keras_vit
    >>> model = keras_vit.ViT(image_size=64, patch_size=16, hidden_size=32, num_layers=4, num_heads=2,
    ...                       mlp_dim=64, include_top=False)
    >>> extractor = feature_extractor(model, blocks=(1, -1))
    >>> {name: tuple(tensor.shape) for name, tensor in extractor.output.items()}
    {'block_1': (None, 4, 4, 32), 'block_3': (None, 4, 4, 32)}
"""

import keras

from keras_vit import model_parts
from keras_vit.layers import TokenGrid

OUTPUTS = ("grid", "tokens")


def block_indices(blocks, num_layers: int) -> list[int]:
    """`blocks` (indices, negative from the end; None: every block) as distinct non-negative indices.

    Raises:
        ValueError: an index out of range or given twice, naming it and the range.
    """
    if blocks is None:
        return list(range(num_layers))
    blocks = (blocks,) if isinstance(blocks, int) else tuple(blocks)
    chosen = []
    for index in blocks:
        if isinstance(index, bool) or not isinstance(index, int) or not -num_layers <= index < num_layers:
            raise ValueError(f"Block indices go from {-num_layers} to {num_layers - 1} (the model has {num_layers} "
                             f"encoder blocks). Received: blocks={blocks!r}")
        if index % num_layers in chosen:
            raise ValueError(f"Block {index % num_layers} is chosen twice. Received: blocks={blocks!r}")
        chosen.append(index % num_layers)
    if not chosen:
        raise ValueError(f"Choose at least one block (None: every block). Received: blocks={blocks!r}")
    return chosen


def feature_extractor(model, blocks=None, output="grid", norm=False, stem_stages=False, name=None):
    """A Keras model giving `model`'s chosen encoder blocks' outputs (see the module docstring).

    Args:
        model: a keras_vit ViT (any `include_top`, hybrids included).
        blocks: block indices (negative from the end); None: every block.
        output: `"grid"` (`(B, h, w, D)`, no prefix tokens) or `"tokens"` (`(B, T, D)`, as the blocks give them).
        norm: apply the model's final LayerNorm to each output (timm's `norm=True`).
        stem_stages: add a hybrid's ResNet stages (`stem_stage_1`, ...).
        name: the extractor's name (default: `<model name>_features`).

    Raises:
        ValueError: a model that is not a keras_vit ViT, a bad `output`, block indices out of range, or
            `stem_stages` on a model without a ResNet stem.
    """
    if not model_parts.is_vit(model):
        raise ValueError(f"feature_extractor takes a keras_vit ViT (keras_vit.ViT or a named constructor). Received: "
                         f"{type(model).__name__} {getattr(model, 'name', '')!r}")
    if output not in OUTPUTS:
        raise ValueError(f"`output` must be one of {OUTPUTS}. Received: output={output!r}")
    encoder = model_parts.encoder_blocks(model)
    chosen = block_indices(blocks, len(encoder))
    stem = model_parts.resnet_stem(model)
    if stem_stages and stem is None:
        raise ValueError(f"stem_stages=True needs a hybrid (a ResNet stem); model {model.name!r} has none. Received: "
                         f"stem_stages=True")
    images = keras.Input(shape=model.input_shape[1:], name="images")
    outputs, x = {}, images
    patches = model_parts.patches(model)
    final_norm = model_parts.encoder_norm(model)
    grid = TokenGrid(model_parts.patch_encoder(model).num_prefix_tokens, patches.patch_size,
                     name="token_grid") if output == "grid" else None
    for layer in model.layers[1:]:  # the data path is a chain: input, [rescaling], [stem], patches, encoder, blocks
        if layer is stem:
            stages = stem.stages(x)
            if stem_stages:
                outputs.update({f"stem_stage_{s + 1}": stage for s, stage in enumerate(stages)})
            x = stages[-1]
            continue
        if layer is patches:
            tokenized = x
        x = layer(x)
        if layer in encoder and encoder.index(layer) in chosen:
            value = final_norm(x) if norm else x
            outputs[f"block_{encoder.index(layer)}"] = grid([value, tokenized]) if grid is not None else value
            if encoder.index(layer) == max(chosen):
                break
    return keras.Model(images, outputs, name=name or f"{model.name}_features")
