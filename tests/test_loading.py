"""keras_vit.checkpoints.loading, as a user meets it: what the loader reports by default (and how to silence it), no
DeprecationWarning on load, weights holding NaN or Inf refused as damaged, truncated `.keras` files reported as
corrupt, and a `.keras` file using a class Keras cannot find named as such."""

import contextlib
import logging
import warnings

import keras
import numpy as np
import pytest
from numpy_reference import random_official_params

import keras_vit
from keras_vit import applications, model_parts
from keras_vit.applications import model_from_name
from keras_vit.checkpoints import loading

TINY_ARCH = dict(patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64)


def _write_npz(tmp_path, params, name="ckpt.npz"):
    path = tmp_path / name
    np.savez(path, **params)
    return str(path)


def _weights(model):
    return [np.array(w) for w in model.weights]


def _assert_unchanged(model, before):
    for weight, value in zip(model.weights, before):
        np.testing.assert_array_equal(np.array(weight), value)


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


KERNEL = "Transformer/encoderblock_1/MlpBlock_3/Dense_0/kernel"  # (32, 64): 2048 values in the tiny model


def _damaged(kind):
    params = random_official_params(np.random.default_rng(0))
    if kind == "overflow":  # finite in float64, Inf once cast to the model's float32
        params[KERNEL] = params[KERNEL].astype(np.float64)
        params[KERNEL][3, 5] = 1e39
    else:
        params[KERNEL][3, 5] = np.nan if kind == "nan" else -np.inf
    return params


@pytest.mark.parametrize("kind", ["nan", "inf", "overflow"])
def test_a_npz_with_non_finite_values_is_refused(tmp_path, tiny, kind):
    path = _write_npz(tmp_path, _damaged(kind), "damaged.npz")
    pattern = rf"{path}.*damaged.*non-finite values \(1\): {KERNEL} \(1 of 2,048 values\).*download or export it again"
    with pytest.raises(ValueError, match=pattern):
        keras_vit.ViT(weights=path)
    model = keras_vit.ViT(**tiny)
    before = _weights(model)
    with pytest.raises(ValueError, match=pattern):
        loading.load_weights(model, path)
    _assert_unchanged(model, before)


def test_a_safetensors_file_with_nan_is_refused(tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    from foreign_checkpoints import random_timm_tensors

    tensors = random_timm_tensors(np.random.default_rng(1))
    tensors["norm.bias"][[2, 7]] = np.nan
    path = str(tmp_path / "model.safetensors")
    safetensors_numpy.save_file(tensors, path, metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"model.safetensors.*Transformer/encoder_norm/bias \(2 of 32 values\)"):
        keras_vit.ViT(weights=path, num_heads=4)


def test_a_weights_h5_with_nan_is_refused_and_the_model_kept(tmp_path, tiny):
    source = keras_vit.ViT(**tiny)
    gamma = model_parts.encoder_norm(source).gamma
    gamma.assign(np.where(np.arange(32) == 4, np.nan, np.array(gamma)).astype("float32"))
    path = str(tmp_path / "damaged.weights.h5")
    source.save_weights(path)
    model = keras_vit.ViT(**tiny)
    before = _weights(model)
    with pytest.raises(ValueError, match=r"damaged.weights.h5.*encoder_norm/gamma \(1 of 32 values\)"):
        loading.load_weights(model, path)
    _assert_unchanged(model, before)


@pytest.fixture
def keras_files(tmp_path, tiny):
    model = keras_vit.ViT(**tiny)
    whole = str(tmp_path / "model.keras")
    model.save(whole)
    data = open(whole, "rb").read()
    half = str(tmp_path / "half.keras")
    open(half, "wb").write(data[: len(data) // 2])
    return model, whole, half, len(data) // 2


def test_a_truncated_keras_file_is_reported_as_corrupt(keras_files, tiny):
    model, _, half, size = keras_files
    pattern = rf"{half}' \({size:,} bytes\) is corrupt: it is not a valid zip/.keras archive.*Save the model again"
    with pytest.raises(ValueError, match=pattern):
        applications.model_from_name(half)
    with pytest.raises(ValueError, match=pattern):
        keras_vit.ViT(**tiny, weights=half)
    with pytest.raises(ValueError, match=pattern):
        loading.load_weights(model, half)


def test_a_whole_keras_file_loads_as_weights(keras_files, tiny):
    model, whole, _, _ = keras_files
    loaded = keras_vit.ViT(**tiny, weights=whole)
    for got, expected in zip(_weights(loaded), _weights(model)):
        np.testing.assert_array_equal(got, expected)


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
