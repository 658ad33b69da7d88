"""The published-weights table, name resolution, and the download path (served from local files: a pre-seeded
Keras cache and file:// URLs; never the network)."""

import hashlib
import inspect
import os
import re
import socket
import tempfile
import traceback

import numpy as np
import pytest
from numpy_reference import random_official_params, vit_forward

import keras_vit
from keras_vit import model_parts, weights
from keras_vit.checkpoints import download, loading
from tools import weights_table
from keras_vit.variants import VARIANTS, Variant

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

AUGREG_NAME = re.compile(
    r"^augreg/(R_|R26_|R50_)?(Ti|S|B|L)_(8|16|32)-i21k-300ep-lr_0\.001-aug_(none|light[01]|medium[12]|strong[12])"
    r"-wd_0\.(1|03)-do_0\.[01]-sd_0\.[01](--imagenet2012-steps_20k-lr_0\.0[13]-res_(224|384))?\.npz$"
)


def test_every_variant_has_its_published_names():
    # docs/REFERENCE.md: imagenet21k for B/16, B/32, L/16, L/32, H/14, R50+B/16; fine-tuned for all but H/14.
    for variant in ("B16", "B32", "L16", "L32", "H14", "R50_B16"):
        assert "imagenet21k" in weights.names_for(variant)
    for variant in ("B16", "B32", "L16", "L32", "R50_B16"):
        assert "imagenet21k+imagenet2012" in weights.names_for(variant)
    for variant in ("Ti16", "S16", "S32", "B8", "B16", "B32", "L16", "R_Ti16", "R26_S32", "R50_L32"):
        assert {"augreg_in21k", "augreg_in21k_ft_in1k"} <= set(weights.names_for(variant))
    assert weights.names_for("R26_B32") == ["imagenet21k"] and "imagenet21k" in weights.names_for("R50_L32")


def test_table_entries_are_consistent():
    for (variant, name), entry in weights.WEIGHTS.items():
        if name.startswith("deit"):  # timm's DeiT files on the Hugging Face Hub
            timm_name = f"deit_{dict(Ti16='tiny', S16='small', B16='base')[variant]}_" + \
                ("distilled_" if "distilled" in name else "") + f"patch16_{entry.image_size}.fb_in1k"
            assert entry.url == f"https://huggingface.co/timm/{timm_name}/resolve/main/model.safetensors"
            assert not entry.gelu_approximate and entry.layer_norm_epsilon == 1e-6 and entry.sha256 is None
            assert entry.classes == 1000 and entry.preprocessing == "imagenet"
            continue
        assert entry.url.startswith("https://storage.googleapis.com/vit_models/")
        assert entry.url.endswith(".npz") and entry.sha256 is None  # no checksum known: documented
        assert entry.gelu_approximate and entry.layer_norm_epsilon == 1e-6 and entry.preprocessing == "inception"
        assert entry.classes == (21843 if name in ("imagenet21k", "augreg_in21k") else 1000)
        if name.startswith("augreg"):
            assert AUGREG_NAME.match(entry.path), entry.path
            assert entry.path.split("/")[1].split("-")[0].replace("_", "") == variant.replace("_", "")  # R_Ti_16
            assert entry.path.endswith(f"res_{entry.image_size}.npz") or name == "augreg_in21k"
        if name == "imagenet21k":
            assert entry.representation_size == {"B": 768, "L": 1024, "H": 1280}[variant.split("_")[-1][0]]
    assert len({e.file_name for e in weights.WEIGHTS.values()}) == len(weights.WEIGHTS)


def test_table_values_from_the_upstream_tables():
    b16 = weights.get_entry("B16", "augreg_in21k")
    assert b16.path == "augreg/B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0.npz"
    ft = weights.get_entry("B16", "augreg_in21k_ft_in1k")
    assert ft.path == ("augreg/B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0"
                       "--imagenet2012-steps_20k-lr_0.03-res_384.npz")
    assert (ft.image_size, ft.imagenet_top1) == (384, 85.49)
    paper = {v: weights.get_entry(v, "imagenet21k+imagenet2012").imagenet_top1 for v in ("B16", "B32", "L16", "L32")}
    assert paper == {"B16": 83.97, "B32": 81.28, "L16": 85.15, "L32": 80.99}  # paper Table 5
    assert weights.get_entry("L16", "imagenet21k+imagenet2012_224").path == "imagenet21k+imagenet2012/ViT-L_16-224.npz"


