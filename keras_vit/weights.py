"""The table of published ViT weights, as data, and their download.

Every entry names one file under https://storage.googleapis.com/vit_models/ with what a loader and a user need
to know about it: the image size it was trained or fine-tuned at, its classes, whether it has the
`pre_logits` layer, the GELU form and LayerNorm epsilon of its source (the official Flax code: tanh GELU,
epsilon 1e-6), its input preprocessing, and the ImageNet top-1 accuracy the upstream tables report.

Sources of the table:
- `imagenet21k`, `imagenet21k+imagenet2012`: the files of the paper (Dosovitskiy et al. 2021); top-1 of the
  384 fine-tunes from paper Table 5 (ImageNet-21k pre-training row); R50+ViT-B/16's 384 fine-tune 85.08 from
  google-research/vision_transformer issue 39; the `-224` fine-tunes from the google-research/vision_transformer
  README (81.2 and 82.7).
- `augreg_in21k`, `augreg_in21k_ft_in1k`: the checkpoints *recommended* by "How to train your ViT?"
  (Steiner et al. 2021, arXiv 2106.10270, section 4.5; the vision_transformer README table and big_vision's
  `howto-i21k-*` names), fine-tuned at 384, with the README's ImageNet accuracies.
  ViT-B/8's `augreg_in21k_ft_in1k` is the 224 fine-tune of its recommended pre-training run that the
  upstream AugReg colab lists,
  `B_8-i21k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.03-res_224` (85.58).
- `augreg_in21k_ft_in1k_224`: the 224 fine-tunes timm ships as `vit_*_224.augreg_in21k_ft_in1k`.

Names that mean a different file than timm's tag of the same name (ours follow the recommended runs; timm's
224 fine-tunes, `augreg_in21k_ft_in1k_224` here, come from partly different runs):
- `augreg_in21k_ft_in1k` here is the recommended fine-tune (at 384; B/8 at 224). timm's
  `vit_*_224.augreg_in21k_ft_in1k` is `augreg_in21k_ft_in1k_224` here. For B/8 both are at 224 yet differ:
  ours is the aug_medium2 run fine-tuned with lr 0.03, timm's `vit_base_patch8_224.augreg_in21k_ft_in1k` the
  aug_medium1 run fine-tuned with lr 0.01.
- `augreg_in21k` here is the recommended pre-training run. It is not the run behind timm's 224 fine-tune
  for S/32 (aug_none-wd_0.1 against aug_light1-wd_0.03), B/32 (aug_light1-wd_0.1 against aug_medium1-wd_0.03),
  B/8 (aug_medium2 against aug_medium1) and L/16 (aug_strong1 against aug_medium1-do_0.1-sd_0.1): check the
  file name before pairing it with timm's `augreg_in21k` tag. Ti/16, S/16 and B/16 use the same run in both.

Checksums: no sha256 is known for any of these files here (they could not be downloaded while writing this
table), so `sha256` is None everywhere and downloads are not verified; `python -m keras_vit.convert
--weights=NAME --model=... --out=...` prints the sha256 of the downloaded source file, which can be pinned into
the table.

`weights="imagenet"`, the Keras Applications spelling, is an alias: each variant's best ImageNet-1k
fine-tuned file (`IMAGENET_WEIGHTS`). Downloads go to `cache_path(entry)`; a failed one raises
`WeightsDownloadError` (an `OSError`) naming that path, a checksum mismatch `WeightsChecksumError`.

Example:
    >>> entry = get_entry("B16", "imagenet21k+imagenet2012")
    >>> entry.image_size, entry.classes, entry.url
    (384, 1000, 'https://storage.googleapis.com/vit_models/imagenet21k+imagenet2012/ViT-B_16.npz')
"""

import dataclasses
import hashlib
import os
import tempfile
import urllib.error

BASE_URL = "https://storage.googleapis.com/vit_models/"
CACHE_SUBDIR = "keras_vit"
IMAGENET_ALIAS = "imagenet"
"""The Keras Applications name for ImageNet weights; resolved per variant through `IMAGENET_WEIGHTS`."""


class WeightsDownloadError(ConnectionError):
    """A published weights file could not be downloaded (no network, DNS failure, HTTP error, ...).

    Its message names the weights, the URL, the cache file where a file downloaded by hand can be placed,
    and the alternatives `weights=None` and `weights="/path/to/file.npz"`. Attributes: `entry` (the
    `WeightsEntry`), `path` (that cache file) and `reason` (the network error, as text).
    """

    def __init__(self, message: str, entry=None, path: str | None = None, reason: str | None = None):
        super().__init__(message)
        self.entry, self.path, self.reason = entry, path, reason


