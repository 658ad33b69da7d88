"""Reads a timm `VisionTransformer` `model.safetensors` into a `Checkpoint` in the official layout.

timm (github.com/huggingface/pytorch-image-models, `timm/models/vision_transformer.py`) names and shapes:

    patch_embed.proj.weight (D,C,P,P), .bias     -> embedding/kernel (P,P,C,D), embedding/bias
    cls_token (1,1,D)                            -> cls
    dist_token (1,1,D) (DeiT, timm.models.deit)  -> dist
    pos_embed (1,T,D)                            -> Transformer/posembed_input/pos_embedding
    blocks.{i}.norm1 / norm2                     -> LayerNorm_0 / LayerNorm_2 (weight -> scale)
    blocks.{i}.attn.qkv.weight (3D,D), .bias     -> MultiHeadDotProductAttention_1/{query,key,value}
    blocks.{i}.attn.proj.weight (D,D), .bias     -> MultiHeadDotProductAttention_1/out (heads,head_dim,D)
    blocks.{i}.mlp.fc1 / fc2                     -> MlpBlock_3/Dense_0 / Dense_1
    norm                                         -> Transformer/encoder_norm
    pre_logits.fc (older timm, with tanh)        -> pre_logits
    head.weight (classes,D), .bias               -> head
    head_dist.weight, .bias (DeiT distilled)     -> head_dist

timm models use exact (erf) GELU and LayerNorm epsilon 1e-6 (`partial(nn.LayerNorm, eps=1e-6)`), so the
checkpoint says `gelu_approximate=False`, `layer_norm_epsilon=1e-6`. The number of heads is not in the file:
it comes from `num_heads` or from the standard width table (`keras_vit.variants`).

Also handled exactly: layer scale (`blocks.{i}.ls1.gamma`, `ls2.gamma`, folded into the projections they
scale), `no_embed_class` position embeddings (a zero row is prepended for the class token, which adds the
same thing), and `qkv_bias=False` (no biases in the file, none in the checkpoint: a model without them). Refused with a clear error, because keras_vit's data path
(paper section 3.1) cannot compute them: `fc_norm` (LayerNorm after average pooling), `norm_pre`, register
tokens, attention-pool (MAP) heads, q/k normalisation, CNN stems other than the official hybrids' ResNet and
any other unknown tensor. The hybrids of `vision_transformer_hybrid.py` (R+Ti/16, R26+S/32, R50+B/16,
R50+L/32: `patch_embed.backbone.*`) read as the official ResNet keys (`resnet_names.timm_resnet_plan`).

DeiT (`timm.models.deit`): the plain `deit_*_patch16_*` files are a ViT layout and read as one; the distilled
`deit_*_distilled_patch16_*` files (`VisionTransformerDistilled`) add `dist_token` after `cls_token`, two prefix
rows in `pos_embed` and `head_dist`, read as a `distillation_token=True` model (its eval output, the mean of both
heads, is keras_vit's).

Not visible in the weights: timm's `global_pool="avg"` on a model with a class token (pools patch tokens
only); such a file reads as a token-classifier model. Models without a class token read as `gap`.

Example:
    >>> from keras_vit.checkpoints import timm
    >>> checkpoint = timm.read("vit_base_patch16_224/model.safetensors")  # doctest: +SKIP
    >>> checkpoint.params["embedding/kernel"].shape  # doctest: +SKIP
    (16, 16, 3, 768)
"""

import math
import os

import numpy as np

from keras_vit import variants
from keras_vit.checkpoints import resnet_names, safetensors_file, torch_layout
from keras_vit.checkpoints.layouts import looks_like_timm
from keras_vit.checkpoints.canonical import DISTILLATION_HEAD, DISTILLATION_TOKEN, Checkpoint
from keras_vit.checkpoints.torch_layout import ATTENTION, BLOCK, MLP, identity

SOURCE = "timm"

