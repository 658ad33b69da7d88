"""The ViT variants as data (paper Table 1, plus the AugReg Ti and S models), the architecture defaults and
the hybrids' ResNet stems by name.

No Keras import here: the table is plain data that the constructors, the weights table, the training
app and the tests all read.

Example:
    >>> from keras_vit.variants import VARIANTS
    >>> VARIANTS["B16"].hidden_size
    768
"""

import dataclasses
import re


@dataclasses.dataclass(frozen=True)
class Variant:
    """One ViT architecture: the Table 1 model size plus a patch size.

    Args:
        name: short name, e.g. `"B16"` (model size + patch size).
        width_name: the Table 1 size name (`"Ti"`, `"S"`, `"B"`, `"L"`, `"H"`).
        patch_size: P, the side of a square patch in pixels.
        hidden_size: D, the token width.
        num_layers: L, the number of Transformer blocks.
        num_heads: attention heads per block.
        mlp_dim: hidden width of each block's MLP (4 D in every published model).
        hybrid: the name of a hybrid's ResNet stem in `RESNET_STEMS` (`"r50"` for the paper's R50+ViT-B/16),
            else None.
        published_name: the name the authors published a hybrid under (`"R+ViT-Ti/16"`), else None.
    """

    name: str
    width_name: str
    patch_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    mlp_dim: int
    hybrid: str | None = None
    published_name: str | None = None

    @property
    def title(self) -> str:
        """The model as the papers name it: `"ViT-B/16"`, or a hybrid's published name (`"R50+ViT-B/16"`)."""
        return self.published_name or f"ViT-{self.width_name}/{self.patch_size}"

    @property
    def constructor_name(self) -> str:
        """The public constructor, e.g. `ViT_B16`."""
        return f"ViT_{self.name}"

    @property
    def model_name(self) -> str:
        """Lower-case model name used by the CLIs and as the Keras model name, e.g. `vit_b16`."""
        return f"vit_{self.name.lower()}"

    def architecture(self) -> dict:
        """Keyword arguments of `keras_vit.ViT` that define this architecture."""
        args = dict(
            patch_size=self.patch_size,
            hidden_size=self.hidden_size,
            num_layers=self.num_layers,
            num_heads=self.num_heads,
            mlp_dim=self.mlp_dim,
        )
        if self.hybrid:
            args["hybrid"] = self.hybrid
        return args


# (width name, layers, D, MLP, heads): paper Table 1 and the AugReg Ti/S sizes.
_WIDTHS = {
    "Ti": (12, 192, 768, 3),
    "S": (12, 384, 1536, 6),
    "B": (12, 768, 3072, 12),
    "L": (24, 1024, 4096, 16),
    "H": (32, 1280, 5120, 16),
}

# (width name, patch size) of every named constructor.
_NAMED = [("Ti", 16), ("S", 16), ("S", 32), ("B", 8), ("B", 16), ("B", 32), ("L", 16), ("L", 32), ("H", 14)]


def _variant(width_name: str, patch_size: int, hybrid: str | None = None, name: str | None = None,
             published_name: str | None = None) -> Variant:
    num_layers, hidden_size, mlp_dim, num_heads = _WIDTHS[width_name]
    return Variant(
        name=name or f"{width_name}{patch_size}",
        width_name=width_name,
        patch_size=patch_size,
        hidden_size=hidden_size,
        num_layers=num_layers,
        num_heads=num_heads,
        mlp_dim=mlp_dim,
        hybrid=hybrid,
        published_name=published_name,
    )


RESNET_STEMS = {
    "r": dict(block_units=(), width=64),
    "r26": dict(block_units=(2, 2, 2, 2), width=64),
    "r50": dict(block_units=(3, 4, 9), width=64),
    "r50_s32": dict(block_units=(3, 4, 6, 3), width=64),
}
"""The published hybrids' ResNet stems by name (vit_jax/configs/models.py, `resnet.num_layers`, width 64):
`"r"` the root alone (R+ViT-Ti/16, stride 4), `"r26"` (2, 2, 2, 2) units (R26+ViT-S/32 and B/32, stride 32),
`"r50"` (3, 4, 9) units (the paper's R50+ViT-B/16, stride 16) and `"r50_s32"` the real ResNet-50's (3, 4, 6, 3)
units (R50+ViT-L/32, stride 32)."""