class WeightsChecksumError(ValueError):
    """A downloaded weights file does not have the sha256 of the weights table (damaged or altered download)."""


@dataclasses.dataclass(frozen=True)
class WeightsEntry:
    """One published checkpoint.

    Args:
        name: the `weights=` name, e.g. `"imagenet21k+imagenet2012"`.
        variant: the variant it belongs to (`"B16"`, `"R50_B16"`, ...: keys of `keras_vit.variants.VARIANTS`).
        path: the file's path under `BASE_URL`.
        sha256: the file's sha256, or None where not known (then the download is not verified).
        image_size: the resolution it was trained or fine-tuned at; the model's default input size.
        classes: classes of its head (21843 for ImageNet-21k, 1000 for ImageNet).
        representation_size: width of its `pre_logits` layer, None when it has none (for the AugReg
            files as far as known; the loader always follows the file itself).
        gelu_approximate: True for the tanh GELU of the official Flax code.
        layer_norm_epsilon: LayerNorm epsilon of the source code.
        preprocessing: `"inception"`: images scaled from [0, 255] to [-1, 1] (x / 127.5 - 1).
        imagenet_top1: ImageNet top-1 (%) from the upstream tables; None where not reported or not
            applicable (raw ImageNet-21k heads must be fine-tuned first).
        top1_source: where `imagenet_top1` comes from.
        notes: what else a user should know about the file (shown in docs/WEIGHTS.md's table).
    """

    name: str
    variant: str
    path: str
    sha256: str | None
    image_size: int
    classes: int
    representation_size: int | None
    gelu_approximate: bool = True
    layer_norm_epsilon: float = 1e-6
    preprocessing: str = "inception"
    imagenet_top1: float | None = None
    top1_source: str = "see upstream"
    notes: str = ""

    @property
    def url(self) -> str:
        return BASE_URL + self.path

    @property
    def file_name(self) -> str:
        """A cache file name unique across the table (the buckets reuse basenames such as ViT-B_16.npz)."""
        return self.path.replace("/", "__")


_RAW_21K = "n/a: raw ImageNet-21k head, fine-tune first"

