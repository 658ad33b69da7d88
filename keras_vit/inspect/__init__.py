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

from keras_vit.inspect.attention import TokenGeometry, attention_model, attention_probabilities, token_geometry
from keras_vit.inspect.distance import mean_attention_distance, patch_distances
from keras_vit.inspect.filters import embedding_filters
from keras_vit.inspect.rollout import attention_rollout, resize_bilinear, rollout_maps
from keras_vit.inspect.similarity import position_embedding_similarity

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
    "position_embedding_similarity",
    "embedding_filters",
]