# Tensor-name fragments of timm ViT features that keras_vit cannot compute, with the reason.
_UNSUPPORTED = {
    "fc_norm.": "fc_norm (LayerNorm applied after average pooling, timm global_pool='avg' models such as MAE "
                "fine-tunes); keras_vit applies encoder_norm to all tokens before pooling",
    "norm_pre.": "norm_pre (a LayerNorm before the blocks, CLIP-style models)",
    "reg_token": "register tokens",
    "attn_pool.": "an attention-pool (MAP) head",
    ".attn.q_norm.": "q/k normalisation in attention",
    ".attn.k_norm.": "q/k normalisation in attention",
}


def read(path, num_heads: int | None = None) -> Checkpoint:
    """Reads a timm ViT `.safetensors` file and translates it to the official layout.

    Args:
        path: the `model.safetensors` file.
        num_heads: attention heads per block; None infers them from the width by the standard table
            (Ti 192: 3, S 384: 6, B 768: 12, L 1024: 16, H 1280: 16).

    Returns:
        A `Checkpoint` with `source="timm"`, `gelu_approximate=False`, `layer_norm_epsilon=1e-6`.

    Raises:
        ImportError: `safetensors` is not installed.
        ValueError: a missing, truncated or corrupt file, names that are not timm's ViT, a feature keras_vit
            cannot compute, a non-standard width without `num_heads`, or tensors of the wrong shape.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"The timm checkpoint file does not exist. Received: path={path!r}")
    tensors = safetensors_file.load(path)
    if not looks_like_timm(tensors):
        raise ValueError(
            f"{path!r} is not a timm ViT checkpoint (no `patch_embed.proj.weight`). "
            f"Received tensors: {sorted(tensors)[:10]}"
        )
    for fragment, feature in _UNSUPPORTED.items():
        found = sorted(name for name in tensors if fragment in name)
        if found:
            raise ValueError(
                f"The timm checkpoint {path!r} uses {feature}, which keras_vit's ViT cannot compute. "
                f"Received: {found[:4]}"
            )
    hidden_size = tensors["patch_embed.proj.weight"].shape[0]
    heads = variants.resolve_num_heads(num_heads, hidden_size, path)
    plan = _embedding_plan(tensors)
    if any(name.startswith(resnet_names.TIMM_BACKBONE) for name in tensors):
        plan += resnet_names.timm_resnet_plan(tensors, path)
    for i in range(torch_layout.count_blocks(tensors, "blocks.", path)):
        plan += _block_plan(tensors, i, heads)
    plan += [
        ("Transformer/encoder_norm/scale", ("norm.weight",), identity),
        ("Transformer/encoder_norm/bias", ("norm.bias",), identity),
    ]
    for official, timm_name in (("pre_logits", "pre_logits.fc"), ("head", "head"), (DISTILLATION_HEAD, "head_dist")):
        if f"{timm_name}.weight" in tensors:
            plan += [
                (f"{official}/kernel", (f"{timm_name}.weight",), torch_layout.linear_kernel),
                (f"{official}/bias", (f"{timm_name}.bias",), identity),
            ]
    params = torch_layout.translate(tensors, plan, path, SOURCE)
    return Checkpoint(params=params, source=SOURCE, path=path, gelu_approximate=False, layer_norm_epsilon=1e-6)


def _embedding_plan(tensors: dict) -> list:
    plan = [
        ("embedding/kernel", ("patch_embed.proj.weight",), torch_layout.conv_kernel),
        ("embedding/bias", ("patch_embed.proj.bias",), identity),
        ("Transformer/posembed_input/pos_embedding", ("pos_embed",), identity),
    ]
    if "cls_token" in tensors:
        plan.append(("cls", ("cls_token",), identity))
        prefix = 1
        if "dist_token" in tensors:  # DeiT distilled: pos_embed covers both prefix tokens
            plan.append((DISTILLATION_TOKEN, ("dist_token",), identity))
            prefix = 2
        if _is_no_embed_class(tensors.get("pos_embed")):
            plan[2] = ("Transformer/posembed_input/pos_embedding", ("pos_embed",),
                       lambda pos_embed: _prepend_zero_rows(pos_embed, prefix))
    return plan


def _is_no_embed_class(pos_embed) -> bool:
    """timm `no_embed_class`: the position embedding covers only the patch grid (T = g*g), not the class
    token (T = g*g + 1, never a square). Non-square grids cannot be told apart and read as T = N + 1."""
    if pos_embed is None or pos_embed.ndim != 3:
        return False
    tokens = pos_embed.shape[1]
    return math.isqrt(tokens) ** 2 == tokens


def _prepend_zero_rows(pos_embed: np.ndarray, rows: int = 1) -> np.ndarray:
    """cat(cls, patches + pos) == cat(cls, patches) + cat(0, pos) (`rows` 2: cls and DeiT's dist token)."""
    zero = np.zeros((pos_embed.shape[0], rows, pos_embed.shape[2]), pos_embed.dtype)
    return np.concatenate([zero, pos_embed], axis=1)


def _block_plan(tensors: dict, i: int, heads: int) -> list:
    t = f"blocks.{i}."
    o = BLOCK.format(i)
    a = o + ATTENTION
    qkv = (t + "attn.qkv.weight",)
    qkv_bias = (t + "attn.qkv.bias",)

    def split_kernel(index):
        return lambda weight: torch_layout.heads_kernel(_third(weight, index), heads)

    def split_bias(index):
        return lambda bias: torch_layout.heads_bias(_third(bias, index), heads)

    plan = [
        (o + "LayerNorm_0/scale", (t + "norm1.weight",), identity),
        (o + "LayerNorm_0/bias", (t + "norm1.bias",), identity),
        (o + "LayerNorm_2/scale", (t + "norm2.weight",), identity),
        (o + "LayerNorm_2/bias", (t + "norm2.bias",), identity),
        (o + MLP + "Dense_0/kernel", (t + "mlp.fc1.weight",), torch_layout.linear_kernel),
        (o + MLP + "Dense_0/bias", (t + "mlp.fc1.bias",), identity),
    ]
    for index, name in enumerate(("query", "key", "value")):
        plan.append((a + f"{name}/kernel", qkv, split_kernel(index)))
        if qkv_bias[0] in tensors:  # timm's qkv_bias=False models store none: the checkpoint then has none
            plan.append((a + f"{name}/bias", qkv_bias, split_bias(index)))
    # Layer scale y = gamma * (W x + b) == (gamma W) x + gamma b: folded into the projection it scales.
    for names, out_key, kernel_fn in (
        (("attn.proj", "ls1.gamma"), a + "out", lambda w: torch_layout.out_kernel(w, heads)),
        (("mlp.fc2", "ls2.gamma"), o + MLP + "Dense_1", torch_layout.linear_kernel),
    ):
        layer, gamma = (t + n for n in names)
        if gamma in tensors:
            plan += [
                (out_key + "/kernel", (layer + ".weight", gamma), lambda w, g, fn=kernel_fn: fn(w * g[:, None])),
                (out_key + "/bias", (layer + ".bias", gamma), lambda b, g: b * g),
            ]
        else:
            plan += [
                (out_key + "/kernel", (layer + ".weight",), kernel_fn),
                (out_key + "/bias", (layer + ".bias",), identity),
            ]
    return plan


def _third(array: np.ndarray, index: int) -> np.ndarray:
    """The query (0), key (1) or value (2) third of timm's fused qkv output axis."""
    if array.shape[0] % 3:
        raise ValueError(f"the fused qkv axis ({array.shape[0]}) is not divisible by 3")
    size = array.shape[0] // 3
    return array[index * size:(index + 1) * size]