PUBLISHED: list[WeightsEntry] = [
    # The paper's files (Dosovitskiy et al. 2021): ImageNet-21k pre-training at 224, its 384 ImageNet fine-tune.
    WeightsEntry(variant="B16", name="imagenet21k", image_size=224, classes=21843,
                 path="imagenet21k/ViT-B_16.npz",
                 representation_size=768, sha256=None, top1_source=_RAW_21K),
    WeightsEntry(variant="B16", name="imagenet21k+imagenet2012", image_size=384, classes=1000,
                 path="imagenet21k+imagenet2012/ViT-B_16.npz",
                 representation_size=None, sha256=None, imagenet_top1=83.97, top1_source="paper Table 5"),
    WeightsEntry(variant="B32", name="imagenet21k", image_size=224, classes=21843,
                 path="imagenet21k/ViT-B_32.npz",
                 representation_size=768, sha256=None, top1_source=_RAW_21K),
    WeightsEntry(variant="B32", name="imagenet21k+imagenet2012", image_size=384, classes=1000,
                 path="imagenet21k+imagenet2012/ViT-B_32.npz",
                 representation_size=None, sha256=None, imagenet_top1=81.28, top1_source="paper Table 5"),
    WeightsEntry(variant="L16", name="imagenet21k", image_size=224, classes=21843,
                 path="imagenet21k/ViT-L_16.npz",
                 representation_size=1024, sha256=None, top1_source=_RAW_21K),
    WeightsEntry(variant="L16", name="imagenet21k+imagenet2012", image_size=384, classes=1000,
                 path="imagenet21k+imagenet2012/ViT-L_16.npz",
                 representation_size=None, sha256=None, imagenet_top1=85.15, top1_source="paper Table 5"),
    WeightsEntry(variant="L32", name="imagenet21k", image_size=224, classes=21843,
                 path="imagenet21k/ViT-L_32.npz",
                 representation_size=1024, sha256=None, top1_source=_RAW_21K),
    WeightsEntry(variant="L32", name="imagenet21k+imagenet2012", image_size=384, classes=1000,
                 path="imagenet21k+imagenet2012/ViT-L_32.npz",
                 representation_size=None, sha256=None, imagenet_top1=80.99, top1_source="paper Table 5"),
    WeightsEntry(variant="H14", name="imagenet21k", image_size=224, classes=21843,
                 path="imagenet21k/ViT-H_14.npz",
                 representation_size=1280, sha256=None, top1_source=_RAW_21K,
                 notes="the only ViT-H/14 file: its head is all zeros and ViT_H14() warns; fine-tune it first"),
    WeightsEntry(variant="R50_B16", name="imagenet21k", image_size=224, classes=21843,
                 path="imagenet21k/R50+ViT-B_16.npz",
                 representation_size=768, sha256=None, top1_source=_RAW_21K),
    WeightsEntry(variant="R50_B16", name="imagenet21k+imagenet2012", image_size=384, classes=1000,
                 path="imagenet21k+imagenet2012/R50+ViT-B_16.npz",
                 representation_size=None, sha256=None, imagenet_top1=85.08,
                 top1_source="google-research/vision_transformer issue 39"),
    # The 224 ImageNet fine-tunes of the google-research/vision_transformer README.
    WeightsEntry(variant="B16", name="imagenet21k+imagenet2012_224", image_size=224, classes=1000,
                 path="imagenet21k+imagenet2012/ViT-B_16-224.npz",
                 representation_size=None, sha256=None, imagenet_top1=81.2, top1_source="vision_transformer README"),
    WeightsEntry(variant="L16", name="imagenet21k+imagenet2012_224", image_size=224, classes=1000,
                 path="imagenet21k+imagenet2012/ViT-L_16-224.npz",
                 representation_size=None, sha256=None, imagenet_top1=82.7, top1_source="vision_transformer README"),
    # AugReg (Steiner et al. 2021): the recommended pre-training runs and their recommended ImageNet fine-tune.
    WeightsEntry(variant="Ti16", name="augreg_in21k", image_size=224, classes=21843,
                 path="augreg/Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0.npz",
                 representation_size=None, sha256=None),
    WeightsEntry(variant="Ti16", name="augreg_in21k_ft_in1k", image_size=384, classes=1000,
                 path="augreg/Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0"
                      "--imagenet2012-steps_20k-lr_0.03-res_384.npz",
                 representation_size=None, sha256=None, imagenet_top1=78.22,
                 top1_source="vision_transformer README (AugReg)"),
    WeightsEntry(variant="S32", name="augreg_in21k", image_size=224, classes=21843,
                 path="augreg/S_32-i21k-300ep-lr_0.001-aug_none-wd_0.1-do_0.0-sd_0.0.npz",
                 representation_size=None, sha256=None,
                 notes="not the pre-training run of timm's 224 fine-tune (compare the file names)"),
    WeightsEntry(variant="S32", name="augreg_in21k_ft_in1k", image_size=384, classes=1000,
                 path="augreg/S_32-i21k-300ep-lr_0.001-aug_none-wd_0.1-do_0.0-sd_0.0"
                      "--imagenet2012-steps_20k-lr_0.01-res_384.npz",
                 representation_size=None, sha256=None, imagenet_top1=79.58,
                 top1_source="vision_transformer README (AugReg)"),
    WeightsEntry(variant="S16", name="augreg_in21k", image_size=224, classes=21843,
                 path="augreg/S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0.npz",
                 representation_size=None, sha256=None),
    WeightsEntry(variant="S16", name="augreg_in21k_ft_in1k", image_size=384, classes=1000,
                 path="augreg/S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0"
                      "--imagenet2012-steps_20k-lr_0.03-res_384.npz",
                 representation_size=None, sha256=None, imagenet_top1=83.73,
                 top1_source="vision_transformer README (AugReg)"),
    WeightsEntry(variant="B32", name="augreg_in21k", image_size=224, classes=21843,
                 path="augreg/B_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0.npz",
                 representation_size=None, sha256=None,
                 notes="not the pre-training run of timm's 224 fine-tune (compare the file names)"),
    WeightsEntry(variant="B32", name="augreg_in21k_ft_in1k", image_size=384, classes=1000,
                 path="augreg/B_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0"
                      "--imagenet2012-steps_20k-lr_0.01-res_384.npz",
                 representation_size=None, sha256=None, imagenet_top1=83.59,
                 top1_source="vision_transformer README (AugReg)"),
    WeightsEntry(variant="B16", name="augreg_in21k", image_size=224, classes=21843,
                 path="augreg/B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0.npz",
                 representation_size=None, sha256=None),
    WeightsEntry(variant="B16", name="augreg_in21k_ft_in1k", image_size=384, classes=1000,
                 path="augreg/B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0"
                      "--imagenet2012-steps_20k-lr_0.03-res_384.npz",
                 representation_size=None, sha256=None, imagenet_top1=85.49,
                 top1_source="vision_transformer README (AugReg)"),
    WeightsEntry(variant="B8", name="augreg_in21k", image_size=224, classes=21843,
                 path="augreg/B_8-i21k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.0-sd_0.0.npz",
                 representation_size=None, sha256=None,
                 notes="not the pre-training run of timm's 224 fine-tune (compare the file names)"),
    WeightsEntry(variant="B8", name="augreg_in21k_ft_in1k", image_size=224, classes=1000,
                 path="augreg/B_8-i21k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.0-sd_0.0"
                      "--imagenet2012-steps_20k-lr_0.03-res_224.npz",
                 representation_size=None, sha256=None, imagenet_top1=85.58,
                 top1_source="vision_transformer AugReg colab",
                 notes="the AugReg colab's 224 fine-tune of the recommended run (no 384 one is listed)"),
    WeightsEntry(variant="L16", name="augreg_in21k", image_size=224, classes=21843,
                 path="augreg/L_16-i21k-300ep-lr_0.001-aug_strong1-wd_0.1-do_0.0-sd_0.0.npz",
                 representation_size=None, sha256=None,
                 notes="not the pre-training run of timm's 224 fine-tune (compare the file names)"),
    WeightsEntry(variant="L16", name="augreg_in21k_ft_in1k", image_size=384, classes=1000,
                 path="augreg/L_16-i21k-300ep-lr_0.001-aug_strong1-wd_0.1-do_0.0-sd_0.0"
                      "--imagenet2012-steps_20k-lr_0.01-res_384.npz",
                 representation_size=None, sha256=None, imagenet_top1=85.59,
                 top1_source="vision_transformer README (AugReg)"),
    # AugReg: the 224 ImageNet fine-tunes timm ships (partly from other pre-training runs).
    WeightsEntry(variant="Ti16", name="augreg_in21k_ft_in1k_224", image_size=224, classes=1000,
                 path="augreg/Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0"
                      "--imagenet2012-steps_20k-lr_0.03-res_224.npz",
                 representation_size=None, sha256=None, notes="timm's `vit_*_224.augreg_in21k_ft_in1k`"),
    WeightsEntry(variant="S32", name="augreg_in21k_ft_in1k_224", image_size=224, classes=1000,
                 path="augreg/S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0"
                      "--imagenet2012-steps_20k-lr_0.03-res_224.npz",
                 representation_size=None, sha256=None, notes="timm's `vit_*_224.augreg_in21k_ft_in1k`"),
    WeightsEntry(variant="S16", name="augreg_in21k_ft_in1k_224", image_size=224, classes=1000,
                 path="augreg/S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0"
                      "--imagenet2012-steps_20k-lr_0.03-res_224.npz",
                 representation_size=None, sha256=None, notes="timm's `vit_*_224.augreg_in21k_ft_in1k`"),
    WeightsEntry(variant="B32", name="augreg_in21k_ft_in1k_224", image_size=224, classes=1000,
                 path="augreg/B_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.03-do_0.0-sd_0.0"
                      "--imagenet2012-steps_20k-lr_0.03-res_224.npz",
                 representation_size=None, sha256=None, notes="timm's `vit_*_224.augreg_in21k_ft_in1k`"),
    WeightsEntry(variant="B16", name="augreg_in21k_ft_in1k_224", image_size=224, classes=1000,
                 path="augreg/B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0"
                      "--imagenet2012-steps_20k-lr_0.01-res_224.npz",
                 representation_size=None, sha256=None, notes="timm's `vit_*_224.augreg_in21k_ft_in1k`"),
    WeightsEntry(variant="B8", name="augreg_in21k_ft_in1k_224", image_size=224, classes=1000,
                 path="augreg/B_8-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0"
                      "--imagenet2012-steps_20k-lr_0.01-res_224.npz",
                 representation_size=None, sha256=None, notes="timm's `vit_*_224.augreg_in21k_ft_in1k`"),
    WeightsEntry(variant="L16", name="augreg_in21k_ft_in1k_224", image_size=224, classes=1000,
                 path="augreg/L_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1"
                      "--imagenet2012-steps_20k-lr_0.01-res_224.npz",
                 representation_size=None, sha256=None, notes="timm's `vit_*_224.augreg_in21k_ft_in1k`"),
]
"""Every published checkpoint, one record each, in table order (the order of `names_for` and `all_names`).
The weights table of docs/WEIGHTS.md is generated from it: `python -m keras_vit.weights --write`."""

