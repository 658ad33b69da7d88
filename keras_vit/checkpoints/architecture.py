"""The ViT architecture a checkpoint implies, read from its array shapes (canonical official layout).

A checkpoint carries no config, but its shapes fix everything that matters: the patch embedding kernel
(P, P, C, D) gives the patch size, channels and width; the blocks give depth, heads (query kernel
(D, heads, head_dim)) and MLP width; `cls` means the token classifier, `dist` DeiT's distillation token;
`pre_logits` its representation
size; `head` its classes; the position embedding the training resolution; the query/key/value biases, or
their absence, `qkv_bias`. keras_vit's own options (`keras_vit.variants.OWN_OPTIONS`: the position embedding
kind, the tokenizer, locality attention, ...) are not read from shapes: a keras_vit file carries its arguments, and
every other checkpoint has the defaults. `variant_name()` names the published variant it matches, for error
messages.

`resolve_arguments` is the step of `keras_vit.ViT(weights=...)` between reading a checkpoint and building the
model: it fills the arguments the caller left at None from the checkpoint and refuses those that contradict it.

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
import logging
import math
import re

import numpy as np

from keras_vit import variants
from keras_vit.checkpoints.canonical import DISTILLATION_HEAD, DISTILLATION_TOKEN, Checkpoint

log = logging.getLogger("keras_vit")

QKV_BIAS_KEYS = tuple(f"MultiHeadDotProductAttention_1/{name}/bias" for name in ("query", "key", "value"))
"""The official keys (below `Transformer/encoderblock_{i}/`) that `qkv_bias=False` models lack."""

DISTILLATION_HEAD_KEYS = (f"{DISTILLATION_HEAD}/kernel", f"{DISTILLATION_HEAD}/bias")

PRESENCE = {
    "qkv_bias": (f"Transformer/encoderblock_0/{QKV_BIAS_KEYS[0]}", "query/key/value biases"),
    "distillation_token": (DISTILLATION_TOKEN, "distillation token"),
}
"""The `keras_vit.ViT` switches a checkpoint decides by holding a canonical key or not (argument -> (key, what the
key's layer holds, for messages)): inference,
the description and the conflict check loop over it. The readers translate what a file holds and invent nothing:
a file without the key has the switch off."""


def named_stem(stem: dict):
    """The `variants.RESNET_STEMS` name of the stem (`"r50"`, `"r26"`, ...), else the dict of `ResNetStem` arguments."""
    for name, known in variants.RESNET_STEMS.items():
        if tuple(known["block_units"]) == stem["block_units"] and known["width"] == stem["width"]:
            return name
    return dict(stem)


@dataclasses.dataclass(frozen=True)
class CheckpointArchitecture:
    """What a checkpoint's shapes say about the model it belongs to."""

    patch_size: int
    """The embedding kernel's side: pixels for a plain ViT, features of the stem's map for a hybrid."""
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
    switches: dict = dataclasses.field(default_factory=lambda: {name: variants.DEFAULTS[name] for name in PRESENCE})
    """The `PRESENCE` switches as the file decides them (`qkv_bias`: whether it holds query/key/value biases)."""
    options: dict = dataclasses.field(default_factory=lambda: dict(variants.OWN_OPTIONS))
    """keras_vit's own options (`variants.OWN_OPTIONS` keys): a keras_vit file's values, else the defaults."""

    @property
    def num_prefix_tokens(self) -> int:
        """Rows of the position table before the patch rows: [class], and DeiT's distillation token."""
        return (1 if self.classifier == "token" else 0) + int(self.switches.get("distillation_token", False))

    @property
    def stride(self) -> int:
        """Pixels per position-embedding row along one axis."""
        return self.patch_size * (variants.stem_stride(self.hybrid["block_units"]) if self.hybrid else 1)

    @property
    def image_size(self) -> tuple[int, int] | None:
        """The resolution the position embedding was trained at, when its grid is square (else None)."""
        return None if self.grid is None else (self.grid[0] * self.stride, self.grid[1] * self.stride)

    def model_arguments(self) -> dict:
        """The `keras_vit.ViT` arguments fixed by the checkpoint."""
        args = dict(patch_size=self.stride, hidden_size=self.hidden_size, num_layers=self.num_layers,
                    num_heads=self.num_heads, mlp_dim=self.mlp_dim, **self.switches, **self.options)
        if self.hybrid:
            args["hybrid"] = named_stem(self.hybrid)
        return args

    def variant_name(self) -> str | None:
        """The published variant with this architecture (`"vit_b16"`, ...), or None."""
        variant = variants.find_variant(self.model_arguments())
        return None if variant is None else variant.model_name

    def describe(self) -> str:
        """One line, e.g. `vit_b16 (patch 16, D=768, 12 layers, 12 heads, MLP 3072), token, 1000 classes`."""
        name = self.variant_name() or "an unpublished ViT"
        head = f"{self.classes} classes" if self.classes else "no head"
        extra = f", pre_logits {self.representation_size}" if self.representation_size else ""
        hybrid = f" with ResNet stem {self.hybrid}" if self.hybrid else ""
        size = f", trained at {self.image_size[0]}x{self.image_size[1]}" if self.image_size else ""
        bias = "".join(f", {_holds(key, value)}" for key, value in self.switches.items()
                       if value != variants.DEFAULTS[key]) + "".join(
            f", {key}={value!r}" for key, value in self.options.items() if value != variants.OWN_OPTIONS[key])
        return (f"{name}{hybrid} (patch {self.stride}, D={self.hidden_size}, {self.num_layers} layers, "
                f"{self.num_heads} heads, MLP {self.mlp_dim}, {self.channels} channels{bias}), {self.classifier} "
                f"classifier, {head}{extra}{size}")


def _holds(switch: str, value: bool) -> str:
    """What a checkpoint holds for a `PRESENCE` switch: "query/key/value biases" or "no query/key/value biases"."""
    return ("" if value else "no ") + PRESENCE[switch][1]


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
    classifier = "token" if "cls" in params else "gap"
    if DISTILLATION_TOKEN in params and classifier != "token":
        raise ValueError(f"{path!r} has a distillation token ({DISTILLATION_TOKEN!r}) but no [class] token ('cls'): "
                         "DeiT's distillation token follows the [class] token.")
    prefix = (1 if classifier == "token" else 0) + int(DISTILLATION_TOKEN in params)
    posemb = params.get("Transformer/posembed_input/pos_embedding")
    if posemb is None and checkpoint.arguments is None:  # every published layout has one; a keras_vit file says
        _require(params, "Transformer/posembed_input/pos_embedding", path)  # in its arguments whether it has one
    num_patches = -1 if posemb is None else posemb.shape[1] - prefix
    side = math.isqrt(max(num_patches, 0))
    pre_logits = params.get("pre_logits/kernel")
    head = params.get("head/kernel")
    stem = _stem(params)  # a hybrid's embedding/kernel cuts the stem's feature map (1x1 for R50+B/16, 8x8 R+Ti/16)
    first = params["conv_root/kernel"] if stem else kernel  # the layer that sees the image
    patch_size, channels = int(kernel.shape[0]), int(first.shape[2])
    if checkpoint.arguments is not None:  # its own tokenizer may reshape the kernel: the arguments say it
        patch_size = variants.feature_patch_size(stem, checkpoint.arguments["patch_size"])
        channels = int(checkpoint.arguments["input_shape"][2])
    return CheckpointArchitecture(
        patch_size=patch_size,
        hidden_size=int(kernel.shape[3]),
        num_layers=len(blocks),
        num_heads=int(query.shape[1]),
        mlp_dim=int(mlp.shape[1]),
        channels=channels,
        classifier=classifier,
        representation_size=None if pre_logits is None else int(pre_logits.shape[1]),
        classes=None if head is None else int(head.shape[-1]),
        grid=_grid(checkpoint, patch_size * (variants.stem_stride(stem["block_units"]) if stem else 1), side,
                   num_patches),
        hybrid=stem,
        switches={name: key in params for name, (key, _) in PRESENCE.items()},
        options={key: (checkpoint.arguments or variants.OWN_OPTIONS)[key] for key in variants.OWN_OPTIONS},
    )


def _grid(checkpoint: Checkpoint, stride: int, side: int, num_patches: int) -> tuple[int, int] | None:
    """The position embedding's patch grid: from the input shape a keras_vit file carries, else when square."""
    if checkpoint.arguments is not None:
        height, width = checkpoint.arguments["input_shape"][:2]
        if height is None or width is None:  # a model of any size: its table covers its image_size
            size = checkpoint.arguments["image_size"]
            pair = (size, size) if isinstance(size, int) else tuple(size)
            height, width = pair[0] if height is None else height, pair[1] if width is None else width
        if num_patches < 0 or (height // stride) * (width // stride) == num_patches:
            return height // stride, width // stride
    return (side, side) if side * side == num_patches and side > 0 else None


def qkv_bias_keys(params) -> list[str]:
    """The query/key/value bias keys of a canonical checkpoint's blocks."""
    return [key for key in params if key.startswith("Transformer/encoderblock_") and key.endswith(QKV_BIAS_KEYS)]


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


# ----------------------------------------------------------------------------------------------------------
# The `keras_vit.ViT` arguments a checkpoint implies


def resolve_arguments(arguments: dict, checkpoint: Checkpoint, entry=None, label=None) -> dict:
    """The `keras_vit.ViT` arguments to build `checkpoint`'s model: the caller's, with every architecture argument
    left at None taken from the checkpoint (then from the published entry, then from `variants.DEFAULTS`).

    Args:
        arguments: the caller's `keras_vit.ViT` arguments (without `weights`); None means "from the checkpoint".
        checkpoint: the canonical checkpoint read from `label`.
        entry: its `keras_vit.weights.WeightsEntry` for a published name (its image size), else None.
        label: what the caller passed as `weights`, for messages.

    Returns:
        A new dict of arguments for the builder (`keras_vit.vit.build`).

    Raises:
        ValueError: an argument that contradicts the checkpoint (listing them all and describing the
            checkpoint), a representation size other than its pre_logits width, or images with other channels.
    """
    label = checkpoint.path if label is None else label
    arch = infer(checkpoint)
    args = dict(arguments)
    if checkpoint.arguments is not None and args.get("hybrid") is None:
        args["hybrid"] = checkpoint.arguments["hybrid"]  # the stem as built, GroupNorm groups included
    _resolve_architecture(args, arch, checkpoint, label)
    _resolve_head(args, arch, label)
    _resolve_numerics(args, checkpoint)
    _resolve_input(args, arch, entry, label, checkpoint.arguments)
    return args


def _same_stem(requested, found: dict) -> bool:
    stem = variants.RESNET_STEMS.get(requested) if isinstance(requested, str) else requested
    if not isinstance(stem, dict):
        return False
    return all(tuple(np.atleast_1d(stem[k])) == tuple(np.atleast_1d(found[k])) for k in found if k in stem)


def _resolve_architecture(args: dict, arch: CheckpointArchitecture, checkpoint: Checkpoint, label) -> None:
    """Fills unset architecture arguments from the checkpoint; raises on a conflict with set ones."""
    conflicts = []
    for key, value in arch.model_arguments().items():
        given = args.get(key)
        if given is None:
            args[key] = value
        elif key == "hybrid":
            if not _same_stem(given, arch.hybrid):
                conflicts.append(f"hybrid={given!r} (checkpoint stem: {arch.hybrid})")
            args[key] = given  # keep the caller's spelling (it may carry GroupNorm groups)
        elif given != value:
            found = _holds(key, value) if key in PRESENCE else repr(value)
            conflicts.append(f"{key}={given!r} (checkpoint: {found})")
    if args.get("hybrid") is not None and arch.hybrid is None:
        conflicts.append(f"hybrid={args['hybrid']!r} (checkpoint: a plain ViT without a ResNet stem)")
    classifier = args.get("classifier")
    if classifier is not None and classifier != arch.classifier:
        conflicts.append(f"classifier={classifier!r} (checkpoint: {arch.classifier!r})")
    args["classifier"] = arch.classifier
    if conflicts:
        raise ValueError(
            f"The checkpoint does not match the requested architecture: {'; '.join(conflicts)}. "
            f"The checkpoint looks like {arch.describe()}. Use the matching constructor or leave these arguments "
            f"unset to take them from the checkpoint. Received: weights={label!r}"
        )


def _resolve_head(args: dict, arch: CheckpointArchitecture, label) -> None:
    if not args.get("include_top", True):
        args["representation_size"] = None
        return
    given = args.get("representation_size")
    if given is not None and arch.representation_size is not None and given != arch.representation_size:
        raise ValueError(
            f"`representation_size={given}` does not match the checkpoint's pre_logits width "
            f"{arch.representation_size}. Received: weights={label!r}"
        )
    if args.get("classes") is None:
        args["classes"] = arch.classes or variants.DEFAULTS["classes"]
    if given is None:
        # A new head means fine-tuning, which drops pre_logits as the official code does (vit_jax
        # `load_pretrained`, "drop-head variant"); representation_size=N keeps it.
        new_head = arch.classes is not None and args["classes"] != arch.classes
        args["representation_size"] = None if new_head else arch.representation_size


def check_carried(args: dict, checkpoint: Checkpoint, label=None) -> None:
    """Refuses arguments that contradict the numerics a keras_vit file carries (`variants.CARRIED_NUMERICS`); other
    sources carry none.

    Raises:
        ValueError: naming each contradiction, with both sides, and the way out.
    """
    if checkpoint.arguments is None:
        return
    conflicts = [f"{key}={args[key]!r} (file: {checkpoint.arguments[key]!r})" for key in variants.CARRIED_NUMERICS
                 if args.get(key) is not None and args[key] != checkpoint.arguments[key]]
    if conflicts:
        raise ValueError(
            f"The keras_vit file was saved from a model with other numerics: {'; '.join(conflicts)}. Its weights "
            "would compute something else; leave these arguments unset to take the file's. "
            f"Received: weights={checkpoint.path if label is None else label!r}")


def _resolve_numerics(args: dict, checkpoint: Checkpoint) -> None:
    """GELU form and LayerNorm epsilon follow the source unless the caller set them (a keras_vit file's may not be
    contradicted: `check_carried`)."""
    check_carried(args, checkpoint)
    for key, value in (("gelu_approximate", checkpoint.gelu_approximate),
                       ("layer_norm_epsilon", checkpoint.layer_norm_epsilon)):
        if args.get(key) is None:
            args[key] = value
        elif args[key] != value:
            log.warning("Using %s=%r although the %s checkpoint was trained with %r: outputs will differ from "
                        "the source model.", key, args[key], checkpoint.source, value)


def _resolve_input(args: dict, arch: CheckpointArchitecture, entry, label, saved: dict | None = None) -> None:
    """The input shape: the caller's, else the checkpoint's resolution (a keras_vit file of a model of any size:
    any size again); the `image_size` a model of any size keeps its table at: the caller's, else the checkpoint's."""
    shape = args.get("input_shape")
    tensor = args.get("input_tensor")
    if shape is None and tensor is not None:
        shape = tuple(tensor.shape[1:])
    trained_at = arch.image_size or (entry.image_size if entry else variants.DEFAULTS["image_size"])
    if shape is None and args.get("image_size") is None and saved is not None and \
            None in tuple(saved["input_shape"])[:2]:
        shape = args["input_shape"] = (*tuple(saved["input_shape"])[:2], arch.channels)
    if shape is not None and len(shape) == 3 and None in tuple(shape)[:2] and args.get("image_size") is None:
        args["image_size"] = trained_at  # a model of any size keeps the checkpoint's table
    if shape is None:
        size = args.get("image_size")
        if size is None:
            size = trained_at
        height, width = (size, size) if isinstance(size, int) else tuple(size)
        args["input_shape"] = (height, width, arch.channels)
        return
    if len(shape) == 3 and shape[-1] is not None and shape[-1] != arch.channels and (
            arch.options["tokenizer"] != "patches" or (arch.channels != 3 and shape[-1] != 1)):
        raise ValueError(
            f"The checkpoint expects images with {arch.channels} channels and its kernel cannot be adapted to "
            f"{shape[-1]} (only a 3-channel patch or root kernel adapts to any count, and any to 1). Received: "
            f"input_shape={tuple(shape)}, weights={label!r}"
        )
