"""The one in-memory form every checkpoint reader produces: arrays in the official layout.

Readers (official .npz in any spelling, timm and Hugging Face safetensors, ...) translate their file into a
`Checkpoint` whose `params` use the released pre-Linen official .npz key names (../shared/REFERENCE.md):
no `params/` or `opt/target/` prefix, one entry per block (`Transformer/encoderblock_{i}/...`), attention
kernels (D, heads, head_dim), patch embedding kernel HWIO (P, P, C, D). The loader maps this layout onto a
Keras model by explicit layer names; nothing else needs to know a foreign format.

Example:
    >>> import numpy as np
    >>> ckpt = Checkpoint(params={"cls": np.zeros((1, 1, 8))}, source="official", path="x.npz",
    ...                   gelu_approximate=True, layer_norm_epsilon=1e-6)
    >>> ckpt.source
    'official'
"""

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A checkpoint translated to the official layout.

    Args:
        params: arrays by official key (`embedding/kernel`, `cls`,
            `Transformer/posembed_input/pos_embedding`, `Transformer/encoderblock_{i}/...`,
            `Transformer/encoder_norm/...`, optional `pre_logits/...`, `head/...`; hybrid models add the
            ResNet stem's top-level `conv_root/...`, `gn_root/...`, `block{s}/unit{u}/...` keys).
        source: where it came from: `"official"`, `"timm"` or `"huggingface"`.
        path: the file or folder it was read from (for messages).
        gelu_approximate: the GELU form the checkpoint was trained with (official Flax: tanh form, True;
            timm and Hugging Face: exact erf, False).
        layer_norm_epsilon: the LayerNorm epsilon of the source (1e-6 official and timm; HF config value).
    """

    params: dict[str, np.ndarray]
    source: str
    path: str
    gelu_approximate: bool
    layer_norm_epsilon: float
