"""Shared checks for layers and models: `run_layer_test` (every public layer: shapes, weights, training, mixed
precision, config and `.keras` round trips), config round trips and `.keras` save/load in safe mode."""

import warnings

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
    clone = type(model).from_config(model.get_config())  # a keras_vit model's config is its arguments
    clone.set_weights(model.get_weights())
    np.testing.assert_allclose(keras.ops.convert_to_numpy(clone(inputs)), outputs, atol=atol)


def _shape(x):
    return tuple(x.shape)


def _dtype(x):
    return keras.backend.standardize_dtype(x.dtype)


def run_layer_test(layer_cls, init_kwargs, input_data, expected_output_shape, expected_num_trainable_weights,
                   expected_num_non_trainable_weights=0, tmp_path=None, run_training_check=True,
                   run_mixed_precision_check=True, atol=1e-6):
    """The checks every public layer passes (keras-hub's `run_layer_test` is the model).

    `layer_cls(**init_kwargs)` is built on `input_data` (a float32 array with its batch axis):
    1. `from_config(get_config())` gives the same config;
    2. symbolic and eager: the output on a `keras.Input` has the eager output's shape with a None batch, and
       `compute_output_shape` agrees with the eager output;
    3. the trainable and non-trainable weight counts;
    4. training: one `model.fit` step with finite loss, and a gradient for every trainable weight (TensorFlow);
    5. mixed precision (`mixed_bfloat16`): bfloat16 outputs, float32 variables, and every sublayer under the
       same policy;
    6. a `.keras` file of a model holding the layer reloads in safe mode with the same outputs
       (`assert_layer_round_trip`, needs `tmp_path`).
    """
    name = layer_cls.__name__
    layer = layer_cls(**init_kwargs)
    config = layer.get_config()
    assert layer_cls.from_config(config).get_config() == config, f"{name}: get_config/from_config"

    symbolic_layer = layer_cls(**init_kwargs)
    symbolic = symbolic_layer(keras.Input(shape=input_data.shape[1:]))
    outputs = layer(input_data)
    assert _shape(outputs) == tuple(expected_output_shape), f"{name}: eager output shape {_shape(outputs)}"
    assert _shape(symbolic) == (None, *expected_output_shape[1:]), f"{name}: symbolic output shape {_shape(symbolic)}"
    assert tuple(layer.compute_output_shape(input_data.shape)) == tuple(expected_output_shape), (
        f"{name}: compute_output_shape {layer.compute_output_shape(input_data.shape)}")

    for built in (layer, symbolic_layer):
        assert len(built.trainable_weights) == expected_num_trainable_weights, (
            f"{name}: trainable weights {[w.path for w in built.trainable_weights]}")
        assert len(built.non_trainable_weights) == expected_num_non_trainable_weights, (
            f"{name}: non-trainable weights {[w.path for w in built.non_trainable_weights]}")

    if run_training_check:
        _check_training(layer_cls, init_kwargs, input_data, name)
    if run_mixed_precision_check:
        _check_mixed_precision(layer_cls, init_kwargs, input_data, name)
    if tmp_path is not None:
        assert_layer_round_trip(layer_cls(**init_kwargs), input_data, tmp_path, atol=atol)


def _check_training(layer_cls, init_kwargs, input_data, name):
    layer = layer_cls(**init_kwargs)
    inputs = keras.Input(shape=input_data.shape[1:])
    model = keras.Model(inputs, layer(inputs))
    model.compile(optimizer="sgd", loss="mse")
    target = np.zeros(_shape(model(input_data)), "float32")
    with warnings.catch_warnings():  # Keras warns when there is nothing to train (Patches, DropPath, ...)
        warnings.filterwarnings("ignore", "The model does not have any trainable weights")
        history = model.fit(input_data, target, batch_size=len(input_data), epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0]), f"{name}: loss of one fit step"
    if keras.config.backend() == "tensorflow" and layer.trainable_weights:
        import tensorflow as tf

        with tf.GradientTape() as tape:
            loss = keras.ops.sum(keras.ops.square(layer(input_data, training=True)))
        gradients = tape.gradient(loss, layer.trainable_weights)
        unused = [w.path for w, g in zip(layer.trainable_weights, gradients) if g is None]
        assert not unused, f"{name}: no gradient reaches {unused}"


def _check_mixed_precision(layer_cls, init_kwargs, input_data, name):
    policy = "mixed_bfloat16"
    layer = layer_cls(**init_kwargs, dtype=policy)
    outputs = layer(input_data)
    assert _dtype(outputs) == "bfloat16", f"{name}: output dtype {_dtype(outputs)} under {policy}"
    floats = [w.path for w in layer.weights if _dtype(w) != "float32"]
    assert not floats, f"{name}: variables not float32 under {policy}: {floats}"
    others = [(sub.name, sub.dtype_policy.name) for sub in layer._flatten_layers(include_self=False)
              if sub.dtype_policy.name != policy]
    assert not others, f"{name}: sublayers not under {policy}: {others}"
    assert layer_cls.from_config(layer.get_config()).dtype_policy.name == policy, f"{name}: policy in config"