def stem_stride(block_units) -> int:
    """Downscaling of a stem: 4 from the root (conv stride 2, max pool stride 2), 2 per stage after the first."""
    return 4 * 2 ** max(len(block_units) - 1, 0)


def feature_patch_size(stem: dict | None, patch_size: int) -> int:
    """Side of the patches the embedding cuts: `patch_size` pixels, or for a hybrid (`stem`, from
    `resolve_hybrid`) `patch_size / stride` features of the stem's map (8 for R+ViT-Ti/16, 1 for R50+ViT-B/16).

    Example:
        >>> feature_patch_size(resolve_hybrid("r", 32), 32), feature_patch_size(None, 16)
        (8, 16)
    """
    if stem is None:
        return patch_size
    return patch_size // stem_stride(stem.get("block_units", RESNET_STEMS["r50"]["block_units"]))


def resolve_hybrid(hybrid, patch_size: int):
    """`ResNetStem` arguments for the `hybrid` argument of `keras_vit.ViT`, or None for a plain ViT.

    Args:
        hybrid: None, a name in `RESNET_STEMS` (`"r50"`, ...), or a dict of `keras_vit.layers.resnet.ResNetStem`
            arguments (`block_units`, `width`, `groups`).
        patch_size: the model's effective patch size in pixels, a multiple of the stem's stride (the
            embedding cuts the stem's feature map into patches of `patch_size / stride` features).

    Raises:
        ValueError: for an unknown name, a non-dict, or a patch size that is not a multiple of the stride.

    Example:
        >>> resolve_hybrid("r50", patch_size=16)
        {'block_units': (3, 4, 9), 'width': 64}
    """
    if hybrid is None:
        return None
    if isinstance(hybrid, str):
        if hybrid not in RESNET_STEMS:
            raise ValueError(f"Unknown hybrid stem. Received: hybrid={hybrid!r}. Known: {', '.join(RESNET_STEMS)}.")
        stem = dict(RESNET_STEMS[hybrid])
    elif isinstance(hybrid, dict):
        stem = dict(hybrid)
        unknown = set(stem) - {"block_units", "width", "groups"}
        if unknown:
            raise ValueError(f"Unknown ResNetStem arguments {sorted(unknown)}. Received: hybrid={hybrid!r}")
    else:
        raise ValueError(f"`hybrid` must be None, a stem name or a dict of ResNetStem arguments. Received: hybrid={hybrid!r}")
    stride = stem_stride(stem.get("block_units", RESNET_STEMS["r50"]["block_units"]))
    if not isinstance(patch_size, int) or patch_size < stride or patch_size % stride:
        raise ValueError(
            f"A hybrid's patch size must be a multiple of the stride of its ResNet stem ({stride}): the stem's "
            f"feature map is cut into patches of patch_size / {stride} features. Received: patch_size="
            f"{patch_size}, hybrid={hybrid!r}. Use patch_size={stride} (1x1 patches) or a multiple of it."
        )
    return stem


# (name, width name, patch size, stem, published name) of the hybrid constructors (vit_jax/configs/models.py).
# The patch size is the model's effective stride in pixels: the stem's stride times the patch side on its
# feature map. R+ViT-Ti/16 cuts the root's stride-4 map into 8x8 patches (`patches.size = (8, 8)`), so its
# tokens are 32 pixels apart; the "/16" of its published name assumes a 2x root (its config's comment).
_HYBRIDS = [
    ("R50_B16", "B", 16, "r50", "R50+ViT-B/16"),
    ("R_Ti16", "Ti", 32, "r", "R+ViT-Ti/16"),
    ("R26_S32", "S", 32, "r26", "R26+ViT-S/32"),
    ("R26_B32", "B", 32, "r26", "R26+ViT-B/32"),
    ("R50_L32", "L", 32, "r50_s32", "R50+ViT-L/32"),
]

VARIANTS: dict[str, Variant] = {
    v.name: v for v in [*(_variant(w, p) for w, p in _NAMED),
                        *(_variant(w, p, stem, name, title) for name, w, p, stem, title in _HYBRIDS)]
}


