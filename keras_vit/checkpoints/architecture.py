"""The ViT architecture a checkpoint implies, read from its array shapes (canonical official layout).

A checkpoint carries no config, but its shapes fix everything that matters: the patch embedding kernel
(P, P, C, D) gives the patch size, channels and width; the blocks give depth, heads (query kernel
(D, heads, head_dim)) and MLP width; `cls` means the token classifier; `pre_logits` its representation
size; `head` its classes; the position embedding the training resolution. `ViT(weights=...)` builds from
this and `variant_name()` names the published variant it matches, for error messages.

Example:
    >>> import numpy as np
    >>> from keras_vit.checkpoints.canonical import Checkpoint
    >>> params = {"embedding/kernel": np.zeros((16, 16, 3, 192)), "cls": np.zeros((1, 1, 192)),
    ...           "Transformer/posembed_input/pos_embedding": np.zeros((1, 197, 192))}
    >>> for i in range(12):
    ...     params[f"Transformer/encoderblock_{i}/MultiHeadDotProductAttention_1/query/kernel"] = np.zeros((192, 3, 64))
    ...     params[f"Transformer/encoderblock_{i}/MlpBlock_3/Dense_0/kernel"] = np.zeros((192, 768))
    >>> arch = infer(Checkpoint(params, "official", "x.npz", True, 1e-6))
    >>> arch.variant_name(), arch.image_size
    ('vit_ti16', (224, 224))
"""

import dataclasses
import math
import re

from keras_vit.checkpoints.canonical import Checkpoint
from keras_vit.variants import VARIANTS


def _stem_stride(block_units) -> int:
    from keras_vit.layers.resnet import stem_stride

    return stem_stride(block_units)


def _named_stem(stem: dict):
    """`"r50"` when the stem is the paper's R50, else the dict of `ResNetStem` arguments."""
    from keras_vit.layers.resnet import RESNET_STEMS

    for name, known in RESNET_STEMS.items():
        if tuple(known["block_units"]) == stem["block_units"] and known["width"] == stem["width"]:
            return name
    return dict(stem)


@dataclasses.dataclass(frozen=True)
class CheckpointArchitecture:
    """What a checkpoint's shapes say about the model it belongs to."""

    patch_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    mlp_dim: int
    channels: int
    classifier: str
    representation_size: int | None
    classes: int | None
    grid: tuple[int, int] | None
    hybrid: dict | None
    """The hybrid's ResNet stem as read from the file: dict(block_units=(...), width=...), or None."""

    @property
    def num_prefix_tokens(self) -> int:
        return 1 if self.classifier == "token" else 0

    @property
    def stride(self) -> int:
        """Pixels per position-embedding row along one axis."""
        return self.patch_size * (_stem_stride(self.hybrid["block_units"]) if self.hybrid else 1)

    @property
    def image_size(self) -> tuple[int, int] | None:
        """The resolution the position embedding was trained at, when its grid is square (else None)."""
        return None if self.grid is None else (self.grid[0] * self.stride, self.grid[1] * self.stride)

    def model_arguments(self) -> dict:
        """The `keras_vit.ViT` arguments fixed by the checkpoint."""
        args = dict(patch_size=self.stride, hidden_size=self.hidden_size, num_layers=self.num_layers,
                    num_heads=self.num_heads, mlp_dim=self.mlp_dim)
        if self.hybrid:
            args["hybrid"] = _named_stem(self.hybrid)
        return args

    def variant_name(self) -> str | None:
        """The published variant with this architecture (`"vit_b16"`, ...), or None."""
        args = self.model_arguments()
        for variant in VARIANTS.values():
            if variant.architecture() == args:
                return variant.model_name
        return None

    def describe(self) -> str:
        """One line, e.g. `vit_b16 (patch 16, D=768, 12 layers, 12 heads, MLP 3072), token, 1000 classes`."""
        name = self.variant_name() or "an unpublished ViT"
        head = f"{self.classes} classes" if self.classes else "no head"
        extra = f", pre_logits {self.representation_size}" if self.representation_size else ""
        hybrid = f" with ResNet stem {self.hybrid}" if self.hybrid else ""
        size = f", trained at {self.image_size[0]}x{self.image_size[1]}" if self.image_size else ""
        return (f"{name}{hybrid} (patch {self.stride}, D={self.hidden_size}, {self.num_layers} layers, "
                f"{self.num_heads} heads, MLP {self.mlp_dim}, {self.channels} channels), {self.classifier} "
                f"classifier, {head}{extra}{size}")