WEIGHTS: dict[tuple[str, str], WeightsEntry] = {(entry.variant, entry.name): entry for entry in PUBLISHED}
"""Published weights by (variant, name)."""

DEFAULT_WEIGHTS = {
    "Ti16": "augreg_in21k_ft_in1k",
    "S16": "augreg_in21k_ft_in1k",
    "S32": "augreg_in21k_ft_in1k",
    "B8": "augreg_in21k_ft_in1k",
    "B16": "augreg_in21k_ft_in1k",
    "B32": "augreg_in21k_ft_in1k",
    "L16": "augreg_in21k_ft_in1k",
    "L32": "imagenet21k+imagenet2012",
    "H14": "imagenet21k",
    "R50_B16": "imagenet21k+imagenet2012",
}
"""The default `weights` of each named constructor: its best published checkpoint by upstream ImageNet
top-1 (AugReg where it exists; ViT-L/32 has only the paper's fine-tune; ViT-H/14 only the raw ImageNet-21k
pre-training: `ViT_H14()` loads that file's 21843-class head, all zeros on purpose, with its pre_logits layer,
and warns that its predictions are meaningless; pass `classes=...` for a new zero-initialised head to fine-tune,
or `include_top=False` for features)."""


IMAGENET_WEIGHTS = {variant: name for variant, name in DEFAULT_WEIGHTS.items() if variant != "H14"}
"""What `weights="imagenet"` loads per variant: its ImageNet-1k (1000-class) fine-tune with the best upstream
top-1 (AugReg where it exists: 85.49 against the paper's 83.97 for B/16, 85.59 against 85.15 for L/16; B/8's
recommended 1k fine-tune is AugReg's at 224, 85.58; L/32 and R50+B/16 (85.08) have only the paper's).
ViT-H/14 has no ImageNet-1k fine-tune, so `"imagenet"` is refused for it."""


