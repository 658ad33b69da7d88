"""Shared checks for layers and models: config round trips and `.keras` save/load in safe mode."""

import keras
import numpy as np


def assert_layer_round_trip(layer, inputs, tmp_path, atol=1e-6):
    """`from_config(get_config())` gives the same config, and a `.keras` file of a model holding the
    layer reloads in safe mode with identical outputs."""
    outputs = keras.ops.convert_to_numpy(layer(inputs))
    config = layer.get_config()
    clone = type(layer).from_config(config)
    assert clone.get_config() == config
    model = keras.Sequential([keras.Input(inputs.shape[1:]), layer])
    path = str(tmp_path / f"{layer.name}.keras")
    model.save(path)
    restored = keras.saving.load_model(path, safe_mode=True)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(restored(inputs)), outputs, atol=atol)


def assert_model_round_trip(model, inputs, tmp_path, atol=1e-6):
    """A model survives `.keras` save/load (safe mode) and `from_config` with identical outputs."""
    outputs = keras.ops.convert_to_numpy(model(inputs))
    path = str(tmp_path / "model.keras")
    model.save(path)
    restored = keras.saving.load_model(path, safe_mode=True)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(restored(inputs)), outputs, atol=atol)
    clone = keras.Model.from_config(model.get_config())
    clone.set_weights(model.get_weights())
    np.testing.assert_allclose(keras.ops.convert_to_numpy(clone(inputs)), outputs, atol=atol)