# The resolved table as it was before it became one literal list (copied from its output): every entry, its
# fields and its order (the order of `all_names()` and of the error messages). A change here is a change of
# the published table, to be made on purpose in both places.
PINNED_TABLE = [
    # (variant, name, path, image_size, classes, representation_size, imagenet_top1, top1_source), in table order
    ('B16', 'imagenet21k', 'imagenet21k/ViT-B_16.npz',
     224, 21843, 768, None, 'n/a: raw ImageNet-21k head, fine-tune first'),
    ('B16', 'imagenet21k+imagenet2012', 'imagenet21k+imagenet2012/ViT-B_16.npz',
     384, 1000, None, 83.97, 'paper Table 5'),
    ('B32', 'imagenet21k', 'imagenet21k/ViT-B_32.npz',
     224, 21843, 768, None, 'n/a: raw ImageNet-21k head, fine-tune first'),
    ('B32', 'imagenet21k+imagenet2012', 'imagenet21k+imagenet2012/ViT-B_32.npz',
     384, 1000, None, 81.28, 'paper Table 5'),
    ('L16', 'imagenet21k', 'imagenet21k/ViT-L_16.npz',
     224, 21843, 1024, None, 'n/a: raw ImageNet-21k head, fine-tune first'),
    ('L16', 'imagenet21k+imagenet2012', 'imagenet21k+imagenet2012/ViT-L_16.npz',
     384, 1000, None, 85.15, 'paper Table 5'),
    ('L32', 'imagenet21k', 'imagenet21k/ViT-L_32.npz',
     224, 21843, 1024, None, 'n/a: raw ImageNet-21k head, fine-tune first'),
    ('L32', 'imagenet21k+imagenet2012', 'imagenet21k+imagenet2012/ViT-L_32.npz',
     384, 1000, None, 80.99, 'paper Table 5'),
    ('H14', 'imagenet21k', 'imagenet21k/ViT-H_14.npz',
     224, 21843, 1280, None, 'n/a: raw ImageNet-21k head, fine-tune first'),
    ('R50_B16', 'imagenet21k', 'imagenet21k/R50+ViT-B_16.npz',
     224, 21843, 768, None, 'n/a: raw ImageNet-21k head, fine-tune first'),
    ('R50_B16', 'imagenet21k+imagenet2012', 'imagenet21k+imagenet2012/R50+ViT-B_16.npz',
     384, 1000, None, 85.08, 'google-research/vision_transformer issue 39'),
    ('B16', 'imagenet21k+imagenet2012_224', 'imagenet21k+imagenet2012/ViT-B_16-224.npz',
     224, 1000, None, 81.2, 'vision_transformer README'),
    ('L16', 'imagenet21k+imagenet2012_224', 'imagenet21k+imagenet2012/ViT-L_16-224.npz',
     224, 1000, None, 82.7, 'vision_transformer README'),
    ('Ti16', 'augreg_in21k', 'augreg/Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0.npz',
     224, 21843, None, None, 'see upstream'),
    ('Ti16', 'augreg_in21k_ft_in1k',
     'augreg/Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.03-res_384.npz',
     384, 1000, None, 78.22, 'vision_transformer README (AugReg)'),
    ('S32', 'augreg_in21k', 'augreg/S_32-i21k-300ep-lr_0.001-aug_none-wd_0.1-do_0.0-sd_0.0.npz',
     224, 21843, None, None, 'see upstream'),
    ('S32', 'augreg_in21k_ft_in1k',
     'augreg/S_32-i21k-300ep-lr_0.001-aug_none-wd_0.1-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.01-res_384.npz',
     384, 1000, None, 79.58, 'vision_transformer README (AugReg)'),
    ('S16', 'augreg_in21k', 'augreg/S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0.npz',
     224, 21843, None, None, 'see upstream'),
    ('S16', 'augreg_in21k_ft_in1k',
     'augreg/S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.03-res_384.npz',
     384, 1000, None, 83.73, 'vision_transformer README (AugReg)'),
    ('B32', 'augreg_in21k', 'augreg/B_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0.npz',
     224, 21843, None, None, 'see upstream'),
    ('B32', 'augreg_in21k_ft_in1k',
     'augreg/B_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.01-res_384.npz',
     384, 1000, None, 83.59, 'vision_transformer README (AugReg)'),
    ('B16', 'augreg_in21k', 'augreg/B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0.npz',
     224, 21843, None, None, 'see upstream'),
    ('B16', 'augreg_in21k_ft_in1k',
     'augreg/B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.03-res_384.npz',
     384, 1000, None, 85.49, 'vision_transformer README (AugReg)'),
    ('B8', 'augreg_in21k', 'augreg/B_8-i21k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.0-sd_0.0.npz',
     224, 21843, None, None, 'see upstream'),
    ('B8', 'augreg_in21k_ft_in1k',
     'augreg/B_8-i21k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.03-res_224.npz',
     224, 1000, None, 85.58, 'vision_transformer AugReg colab'),
    ('L16', 'augreg_in21k', 'augreg/L_16-i21k-300ep-lr_0.001-aug_strong1-wd_0.1-do_0.0-sd_0.0.npz',
     224, 21843, None, None, 'see upstream'),
    ('L16', 'augreg_in21k_ft_in1k',
     'augreg/L_16-i21k-300ep-lr_0.001-aug_strong1-wd_0.1-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.01-res_384.npz',
     384, 1000, None, 85.59, 'vision_transformer README (AugReg)'),
    ('Ti16', 'augreg_in21k_ft_in1k_224',
     'augreg/Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.03-res_224.npz',
     224, 1000, None, None, 'see upstream'),
    ('S32', 'augreg_in21k_ft_in1k_224',
     'augreg/S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.03-res_224.npz',
     224, 1000, None, None, 'see upstream'),
    ('S16', 'augreg_in21k_ft_in1k_224',
     'augreg/S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.03-res_224.npz',
     224, 1000, None, None, 'see upstream'),
    ('B32', 'augreg_in21k_ft_in1k_224',
     'augreg/B_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.03-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.03-res_224.npz',
     224, 1000, None, None, 'see upstream'),
    ('B16', 'augreg_in21k_ft_in1k_224',
     'augreg/B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.01-res_224.npz',
     224, 1000, None, None, 'see upstream'),
    ('B8', 'augreg_in21k_ft_in1k_224',
     'augreg/B_8-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.01-res_224.npz',
     224, 1000, None, None, 'see upstream'),
    ('L16', 'augreg_in21k_ft_in1k_224',
     'augreg/L_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1--imagenet2012-steps_20k-lr_0.01-res_224.npz',
     224, 1000, None, None, 'see upstream'),
    # The published hybrids (issue 27).
    ('R26_B32', 'imagenet21k', 'imagenet21k/R26+ViT-B_32.npz',
     224, 21843, 768, None, 'n/a: raw ImageNet-21k head, fine-tune first'),
    ('R50_L32', 'imagenet21k', 'imagenet21k/R50+ViT-L_32.npz',
     224, 21843, 1024, None, 'n/a: raw ImageNet-21k head, fine-tune first'),
    ('R_Ti16', 'augreg_in21k', 'augreg/R_Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0.npz',
     224, 21843, None, None, 'see upstream'),
    ('R_Ti16', 'augreg_in21k_ft_in1k',
     'augreg/R_Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.03-res_384.npz',
     384, 1000, None, 75.4, 'vision_transformer README (AugReg)'),
    ('R_Ti16', 'augreg_in21k_ft_in1k_224',
     'augreg/R_Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.03-res_224.npz',
     224, 1000, None, None, 'see upstream'),
    ('R26_S32', 'augreg_in21k', 'augreg/R26_S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0.npz',
     224, 21843, None, None, 'see upstream'),
    ('R26_S32', 'augreg_in21k_ft_in1k',
     'augreg/R26_S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.01-res_384.npz',
     384, 1000, None, 83.85, 'vision_transformer README (AugReg)'),
    ('R26_S32', 'augreg_in21k_ft_in1k_224',
     'augreg/R26_S_32-i21k-300ep-lr_0.001-aug_light0-wd_0.03-do_0.1-sd_0.1--imagenet2012-steps_20k-lr_0.03-res_224.npz',
     224, 1000, None, None, 'see upstream'),
    ('R50_L32', 'augreg_in21k', 'augreg/R50_L_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1.npz',
     224, 21843, None, None, 'see upstream'),
    ('R50_L32', 'augreg_in21k_ft_in1k',
     'augreg/R50_L_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1--imagenet2012-steps_20k-lr_0.01-res_384.npz',
     384, 1000, None, 85.99, 'vision_transformer README (AugReg)'),
    ('R50_L32', 'augreg_in21k_ft_in1k_224',
     'augreg/R50_L_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1--imagenet2012-steps_20k-lr_0.01-res_224.npz',
     224, 1000, None, None, 'see upstream'),
    # DeiT: timm's files on the Hugging Face Hub; top-1 from the facebookresearch/deit README
    ('Ti16', 'deit_in1k', 'timm/deit_tiny_patch16_224.fb_in1k/resolve/main/model.safetensors',
     224, 1000, None, 72.2, 'DeiT README'),
    ('Ti16', 'deit_distilled_in1k', 'timm/deit_tiny_distilled_patch16_224.fb_in1k/resolve/main/model.safetensors',
     224, 1000, None, 74.5, 'DeiT README'),
    ('S16', 'deit_in1k', 'timm/deit_small_patch16_224.fb_in1k/resolve/main/model.safetensors',
     224, 1000, None, 79.8, 'DeiT README'),
    ('S16', 'deit_distilled_in1k', 'timm/deit_small_distilled_patch16_224.fb_in1k/resolve/main/model.safetensors',
     224, 1000, None, 81.2, 'DeiT README'),
    ('B16', 'deit_in1k', 'timm/deit_base_patch16_224.fb_in1k/resolve/main/model.safetensors',
     224, 1000, None, 81.8, 'DeiT README'),
    ('B16', 'deit_distilled_in1k', 'timm/deit_base_distilled_patch16_224.fb_in1k/resolve/main/model.safetensors',
     224, 1000, None, 83.4, 'DeiT README'),
    ('B16', 'deit_distilled_in1k_384', 'timm/deit_base_distilled_patch16_384.fb_in1k/resolve/main/model.safetensors',
     384, 1000, None, 85.2, 'DeiT README'),
]


