"""keras_vit: the Vision Transformer (arXiv 2010.11929) as Keras 3 applications.

Example:
    >>> import keras_vit
    >>> model = keras_vit.ViT_Ti16(weights=None)
    >>> model.count_params()
    5717416
"""

from keras_vit.applications import (
    ViT_B8,
    ViT_B16,
    ViT_B32,
    ViT_H14,
    ViT_L16,
    ViT_L32,
    ViT_R50_B16,
    ViT_S16,
    ViT_S32,
    ViT_Ti16,
)
from keras_vit.layers import DropPath, MultiHeadSelfAttention, PatchEncoder, Patches, TokenPooling, TransformerBlock
from keras_vit.preprocessing import decode_predictions, preprocess_input
from keras_vit.vit import ViT
from keras_vit.weights import WeightsChecksumError, WeightsDownloadError

__version__ = "0.1.0"

__all__ = [
    "ViT",
    "ViT_Ti16",
    "ViT_S16",
    "ViT_S32",
    "ViT_B8",
    "ViT_B16",
    "ViT_B32",
    "ViT_L16",
    "ViT_L32",
    "ViT_H14",
    "ViT_R50_B16",
    "Patches",
    "PatchEncoder",
    "TransformerBlock",
    "MultiHeadSelfAttention",
    "DropPath",
    "TokenPooling",
    "preprocess_input",
    "decode_predictions",
    "WeightsDownloadError",
    "WeightsChecksumError",
    "__version__",
]
