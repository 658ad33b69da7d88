"""Kept for the old import path: `architecture_of` is `keras_vit.model_parts.architecture`, the `keras_vit.ViT`
arguments of a built keras_vit model.

Example:
    >>> import keras_vit
    >>> from keras_vit.rebuild import architecture_of
    >>> args = architecture_of(keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=2,
    ...                                      num_heads=4, mlp_dim=64, classes=5))
    >>> args["patch_size"], args["num_layers"], args["hybrid"]
    (8, 2, None)
"""

from keras_vit.model_parts import ARGUMENT_ORDER
from keras_vit.model_parts import architecture as architecture_of

__all__ = ["ARGUMENT_ORDER", "architecture_of"]
