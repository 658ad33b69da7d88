"""The paper's Figure 7 measured on one model of `training.experiments` (a ViT or the hybrid), at initialisation
or trained: attention distance and entropy per head (right), position-embedding similarity (centre), principal
components of the embedding filters (left), all with `keras_vit.inspect`.
"""

from __future__ import annotations

import numpy as np

FILTER_COMPONENTS = 14  # principal components kept per model (the paper shows 28 of 768 filters)


def filter_kernel(model):
    """(kernel, side, source) of the filters that see pixels: the patch embedding's projection of a ViT, the
    root convolution of a hybrid's stem (its patch embedding sees the stem's features, not pixels)."""
    from keras_vit import model_parts

    channels = model.input_shape[-1]
    stem = model_parts.resnet_stem(model) if model_parts.is_vit(model) else None
    if stem is None:
        side = model_parts.patches(model).patch_size
        return np.asarray(model_parts.patch_encoder(model).projection.kernel), side, "patch embedding"
    kernel = next(np.asarray(w) for w in stem.weights if len(w.shape) == 4 and w.shape[2] == channels)
    return kernel, kernel.shape[0], "stem root convolution"


def figure7(model, images) -> dict:
    """Figure 7 of `model` on `images` (already in the model's input range).

    Returns:
        dict of JSON-ready values: `attention_distance` and `attention_entropy` ((layers, heads) lists: pixels;
        entropy relative to uniform attention, 1 = uniform), `position_similarity` ((rows, cols, rows, cols),
        rounded), `position_structure` (`keras_vit.inspect.similarity_against_distance`), `filters`
        ((k, side, side, C) principal components; C = 1 for grey images, of the channel-summed filters),
        `filter_variance` (the fraction of variance of the first k), `filter_source`.
    """
    from keras_vit import inspect, model_parts

    geometry = inspect.token_geometry(model)
    probabilities = inspect.attention_probabilities(model, images)
    prefix = geometry.num_prefix_tokens
    distance = inspect.mean_attention_distance(probabilities, geometry.grid_shape, geometry.patch_size, prefix)
    entropy = inspect.attention_entropy(probabilities, prefix)
    similarity = inspect.position_embedding_similarity(model_parts.patch_encoder(model).patch_position_table(),
                                                       geometry.grid_shape)
    kernel, side, source = filter_kernel(model)
    channels = model.input_shape[-1]
    images = np.asarray(images)
    if channels > 1 and np.allclose(images[..., :1], images[..., 1:]):
        # Grey images (the digits): every channel gets the same gradient, so the differences between a filter's
        # channels stay as initialised and would dominate the components; the filter a grey image sees is the sum.
        kernel = np.asarray(kernel).reshape(side, side, channels, -1).sum(axis=2, keepdims=True)
        channels, source = 1, source + ", channels summed (grey images)"
    return dict(
        attention_distance=distance.tolist(), attention_entropy=entropy.tolist(),
        position_similarity=np.round(similarity, 4).tolist(),
        position_structure=inspect.similarity_against_distance(similarity),
        filters=np.round(inspect.embedding_filters(kernel, side, channels, FILTER_COMPONENTS), 4).tolist(),
        filter_variance=inspect.explained_variance(kernel, FILTER_COMPONENTS).tolist(), filter_source=source,
    )


def uniform_distance(image_size: int, patch: int) -> float:
    """The mean attention distance of uniform attention over the patch grid of a square image, in pixels.

    Example:
        >>> round(uniform_distance(28, 4), 2)  # the default study's 7x7 grid of 4-px patches
        14.44
    """
    from keras_vit.inspect.distance import uniform_attention_distance

    return uniform_attention_distance((image_size // patch, image_size // patch), patch)
