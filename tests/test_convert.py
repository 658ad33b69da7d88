"""`python -m keras_vit.convert`: a test checkpoint round-trips to `.weights.h5` and back with equal logits."""

import hashlib
import os
import subprocess
import sys

import numpy as np
import pytest
from numpy_reference import random_official_params, vit_forward

import keras_vit
from keras_vit import convert, model_parts


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