def test_the_resolved_table_is_the_pinned_one():
    resolved = [(e.variant, e.name, e.path, e.image_size, e.classes, e.representation_size, e.imagenet_top1,
                 e.top1_source) for e in weights.WEIGHTS.values()]
    assert resolved == PINNED_TABLE
    assert list(weights.WEIGHTS) == [(variant, name) for variant, name, *_ in PINNED_TABLE]
    assert len(weights.PUBLISHED) == len(weights.WEIGHTS)  # no (variant, name) twice in the literal list
    for entry in weights.WEIGHTS.values():
        deit = entry.name.startswith("deit")  # timm's code: exact GELU, ImageNet mean/std input
        assert (entry.sha256, entry.gelu_approximate, entry.layer_norm_epsilon, entry.preprocessing) == (
            None, deit is False, 1e-6, "imagenet" if deit else "inception"), entry


def test_constructor_defaults_are_the_documented_best_checkpoints():
    for key, variant in VARIANTS.items():
        constructor = getattr(keras_vit, variant.constructor_name)
        default = inspect.signature(constructor).parameters["weights"].default
        assert default == weights.DEFAULT_WEIGHTS[key]
        assert (key, default) in weights.WEIGHTS
        assert repr(default) in constructor.__doc__
        assert inspect.signature(constructor).parameters["classes"].default is None