def names_for(variant: str) -> list[str]:
    """The published weight names of a variant (empty for an unpublished architecture)."""
    return [name for (v, name) in WEIGHTS if v == variant]


def all_names() -> list[str]:
    """Every published weight name, in table order, without repetition."""
    return list(dict.fromkeys(name for (_, name) in WEIGHTS))


def is_name(weights) -> bool:
    """Whether `weights` is a published name or the `"imagenet"` alias."""
    return isinstance(weights, str) and (weights == IMAGENET_ALIAS or weights in all_names())


def _describe(entry: WeightsEntry) -> str:
    return f"{entry.name!r} ({entry.classes} classes, {entry.image_size}x{entry.image_size})"


def get_entry(variant: str | None, name: str) -> WeightsEntry:
    """The table entry for `weights=name` on `variant`; `"imagenet"` resolves through `IMAGENET_WEIGHTS`.

    Raises:
        ValueError: for a name that is not published for this variant, listing the known ones.
    """
    if name == IMAGENET_ALIAS and variant in IMAGENET_WEIGHTS:
        return WEIGHTS[(variant, IMAGENET_WEIGHTS[variant])]
    if (variant, name) in WEIGHTS:
        return WEIGHTS[(variant, name)]
    if name == IMAGENET_ALIAS and variant is not None and names_for(variant):
        raise ValueError(
            f"ViT {variant} has no ImageNet-1k fine-tuned weights, so `weights='imagenet'` (each variant's best "
            f"ImageNet-1k fine-tune) has nothing to load. Published for {variant}: "
            f"{', '.join(_describe(WEIGHTS[(variant, n)]) for n in names_for(variant))}: pass one of these (with "
            "`classes=N` for a new head to fine-tune), None, or a file path. Received: weights='imagenet'"
        )
    if variant is None:
        raise ValueError(
            f"`weights={name!r}` is a published name, but the model's architecture is not one of the published "
            f"variants ({', '.join(sorted({v for v, _ in WEIGHTS}))}). Build a named variant or pass a file path. "
            f"Received: weights={name!r}"
        )
    known = names_for(variant)
    raise ValueError(
        f"Unknown weights for ViT {variant}. Received: weights={name!r}. Published names for {variant}: "
        f"{', '.join(repr(n) for n in known) or 'none'}; or None, or the path to a .npz, .safetensors, "
        "Hugging Face folder or .weights.h5 file."
    )


