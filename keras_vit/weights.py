"""The table of published ViT weights, as data (their download: `keras_vit.download`).

Every entry names one file under https://storage.googleapis.com/vit_models/ (DeiT's: timm's files on the Hugging
Face Hub, `host`) with what a loader and a user need
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
- The hybrids: the original release's `imagenet21k/R26+ViT-B_32.npz` and `imagenet21k/R50+ViT-L_32.npz`
  (pre_logits as the other original ImageNet-21k files); AugReg's R+Ti/16, R26+S/32 and R50+L/32 with the
  same three names (the README's recommended runs and 384 fine-tunes, 75.40 / 83.85 / 85.99; timm's 224
  fine-tunes, `vit_tiny_r_s16_p8_224`, `vit_small_r26_s32_224`, `vit_large_r50_s32_224`).
- DeiT (Touvron et al. 2021, arXiv 2012.12877), ImageNet-1k only, timm's safetensors files on the Hugging Face Hub
  (`https://huggingface.co/timm/deit_*_patch16_224.fb_in1k`): `deit_in1k` the plain DeiT-Ti/S/B (a ViT layout),
  `deit_distilled_in1k` (and B's `deit_distilled_in1k_384`) the distilled ones, which load as
  `distillation_token=True` models (the token and `head_dist` are in the file: `ViT_B16(weights=
  "deit_distilled_in1k")`). Top-1 from the facebookresearch/deit README. timm's code: exact GELU, LayerNorm
  epsilon 1e-6; their input is normalised with the ImageNet mean and standard deviation (`preprocessing`
  `"imagenet"`), not scaled to [-1, 1].

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
fine-tuned file (`IMAGENET_WEIGHTS`). `keras_vit.download.fetch(entry)` downloads a file once into the Keras
cache. The Markdown table of docs/WEIGHTS.md is generated from `PUBLISHED` by `python tools/weights_table.py
--write` (a repository tool, not part of the package).

Example:
    >>> entry = get_entry("B16", "imagenet21k+imagenet2012")
    >>> entry.image_size, entry.classes, entry.url
    (384, 1000, 'https://storage.googleapis.com/vit_models/imagenet21k+imagenet2012/ViT-B_16.npz')
"""

import dataclasses

BASE_URL = "https://storage.googleapis.com/vit_models/"
IMAGENET_ALIAS = "imagenet"
"""The Keras Applications name for ImageNet weights; resolved per variant through `IMAGENET_WEIGHTS`."""


