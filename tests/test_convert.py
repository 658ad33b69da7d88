"""`python -m keras_vit.convert`: a test checkpoint round-trips to `.weights.h5` and back with equal logits."""

import hashlib
import os
import subprocess
import sys

import numpy as np
import pytest
from numpy_reference import random_official_params, vit_forward
from test_loading import KERNEL, _damaged, _write_npz

import keras_vit
from keras_vit import convert, model_parts, weights
from keras_vit.checkpoints import download
from keras_vit.variants import VARIANTS, Variant


@pytest.fixture
def checkpoint(tmp_path):
    params = random_official_params(np.random.default_rng(0), representation_size=16)
    path = tmp_path / "tiny.npz"
    np.savez(path, **params)
    return str(path), params


def test_round_trip_through_weights_h5(checkpoint, tmp_path, images, capsys):
    source, params = checkpoint
    destination = str(tmp_path / "tiny.weights.h5")
    assert convert.main([f"--weights={source}", f"--out={destination}"]) == 0
    out = capsys.readouterr().out
    assert f"loading {source} ..." in out and f"writing {destination} ..." in out  # progress lines
    digest = hashlib.sha256(open(destination, "rb").read()).hexdigest()
    assert f"written sha256: {digest}" in out
    assert f"source sha256:  {hashlib.sha256(open(source, 'rb').read()).hexdigest()}" in out
    assert "classes:        5 (token classifier, pre_logits 16)" in out
    assert "rebuild:        keras_vit.ViT(patch_size=8, hidden_size=32, num_layers=2" in out and "input_shape=(32, 32, 3)" in out
    model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64,
                          classes=5, representation_size=16, weights=destination, classifier_activation=None)
    expected = vit_forward({k: v.astype("float64") for k, v in params.items()}, images.astype("float64"))
    np.testing.assert_allclose(model.predict(images, verbose=0), expected, rtol=1e-4, atol=1e-4)


def test_convert_at_a_new_size_with_new_classes(checkpoint, tmp_path):
    source, _ = checkpoint
    model, digest = convert.convert(source, str(tmp_path / "big.weights.h5"), image_size=48, classes=3)
    assert model.input_shape == (None, 48, 48, 3) and model.output_shape == (None, 3)
    assert len(digest) == 64


def test_errors(checkpoint, tmp_path, capsys):
    source, _ = checkpoint
    assert convert.main(["--weights", source, "--out", str(tmp_path / "x.h5")]) == 2  # a usage error
    assert "must end in `.weights.h5`" in capsys.readouterr().err
    assert convert.main(["--weights", source, "--out", str(tmp_path / "x.weights.h5"), "--model", "vit_b16"]) == 1
    assert "looks like an unpublished ViT (patch 8" in capsys.readouterr().err
    assert convert.main(["--weights", "imagenet-foo", "--out", str(tmp_path / "x.weights.h5"), "--model",
                         "vit_b16"]) == 2
    assert "flag --weights=imagenet-foo: --weights is neither none" in capsys.readouterr().err
    assert convert.main(["--weights", "imagenet21k", "--out", str(tmp_path / "x.weights.h5")]) == 2
    assert "--model is required with a published name" in capsys.readouterr().err


def test_the_cli_builds_at_image_size(checkpoint, tmp_path, capsys):
    source, _ = checkpoint
    assert convert.main([f"--weights={source}", f"--out={tmp_path / 'big.weights.h5'}", "--image_size=48"]) == 0
    assert "input:          48x48x3" in capsys.readouterr().out


@pytest.mark.e2e
def test_module_entry_point(checkpoint, tmp_path):
    source, _ = checkpoint
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}  # importing TF set it here
    result = subprocess.run([sys.executable, "-m", "keras_vit.convert", f"--weights={source}",
                             f"--out={tmp_path / 'm.weights.h5'}"], capture_output=True, text=True, timeout=300,
                            env=env)
    assert result.returncode == 0, result.stderr
    assert "sha256:" in result.stdout and (tmp_path / "m.weights.h5").exists()
    assert result.stderr == "", result.stderr  # a quiet start: no TensorFlow start-up lines