def default_cache_dir() -> str | None:
    """`$KERAS_HOME` when set (read at call time), else None: the Keras default (~/.keras)."""
    return os.environ.get("KERAS_HOME") or None


def _cache_root(cache_dir: str | None) -> str:
    """The folder `keras.utils.get_file` is given: `cache_dir`, else `$KERAS_HOME`, else Keras' own home
    (`~/.keras`, or `/tmp/.keras` when the home folder is not writable, as Keras decides at import)."""
    root = cache_dir if cache_dir is not None else default_cache_dir()
    if root is None:
        home = os.path.expanduser("~")
        root = os.path.join(home if os.access(home, os.W_OK) else "/tmp", ".keras")
    return os.path.expanduser(root)


def cache_path(entry: WeightsEntry, cache_dir: str | None = None) -> str:
    """The file `fetch` downloads `entry` to, and uses without any download when it is already there.

    `<cache>/keras_vit/<entry.file_name>`, `<cache>` being `cache_dir`, else `$KERAS_HOME`, else `~/.keras`;
    as `keras.utils.get_file` does, a cache folder that cannot be written falls back to `/tmp/.keras`.

    Example:
        >>> import os
        >>> os.path.basename(cache_path(get_entry("B16", "imagenet21k")))
        'imagenet21k__ViT-B_16.npz'
    """
    root = _cache_root(cache_dir)
    if not os.access(root, os.W_OK):
        root = os.path.join("/tmp" if os.path.isdir("/tmp") else tempfile.gettempdir(), ".keras")
    return os.path.join(root, CACHE_SUBDIR, entry.file_name)


def _failure_reason(error: BaseException, url: str) -> str:
    """The network error behind a failed `get_file`, as short text without the URL (the message has it)."""
    for cause in (error, error.__context__):  # get_file wraps a URLError in a plain Exception with the URL
        if isinstance(cause, urllib.error.HTTPError):
            return f"HTTP {cause.code} {cause.msg}"
        if isinstance(cause, urllib.error.URLError):
            reason = cause.reason
            return reason.strerror if isinstance(reason, OSError) and reason.strerror else str(reason)
    text = str(error).replace(f"URL fetch failure on {url}: ", "").replace(url, "the URL")
    return text or type(error).__name__


def sha256(path: str) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fetch(entry: WeightsEntry, cache_dir: str | None = None) -> str:
    """Downloads `entry` to `cache_path(entry, cache_dir)` (once) with `keras.utils.get_file`; returns that path.

    A file already at that path is used without a download (a file downloaded by hand can be placed there).
    The file is verified against `entry.sha256` when the table has one.

    Raises:
        WeightsDownloadError: when the download fails (an `OSError`; the message names the URL, the cache
            path for a manual download, and `weights=None` or a local file as the alternatives).
        WeightsChecksumError: when the downloaded file does not match its sha256 (a `ValueError`).
    """
    import keras

    root = _cache_root(cache_dir)
    try:  # get_file falls back to /tmp/.keras when the folder does not exist yet
        os.makedirs(root, exist_ok=True)
    except OSError:
        pass  # not writable: get_file (and cache_path) fall back to /tmp/.keras
    path = cache_path(entry, cache_dir)
    try:
        return keras.utils.get_file(
            fname=entry.file_name,
            origin=entry.url,
            file_hash=entry.sha256,
            hash_algorithm="sha256",
            cache_subdir=CACHE_SUBDIR,
            cache_dir=root,
        )
    except Exception as error:  # network errors come in many types (URLError, HTTPError, socket errors...)
        checksum = isinstance(error, ValueError) and entry.sha256 is not None and "hash" in str(error)
        if not (checksum and os.path.exists(path)):
            reason = _failure_reason(error, entry.url)
            raise WeightsDownloadError(
                f"Could not download weights {entry.name!r} for ViT {entry.variant} ({reason}) from {entry.url}. "
                f"To use them offline, download that file elsewhere and place it at {path} (it is then used "
                f"without a download); or pass weights=None (random initialisation, no download) or "
                f"weights=\"/path/to/file.npz\" (a checkpoint on disk).",
                entry=entry, path=path, reason=reason,
            ) from None
        found = sha256(path)
        raise WeightsChecksumError(
            f"The file downloaded for weights {entry.name!r} of ViT {entry.variant} from {entry.url} failed its "
            f"sha256 check (expected {entry.sha256}, got {found}): the download is damaged or not the published "
            f"file. Delete {path} and try again, or pass weights=None or weights=\"/path/to/file.npz\"."
        ) from None


