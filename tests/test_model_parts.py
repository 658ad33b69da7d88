"""One home per contract (issue 16): the model's parts (`keras_vit.model_parts`), the defaults table
(`keras_vit.variants.DEFAULTS`), the input scaling (`keras_vit.preprocessing`), the pure builder
(`keras_vit.vit.build`) and the reader registry (`keras_vit.checkpoints.readers`)."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import model_parts, preprocessing, variants, vit
from keras_vit.checkpoints import detect, readers


def test_accessors_find_every_stage(tiny):
    model = keras_vit.ViT(**tiny, representation_size=8, include_preprocessing=True)
    assert [b.name for b in model_parts.encoder_blocks(model)] == ["encoder_block_0", "encoder_block_1"]
    assert model_parts.patches(model).patch_size == 8 and model_parts.patch_encoder(model).hidden_size == 32
    assert model_parts.head(model).units == 5 and model_parts.pre_logits(model).units == 8
    assert model_parts.preprocessing(model) is not None and model_parts.resnet_stem(model) is None
    assert model_parts.model_grid(model) == (4, 4)
    features = keras_vit.ViT(**tiny, include_top=False)
    assert model_parts.head(features) is None and model_parts.pooling(features) is None
    assert model_parts.architecture(features)["include_top"] is False


def test_a_foreign_model_is_no_vit():
    other = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, name="head")])
    assert not model_parts.is_vit(other) and model_parts.architecture(other) is None
    with pytest.raises(ValueError, match="no layer named `encoder_block_0`; pass a keras_vit model"):
        model_parts.encoder_blocks(other)
    with pytest.raises(ValueError, match="no layer named `patches`"):
        model_parts.patches(other)


def test_architecture_rebuilds_the_model(tiny):
    model = keras_vit.ViT(**tiny, classifier="gap", gelu_approximate=False, layer_norm_epsilon=1e-12)
    args = model_parts.architecture(model)
    assert model.get_config() | args == model.get_config() and args["classifier"] == "gap" and args["layer_norm_epsilon"] == 1e-12
    rebuilt = keras_vit.ViT(**args)
    assert model_parts.architecture(rebuilt) == args and rebuilt.count_params() == model.count_params()


def test_one_defaults_table():
    model = vit.build(dict(num_layers=1))  # one block: ViT-B/16's defaults otherwise, quickly
    args = model_parts.architecture(model)
    others = [k for k in variants.DEFAULTS if k not in ("image_size", "num_layers")]
    assert {k: args.get(k, True) for k in others} == {k: variants.DEFAULTS[k] for k in others}  # qkv_bias: True
    assert args["input_shape"][:2] == (variants.DEFAULTS["image_size"],) * 2
    assert variants.find_variant({}).name == "B16"
    assert variants.find_variant(dict(hybrid="r50")).name == "R50_B16"
    assert variants.find_variant(dict(hidden_size=48)) is None
    with pytest.raises(TypeError, match="without `weights`"):
        vit.build({"weights": None})


def test_the_input_scaling_has_one_home(tiny):
    pixels = np.array([0.0, 63.75, 255.0], "float32")
    np.testing.assert_allclose(preprocessing.to_model_range(pixels), [-1.0, -0.5, 1.0])
    np.testing.assert_allclose(preprocessing.from_model_range(preprocessing.to_model_range(pixels)), pixels)
    np.testing.assert_allclose(preprocessing.preprocess_input(pixels), preprocessing.to_model_range(pixels))
    raw, scaled = keras_vit.ViT(**tiny, include_preprocessing=True), keras_vit.ViT(**tiny)
    assert preprocessing.scales_own_input(raw) and not preprocessing.scales_own_input(scaled)
    assert preprocessing.model_inputs(raw, pixels) is pixels
    np.testing.assert_allclose(preprocessing.model_inputs(scaled, pixels), preprocessing.to_model_range(pixels))
    images = np.random.default_rng(0).uniform(0, 255, (1, 32, 32, 3)).astype("float32")
    scaled.set_weights(raw.get_weights())  # the same weights: the own layer == the helper
    np.testing.assert_allclose(raw.predict(images, verbose=0),
                               scaled.predict(preprocessing.to_model_range(images), verbose=0), atol=1e-5)


def test_the_reader_registry_refuses_keras_files(tmp_path, tiny):
    path = str(tmp_path / "m.keras")
    keras_vit.ViT(**tiny).save(path)
    assert detect.detect_format(path) == "keras_model"
    with pytest.raises(ValueError, match="holds no checkpoint to read"):
        readers.read_checkpoint(path)
    assert set(readers.READERS) == set(detect.FORMATS) - {"keras_weights", "keras_model"}