@pytest.mark.e2e  # moved from the default tier (its time budget)
def test_hybrid_rebuild_call_loads_the_written_file(tmp_path, images, capsys):
    """An official-layout R50-style hybrid .npz (tiny: 3 stages, width 32): the printed call names the hybrid
    stem and the stem-stride patch size, and the model it builds loads the written `.weights.h5` exactly."""
    from numpy_reference import random_resnet_params

    rng = np.random.default_rng(3)
    params = random_resnet_params(rng, (1, 1, 1), 32)
    params.update(random_official_params(rng, image_size=2, patch_size=1, channels=512, hidden=32, layers=2,
                                         heads=4, mlp=64, classes=5))
    source, destination = str(tmp_path / "R50+ViT-tiny.npz"), str(tmp_path / "hybrid.weights.h5")
    np.savez(source, **params)
    assert convert.main(["--weights", source, "--out", destination]) == 0
    line = next(l for l in capsys.readouterr().out.splitlines() if l.startswith("rebuild:"))
    call = line.split(":", 1)[1].strip()
    assert call.startswith("keras_vit.ViT(patch_size=16, hidden_size=32, num_layers=2"), call
    assert "input_shape=(32, 32, 3)" in call and "hybrid={'block_units': (1, 1, 1), 'width': 32}" in call, call
    rebuilt = eval(call, {"keras_vit": keras_vit})
    assert model_parts.resnet_stem(rebuilt).block_units == (1, 1, 1)
    direct = keras_vit.ViT(weights=source)  # same default softmax as the printed call
    np.testing.assert_allclose(rebuilt.predict(images, verbose=0), direct.predict(images, verbose=0),
                               rtol=1e-5, atol=1e-5)


def _sha256(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_convert_prints_the_source_and_the_written_sha256(checkpoint_npz, tmp_path, capsys):
    destination = str(tmp_path / "tiny.weights.h5")
    assert convert.main(["--weights", checkpoint_npz, "--out", destination]) == 0
    out = capsys.readouterr().out.splitlines()
    assert f"source sha256:  {_sha256(checkpoint_npz)}" in out
    assert f"written sha256: {_sha256(destination)}" in out
    assert _sha256(checkpoint_npz) != _sha256(destination)


TINY_ARCH = dict(patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64)


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


def test_convert_cli_reports_a_download_error_without_a_traceback(no_dns, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "home"))
    destination = str(tmp_path / "x.weights.h5")
    assert convert.main(["--weights", "imagenet21k", "--out", destination, "--model", "vit_b16"]) == 1
    assert "error: Could not download weights 'imagenet21k' for ViT B16" in capsys.readouterr().err


def test_convert_refuses_a_damaged_checkpoint(tmp_path, capsys):
    source = _write_npz(tmp_path, _damaged("nan"), "damaged.npz")
    destination = tmp_path / "out.weights.h5"
    assert convert.main(["--weights", source, "--out", str(destination)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "damaged.npz" in err and KERNEL in err
    assert not destination.exists()


@pytest.fixture
def source(tmp_path):
    return _write_npz(tmp_path, random_official_params(np.random.default_rng(6)), "tiny.npz")


def _one_error_line(capsys, *needles):
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    for needle in needles:
        assert needle in err, err


def test_convert_into_a_missing_folder(tmp_path, source, capsys):
    destination = str(tmp_path / "missing" / "out.weights.h5")
    assert convert.main(["--weights", source, "--out", destination]) == 1
    _one_error_line(capsys, destination, "does not exist")


def test_convert_into_a_read_only_folder(tmp_path, source, capsys, monkeypatch):
    folder = tmp_path / "read_only"
    folder.mkdir()
    folder.chmod(0o555)
    if os.geteuid() == 0:  # root writes through permission bits: stand in for a read-only mount
        real_access = os.access
        monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) == str(folder) else real_access(p, mode))
    destination = str(folder / "out.weights.h5")
    try:
        assert convert.main(["--weights", source, "--out", destination]) == 1
    finally:
        folder.chmod(0o755)
    _one_error_line(capsys, destination, "not writable")


def test_convert_when_the_write_itself_fails(tmp_path, source, capsys):
    destination = tmp_path / "taken.weights.h5"
    destination.mkdir()  # a folder where the file should go: the folder checks pass, the write fails
    assert convert.main(["--weights", source, "--out", str(destination)]) == 1
    _one_error_line(capsys, str(destination), "Cannot write the destination")