def _require(params, key, path):
    if key not in params:
        raise ValueError(
            f"{path!r} does not look like a ViT checkpoint: it has no {key!r} array. "
            f"Its first keys: {', '.join(sorted(params)[:8])}"
        )
    return params[key]


def infer(checkpoint: Checkpoint) -> CheckpointArchitecture:
    """Reads the architecture off a canonical checkpoint's shapes.

    Raises:
        ValueError: when the essential arrays are missing or inconsistent.
    """
    params, path = checkpoint.params, checkpoint.path
    kernel = _require(params, "embedding/kernel", path)
    if kernel.ndim != 4 or kernel.shape[0] != kernel.shape[1]:
        raise ValueError(
            f"The patch embedding kernel of {path!r} must have shape (P, P, C, D). Received: shape={kernel.shape}"
        )
    blocks = sorted({int(m.group(1)) for k in params if (m := re.match(r"^Transformer/encoderblock_(\d+)/", k))})
    if not blocks or blocks != list(range(len(blocks))):
        raise ValueError(f"{path!r} has no consecutive Transformer/encoderblock_{{i}} blocks. Received: {blocks}")
    query = _require(params, "Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/kernel", path)
    mlp = _require(params, "Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel", path)
    posemb = _require(params, "Transformer/posembed_input/pos_embedding", path)
    classifier = "token" if "cls" in params else "gap"
    prefix = 1 if classifier == "token" else 0
    num_patches = posemb.shape[1] - prefix
    side = math.isqrt(max(num_patches, 0))
    pre_logits = params.get("pre_logits/kernel")
    head = params.get("head/kernel")
    stem = _stem(params)
    if stem is not None and kernel.shape[0] != 1:
        raise ValueError(
            f"{path!r} is a hybrid whose patch embedding cuts the ResNet stem's feature map into "
            f"{kernel.shape[0]}x{kernel.shape[1]} patches (embedding/kernel {tuple(kernel.shape)}); keras_vit's "
            "hybrids cut it into 1x1 patches (as R50+ViT-B/16), so this checkpoint cannot be loaded."
        )
    first = params["conv_root/kernel"] if stem else kernel  # the layer that sees the image
    return CheckpointArchitecture(
        patch_size=int(kernel.shape[0]),
        hidden_size=int(kernel.shape[3]),
        num_layers=len(blocks),
        num_heads=int(query.shape[1]),
        mlp_dim=int(mlp.shape[1]),
        channels=int(first.shape[2]),
        classifier=classifier,
        representation_size=None if pre_logits is None else int(pre_logits.shape[1]),
        classes=None if head is None else int(head.shape[-1]),
        grid=(side, side) if side * side == num_patches and side > 0 else None,
        hybrid=stem,
    )


def _stem(params) -> dict | None:
    """dict(block_units, width) of the hybrid ResNet stem whose keys the checkpoint holds, or None."""
    from keras_vit.checkpoints.resnet_names import is_resnet_key

    if not any(is_resnet_key(k) for k in params):
        return None
    units: dict[int, set] = {}
    for key in params:
        if match := re.match(r"^block(\d+)/unit(\d+)/", key):
            units.setdefault(int(match.group(1)), set()).add(int(match.group(2)))
    root = params.get("conv_root/kernel")
    if root is None:
        raise ValueError("The checkpoint has ResNet stem keys but no `conv_root/kernel`.")
    if units and sorted(units) != list(range(1, len(units) + 1)):
        raise ValueError(f"The checkpoint's ResNet stages are not consecutive block1, block2, ...: {sorted(units)}.")
    # No units: a root-only stem (`resnet.num_layers = ()` in the official configs), which ResNetStem(block_units=())
    # builds: conv_root, gn_root, relu, max pool (stride 4).
    return dict(block_units=tuple(len(units[s]) for s in sorted(units)), width=int(root.shape[-1]))