B8_MEDIUM2 = ("augreg/B_8-i21k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.0-sd_0.0"
              "--imagenet2012-steps_20k-lr_0.03-res_224.npz")
B8_MEDIUM1 = ("augreg/B_8-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0"
              "--imagenet2012-steps_20k-lr_0.01-res_224.npz")
# (variant, name) -> (path, image size, classes, top-1) of the entries a review changed or added (issue 39).
REVIEWED = {
    ("R50_B16", "imagenet21k+imagenet2012"): ("imagenet21k+imagenet2012/R50+ViT-B_16.npz", 384, 1000, 85.08),
    ("B8", "augreg_in21k_ft_in1k"): (B8_MEDIUM2, 224, 1000, 85.58),
    ("B8", "augreg_in21k_ft_in1k_224"): (B8_MEDIUM1, 224, 1000, None),
}


def test_r50_fine_tune_top1_is_85_08():
    entry = weights.get_entry("R50_B16", "imagenet21k+imagenet2012")
    assert entry.imagenet_top1 == 85.08
    assert "issue 39" in entry.top1_source


def test_b8_fine_tune_is_the_colab_medium2_file():
    entry = weights.get_entry("B8", "augreg_in21k_ft_in1k")
    assert entry.path == B8_MEDIUM2 and entry.imagenet_top1 == 85.58
    assert weights.get_entry("B8", "imagenet").path == B8_MEDIUM2
    assert "no recommended fine-tune" not in weights.__doc__
    # the recommended pre-training run and its fine-tune are the same run
    assert entry.path.split("--")[0] + ".npz" == weights.get_entry("B8", "augreg_in21k").path


