"""A keras_vit model of one's own is the start of the next one: its `.keras`, `.weights.h5` or training run, into
any constructor call with other classes, another image size or no head; weights compared tensor by tensor with
the source's (the resampled position embedding against scipy's zoom, the official bilinear method)."""

import json
import logging

import numpy as np
import pytest
import scipy.ndimage
from foreign_checkpoints import random_timm_tensors, rel_err, timm_forward

import keras_vit
from keras_vit import convert, model_parts
from keras_vit.checkpoints import keras_names, loading

ARCH = dict(patch_size=8, hidden_size=48, num_layers=2, num_heads=3, mlp_dim=96)
POS = keras_names.POSITION_EMBEDDING
HEAD = ("head/kernel", "head/bias")


def arrays(model) -> dict:
    return {key: variable.numpy() for key, variable in keras_names.targets(model).items()}


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A trained-looking tiny ViT (random non-zero head), saved the three ways a user has it."""
    folder = tmp_path_factory.mktemp("own")
    model = keras_vit.ViT(image_size=32, classes=10, **ARCH, gelu_approximate=False, layer_norm_epsilon=1e-5)
    rng = np.random.default_rng(0)
    for variable in model.weights:
        variable.assign(rng.normal(0, 0.1, variable.shape).astype("float32"))
    model.save(str(folder / "own.keras"))
    model.save_weights(str(folder / "own.weights.h5"))
    run = folder / "run"  # what a finished run of the training app leaves
    run.mkdir()
    model.save(str(run / "model.keras"))
    (run / "config.json").write_text(json.dumps({"model": "tiny"}))
    (run / "checkpoints").mkdir()
    return model, {"keras": str(folder / "own.keras"), "weights.h5": str(folder / "own.weights.h5"), "run": str(run)}


def bilinear(pos, old, new):
    """The official corner-aligned bilinear resampling of the grid part (scipy.ndimage.zoom(order=1))."""
    grid = pos[0, 1:].reshape(old, old, -1)
    return scipy.ndimage.zoom(grid, (new / old, new / old, 1), order=1).reshape(1, new * new, -1)


_LATIN_SQUARE = {("keras", "classes"), ("weights.h5", "image_size"), ("run", "no_head")}
"""The pairs the default tier runs (each kind and each change once); all nine run in e2e (the default tier's time
budget)."""


@pytest.mark.parametrize("kind, change", [
    (kind, change) if (kind, change) in _LATIN_SQUARE else pytest.param(kind, change, marks=pytest.mark.e2e)
    for change in ("classes", "image_size", "no_head") for kind in ("keras", "weights.h5", "run")])
def test_every_source_onto_every_change(source, kind, change, caplog):
    model, files = source
    kwargs = {"classes": dict(classes=5), "image_size": dict(image_size=48),
              "no_head": dict(include_top=False, pooling="avg")}[change]
    with caplog.at_level(logging.INFO, logger="keras_vit"):
        new = keras_vit.ViT(**ARCH, **kwargs, weights=files[kind])
    before, after = arrays(model), arrays(new)
    expected_new = {"classes": set(HEAD), "image_size": {POS}, "no_head": set()}[change]
    assert {k for k in after if k not in before or not np.array_equal(after[k], before[k])} == expected_new
    # The numerics come from the file (not the constructor's defaults).
    assert new.arguments["gelu_approximate"] is False and new.arguments["layer_norm_epsilon"] == 1e-5
    if change == "classes":
        assert new.output_shape == (None, 5) and not np.any(after["head/kernel"]) and not np.any(after["head/bias"])
        assert "the head is new and zero-initialised" in caplog.text
    elif change == "image_size":
        assert new.input_shape == (None, 48, 48, 3) and new.output_shape == (None, 10)
        np.testing.assert_array_equal(after[POS][:, :1], before[POS][:, :1])  # the class token's row
        np.testing.assert_allclose(after[POS][:, 1:], bilinear(before[POS], 4, 6), rtol=1e-5, atol=1e-6)
        assert "Resampled the position embedding from a 4x4 to a 6x6" in caplog.text
    else:
        assert new.output_shape == (None, 48) and model_parts.head(new) is None


def test_the_whole_model_comes_back_with_its_outputs(source, images):
    model, files = source
    for path in files.values():
        again = keras_vit.ViT(weights=path)  # nothing given: everything from the file
        np.testing.assert_allclose(again.predict(images, verbose=0), model.predict(images, verbose=0),
                                   rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("argument, value, found", [
    ("num_layers", 3, "num_layers=3 (checkpoint: 2)"),
    ("hidden_size", 24, "hidden_size=24 (checkpoint: 48)"),
    ("patch_size", 4, "patch_size=4 (checkpoint: 8)"),
    ("classifier", "gap", "classifier='gap' (checkpoint: 'token')"),
    ("gelu_approximate", True, "gelu_approximate=True (file: False)"),
    ("layer_norm_epsilon", 1e-6, "layer_norm_epsilon=1e-06 (file: 1e-05)"),
])
def test_what_cannot_transfer_is_refused_naming_both_sides(source, argument, value, found):
    _, files = source
    with pytest.raises(ValueError, match=r"^[^\n]+$") as error:  # one message, one line
        keras_vit.ViT(**{**ARCH, argument: value}, image_size=48 if argument == "patch_size" else 32,
                      weights=files["keras"])
    assert found in str(error.value) and files["keras"] in str(error.value)


def test_a_named_constructor_refuses_another_architecture(source):
    _, files = source
    with pytest.raises(ValueError, match=r"hidden_size=192 \(checkpoint: 48\)"):
        keras_vit.ViT_Ti16(weights=files["weights.h5"])


def test_load_weights_into_an_existing_model_transfers_too(source):
    model, files = source
    target = keras_vit.ViT(image_size=48, classes=3, **ARCH, gelu_approximate=False, layer_norm_epsilon=1e-5)
    report = loading.load_weights(target, files["run"])
    assert set(report.reinitialised) == set(HEAD) and report.resampled == ((4, 4), (6, 6), "bilinear")
    np.testing.assert_array_equal(arrays(target)["cls"], arrays(model)["cls"])
    other_numerics = keras_vit.ViT(image_size=32, classes=10, **ARCH)  # tanh GELU, epsilon 1e-6
    with pytest.raises(ValueError, match="gelu_approximate=True \\(file: False\\); layer_norm_epsilon"):
        loading.load_weights(other_numerics, files["keras"])


def test_an_unfinished_run_is_refused_with_the_way_out(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "checkpoints").mkdir()
    with pytest.raises(ValueError, match="has not finished: it holds no model.keras yet.*Resume it"):
        keras_vit.ViT(weights=str(tmp_path))


def test_a_bit_body_goes_under_a_new_head(tmp_path):
    bit = keras_vit.BiT(block_units=(1, 1), width=8, groups=4, image_size=32, classes=10)
    rng = np.random.default_rng(1)
    for variable in bit.weights:
        variable.assign(rng.normal(0, 0.1, variable.shape).astype("float32"))
    path = str(tmp_path / "bit.weights.h5")
    bit.save_weights(path)
    for kwargs in (dict(classes=3, image_size=64), dict(include_top=False, pooling="avg")):
        new = keras_vit.BiT(weights=path, **kwargs)
        body = [layer.name for layer in bit.layers if layer.weights and layer.name != "head"]
        for name in body:
            for a, b in zip(new.get_layer(name).weights, bit.get_layer(name).weights):
                np.testing.assert_array_equal(a.numpy(), b.numpy())
        head = model_parts.head(new)
        assert head is None if "pooling" in kwargs else not np.any(head.kernel.numpy())
    with pytest.raises(ValueError, match=r"width=16 \(file: 8\)"):
        keras_vit.BiT(weights=path, width=16)
    with pytest.raises(ValueError, match="not a ViT"):
        keras_vit.ViT(weights=path)


def test_a_converted_timm_file_keeps_the_source_numerics(tmp_path, images):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    tensors = random_timm_tensors(np.random.default_rng(2), hidden=192, layers=1, mlp=384, classes=5)  # 3 heads
    source = str(tmp_path / "timm.safetensors")
    safetensors_numpy.save_file(tensors, source, metadata={"format": "pt"})
    destination = str(tmp_path / "timm.weights.h5")
    assert convert.main([f"--weights={source}", f"--out={destination}"]) == 0
    expected = timm_forward(tensors, images, 3)  # an independent numpy forward of timm's model
    direct = keras_vit.ViT(weights=source, classifier_activation=None)
    for model in (keras_vit.ViT(weights=destination, classifier_activation=None),
                  keras_vit.ViT(patch_size=8, hidden_size=192, num_layers=1, num_heads=3, mlp_dim=384,
                                weights=destination, classifier_activation=None)):
        assert model.arguments["gelu_approximate"] is False  # timm's exact GELU, carried by the file
        logits = model.predict(images, verbose=0)
        assert rel_err(logits, direct.predict(images, verbose=0)) < 1e-5
        assert rel_err(logits, expected) < 1e-4


def _write_three_classes(root):
    """Three classes of 16x16 images (a bright square top-left or bottom-right, or a bar), 12 per split and class."""
    import os

    from PIL import Image

    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        for label in ("top_left", "bottom_right", "bar"):
            os.makedirs(os.path.join(root, split, label))
            for i in range(12):
                image = rng.integers(0, 60, (16, 16, 3)).astype(np.uint8)
                where = {"top_left": np.s_[0:6, 0:6], "bottom_right": np.s_[10:16, 10:16], "bar": np.s_[6:9, :]}
                image[where[label]] = 230
                Image.fromarray(image).save(os.path.join(root, split, label, f"{i}.png"))


@pytest.mark.e2e
def test_the_app_fine_tunes_its_own_run_onto_other_classes_and_size(tmp_path):
    """Pre-train on the embedded digits (10 classes, 8x8), then the run's folder onto 3 classes at 16x16."""
    import subprocess
    import sys

    from test_training_app import ROOT, TINY

    def train(*args):
        env = {**__import__("os").environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
        command = [sys.executable, "-m", "training.train", *TINY, "--steps=4", "--export=false", *args]
        return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)

    pretrain = tmp_path / "pretrain"
    assert train(f"--workdir={pretrain}").returncode == 0
    three = tmp_path / "three"
    _write_three_classes(str(three))
    common = [f"--dataset=folder:{three}", "--image_size=16"]
    tuned = train(f"--workdir={tmp_path / 'tuned'}", f"--weights={pretrain}", *common)
    assert tuned.returncode == 0, tuned.stderr[-3000:]
    assert tuned.stdout.startswith("recipe: scratch, chosen for fine-tuning your own model")
    assert "has 10 classes and the model 3 classes: the head is new" in tuned.stderr
    assert "Resampled the position embedding from a 2x2 to a 4x4 patch grid" in tuned.stderr
    refused = train(f"--workdir={tmp_path / 'deeper'}", f"--weights={pretrain / 'model.weights.h5'}", "--num_layers=2",
                    *common)
    errors = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert refused.returncode == 2 and len(errors) == 1, refused.stderr[-3000:]
    assert "num_layers=2 (checkpoint: 1)" in errors[0] and "model.weights.h5" in errors[0]


def test_none_is_spelled_the_same_in_python_and_the_clis():
    assert keras_vit.ViT(**ARCH, image_size=32, classes=3, weights="none").output_shape == (None, 3)
    assert keras_vit.BiT(block_units=(1,), width=8, groups=4, image_size=16, classes=3, weights="None").output_shape \
        == (None, 3)
    with pytest.raises(ValueError, match="Unknown weights name"):
        keras_vit.ViT(**ARCH, image_size=32, weights="nothing")
