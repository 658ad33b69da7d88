"""Official checkpoint names of the hybrid's ResNet stem, mapped onto the `resnet_stem` layer by name.

The key names follow the official Flax modules (google-research/vision_transformer, `vit_jax/models_vit.py`
and `vit_jax/models_resnet.py`): the root `conv_root`, `gn_root` and the stages `block{s}` of units
`unit{u}` sit directly in the model, beside `embedding` and `Transformer`, so the released
`R50+ViT-B_16.npz` holds `conv_root/kernel`, `gn_root/{scale,bias}`,
`block1/unit1/{conv1,conv2,conv3,conv_proj}/kernel`, `block1/unit1/{gn1,gn2,gn3,gn_proj}/{scale,bias}`
(no `ResNet/` scope; timm's `_load_weights` and other ports of the official file read exactly these keys).

GroupNorm `scale`/`bias` were stored as (1, 1, 1, C) by the pre-Linen Flax `GroupNorm`; the official
loader squeezes them (`vit_jax/checkpoint.py`, `_fix_groupnorm`, see google/flax#1721).
`canonical_resnet_array` does the same, so the canonical form holds (C,) as the Keras layer does.

timm's hybrids (`vision_transformer_hybrid.py`, a `ResNetV2(preact=False)` backbone, or for a root-only stem
`create_resnetv2_stem`) name the same weights under `patch_embed.backbone.` (the mapping of timm's own
`_load_weights`): `[stem.]conv.weight`, `[stem.]norm.{weight,bias}` (no `stem.` for the root alone) and
`stages.{s-1}.blocks.{u-1}.{conv1,conv2,conv3,norm1,norm2,norm3,downsample.conv,downsample.norm}`;
`timm_resnet_plan` maps them onto the official keys.

Example:
    >>> import keras_vit
    >>> from keras_vit.checkpoints.resnet_names import resnet_targets
    >>> model = keras_vit.ViT(image_size=32, patch_size=16, hidden_size=32, num_layers=1, num_heads=2,
    ...                       mlp_dim=64, classes=5, hybrid=dict(block_units=(1, 1, 1), width=8, groups=4))
    >>> from keras_vit import model_parts
    >>> targets = resnet_targets(model_parts.resnet_stem(model))
    >>> tuple(targets["conv_root/kernel"].shape)
    (7, 7, 3, 8)
"""

import re

import numpy as np

from keras_vit.checkpoints.torch_layout import conv_kernel, identity

_GROUP_NORM_KEY = re.compile(r"(^|/)gn(\d+|_root|_proj)/(scale|bias)$")
_RESNET_KEY = re.compile(r"^(conv_root|gn_root|block\d+/unit\d+)/")


def is_resnet_key(key: str) -> bool:
    """Whether an official checkpoint key (without `params/`-style prefix) belongs to the ResNet stem."""
    return bool(_RESNET_KEY.match(key))


def canonical_resnet_array(key: str, array: np.ndarray) -> np.ndarray:
    """Squeezes a pre-Linen (1, 1, 1, C) GroupNorm scale or bias to (C,); other arrays are returned as is."""
    if _GROUP_NORM_KEY.search(key) and array.ndim == 4 and array.shape[:3] == (1, 1, 1):
        return array.reshape(array.shape[-1])
    return array


TIMM_BACKBONE = "patch_embed.backbone."
"""The prefix of a timm hybrid's CNN backbone tensors."""

_TIMM_UNIT = re.compile(r"^patch_embed\.backbone\.stages\.(\d+)\.blocks\.(\d+)\.")


def timm_resnet_plan(names, path) -> list:
    """The `torch_layout.translate` plan (official key, (timm name,), transform) of a timm hybrid's ResNet stem.

    Args:
        names: the file's tensor names.
        path: the file (for messages).

    Raises:
        ValueError: a backbone that is not the official hybrid's ResNet (e.g. timm's `vit_*_resnet26d` BatchNorm
            ResNets), naming its first tensors.

    Example:
        >>> names = ["patch_embed.backbone.conv.weight", "patch_embed.backbone.norm.weight",
        ...          "patch_embed.backbone.norm.bias"]
        >>> [key for key, _, _ in timm_resnet_plan(names, "x.safetensors")]
        ['conv_root/kernel', 'gn_root/scale', 'gn_root/bias']
    """
    names = set(names)
    root = TIMM_BACKBONE + ("stem." if TIMM_BACKBONE + "stem.conv.weight" in names else "")
    if root + "conv.weight" not in names:
        found = sorted(n for n in names if n.startswith(TIMM_BACKBONE))[:4]
        raise ValueError(f"The timm checkpoint {path!r} has a CNN backbone that is not the official hybrids' ResNet "
                         f"(GroupNorm, weight standardisation; `{TIMM_BACKBONE}[stem.]conv.weight`), which keras_vit "
                         f"cannot compute. Received: {found}")

    def norm(key, name):
        return [(f"{key}/scale", (f"{name}.weight",), identity), (f"{key}/bias", (f"{name}.bias",), identity)]

    plan = [("conv_root/kernel", (root + "conv.weight",), conv_kernel), *norm("gn_root", root + "norm")]
    units = sorted({(int(m.group(1)), int(m.group(2))) for n in names if (m := _TIMM_UNIT.match(n))})
    for stage, unit in units:
        timm, official = f"{TIMM_BACKBONE}stages.{stage}.blocks.{unit}.", f"block{stage + 1}/unit{unit + 1}/"
        pairs = [(f"conv{r}", f"norm{r}", f"{r}") for r in (1, 2, 3)]
        if timm + "downsample.conv.weight" in names:
            pairs.append(("downsample.conv", "downsample.norm", "_proj"))
        for conv, gn, suffix in pairs:
            plan += [(f"{official}conv{suffix}/kernel", (timm + conv + ".weight",), conv_kernel),
                     *norm(f"{official}gn{suffix}", timm + gn)]
    return plan


def _norm_targets(prefix, norm):
    return {f"{prefix}/scale": norm.gamma, f"{prefix}/bias": norm.beta}


def resnet_targets(layer) -> dict:
    """Official key -> `keras.Variable` for every weight of a built `keras_vit.layers.ResNetStem`.

    Args:
        layer: the model's `resnet_stem` layer (`keras_vit.model_parts.resnet_stem(model)`), built.

    Returns:
        A dict covering every weight of the layer exactly once: `conv_root/kernel` (7, 7, C, width),
        `gn_root/{scale,bias}`, and per unit `block{s}/unit{u}/conv{1,2,3}/kernel`,
        `block{s}/unit{u}/gn{1,2,3}/{scale,bias}`, plus `conv_proj/kernel`, `gn_proj/{scale,bias}` in the
        units that project their shortcut. Kernels are HWIO as in the file; GroupNorm vectors are (C,).

    Raises:
        ValueError: if the layer is not built.
    """
    if not layer.built:
        raise ValueError(f"`resnet_targets` needs a built ResNetStem. Received: layer={layer.name!r} (not built)")
    targets = {"conv_root/kernel": layer.conv_root.kernel, **_norm_targets("gn_root", layer.gn_root)}
    for stage, count in enumerate(layer.block_units, start=1):
        for index in range(1, count + 1):
            unit = layer.unit(stage, index)
            prefix = f"block{stage}/unit{index}"
            names = ["1", "2", "3"] + (["_proj"] if unit.conv_proj is not None else [])
            for n in names:
                targets[f"{prefix}/conv{n}/kernel"] = getattr(unit, f"conv{n}").kernel
                targets.update(_norm_targets(f"{prefix}/gn{n}", getattr(unit, f"gn{n}")))
    return targets