@pytest.mark.parametrize("key", sorted(REVIEWED))
def test_reviewed_entries_resolve_by_name(key):
    path, size, classes, top1 = REVIEWED[key]
    entry = weights.get_entry(*key)
    assert entry.url == weights.BASE_URL + path
    assert (entry.image_size, entry.classes, entry.imagenet_top1) == (size, classes, top1)
    assert key[1] in weights.names_for(key[0])


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda: keras_vit.ViT_Ti16(weights="imagenet21k"),
         r"ViT Ti16. Received: weights='imagenet21k'. Published names for Ti16: 'augreg_in21k'"),
        (lambda: keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64,
                               weights="imagenet21k"), r"not one of the published variants"),
        (lambda: keras_vit.ViT_B16(weights="imagenet1k"), r"Unknown weights name. Received: weights='imagenet1k'. "
                                                           r"Known names: 'imagenet21k', 'imagenet21k\+imagenet2012'"),
        (lambda: keras_vit.ViT_B16(weights=3), r"Received: weights=3"),
    ],
)
def test_bad_names_are_clear_errors(build, match):
    with pytest.raises(ValueError, match=match):
        build()


TINY_ARCH = dict(patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64)


@pytest.fixture
def published_tiny(tmp_path, monkeypatch):
    """A tiny variant `T8` with a published `imagenet21k` file served from a local folder."""
    monkeypatch.setitem(VARIANTS, "T8", Variant("T8", "T", 8, 32, 2, 4, 64))
    params = random_official_params(np.random.default_rng(0), representation_size=32)
    served = tmp_path / "served" / "imagenet21k"
    served.mkdir(parents=True)
    np.savez(served / "ViT-T_8.npz", **params)
    digest = hashlib.sha256((served / "ViT-T_8.npz").read_bytes()).hexdigest()
    entry = weights.WeightsEntry("imagenet21k", "T8", "imagenet21k/ViT-T_8.npz", digest, 32, 5, 32)
    monkeypatch.setitem(weights.WEIGHTS, ("T8", "imagenet21k"), entry)
    monkeypatch.setattr(weights, "BASE_URL", (tmp_path / "served").as_uri() + "/")
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras_home"))
    return entry, params


def test_download_from_a_file_url_into_the_keras_cache(published_tiny, tmp_path, images):
    entry, params = published_tiny
    model = keras_vit.ViT(**TINY_ARCH, weights="imagenet21k", classifier_activation=None)
    cached = tmp_path / "keras_home" / "keras_vit" / entry.file_name
    assert cached.exists()
    expected = vit_forward({k: v.astype("float64") for k, v in params.items()}, images.astype("float64"))
    np.testing.assert_allclose(model.predict(images, verbose=0), expected, rtol=1e-4, atol=1e-4)


def test_a_pre_seeded_cache_is_used_without_download(published_tiny, tmp_path, monkeypatch):
    entry, _ = published_tiny
    cache = tmp_path / "keras_home" / "keras_vit"
    cache.mkdir(parents=True)
    (cache / entry.file_name).write_bytes((tmp_path / "served" / entry.path).read_bytes())
    monkeypatch.setattr(weights, "BASE_URL", "https://unreachable.invalid/")  # any download would fail
    model = keras_vit.ViT(**TINY_ARCH, weights="imagenet21k")
    assert model_parts.pre_logits(model).units == 32 and model_parts.head(model).units == 5


def test_checksum_mismatch_is_an_error(published_tiny, monkeypatch):
    entry, _ = published_tiny
    monkeypatch.setitem(weights.WEIGHTS, ("T8", "imagenet21k"), weights.WeightsEntry(
        "imagenet21k", "T8", entry.path, "0" * 64, 32, 5, 32))
    with pytest.raises(ValueError, match=r"sha256 check \(expected 0000"):
        keras_vit.ViT(**TINY_ARCH, weights="imagenet21k")


