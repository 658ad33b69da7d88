"""`model.quantize(...)` (Keras core) on keras_vit's models: the quantizable layers only, the per-layer policies in
the config (a `DTypePolicyMap`), exact `.keras` round trips, and the refusals."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import quantization

TINY = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=2, mlp_dim=64, classes=5,
            classifier_activation=None)


def images(shape, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (2, *shape[1:])).astype("float32")


@pytest.mark.e2e  # ~18 s on 2 cores: the default tier's budget (test_refusals quantizes in the default tier)
@pytest.mark.parametrize("mode", ["int8", "int4"])
def test_vit_quantizes_its_dense_layers_and_reloads_exactly(mode, tmp_path, recwarn):
    model = keras_vit.ViT(**TINY)
    x = images(model.input_shape)
    before = keras.ops.convert_to_numpy(model(x))
    model.quantize(mode)
    assert not [w for w in recwarn if "does not have a `quantize` method" in str(w.message)]  # no noise
    quantized = quantization.quantized_layers(model)
    # the patch projection, 4 attention projections and 2 MLP layers per block, and the head
    assert len(quantized) == 1 + 2 * 6 + 1 and {layer.quantization_mode for layer in quantized} == {mode}
    after = keras.ops.convert_to_numpy(model(x))
    bound = 0.05 if mode == "int8" else 0.3  # per-channel int8 / int4 weights (measured 0.018 / 0.1)
    assert np.abs(after - before).max() / np.abs(before).max() < bound
    config = model.get_config()
    assert config["dtype"]["class_name"] == "DTypePolicyMap"
    model.save(tmp_path / "q.keras")
    reloaded = keras.saving.load_model(tmp_path / "q.keras")
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(reloaded(x)), after)
    assert len(quantization.quantized_layers(type(model).from_config(config))) == len(quantized)


@pytest.mark.e2e  # two ResNet builds: the default tier's time budget
def test_hybrid_and_bit_quantize_their_dense_layers(tmp_path):
    hybrid = keras_vit.ViT(**{**TINY, "image_size": 64, "patch_size": 32, "num_layers": 1}, hybrid="r26")
    bit = keras_vit.BiT(input_shape=(32, 32, 3), classes=5)
    for model in (hybrid, bit):
        x = images(model.input_shape)
        model.quantize("int8")
        model.save(tmp_path / "m.keras")
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(keras.saving.load_model(tmp_path / "m.keras")(x)),
                                      keras.ops.convert_to_numpy(model(x)))
    assert len(quantization.quantized_layers(bit)) == 1  # Keras has no int8 convolution: the ResNet stays float


@pytest.mark.e2e  # the default tier's time budget (10 minutes on 2 cores)
def test_refusals(tmp_path):
    model = keras_vit.ViT(**TINY)
    with pytest.raises(ValueError, match="GPTQConfig"):  # Keras' own check, before keras_vit's
        model.quantize("gptq")
    with pytest.raises(ValueError, match="quantize to one of int8, int4, float8.*Received: mode='gptq'"):
        quantization.check_mode("gptq")
    assert not quantization.quantized_layers(model)  # nothing half-applied
    model.quantize("int8")
    with pytest.raises(ValueError, match="is already quantized .* in int8"):
        model.quantize("int8")
    model.save(tmp_path / "q.keras")
    with pytest.raises(ValueError, match="holds a quantized keras_vit model.*keras.saving.load_model"):
        keras_vit.ViT(weights=str(tmp_path / "q.keras"))
    from keras_vit.export import precision

    with pytest.raises(ValueError, match="A quantized model exports at precision='float32'"):
        precision.serving_model(model, "bfloat16")


@pytest.mark.e2e  # the default tier's time budget (10 minutes on 2 cores)
def test_a_damaged_policy_map_is_refused():
    config = keras_vit.ViT(**TINY).get_config()
    policies = keras.dtype_policies.DTypePolicyMap(default_policy="float32")
    policies["encoder_block_9/attention/query"] = keras.dtype_policies.get("int8_from_float32")
    config["dtype"] = keras.saving.serialize_keras_object(policies)
    with pytest.raises(ValueError, match="names the layer 'encoder_block_9/attention/query'"):
        keras_vit.applications.vit.VisionTransformer.from_config(config)


def test_a_quantized_config_builds_its_layers_quantized(monkeypatch):
    """Quantizing float layers after the build (Keras frees each float kernel with a `gc.collect()`) made an int8
    ViT-B/16 `.keras` load 5-10x slower than the float file (main 9a09833): the layers build int8 directly."""
    model = keras_vit.ViT(**TINY)
    model.quantize("int8")
    config = model.get_config()

    def refuse(self, *args, **kwargs):
        raise AssertionError(f"{self.path} was quantized after its build")

    for layer_class in (keras.layers.Dense, keras.layers.EinsumDense):
        monkeypatch.setattr(layer_class, "quantize", refuse)
    rebuilt = type(model).from_config(config)
    assert rebuilt.get_config() == config
    assert [(layer.path, layer.dtype_policy.name) for layer in quantization.quantized_layers(rebuilt)] == [
        (layer.path, layer.dtype_policy.name) for layer in quantization.quantized_layers(model)]
    assert {str(layer._kernel.dtype) for layer in quantization.quantized_layers(rebuilt)} == {"int8"}


def test_a_mixed_precision_model_reloads_quantized_in_its_own_policy(tmp_path):
    keras.config.set_dtype_policy("mixed_bfloat16")  # how a user builds in mixed precision (conftest resets it)
    model = keras_vit.ViT(**TINY)
    keras.config.set_dtype_policy("float32")
    model.quantize("int8")
    model.save(tmp_path / "q.keras")
    reloaded = keras.saving.load_model(tmp_path / "q.keras")
    norms = [layer for layer in reloaded._flatten_layers() if isinstance(layer, keras.layers.LayerNormalization)]
    assert norms and {layer.dtype_policy.name for layer in norms} == {"mixed_bfloat16"}
    x = images(model.input_shape)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(reloaded(x)), keras.ops.convert_to_numpy(model(x)))
