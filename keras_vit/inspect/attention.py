"""Per-layer attention probabilities of a keras_vit model, from a second graph over the same layers.

The normal model keeps its fast attention path (no probabilities kept) and pays nothing; the inspection
graph built here calls the model's own `encoder_block_{i}` layer objects (same weights, no copies) with
`return_attention_scores=True`, which takes the blocks' explicit softmax path (paper section 4.5).
"""

import dataclasses

import keras
import numpy as np

from keras_vit import model_parts


@dataclasses.dataclass(frozen=True)
class TokenGeometry:
    """Where a model's tokens sit on the input image.

    Attributes:
        image_shape: (H, W) of the model input in pixels.
        grid_shape: (rows, columns) of the patch grid; patch tokens are numbered row-major.
        patch_size: (height, width) in input pixels covered by one patch token (P for a plain ViT; the
            total stride for a hybrid, whose patches are taken from a CNN feature map).
        num_prefix_tokens: tokens before the patch tokens (1 with a [class] token, 2 with DeiT's
            distillation token too, 0 for GAP models).
    """

    image_shape: tuple
    grid_shape: tuple
    patch_size: tuple
    num_prefix_tokens: int


class _BlockWithAttention(keras.layers.Layer):
    """Calls an existing `TransformerBlock` with `return_attention_scores=True` inside a functional graph.

    `TransformerBlock.compute_output_shape` describes only the normal single output, so a symbolic call
    that asks for the probabilities cannot be traced on the block itself; this layer owns no weights, it
    holds the very same block object and lets Keras trace the two outputs from the block's `call`.
    Internal to the inspection graph, which is never saved.
    """

    def __init__(self, block, **kwargs):
        super().__init__(dtype=block.dtype_policy, **kwargs)
        self.block = block

    def call(self, x):
        return self.block(x, training=False, return_attention_scores=True)


def attention_model(model):
    """A functional model from the images to the attention probabilities of every block.

    It shares the input, the embedding stages (preprocessing, `patches`, `patch_encoder` and, for hybrids,
    the CNN stem) and the `encoder_block_{i}` layer objects with `model`; nothing is copied, so weights
    loaded into `model` later are seen here too.

    Args:
        model: a keras_vit model (token or GAP classifier, any `include_top`/`pooling`).

    Returns:
        A `keras.Model` with one output per block, each (B, heads, T, T) float32 probabilities.

    Example:
        >>> import keras_vit
        >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4,
        ...                       mlp_dim=64, classes=5)
        >>> [tuple(o.shape) for o in attention_model(model).outputs]
        [(None, 4, 17, 17), (None, 4, 17, 17)]
    """
    blocks = model_parts.encoder_blocks(model)
    x = blocks[0].input
    probabilities = []
    for block in blocks:
        x, probs = _BlockWithAttention(block, name=f"{block.name}_with_attention")(x)
        probabilities.append(probs)
    return keras.Model(model.input, probabilities, name=f"{model.name}_attention")


def attention_probabilities(model, images, batch_size=32):
    """Attention probabilities of every block for a batch of images, computed in inference mode.

    Args:
        model: a keras_vit model (the inspection graph is built for the call; to reuse one, call
            `attention_model(model)` once and run it yourself).
        images: array (B, H, W, C) prepared as `model` expects its input.
        batch_size: images per forward pass.

    Returns:
        A list with one float32 numpy array (B, heads, T, T) per block; every row sums to 1.

    Example:
        >>> import numpy as np, keras_vit
        >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4,
        ...                       mlp_dim=64, classes=5)
        >>> probs = attention_probabilities(model, np.zeros((1, 32, 32, 3), "float32"))
        >>> len(probs), probs[0].shape
        (2, (1, 4, 17, 17))
    """
    probe = attention_model(model)
    images = np.asarray(images)
    outputs = [[] for _ in probe.outputs]
    for start in range(0, len(images), batch_size):
        batch = probe(images[start:start + batch_size], training=False)
        if len(probe.outputs) == 1:  # a one-output functional model returns a tensor, not a list
            batch = [batch]
        for layer_outputs, probs in zip(outputs, batch):
            layer_outputs.append(keras.ops.convert_to_numpy(keras.ops.cast(probs, "float32")))
    return [np.concatenate(layer_outputs, axis=0) for layer_outputs in outputs]


def token_geometry(model):
    """Reads the patch grid, the pixels per patch and the number of prefix tokens off a keras_vit model.

    Args:
        model: a keras_vit model with fixed input height and width.

    Returns:
        A `TokenGeometry`.

    Example:
        >>> import keras_vit
        >>> token_geometry(keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=1,
        ...                              num_heads=4, mlp_dim=64, classes=5)).grid_shape
        (4, 4)
    """
    height, width = model.input_shape[1:3]
    if height is None or width is None:
        raise ValueError(f"The model needs a fixed input height and width. Received: input_shape={model.input_shape}")
    prefix = model_parts.patch_encoder(model).num_prefix_tokens
    tokens = model_parts.encoder_blocks(model)[0].input.shape[1]
    patches = tokens - prefix
    # The grid keeps the image's aspect ratio: rows / columns = H / W.
    rows = int(round(np.sqrt(patches * height / width)))
    cols = patches // max(rows, 1)
    if rows * cols != patches:
        raise ValueError(f"Cannot place {patches} patch tokens on a grid for an image of {height}x{width}.")
    return TokenGeometry((height, width), (rows, cols), (height / rows, width / cols), prefix)
