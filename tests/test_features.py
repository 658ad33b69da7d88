"""`keras_vit.feature_extractor`: intermediate blocks as grids or tokens, the final norm, a hybrid's stem stages,
the `features` SavedModel, and the refusals."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import model_parts

TINY = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=3, num_heads=2, mlp_dim=64, classes=4)


def numpy(value):
    return keras.ops.convert_to_numpy(value)


@pytest.fixture(scope="module")
def x():
    return np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")


@pytest.mark.parametrize("classifier, prefix", [("token", 1), ("gap", 0)])
def test_grids_are_the_blocks_patch_tokens_in_row_major_order(classifier, prefix, x, tmp_path):
    model = keras_vit.ViT(**TINY, classifier=classifier)
    extractor = keras_vit.feature_extractor(model, blocks=(0, -1))
    assert sorted(extractor.output) == ["block_0", "block_2"]
    got = extractor(x)
    for index in (0, 2):  # the reference: the block's own output in the model's graph, reshaped here
        tokens = numpy(keras.Model(model.input, model.get_layer(f"encoder_block_{index}").output)(x))
        np.testing.assert_allclose(numpy(got[f"block_{index}"]), tokens[:, prefix:].reshape(2, 4, 4, 32), atol=1e-6)
    extractor.save(f"{tmp_path}/extractor.keras")  # its TokenGrid layer is registered: safe mode reloads it
    reloaded = keras.saving.load_model(f"{tmp_path}/extractor.keras")
    np.testing.assert_array_equal(numpy(reloaded(x)["block_2"]), numpy(got["block_2"]))
    as_tokens = keras_vit.feature_extractor(model, blocks=(-1,), output="tokens")(x)["block_2"]
    assert tuple(as_tokens.shape) == (2, prefix + 16, 32)


@pytest.mark.e2e  # the default tier's time budget (10 minutes on 2 cores)
def test_norm_applies_the_final_layer_norm(x):
    model = keras_vit.ViT(**TINY)
    normed = numpy(keras_vit.feature_extractor(model, blocks=(-1,), output="tokens", norm=True)(x)["block_2"])
    tokens = numpy(keras.Model(model.input, model.get_layer("encoder_block_2").output)(x))
    mean, var = tokens.mean(-1, keepdims=True), tokens.var(-1, keepdims=True)
    norm = model_parts.encoder_norm(model)
    expected = (tokens - mean) / np.sqrt(var + norm.epsilon) * numpy(norm.gamma) + numpy(norm.beta)
    np.testing.assert_allclose(normed, expected, atol=1e-5)


@pytest.mark.e2e  # the default tier's time budget (10 minutes on 2 cores)
def test_a_hybrid_gives_its_stem_stages(x):
    model = keras_vit.ViT(**{**TINY, "image_size": 64, "patch_size": 32, "num_layers": 1}, hybrid="r26")
    images = np.random.default_rng(1).uniform(-1, 1, (1, 64, 64, 3)).astype("float32")
    features = keras_vit.feature_extractor(model, stem_stages=True)(images)
    shapes = {name: tuple(value.shape) for name, value in features.items()}
    assert shapes == {"stem_stage_1": (1, 16, 16, 256), "stem_stage_2": (1, 8, 8, 512),
                      "stem_stage_3": (1, 4, 4, 1024), "stem_stage_4": (1, 2, 2, 2048), "block_0": (1, 2, 2, 32)}
    stem = model_parts.resnet_stem(model)
    np.testing.assert_allclose(numpy(features["stem_stage_4"]), numpy(keras.Model(model.input, stem.output)(images)),
                               atol=1e-5)


@pytest.mark.parametrize("kwargs, message", [
    (dict(blocks=(3,)), r"Block indices go from -3 to 2 \(the model has 3 encoder blocks\). Received: blocks=\(3,\)"),
    (dict(blocks=(1, -2)), r"Block 1 is chosen twice"),
    (dict(blocks=()), r"Choose at least one block"),
    (dict(output="nchw"), r"`output` must be one of \('grid', 'tokens'\). Received: output='nchw'"),
    (dict(stem_stages=True), r"stem_stages=True needs a hybrid"),
])
def test_refusals(kwargs, message):
    with pytest.raises(ValueError, match=message):
        keras_vit.feature_extractor(keras_vit.ViT(**TINY), **kwargs)
    with pytest.raises(ValueError, match="takes a keras_vit ViT"):
        keras_vit.feature_extractor(keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)]))


@pytest.mark.e2e  # the default tier's time budget (10 minutes on 2 cores)
def test_the_features_savedmodel(tmp_path):
    import tensorflow as tf

    from keras_vit.export import export_features

    model = keras_vit.ViT(**TINY)
    extractor = keras_vit.feature_extractor(model, blocks=(1, 2))
    path = export_features(extractor, tmp_path / "features", max_batch_size=4)
    served = tf.saved_model.load(path).signatures["features"]
    pixels = np.random.default_rng(2).uniform(0, 255, (2, 32, 32, 3)).astype("float32")
    got = served(images=tf.constant(pixels))
    expected = extractor(pixels / 127.5 - 1.0)
    for name in ("block_1", "block_2"):
        np.testing.assert_allclose(got[name].numpy(), numpy(expected[name]), atol=1e-5)
    with pytest.raises(tf.errors.InvalidArgumentError):
        served(images=tf.zeros((5, 32, 32, 3)))


@pytest.mark.e2e  # the default tier's time budget (10 minutes on 2 cores)
def test_an_any_size_model_gives_grids_of_the_input_size():
    model = keras_vit.ViT(**{**TINY, "include_top": False}, input_shape=(None, None, 3))
    extractor = keras_vit.feature_extractor(model, blocks=(-1,))
    for height, width in ((32, 32), (48, 24)):
        images = np.zeros((1, height, width, 3), "float32")
        assert tuple(extractor(images)["block_2"].shape) == (1, height // 8, width // 8, 32)