@dataclasses.dataclass(frozen=True)
class WeightsEntry:
    """One published checkpoint.

    Args:
        name: the `weights=` name, e.g. `"imagenet21k+imagenet2012"`.
        variant: the variant it belongs to (`"B16"`, `"R50_B16"`, ...: keys of `keras_vit.variants.VARIANTS`).
        path: the file's path under `BASE_URL` (or under `host`).
        sha256: the file's sha256, or None where not known (then the download is not verified).
        image_size: the resolution it was trained or fine-tuned at; the model's default input size.
        classes: classes of its head (21843 for ImageNet-21k, 1000 for ImageNet).
        representation_size: width of its `pre_logits` layer, None when it has none (for the AugReg
            files as far as known; the loader always follows the file itself).
        gelu_approximate: True for the tanh GELU of the official Flax code.
        layer_norm_epsilon: LayerNorm epsilon of the source code.
        preprocessing: `"inception"`: images scaled from [0, 255] to [-1, 1] (x / 127.5 - 1); `"imagenet"`:
            (x / 255 - mean) / std with ImageNet's mean (0.485, 0.456, 0.406) and std (0.229, 0.224, 0.225).
        imagenet_top1: ImageNet top-1 (%) from the upstream tables; None where not reported or not
            applicable (raw ImageNet-21k heads must be fine-tuned first).
        top1_source: where `imagenet_top1` comes from.
        notes: what else a user should know about the file (shown in docs/WEIGHTS.md's table).
        host: where `path` lives when not under `BASE_URL` (DeiT's files: `"https://huggingface.co/"`), else None.
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
    host: str | None = None

    @property
    def url(self) -> str:
        return (self.host or BASE_URL) + self.path

    @property
    def file_name(self) -> str:
        """A cache file name unique across the table (the buckets reuse basenames such as ViT-B_16.npz)."""
        return self.path.replace("/", "__")


_RAW_21K = "n/a: raw ImageNet-21k head, fine-tune first"
HUGGING_FACE = "https://huggingface.co/"


def _deit(variant: str, name: str, timm_name: str, image_size: int, top1: float) -> "WeightsEntry":
    """A DeiT file: timm's `<timm_name>.fb_in1k` safetensors on the Hugging Face Hub (exact GELU, ImageNet
    mean/std input)."""
    distilled = "distilled" in name
    return WeightsEntry(
        variant=variant, name=name, image_size=image_size, classes=1000, representation_size=None, sha256=None,
        path=f"timm/{timm_name}.fb_in1k/resolve/main/model.safetensors", host=HUGGING_FACE,
        gelu_approximate=False, preprocessing="imagenet", imagenet_top1=top1, top1_source="DeiT README",
        notes=("DeiT distilled from a RegNetY-16GF teacher: loads with distillation_token=True (head and head_dist)"
               if distilled else "DeiT, trained on ImageNet-1k alone") + "; ImageNet mean/std input")

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
    # The hybrids of the original release (ImageNet-21k pre-training only) and of AugReg (the README's
    # recommended run and its 384 fine-tune, and the 224 fine-tune timm ships).
    WeightsEntry(variant="R26_B32", name="imagenet21k", image_size=224, classes=21843,
                 path="imagenet21k/R26+ViT-B_32.npz",
                 representation_size=768, sha256=None, top1_source=_RAW_21K,
                 notes="the only R26+ViT-B/32 file"),
    WeightsEntry(variant="R50_L32", name="imagenet21k", image_size=224, classes=21843,
                 path="imagenet21k/R50+ViT-L_32.npz",
                 representation_size=1024, sha256=None, top1_source=_RAW_21K),
    WeightsEntry(variant="R_Ti16", name="augreg_in21k", image_size=224, classes=21843,
                 path="augreg/R_Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0.npz",
                 representation_size=None, sha256=None),
    WeightsEntry(variant="R_Ti16", name="augreg_in21k_ft_in1k", image_size=384, classes=1000,
                 path="augreg/R_Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0"
                      "--imagenet2012-steps_20k-lr_0.03-res_384.npz",
                 representation_size=None, sha256=None, imagenet_top1=75.40,
                 top1_source="vision_transformer README (AugReg)"),
    WeightsEntry(variant="R_Ti16", name="augreg_in21k_ft_in1k_224", image_size=224, classes=1000,
                 path="augreg/R_Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0"
                      "--imagenet2012-steps_20k-lr_0.03-res_224.npz",
                 representation_size=None, sha256=None, notes="timm's `vit_tiny_r_s16_p8_224.augreg_in21k_ft_in1k`"),
    WeightsEntry(variant="R26_S32", name="augreg_in21k", image_size=224, classes=21843,
                 path="augreg/R26_S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0.npz",
                 representation_size=None, sha256=None,
                 notes="not the pre-training run of timm's fine-tunes or `augreg_in21k` (compare the file names)"),
    WeightsEntry(variant="R26_S32", name="augreg_in21k_ft_in1k", image_size=384, classes=1000,
                 path="augreg/R26_S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0"
                      "--imagenet2012-steps_20k-lr_0.01-res_384.npz",
                 representation_size=None, sha256=None, imagenet_top1=83.85,
                 top1_source="vision_transformer README (AugReg)",
                 notes="not timm's `vit_small_r26_s32_384` (another run)"),
    WeightsEntry(variant="R26_S32", name="augreg_in21k_ft_in1k_224", image_size=224, classes=1000,
                 path="augreg/R26_S_32-i21k-300ep-lr_0.001-aug_light0-wd_0.03-do_0.1-sd_0.1"
                      "--imagenet2012-steps_20k-lr_0.03-res_224.npz",
                 representation_size=None, sha256=None, notes="timm's `vit_small_r26_s32_224.augreg_in21k_ft_in1k`"),
    WeightsEntry(variant="R50_L32", name="augreg_in21k", image_size=224, classes=21843,
                 path="augreg/R50_L_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1.npz",
                 representation_size=None, sha256=None,
                 notes="not the pre-training run of timm's `augreg_in21k` and 384 fine-tune (compare the file names)"),
    WeightsEntry(variant="R50_L32", name="augreg_in21k_ft_in1k", image_size=384, classes=1000,
                 path="augreg/R50_L_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1"
                      "--imagenet2012-steps_20k-lr_0.01-res_384.npz",
                 representation_size=None, sha256=None, imagenet_top1=85.99,
                 top1_source="vision_transformer README (AugReg)",
                 notes="not timm's `vit_large_r50_s32_384` (another run)"),
    WeightsEntry(variant="R50_L32", name="augreg_in21k_ft_in1k_224", image_size=224, classes=1000,
                 path="augreg/R50_L_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1"
                      "--imagenet2012-steps_20k-lr_0.01-res_224.npz",
                 representation_size=None, sha256=None, notes="timm's `vit_large_r50_s32_224.augreg_in21k_ft_in1k`"),
    # DeiT (Touvron et al. 2021): timm's ImageNet-1k files; the distilled ones carry the distillation token.
    *(_deit(variant, name, timm_name, size, top1) for variant, name, timm_name, size, top1 in (
        ("Ti16", "deit_in1k", "deit_tiny_patch16_224", 224, 72.2),
        ("Ti16", "deit_distilled_in1k", "deit_tiny_distilled_patch16_224", 224, 74.5),
        ("S16", "deit_in1k", "deit_small_patch16_224", 224, 79.8),
        ("S16", "deit_distilled_in1k", "deit_small_distilled_patch16_224", 224, 81.2),
        ("B16", "deit_in1k", "deit_base_patch16_224", 224, 81.8),
        ("B16", "deit_distilled_in1k", "deit_base_distilled_patch16_224", 224, 83.4),
        ("B16", "deit_distilled_in1k_384", "deit_base_distilled_patch16_384", 384, 85.2),
    )),
]
"""Every published checkpoint, one record each, in table order (the order of `names_for` and `all_names`).
The weights table of docs/WEIGHTS.md is generated from it: `python tools/weights_table.py --write`."""

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
    "R_Ti16": "augreg_in21k_ft_in1k",
    "R26_S32": "augreg_in21k_ft_in1k",
    "R26_B32": "imagenet21k",
    "R50_L32": "augreg_in21k_ft_in1k",
}
"""The default `weights` of each named constructor: its best published checkpoint by upstream ImageNet
top-1 (AugReg where it exists; ViT-L/32 has only the paper's fine-tune; R26+ViT-B/32 only its ImageNet-21k
pre-training, whose 21843-class head is trained; ViT-H/14 only the raw ImageNet-21k
pre-training: `ViT_H14()` loads that file's 21843-class head, all zeros on purpose, with its pre_logits layer,
and warns that its predictions are meaningless; pass `classes=...` for a new zero-initialised head to fine-tune,
or `include_top=False` for features)."""


IMAGENET_WEIGHTS = {variant: name for variant, name in DEFAULT_WEIGHTS.items()
                    if WEIGHTS[(variant, name)].classes == 1000}
"""What `weights="imagenet"` loads per variant: its ImageNet-1k (1000-class) fine-tune with the best upstream
top-1 (AugReg where it exists: 85.49 against the paper's 83.97 for B/16, 85.59 against 85.15 for L/16; B/8's
recommended 1k fine-tune is AugReg's at 224, 85.58; L/32 and R50+B/16 (85.08) have only the paper's).
ViT-H/14 and R26+ViT-B/32 have no ImageNet-1k fine-tune, so `"imagenet"` is refused for them."""


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
