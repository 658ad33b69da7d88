"""Inspecting a ViT (paper section 4.5): attention maps and rollout, attention distance, position-embedding
similarity, patch-embedding filters; plots and a report CLI (`python -m keras_vit.inspect`).

The analyses are pure numpy functions of arrays; `attention_probabilities` gets the arrays from a model.
Plotting (`keras_vit.inspect.plots`, `keras_vit.inspect.report`) needs matplotlib, the `inspect` extra.

Example:
    >>> import numpy as np, keras_vit
    >>> from keras_vit import inspect
    >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4,
    ...                       mlp_dim=64, classes=5)
    >>> probs = inspect.attention_probabilities(model, np.zeros((1, 32, 32, 3), "float32"))
    >>> geometry = inspect.token_geometry(model)
    >>> inspect.mean_attention_distance(probs, geometry.grid_shape, geometry.patch_size,
    ...                                 geometry.num_prefix_tokens).shape
    (2, 4)
"""

import importlib

_EXPORTS = {
    **dict.fromkeys(("TokenGeometry", "attention_model", "attention_probabilities", "token_geometry"),
                    "keras_vit.inspect.attention"),
    **dict.fromkeys(("attention_entropy", "mean_attention_distance", "patch_distances", "uniform_attention_distance"),
                    "keras_vit.inspect.distance"),
    **dict.fromkeys(("embedding_filters", "explained_variance"), "keras_vit.inspect.filters"),
    **dict.fromkeys(("attention_rollout", "resize_bilinear", "rollout_maps"), "keras_vit.inspect.rollout"),
    **dict.fromkeys(("position_embedding_similarity", "similarity_against_distance"), "keras_vit.inspect.similarity"),
}


def __getattr__(name):  # imported on first use: `python -m keras_vit.inspect --help` needs no Keras
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))


__all__ = [
    "TokenGeometry",
    "attention_model",
    "attention_probabilities",
    "token_geometry",
    "attention_rollout",
    "rollout_maps",
    "resize_bilinear",
    "mean_attention_distance",
    "patch_distances",
    "uniform_attention_distance",
    "attention_entropy",
    "position_embedding_similarity",
    "similarity_against_distance",
    "embedding_filters",
    "explained_variance",
]