def test_unreachable_download_is_a_clear_error(published_tiny, monkeypatch):
    monkeypatch.setattr(weights, "BASE_URL", "file:///nonexistent/vit_models/")
    with pytest.raises(keras_vit.WeightsDownloadError, match="Could not download weights 'imagenet21k' for ViT T8"):
        keras_vit.ViT(**TINY_ARCH, weights="imagenet21k")


def _closed_port() -> int:
    with socket.socket() as sock:  # bound then closed: nothing listens there
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def tiny_published(tmp_path, monkeypatch):
    """A tiny variant `T8` whose published `imagenet21k` file lives on a closed port of 127.0.0.1."""
    monkeypatch.setitem(VARIANTS, "T8", Variant("T8", "T", 8, 32, 2, 4, 64))
    params = random_official_params(np.random.default_rng(0), representation_size=32)
    entry = weights.WeightsEntry("imagenet21k", "T8", "imagenet21k/ViT-T_8.npz", None, 32, 5, 32)
    monkeypatch.setitem(weights.WEIGHTS, ("T8", "imagenet21k"), entry)
    monkeypatch.setattr(weights, "BASE_URL", f"http://127.0.0.1:{_closed_port()}/vit_models/")
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras_home"))
    return entry, params


def test_offline_default_weights_give_one_clear_download_error(no_dns, tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "home"))
    entry = weights.get_entry("B16", "augreg_in21k_ft_in1k")
    with pytest.raises(keras_vit.WeightsDownloadError) as caught:
        keras_vit.ViT_B16()
    error = caught.value
    message = str(error)
    assert isinstance(error, OSError) and not isinstance(error, ValueError)
    assert error.__cause__ is None and error.__suppress_context__  # raised `from None`
    assert "During handling" not in "".join(traceback.format_exception(error))
    assert "\n" not in message
    assert message.startswith("Could not download weights 'augreg_in21k_ft_in1k' for ViT B16 "
                              "(Name or service not known) from https://storage.googleapis.com/vit_models/augreg/")
    assert message.count(entry.url) == 1 and message.count("storage.googleapis.com") == 1
    cached = str(tmp_path / "home" / "keras_vit" / entry.file_name)
    assert error.path == cached == download.cache_path(entry)
    assert f"place it at {cached} " in message
    assert "weights=None (random initialisation" in message and 'weights="/path/to/file.npz"' in message


def test_a_file_placed_at_the_named_cache_path_is_used(tiny_published, tmp_path, images):
    entry, params = tiny_published
    with pytest.raises(keras_vit.WeightsDownloadError, match=r"Connection refused\) from http://127\.0\.0\.1") as caught:
        keras_vit.ViT(**TINY_ARCH, weights="imagenet21k")
    path = caught.value.path
    assert path == str(tmp_path / "keras_home" / "keras_vit" / "imagenet21k__ViT-T_8.npz") and path in str(caught.value)
    np.savez(path, **params)  # the "download by hand" the message asks for; the port is still closed
    model = keras_vit.ViT(**TINY_ARCH, weights="imagenet21k", classifier_activation=None)
    expected = vit_forward({k: v.astype("float64") for k, v in params.items()}, images.astype("float64"))
    np.testing.assert_allclose(model.predict(images, verbose=0), expected, rtol=1e-4, atol=1e-4)


