"""The `qkv_bias` architecture switch: query/key/value projections with biases (the paper, every official
checkpoint; the default) or without (timm / Hugging Face `qkv_bias=False` models), built, read back, saved and
loaded strictly: a checkpoint with biases is refused for `qkv_bias=False`, one without for `qkv_bias=True`."""

import numpy as np
import pytest
from foreign_checkpoints import random_timm_tensors, rel_err, timm_forward
from numpy_reference import random_official_params, vit_forward

import keras_vit
from keras_vit import convert, model_parts
from keras_vit.checkpoints import keras_names, loading

ARCH = dict(patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64)
QKV = ("query", "key", "value")


def _bias_keys(params):
    return [k for k in params if k.endswith(tuple(f"MultiHeadDotProductAttention_1/{n}/bias" for n in QKV))]


def _without_biases(params):
    return {k: v for k, v in params.items() if k not in _bias_keys(params)}


def _write_npz(tmp_path, params, name="ckpt.npz"):
    path = tmp_path / name
    np.savez(path, **params)
    return str(path)


def test_qkv_bias_false_builds_projections_without_bias(tiny):
    with_bias, without = keras_vit.ViT(**tiny), keras_vit.ViT(**tiny, qkv_bias=False)
    assert with_bias.count_params() - without.count_params() == 3 * tiny["num_layers"] * tiny["hidden_size"]
    assert model_parts.architecture(with_bias)["qkv_bias"] is True  # the default, as every official checkpoint
    assert model_parts.architecture(without)["qkv_bias"] is False
    assert _bias_keys(keras_names.targets(without)) == []
    assert len(_bias_keys(keras_names.targets(with_bias))) == 3 * tiny["num_layers"]


def test_qkv_bias_must_be_a_bool(tiny):
    with pytest.raises(ValueError, match="`qkv_bias` must be a bool"):
        keras_vit.ViT(**tiny, qkv_bias="no")


def test_checkpoint_without_biases_builds_and_loads_exactly(tmp_path, images):
    full = random_official_params(np.random.default_rng(3))
    params = _without_biases(full)
    path = _write_npz(tmp_path, params)
    model = keras_vit.ViT(weights=path, classifier_activation=None)  # qkv_bias taken from the file
    assert model_parts.architecture(model)["qkv_bias"] is False
    zero_biases = {k: np.zeros(full[k].shape, "float64") for k in _bias_keys(full)}
    reference = vit_forward({**{k: np.asarray(v, "float64") for k, v in params.items()}, **zero_biases},
                            images.astype("float64"))
    assert rel_err(model.predict(images, verbose=0), reference) < 1e-4
    convert_line = convert.summary(model, path, "x.weights.h5", "0" * 64)
    assert "qkv_bias=False" in convert_line


def test_checkpoint_with_biases_is_refused_for_qkv_bias_false(tmp_path):
    path = _write_npz(tmp_path, random_official_params(np.random.default_rng(4)))
    with pytest.raises(ValueError, match=r"qkv_bias=False \(checkpoint: query/key/value biases\)"):
        keras_vit.ViT(weights=path, qkv_bias=False)
    model = keras_vit.ViT(image_size=32, classes=5, **ARCH, qkv_bias=False)
    before = [w.numpy().copy() for w in model.weights]
    with pytest.raises(ValueError, match=r"has query/key/value biases, but model .* built without them"):
        loading.load_weights(model, path)
    assert all(np.array_equal(b, w.numpy()) for b, w in zip(before, model.weights))  # untouched


def test_checkpoint_without_biases_is_refused_for_qkv_bias_true(tmp_path):
    path = _write_npz(tmp_path, _without_biases(random_official_params(np.random.default_rng(5))))
    with pytest.raises(ValueError, match=r"qkv_bias=True \(checkpoint: no query/key/value biases\)"):
        keras_vit.ViT(weights=path, qkv_bias=True)
    model = keras_vit.ViT(image_size=32, classes=5, **ARCH)
    with pytest.raises(ValueError, match=r"has no query/key/value biases, but model .* build it with qkv_bias=False"):
        loading.load_weights(model, path)


def test_timm_file_without_qkv_bias_loads_as_it_is(tmp_path, images):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    tensors = random_timm_tensors(np.random.default_rng(6), qkv_bias=False)
    path = str(tmp_path / "model.safetensors")
    safetensors_numpy.save_file(tensors, path, metadata={"format": "pt"})
    expected = timm_forward(tensors, images, 4)
    # The reader translates what the file holds: no biases, so the model has none (timm's architecture) ...
    exact = keras_vit.ViT(weights=path, num_heads=4, classifier_activation=None)
    assert model_parts.architecture(exact)["qkv_bias"] is False
    assert rel_err(exact.predict(images, verbose=0), expected) < 1e-4
    # ... and asking for biases the file lacks is refused, naming both sides (the reader invents none).
    with pytest.raises(ValueError, match=r"qkv_bias=True \(checkpoint: no query/key/value biases\)"):
        keras_vit.ViT(weights=path, num_heads=4, qkv_bias=True)
