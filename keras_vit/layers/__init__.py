"""The Keras layers of the ViT, in the order of the data path."""

from keras_vit.layers.attention import MultiHeadSelfAttention
from keras_vit.layers.drop_path import DropPath
from keras_vit.layers.layer_norm import LayerNormalization
from keras_vit.layers.patch_encoder import PatchEncoder
from keras_vit.layers.patches import Patches
from keras_vit.layers.pooling import TokenPooling
from keras_vit.layers.resnet import ResNetStem, ResNetUnit, StdConv2D
from keras_vit.layers.token_grid import TokenGrid  # noqa: F401  (internal: the feature extractor's; registered)
from keras_vit.layers.tokenizers import ConvStem, ShiftedPatches
from keras_vit.layers.transformer_block import TransformerBlock

__all__ = ["Patches", "PatchEncoder", "TransformerBlock", "MultiHeadSelfAttention", "DropPath", "LayerNormalization",
           "TokenPooling", "ResNetStem", "ResNetUnit", "StdConv2D", "ConvStem", "ShiftedPatches"]