TENSORS = "tensors"
"""Decided by a checkpoint's tensors (their shapes, or a key's presence): left at None it is the checkpoint's; a
value the caller passes must agree, except `classes` (a new head) and `image_size` (a resampled position table)."""
NUMERICS = "numerics"
"""Carried by every checkpoint without a shape: its source's (the official code's tanh GELU and epsilon 1e-6, timm's
and Hugging Face's exact GELU), a keras_vit file's own values; a keras_vit file's may not be contradicted."""
OWN = "own"
"""keras_vit's own architecture options, which no published checkpoint uses: a keras_vit file's values, the default
for every other checkpoint; a contradicting value is refused."""
SAVED = "saved"
"""How a keras_vit model was built beyond its tensors (head activation, input scaling, dropout): a keras_vit file
keeps them and `ViT(weights=<that file>)` rebuilds them; a value the caller passes wins; published checkpoints
carry none, so the signature's default applies."""
CALLER = "caller"
"""The caller's alone: what to load and how (the file, the input, the resampling, the initialisation)."""

ROLES = (TENSORS, NUMERICS, OWN, SAVED, CALLER)


@dataclasses.dataclass(frozen=True)
class Argument:
    """The declaration of one argument of `keras_vit.ViT`.

    Args:
        role: one of `ROLES`: where its value comes from when a checkpoint is loaded.
        default: its default in `ViT`'s signature (None for the arguments a checkpoint decides).
        fallback: what None becomes for a `TENSORS`, `NUMERICS` or `OWN` argument when no checkpoint sets it
            (`DEFAULTS`, ViT-B/16 at 224).
        choices: the values it takes, where they are a closed set.
    """

    role: str
    default: object = None
    fallback: object = None
    choices: tuple | None = None


ARGUMENTS = dict(
    image_size=Argument(TENSORS, fallback=224),
    patch_size=Argument(TENSORS, fallback=16),
    hidden_size=Argument(TENSORS, fallback=768),
    num_layers=Argument(TENSORS, fallback=12),
    num_heads=Argument(TENSORS, fallback=12),
    mlp_dim=Argument(TENSORS, fallback=3072),
    classes=Argument(TENSORS, fallback=1000),
    classifier=Argument(TENSORS, fallback="token", choices=("token", "gap")),
    representation_size=Argument(TENSORS),
    include_top=Argument(SAVED, default=True),
    weights=Argument(CALLER),
    input_tensor=Argument(CALLER),
    input_shape=Argument(CALLER),
    pooling=Argument(SAVED, choices=("token", "avg", "max")),
    classifier_activation=Argument(SAVED, default="softmax"),
    dropout_rate=Argument(SAVED, default=0.0),
    attention_dropout_rate=Argument(SAVED, default=0.0),
    drop_path_rate=Argument(SAVED, default=0.0),
    gelu_approximate=Argument(NUMERICS, fallback=True),
    layer_norm_epsilon=Argument(NUMERICS, fallback=1e-6),
    include_preprocessing=Argument(SAVED, default=False),
    name=Argument(SAVED),
    hybrid=Argument(TENSORS),
    position_embedding_interpolation=Argument(CALLER, default="bilinear", choices=("bilinear", "bicubic")),
    qkv_bias=Argument(TENSORS, fallback=True),
    initialization=Argument(CALLER, choices=("official", "scratch")),
    rematerialize=Argument(SAVED, default=True),
    position_embedding=Argument(OWN, fallback="learned", choices=("learned", "sincos2d")),
    tokenizer=Argument(OWN, fallback="patches", choices=("patches", "conv", "shifted_patches")),
    locality_attention=Argument(OWN, fallback=False),
    distillation_token=Argument(TENSORS, fallback=False),
)
"""Every argument of `keras_vit.ViT`, in its signature's order, with its role and default, declared once: the model
class (`keras_vit.vit.VisionTransformer`) takes its defaults from here, and a test checks that `ViT`'s signature
shows the same names and defaults. `DEFAULTS`, `OWN_OPTIONS`, `CARRIED_NUMERICS`, `SAVED_ARGUMENTS` and the choices
(`choices("tokenizer")`) are read from here. A new argument is one row (and its parameter in `ViT`)."""


def with_role(role: str) -> tuple[str, ...]:
    """The arguments of `role`, in table order."""
    return tuple(name for name, argument in ARGUMENTS.items() if argument.role == role)


def choices(name: str) -> tuple:
    """The values argument `name` takes (its closed set in `ARGUMENTS`)."""
    return ARGUMENTS[name].choices


OWN_OPTIONS = {name: ARGUMENTS[name].fallback for name in with_role(OWN)}
"""keras_vit's own architecture options and their defaults: a keras_vit file carries the values its model was
built with (`keras_vit.checkpoints.architecture` reads them from there), every other checkpoint has these."""

