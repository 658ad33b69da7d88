"""`keras_vit.ViT(weights=<one's own file>)` with no other argument is the saved model exactly (every argument's
role declared once in `keras_vit.variants.ARGUMENTS`), the caller's arguments win where they apply, and a
`.weights.h5` written after `compile`/`fit` (optimizer state inside) seeds the next model as an uncompiled one does."""

import inspect
import json
import logging

import h5py
import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import variants
from keras_vit.checkpoints import loading

SAVED = dict(image_size=16, patch_size=4, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32, classes=3,
             classifier="gap", classifier_activation=None, include_preprocessing=True, dropout_rate=0.1,
             drop_path_rate=0.1, tokenizer="shifted_patches", locality_attention=True, name="mine")
"""Every saved-only argument away from its default: a logits head, in-model scaling, dropout, own options."""


def pixels():
    return np.random.default_rng(1).uniform(0, 255, (2, 16, 16, 3)).astype("float32")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("exact")
    model = keras_vit.ViT(**SAVED)
    rng = np.random.default_rng(0)
    for variable in model.weights:
        variable.assign(rng.normal(0, 0.2, variable.shape).astype(variable.dtype))
    model.save(str(folder / "m.keras"))
    model.save_weights(str(folder / "m.weights.h5"))
    run = folder / "run"
    run.mkdir()
    model.save(str(run / "model.keras"))
    (run / "config.json").write_text(json.dumps({"model": "tiny"}))
    expected = model.predict(pixels(), verbose=0)
    return expected, {"keras": str(folder / "m.keras"), "weights.h5": str(folder / "m.weights.h5"), "run": str(run)}


def test_every_argument_of_vit_has_exactly_one_role():
    parameters = inspect.signature(keras_vit.ViT).parameters
    assert list(parameters) == list(variants.ARGUMENTS), set(parameters) ^ set(variants.ARGUMENTS)
    assert {name: p.default for name, p in parameters.items()} == {
        name: argument.default for name, argument in variants.ARGUMENTS.items()}  # the signature shows the table
    assert all(argument.role in variants.ROLES for argument in variants.ARGUMENTS.values())
    constructor = set(inspect.signature(keras_vit.ViT_B16).parameters) - {"kwargs"}
    assert constructor <= set(variants.ARGUMENTS)


@pytest.mark.parametrize("kind", ["keras", "weights.h5", "run"])
def test_a_file_reloads_as_saved(saved, kind):
    expected, files = saved
    model = keras_vit.ViT(weights=files[kind])
    assert model.name == "mine" and model.arguments["classifier_activation"] is None
    assert model.arguments["dropout_rate"] == 0.1 and model.arguments["include_preprocessing"]
    np.testing.assert_array_equal(model.predict(pixels(), verbose=0), expected)
    assert not np.allclose(expected.sum(axis=1), 1.0)  # logits, not softmax


def test_the_callers_arguments_win_where_they_apply(saved, caplog):
    expected, files = saved
    probs = keras_vit.ViT(weights=files["keras"], classifier_activation="softmax").predict(pixels(), verbose=0)
    np.testing.assert_allclose(probs, keras.ops.convert_to_numpy(keras.ops.softmax(expected)), rtol=1e-5, atol=1e-6)
    with caplog.at_level(logging.WARNING, logger="keras_vit"):
        new = keras_vit.ViT(weights=files["keras"], classes=5)
    assert new.output_shape == (None, 5) and new.arguments["classifier_activation"] is None
    assert [r.message for r in caplog.records if "head is new" in r.message]
    features = keras_vit.ViT(weights=files["keras"], include_top=False, pooling="avg")
    assert features.output_shape == (None, 16)


def test_a_headless_file_reloads_headless_and_gets_a_head_when_asked(tmp_path):
    model = keras_vit.ViT(**{**SAVED, "classes": None}, include_top=False, pooling="avg")
    model.save(str(tmp_path / "f.keras"))
    again = keras_vit.ViT(weights=str(tmp_path / "f.keras"))
    assert again.output_shape == (None, 16)
    np.testing.assert_array_equal(again.predict(pixels(), verbose=0), model.predict(pixels(), verbose=0))
    assert keras_vit.ViT(weights=str(tmp_path / "f.keras"), classes=4).output_shape == (None, 4)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A `.weights.h5` saved after `fit`: Keras writes the optimizer's state beside the model's weights."""
    path = str(tmp_path_factory.mktemp("fit") / "ft.weights.h5")
    model = keras_vit.ViT(image_size=16, patch_size=8, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32,
                          classes=3, classifier_activation=None)
    model.compile(keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.optimizer.build(model.trainable_variables)  # what the first step of `fit` does, without the step
    model.save_weights(path)
    with h5py.File(path) as file:
        assert "optimizer" in file  # what this test is about
    return model, path


def test_a_trained_weights_file_seeds_any_task(trained, caplog):
    model, path = trained
    with caplog.at_level(logging.WARNING, logger="keras_vit"):
        again = keras_vit.ViT(weights=path)
    np.testing.assert_array_equal(again.predict(pixels() / 255, verbose=0), model.predict(pixels() / 255, verbose=0))
    assert len([r for r in caplog.records if "optimizer state" in r.message]) == 1
    assert keras_vit.ViT(weights=path, include_top=False, pooling="avg").output_shape == (None, 16)
    other = keras_vit.ViT(image_size=16, patch_size=8, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32,
                          classes=7)
    loading.load_weights(other, path)
    np.testing.assert_array_equal(other.get_layer("encoder_norm").gamma.numpy(),
                                  model.get_layer("encoder_norm").gamma.numpy())


def test_a_damaged_optimizer_part_does_not_stop_the_model_part(trained, tmp_path):
    model, path = trained
    damaged = str(tmp_path / "damaged.weights.h5")
    with open(path, "rb") as source, open(damaged, "wb") as copy:
        copy.write(source.read())
    with h5py.File(damaged, "a") as file:
        name = next(iter(file["optimizer/vars"]))
        del file[f"optimizer/vars/{name}"]
        file[f"optimizer/vars/{name}"] = np.zeros((99,), "float32")
    again = keras_vit.ViT(weights=damaged)
    np.testing.assert_array_equal(again.predict(pixels() / 255, verbose=0), model.predict(pixels() / 255, verbose=0))
