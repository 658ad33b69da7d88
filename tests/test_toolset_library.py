"""User-facing behaviour from a new-user review: failed downloads, `.keras` files in a fresh process, what the
loader reports by default, `weights="imagenet"`, the converter's checksums, warnings on load and root-only
hybrid stems. Never touches the network: downloads go to a closed local port or a failing name lookup."""

import contextlib
import hashlib
import logging
import socket
import subprocess
import sys
import textwrap
import traceback
import warnings

import keras
import numpy as np
import pytest
from numpy_reference import random_official_params, vit_forward

import keras_vit
from keras_vit import convert, model_parts, weights
from keras_vit.checkpoints import download, loading
from keras_vit.applications import model_from_name
from keras_vit.variants import VARIANTS, Variant

TINY_ARCH = dict(patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64)


def _sha256(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def _closed_port() -> int:
    with socket.socket() as sock:  # bound then closed: nothing listens there
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def no_dns(monkeypatch):
    """Every host name lookup fails as it does offline (so nothing can reach the network)."""
    def fail(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", fail)


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


# ---------------------------------------------------------------- 1. a failed download


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


def test_convert_cli_reports_a_download_error_without_a_traceback(no_dns, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "home"))
    destination = str(tmp_path / "x.weights.h5")
    assert convert.main(["--weights", "imagenet21k", "--out", destination, "--model", "vit_b16"]) == 1
    assert "error: Could not download weights 'imagenet21k' for ViT B16" in capsys.readouterr().err


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


# ---------------------------------------------------------------- 2. `.keras` files


def test_every_public_layer_is_registered_with_keras():
    from keras_vit import layers
    from keras_vit.layers.transformer_block import gelu_tanh

    for name in layers.__all__:
        cls = getattr(layers, name)
        assert keras.saving.get_registered_name(cls) == f"keras_vit>{name}"
        assert keras.saving.get_registered_object(f"keras_vit>{name}") is cls
    assert keras.saving.get_registered_object("keras_vit>gelu_tanh") is gelu_tanh


@pytest.mark.e2e
def test_a_keras_file_loads_in_a_fresh_process_that_imports_keras_vit(tmp_path, images):
    """Every keras_vit layer (hybrid stem, drop path, preprocessing) goes through `model.save`; a new process
    fails without `import keras_vit` (as README says) and loads the file with it, with equal outputs."""
    model = keras_vit.ViT(image_size=32, patch_size=16, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64,
                          classes=5, drop_path_rate=0.1, include_preprocessing=True,
                          hybrid=dict(block_units=(1, 1, 1), width=8, groups=4))
    rng = np.random.default_rng(1)
    model.set_weights([rng.standard_normal(w.shape).astype("float32") * 0.2 for w in model.get_weights()])
    path = tmp_path / "vit.keras"
    model.save(path)
    pixels = (images + 1) * 127.5
    np.save(tmp_path / "images.npy", pixels)
    script = textwrap.dedent(f"""
        import numpy as np, keras
        try:
            keras.saving.load_model({str(path)!r})
        except TypeError as error:
            assert "Could not locate class" in str(error), error
        else:
            raise SystemExit("loaded without keras_vit")
        import keras_vit
        model = keras.saving.load_model({str(path)!r})
        np.save({str(tmp_path / "out.npy")!r}, model.predict(np.load({str(tmp_path / "images.npy")!r}), verbose=0))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), model.predict(pixels, verbose=0), rtol=1e-5, atol=1e-5)


@keras.saving.register_keras_serializable(package="toolset_test")
class Mystery(keras.layers.Layer):
    def call(self, x):
        return x


def test_model_from_name_names_a_class_keras_cannot_find(tmp_path):
    inputs = keras.Input((4,))
    keras.Model(inputs, Mystery()(inputs)).save(tmp_path / "custom.keras")
    saved = keras.saving.get_custom_objects().pop("toolset_test>Mystery")  # as in a process that never imported it
    try:
        with pytest.raises(ValueError, match="it uses 'Mystery'") as caught:
            model_from_name(str(tmp_path / "custom.keras"))
    finally:
        keras.saving.get_custom_objects()["toolset_test>Mystery"] = saved
    message = str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    assert f"Cannot load the model file {str(tmp_path / 'custom.keras')!r}: it uses 'Mystery'" in message
    assert "@keras.saving.register_keras_serializable()" in message and "Full object config" not in message


# ---------------------------------------------------------------- 3. loader decisions are visible by default


@pytest.fixture
def checkpoint_npz(tmp_path):
    path = tmp_path / "tiny.npz"
    np.savez(path, **random_official_params(np.random.default_rng(0)))  # 32x32 images, 4x4 grid, 5 classes
    return str(path)


@contextlib.contextmanager
def unconfigured_logging():
    """Logging as in a plain script (no handler anywhere): Python's last-resort handler prints to stderr.
    (A context, not a fixture: pytest attaches its capture handlers to the root logger for the test call.)"""
    root = logging.getLogger()
    saved = root.handlers[:]
    for handler in saved:
        root.removeHandler(handler)
    try:
        yield
    finally:
        logging.getLogger("keras_vit").setLevel(logging.NOTSET)
        for handler in saved:
            root.addHandler(handler)


def test_resampling_and_a_new_head_are_printed_by_default(checkpoint_npz, capsys):
    with unconfigured_logging():
        keras_vit.ViT(weights=checkpoint_npz, input_shape=(48, 48, 3), classes=3)
    lines = capsys.readouterr().err.splitlines()
    grid = [line for line in lines if "position embedding" in line]
    assert grid == ["Resampled the position embedding from a 4x4 to a 6x6 patch grid (bilinear, class token kept)."]
    assert sum("the head is new and zero-initialised" in line for line in lines) == 1


def test_the_loader_lines_can_be_silenced(checkpoint_npz, capsys):
    with unconfigured_logging():
        logging.getLogger("keras_vit").setLevel(logging.ERROR)
        keras_vit.ViT(weights=checkpoint_npz, input_shape=(48, 48, 3), classes=3)
    err = capsys.readouterr().err
    assert "position embedding" not in err and "head" not in err


# ---------------------------------------------------------------- 4. weights="imagenet"


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


# ---------------------------------------------------------------- 5. the converter's checksums


def test_convert_prints_the_source_and_the_written_sha256(checkpoint_npz, tmp_path, capsys):
    destination = str(tmp_path / "tiny.weights.h5")
    assert convert.main(["--weights", checkpoint_npz, "--out", destination]) == 0
    out = capsys.readouterr().out.splitlines()
    assert f"source sha256:  {_sha256(checkpoint_npz)}" in out
    assert f"written sha256: {_sha256(destination)}" in out
    assert _sha256(checkpoint_npz) != _sha256(destination)


def test_the_source_of_a_published_name_is_its_downloaded_file(tmp_path, monkeypatch):
    monkeypatch.setitem(VARIANTS, "T8", Variant("T8", "T", 8, 32, 2, 4, 64))
    served = tmp_path / "served" / "imagenet21k"
    served.mkdir(parents=True)
    np.savez(served / "ViT-T_8.npz", **random_official_params(np.random.default_rng(0)))
    entry = weights.WeightsEntry("imagenet21k", "T8", "imagenet21k/ViT-T_8.npz", None, 32, 5, None)
    monkeypatch.setitem(weights.WEIGHTS, ("T8", "imagenet21k"), entry)
    monkeypatch.setattr(weights, "BASE_URL", (tmp_path / "served").as_uri() + "/")
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras_home"))
    path = convert.source_file("imagenet21k", "T8")
    assert path == download.cache_path(entry) and _sha256(path) == _sha256(served / "ViT-T_8.npz")
    model = keras_vit.ViT(**TINY_ARCH, weights="imagenet21k")
    text = convert.summary(model, "imagenet21k", "x.weights.h5", "f" * 64, path)
    assert f"source sha256:  {_sha256(path)} ({path})" in text.splitlines()


# ---------------------------------------------------------------- 6. no DeprecationWarning on load


def test_loading_keras_weights_emits_no_deprecation_warning(tmp_path, checkpoint_npz):
    model = keras_vit.ViT(image_size=32, **TINY_ARCH, classes=5)
    model.save_weights(tmp_path / "tiny.weights.h5")
    model.save(tmp_path / "tiny.keras")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for path in ("tiny.weights.h5", "tiny.keras"):
            keras_vit.ViT(image_size=32, **TINY_ARCH, classes=5, weights=str(tmp_path / path))
            loading.load_weights(model, str(tmp_path / path))
        keras_vit.ViT(weights=checkpoint_npz)
    deprecations = [f"{w.filename}:{w.lineno}: {w.message}" for w in caught if issubclass(w.category, DeprecationWarning)]
    assert deprecations == []


# ---------------------------------------------------------------- 8. root-only hybrid stems


def test_a_root_only_hybrid_checkpoint_loads_exactly(tmp_path, images):
    """`resnet.num_layers = ()` in the official configs: conv_root, gn_root, relu, max pool (stride 4)."""
    from numpy_reference import numpy_stem, random_resnet_params

    rng = np.random.default_rng(4)
    params = random_resnet_params(rng, (), 8)
    params.update(random_official_params(rng, image_size=8, patch_size=1, channels=8, hidden=32, layers=2, heads=4,
                                         mlp=64, classes=5))
    path = tmp_path / "R+ViT-root-only.npz"
    np.savez(path, **params)
    model = keras_vit.ViT(hybrid=dict(block_units=(), width=8, groups=4), weights=str(path),
                          classifier_activation=None)
    assert model_parts.resnet_stem(model).block_units == () and model.input_shape == (None, 32, 32, 3)
    assert model_parts.patches(model).patch_size == 1
    params64 = {k: v.astype("float64") for k, v in params.items()}
    expected = vit_forward(params64, numpy_stem(params64, images.astype("float64"), (), 4))
    np.testing.assert_allclose(model.predict(images, verbose=0), expected, rtol=1e-4, atol=1e-4)


def test_a_hybrid_checkpoint_with_larger_patches_loads(tmp_path):
    """2x2 patches on the root's stride-4 map, as R+ViT-Ti/16's 8x8 (issue 27; numerics: tests/test_hybrids.py)."""
    from numpy_reference import random_resnet_params

    rng = np.random.default_rng(4)
    params = random_resnet_params(rng, (), 8)
    params.update(random_official_params(rng, image_size=8, patch_size=2, channels=8))
    np.savez(tmp_path / "R+ViT-Ti_16-like.npz", **params)
    model = keras_vit.ViT(hybrid=dict(block_units=(), width=8, groups=4), weights=str(tmp_path / "R+ViT-Ti_16-like.npz"))
    assert model.input_shape == (None, 32, 32, 3) and model_parts.patches(model).patch_size == 2