CARRIED_NUMERICS = with_role(NUMERICS)
"""The arguments that change a model's numerics without changing a shape: every checkpoint carries them."""

SAVED_ARGUMENTS = with_role(SAVED)
"""What `ViT(weights=<keras_vit file>)` takes from the file unless the caller passes it."""

DEFAULTS = {name: argument.fallback for name, argument in ARGUMENTS.items() if argument.fallback is not None}
"""`keras_vit.ViT`'s architecture defaults (ViT-B/16 at 224 as the official code): what an argument left at None
becomes when no checkpoint sets it."""


def with_defaults(arguments: dict) -> dict:
    """`arguments` with every `DEFAULTS` key that is missing or None set to its default."""
    return {**arguments, **{k: v for k, v in DEFAULTS.items() if arguments.get(k) is None}}


def find_variant(arguments: dict) -> Variant | None:
    """The variant whose architecture `arguments` (`keras_vit.ViT` arguments, None meaning the default) ask
    for, or None; a hybrid given as a dict of stem arguments matches none.

    Example:
        >>> find_variant(dict(hidden_size=192, num_heads=3, mlp_dim=768)).name
        'Ti16'
    """
    wanted = with_defaults(arguments)
    for variant in VARIANTS.values():
        fixed = variant.architecture()
        if all(wanted.get(key) == value for key, value in fixed.items()) and wanted.get("hybrid") == variant.hybrid:
            return variant
    return None


def get_variant(name: str) -> Variant:
    """Looks a variant up by any common spelling: `"B16"`, `"b16"`, `"vit_b16"`, `"ViT-B_16"`, `"B/16"`.

    Raises:
        ValueError: for an unknown name, listing the known ones.
    """
    key = name.strip()
    for prefix in ("vit_", "vit-", "ViT_", "ViT-", "VIT_"):
        if key.startswith(prefix):
            key = key[len(prefix):]
    key = key.replace("_", "").replace("/", "").replace("-", "")
    for variant in VARIANTS.values():
        if variant.name.lower().replace("_", "") == key.lower():
            return variant
    raise ValueError(
        f"Unknown ViT variant. Received: name={name!r}. Known variants: "
        f"{', '.join(v.model_name for v in VARIANTS.values())}."
    )


def resolve_num_heads(num_heads, hidden_size: int, path: str) -> int:
    """`num_heads` as given, or the Table 1 head count of a standard width (`VARIANTS`).

    Raises:
        ValueError: a width outside the table with no `num_heads`, or heads that do not divide the width.
    """
    if num_heads is None:
        by_width = {v.hidden_size: v.num_heads for v in VARIANTS.values()}
        if hidden_size not in by_width:
            known = ", ".join(f"{width}: {heads}" for width, heads in sorted(by_width.items()))
            raise ValueError(
                f"The checkpoint {path!r} has width {hidden_size}, which is not a standard ViT width "
                f"(width: heads = {known}); the file does not store the number of attention heads, so pass "
                f"`num_heads`. Received: hidden_size={hidden_size}"
            )
        return by_width[hidden_size]
    if not isinstance(num_heads, int) or isinstance(num_heads, bool) or num_heads <= 0 or hidden_size % num_heads:
        raise ValueError(
            f"`num_heads` must be a positive int dividing the checkpoint width {hidden_size}. "
            f"Received: num_heads={num_heads!r}"
        )
    return num_heads


BIT_MODELS = {"bit_r50x1": "BiT_R50x1"}
"""The BiT ResNet rows of `keras_vit.applications.CONSTRUCTORS` (name -> constructor), known here without
importing Keras so that the tools check `--model` before anything heavy is imported."""


def bit_name(model) -> str | None:
    """The `BIT_MODELS` name `model` spells (any case, with or without `_`, `-` or `/`: `"BiT-R50x1"`,
    `"bit_r50x1"`), or None for any other value (a ViT variant, a `.keras` file, None).

    Example:
        >>> bit_name("BiT-R50x1"), bit_name("vit_b16")
        ('bit_r50x1', None)
    """
    if not isinstance(model, str):
        return None
    key = re.sub(r"[-_/\s]", "", model.lower())
    return next((name for name in BIT_MODELS if name.replace("_", "") == key), None)
