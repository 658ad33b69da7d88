"""The published-weights table, name resolution, and the download path (served from local files: a pre-seeded
Keras cache and file:// URLs; never the network)."""

import hashlib
import inspect
import re

import numpy as np
import pytest
from numpy_reference import random_official_params, vit_forward

import keras_vit
from keras_vit import weights
from keras_vit.variants import VARIANTS, Variant

AUGREG_NAME = re.compile(
    r"^augreg/(R50_)?(Ti|S|B|L)_(8|16|32)-i21k-300ep-lr_0\.001-aug_(none|light[01]|medium[12]|strong[12])"
    r"-wd_0\.(1|03)-do_0\.[01]-sd_0\.[01](--imagenet2012-steps_20k-lr_0\.0[13]-res_(224|384))?\.npz$"
)


def test_every_variant_has_its_published_names():
    # docs/REFERENCE.md: imagenet21k for B/16, B/32, L/16, L/32, H/14, R50+B/16; fine-tuned for all but H/14.
    for variant in ("B16", "B32", "L16", "L32", "H14", "R50_B16"):
        assert "imagenet21k" in weights.names_for(variant)
    for variant in ("B16", "B32", "L16", "L32", "R50_B16"):
        assert "imagenet21k+imagenet2012" in weights.names_for(variant)
    for variant in ("Ti16", "S16", "S32", "B8", "B16", "B32", "L16"):
        assert {"augreg_in21k", "augreg_in21k_ft_in1k"} <= set(weights.names_for(variant))


def test_table_entries_are_consistent():
    for (variant, name), entry in weights.WEIGHTS.items():
        assert entry.url.startswith("https://storage.googleapis.com/vit_models/")
        assert entry.url.endswith(".npz") and entry.sha256 is None  # no checksum known: documented
        assert entry.gelu_approximate and entry.layer_norm_epsilon == 1e-6 and entry.preprocessing == "inception"
        assert entry.classes == (21843 if name in ("imagenet21k", "augreg_in21k") else 1000)
        if name.startswith("augreg"):
            assert AUGREG_NAME.match(entry.path), entry.path
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


def test_constructor_defaults_are_the_documented_best_checkpoints():
    for key, variant in VARIANTS.items():
        constructor = getattr(keras_vit, variant.constructor_name)
        default = inspect.signature(constructor).parameters["weights"].default
        assert default == weights.DEFAULT_WEIGHTS[key]
        assert (key, default) in weights.WEIGHTS
        assert repr(default) in constructor.__doc__
        assert inspect.signature(constructor).parameters["classes"].default is None


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
    assert model.get_layer("pre_logits").units == 32 and model.get_layer("head").units == 5


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


def test_load_a_published_name_into_an_existing_model(published_tiny, images):
    from keras_vit import loading

    _, params = published_tiny
    model = keras_vit.ViT(**TINY_ARCH, image_size=32, classes=5, representation_size=32, classifier_activation=None)
    report = loading.load_weights(model, "imagenet21k")
    assert len(report.loaded) == len(params)
    expected = vit_forward({k: v.astype("float64") for k, v in params.items()}, images.astype("float64"))
    np.testing.assert_allclose(model.predict(images, verbose=0), expected, rtol=1e-4, atol=1e-4)


def _fake_published(monkeypatch, variant, name, **shape_args):
    """Published-name flow with real shapes but no download: broadcast zero views stand in for the file."""
    from keras_vit import loading
    from keras_vit.checkpoints.canonical import Checkpoint

    shapes = random_official_params(np.random.default_rng(0), **shape_args)
    fake = Checkpoint({k: np.broadcast_to(np.float32(0), v.shape) for k, v in shapes.items()}, "official",
                      f"{name}.npz", True, 1e-6)
    fetched = []
    monkeypatch.setattr(weights, "fetch", lambda entry, cache_dir=None: fetched.append(entry) or "fake.npz")
    monkeypatch.setattr(loading, "read_checkpoint", lambda path, num_heads=None: fake)
    return fetched


def test_default_constructor_builds_at_the_checkpoint_resolution(monkeypatch):
    fetched = _fake_published(monkeypatch, "Ti16", "augreg_in21k_ft_in1k", image_size=384, patch_size=16,
                              hidden=192, layers=12, heads=3, mlp=768, classes=1000)
    model = keras_vit.ViT_Ti16()
    assert fetched == [weights.get_entry("Ti16", "augreg_in21k_ft_in1k")]
    assert model.input_shape == (None, 384, 384, 3) and model.output_shape == (None, 1000)
    assert "pre_logits" not in [layer.name for layer in model.layers]


@pytest.mark.slow
def test_raw_imagenet21k_b16_has_the_golden_count_and_warns(monkeypatch):
    _fake_published(monkeypatch, "B16", "imagenet21k", image_size=224, patch_size=16, hidden=768, layers=12,
                    heads=12, mlp=3072, classes=21843, representation_size=768)
    with pytest.warns(UserWarning, match="all zeros"):
        model = keras_vit.ViT_B16(weights="imagenet21k")
    assert model.count_params() == 103_186_515  # docs/REFERENCE.md