# ------------------------------------------------- the table of docs/WEIGHTS.md, generated from PUBLISHED

TABLE_FILE = "docs/WEIGHTS.md"
"""The file that holds the generated weights table, relative to the repository root."""

TABLE_BEGIN = ("<!-- weights table: generated from keras_vit/weights.py by "
               "`python -m keras_vit.weights --write docs/WEIGHTS.md` -->")
TABLE_END = "<!-- end of the generated weights table -->"
README_BEGIN, README_END = TABLE_BEGIN, TABLE_END  # the names from when the table lived in README.md


def _top1_cell(entry: WeightsEntry) -> str:
    return f"{entry.imagenet_top1:g}, {entry.top1_source}" if entry.imagenet_top1 is not None else entry.top1_source


def markdown_table() -> str:
    """The weights table as Markdown, one row per `PUBLISHED` entry, by variant (in `VARIANTS` order), then in
    table order; the default of each named constructor is marked "(default)"."""
    from keras_vit.variants import VARIANTS

    order = {variant: i for i, variant in enumerate(VARIANTS)}
    rows = sorted(PUBLISHED, key=lambda e: order.get(e.variant, len(order)))  # stable: table order per variant
    lines = [
        f"| variant | `weights=` | file under `{BASE_URL}` | res. | classes | pre_logits | ImageNet top-1 | notes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for e in rows:
        default = " (default)" if DEFAULT_WEIGHTS.get(e.variant) == e.name else ""
        pre_logits = "-" if e.representation_size is None else str(e.representation_size)
        lines.append(f"| {e.variant} | `{e.name}`{default} | `{e.path}` | {e.image_size} | {e.classes} | {pre_logits} "
                     f"| {_top1_cell(e)} | {e.notes or '-'} |")
    return "\n".join(lines) + "\n"


def table_region(text: str) -> tuple[int, int]:
    """Where the generated table sits in a Markdown `text`: (start, end) between the two markers."""
    begin, end = text.find(TABLE_BEGIN), text.find(TABLE_END)
    if begin < 0 or end < begin:
        raise ValueError(f"The file has no generated weights table: it needs the lines {TABLE_BEGIN!r} and "
                         f"{TABLE_END!r}, in that order.")
    return begin + len(TABLE_BEGIN) + 1, end


readme_region = table_region  # the name from when the table lived in README.md


def main(argv=None) -> int:
    """`python -m keras_vit.weights --markdown` prints the table; `--write [PATH]` rewrites the region between
    the markers of PATH (default docs/WEIGHTS.md, from the repository root; `--readme PATH` is the old
    spelling); `--check [PATH]` fails (exit 1) when that region is out of date."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m keras_vit.weights", description=main.__doc__)
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--markdown", action="store_true", help="print the weights table as Markdown")
    group.add_argument("--write", "--readme", dest="write", metavar="PATH", nargs="?", const=TABLE_FILE,
                       help=f"rewrite the generated table in this Markdown file (default {TABLE_FILE})")
    group.add_argument("--check", metavar="PATH", nargs="?", const=TABLE_FILE,
                       help=f"exit 1 when this file's table is not the generated one (default {TABLE_FILE})")
    args = parser.parse_args(argv)
    table = markdown_table()
    if args.markdown:
        print(table, end="")
        return 0
    path = args.write or args.check
    with open(path, encoding="utf-8") as f:
        text = f.read()
    start, end = table_region(text)
    if args.check:
        if text[start:end] != table:
            print(f"{path}: the weights table is out of date; run `python -m keras_vit.weights --write {path}`")
            return 1
        return 0
    with open(path, "w", encoding="utf-8") as f:
        f.write(text[:start] + table + text[end:])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