def _sha256(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_checksum_mismatch_stays_a_distinct_error(tmp_path, monkeypatch):
    monkeypatch.setitem(VARIANTS, "T8", Variant("T8", "T", 8, 32, 2, 4, 64))
    served = tmp_path / "served" / "imagenet21k"
    served.mkdir(parents=True)
    np.savez(served / "ViT-T_8.npz", **random_official_params(np.random.default_rng(0)))
    entry = weights.WeightsEntry("imagenet21k", "T8", "imagenet21k/ViT-T_8.npz", "0" * 64, 32, 5, None)
    monkeypatch.setitem(weights.WEIGHTS, ("T8", "imagenet21k"), entry)
    monkeypatch.setattr(weights, "BASE_URL", (tmp_path / "served").as_uri() + "/")  # a local file:// URL
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras_home"))
    with pytest.raises(keras_vit.WeightsChecksumError) as caught:
        keras_vit.ViT(**TINY_ARCH, weights="imagenet21k")
    error = caught.value
    assert isinstance(error, ValueError) and not isinstance(error, keras_vit.WeightsDownloadError)
    assert error.__cause__ is None and error.__suppress_context__
    actual = _sha256(served / "ViT-T_8.npz")
    assert f"sha256 check (expected {'0' * 64}, got {actual})" in str(error)
    assert f"Delete {download.cache_path(entry)} and try again" in str(error)


def test_load_a_published_name_into_an_existing_model(published_tiny, images):
    from keras_vit.checkpoints import loading

    _, params = published_tiny
    model = keras_vit.ViT(**TINY_ARCH, image_size=32, classes=5, representation_size=32, classifier_activation=None)
    report = loading.load_weights(model, "imagenet21k")
    assert len(report.loaded) == len(params)
    expected = vit_forward({k: v.astype("float64") for k, v in params.items()}, images.astype("float64"))
    np.testing.assert_allclose(model.predict(images, verbose=0), expected, rtol=1e-4, atol=1e-4)


def _fake_published(monkeypatch, variant, name, **shape_args):
    """Published-name flow with real shapes but no download: broadcast zero views stand in for the file."""
    from keras_vit.checkpoints import readers
    from keras_vit.checkpoints.canonical import Checkpoint

    shapes = random_official_params(np.random.default_rng(0), **shape_args)
    fake = Checkpoint({k: np.broadcast_to(np.float32(0), v.shape) for k, v in shapes.items()}, "official",
                      f"{name}.npz", True, 1e-6)
    fetched, stand_in = [], os.path.join(tempfile.mkdtemp(), f"{name}.npz")
    np.savez(stand_in, cls=np.zeros(1, "float32"))  # what the download step leaves: a file of the format
    monkeypatch.setattr(download, "fetch", lambda entry, cache_dir=None: fetched.append(entry) or stand_in)
    monkeypatch.setattr(readers, "read_checkpoint", lambda path, num_heads=None, file_format=None: fake)
    return fetched


def test_default_constructor_builds_at_the_checkpoint_resolution(monkeypatch):
    fetched = _fake_published(monkeypatch, "Ti16", "augreg_in21k_ft_in1k", image_size=384, patch_size=16,
                              hidden=192, layers=12, heads=3, mlp=768, classes=1000)
    model = keras_vit.ViT_Ti16()
    assert fetched == [weights.get_entry("Ti16", "augreg_in21k_ft_in1k")]
    assert model.input_shape == (None, 384, 384, 3) and model.output_shape == (None, 1000)
    assert model_parts.pre_logits(model) is None


@pytest.mark.e2e
def test_raw_imagenet21k_b16_has_the_golden_count_and_warns(monkeypatch):
    _fake_published(monkeypatch, "B16", "imagenet21k", image_size=224, patch_size=16, hidden=768, layers=12,
                    heads=12, mlp=3072, classes=21843, representation_size=768)
    with pytest.warns(UserWarning, match="all zeros"):
        model = keras_vit.ViT_B16(weights="imagenet21k")
    assert model.count_params() == 103_186_515  # docs/REFERENCE.md


def test_imagenet_resolves_to_each_variants_best_imagenet1k_file():
    for key in VARIANTS:
        in1k = [weights.WEIGHTS[(key, n)] for n in weights.names_for(key) if weights.WEIGHTS[(key, n)].classes == 1000]
        if not in1k:
            assert key not in weights.IMAGENET_WEIGHTS
            continue
        entry = weights.get_entry(key, "imagenet")
        assert entry is weights.WEIGHTS[(key, weights.IMAGENET_WEIGHTS[key])] and entry.classes == 1000
        best = max(e.imagenet_top1 or -1 for e in in1k)
        assert (entry.imagenet_top1 or -1) == best, key
    assert weights.get_entry("B16", "imagenet").name == "augreg_in21k_ft_in1k"
    assert weights.get_entry("L32", "imagenet").name == "imagenet21k+imagenet2012"
    assert weights.get_entry("R50_B16", "imagenet").name == "imagenet21k+imagenet2012"


def test_imagenet_through_the_constructor_without_download(monkeypatch, tmp_path):
    fetched = []

    def fake_fetch(entry, cache_dir=None):
        fetched.append(entry)
        raise keras_vit.WeightsDownloadError("stop here")

    monkeypatch.setattr(download, "fetch", fake_fetch)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "imagenet").write_text("not a weights file")  # a file of that name does not shadow the alias
    with pytest.raises(keras_vit.WeightsDownloadError, match="stop here"):
        keras_vit.ViT_B16(weights="imagenet")
    with pytest.raises(keras_vit.WeightsDownloadError, match="stop here"):
        loading.load_weights(keras_vit.ViT_Ti16(weights=None), "imagenet")
    assert fetched == [weights.get_entry("B16", "augreg_in21k_ft_in1k"), weights.get_entry("Ti16", "augreg_in21k_ft_in1k")]


def test_imagenet_for_a_variant_without_imagenet1k_weights_says_what_it_has(monkeypatch):
    monkeypatch.setattr(download, "fetch", lambda entry, cache_dir=None: pytest.fail("no download expected"))
    with pytest.raises(ValueError, match=r"ViT H14 has no ImageNet-1k fine-tuned weights.*Published for H14: "
                                         r"'imagenet21k' \(21843 classes, 224x224\).*Received: weights='imagenet'"):
        keras_vit.ViT_H14(weights="imagenet")
    with pytest.raises(ValueError, match=r"not one of the published variants"):
        keras_vit.ViT(image_size=32, **TINY_ARCH, weights="imagenet")


def test_markdown_table_has_one_row_per_entry_with_its_fields():
    rows = {}
    for line in weights_table.markdown_table().splitlines()[2:]:
        variant, name, path, size, classes, pre_logits, top1, notes = [c.strip() for c in line.strip("|").split(" | ")]
        key = (variant, re.fullmatch(r"`([^`]+)`( \(default\))?", name).group(1))
        assert key not in rows
        rows[key] = (path.strip("`"), int(size), int(classes), pre_logits, top1, notes, name.endswith("(default)"))
    assert list(rows) == sorted(weights.WEIGHTS, key=lambda k: list(VARIANTS).index(k[0]))  # by variant, stable
    for key, entry in weights.WEIGHTS.items():
        path, size, classes, pre_logits, top1, notes, default = rows[key]
        assert (path, size, classes) == (entry.path if entry.host is None else entry.url, entry.image_size,
                                         entry.classes)
        assert pre_logits == ("-" if entry.representation_size is None else str(entry.representation_size))
        assert top1 == (entry.top1_source if entry.imagenet_top1 is None
                        else f"{entry.imagenet_top1:g}, {entry.top1_source}")
        assert notes == (entry.notes or "-") and default == (weights.DEFAULT_WEIGHTS[key[0]] == key[1])


def test_the_readme_table_is_rewritten_and_checked_between_its_markers(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{weights_table.TABLE_BEGIN}\n| stale |\n{weights_table.TABLE_END}\nafter\n")
    assert weights_table.main(["--check", str(readme)]) == 1
    assert "out of date" in capsys.readouterr().out
    assert weights_table.main(["--write", str(readme)]) == 0
    assert readme.read_text() == (f"intro\n{weights_table.TABLE_BEGIN}\n{weights_table.markdown_table()}{weights_table.TABLE_END}"
                                  "\nafter\n")
    assert weights_table.main(["--check", str(readme)]) == 0
    readme.write_text("no markers\n")
    with pytest.raises(ValueError, match="has no generated weights table"):
        weights_table.main(["--check", str(readme)])


def test_docs_weights_table_is_the_one_generated_from_the_code():
    """docs/WEIGHTS.md's table is `keras_vit.weights_table.markdown_table()` (whose rows are checked above),
    and the README links to it."""
    with open(os.path.join(ROOT, weights_table.TABLE_FILE), encoding="utf-8") as f:
        text = f.read()
    start, end = weights_table.table_region(text)
    assert text[start:end] == weights_table.markdown_table(), "run `python tools/weights_table.py --write`"
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    assert "(docs/WEIGHTS.md)" in readme and weights_table.TABLE_BEGIN not in readme
    for key, (path, size, classes, top1) in REVIEWED.items():
        assert f"| {key[0]} | `{key[1]}`" in text and f"| `{path}` | {size} | {classes} |" in text
