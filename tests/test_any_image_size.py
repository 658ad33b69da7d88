"""A ViT of any image size at run time (`input_shape=(None, None, 3)`): its `PatchEncoder` resamples the stored
position table (covering `image_size`) to each batch's patch grid in the graph, as the load-time resampling of
`keras_vit.checkpoints.position_embedding` does, so that it computes what a model built at that size from the same
weights computes."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import model_parts
from keras_vit.checkpoints import position_embedding
from keras_vit.layers.patch_encoder import PatchEncoder, resize_grid

ANY = (None, None, 3)


def _rel(a, b):
    a, b = np.asarray(a, "float64"), np.asarray(b, "float64")
    return np.abs(a - b).max() / np.abs(b).max()


def _randomized(model, seed=0):
    """Every weight drawn at random (the head too, so the output depends on every patch); BatchNorm variances kept
    positive."""
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        value = rng.normal(0, 0.2, variable.shape)
        variable.assign((np.abs(value) + 0.5 if "variance" in variable.path else value).astype(variable.dtype))
    return model


def _images(height, width, batch=2, seed=1):
    return np.random.default_rng(seed).uniform(-1, 1, (batch, height, width, 3)).astype("float32")


@pytest.mark.parametrize("options", [
    dict(),
    dict(position_embedding_interpolation="bicubic"),
    dict(position_embedding="sincos2d", classifier="gap"),
    dict(tokenizer="shifted_patches"),
    dict(tokenizer="conv"),
], ids=["bilinear", "bicubic", "sincos2d-gap", "shifted_patches", "conv"])
def test_outputs_equal_a_model_built_at_that_size_from_the_same_weights(tiny, tmp_path, options):
    model = _randomized(keras_vit.ViT(**tiny, **options, input_shape=ANY, classifier_activation=None))
    path = str(tmp_path / "any.weights.h5")
    model.save_weights(path)
    assert model_parts.patch_encoder(model).grid == (4, 4)
    for height, width in ((48, 24), (16, 40)):  # larger and smaller, non-square
        fixed = keras_vit.ViT(**tiny, **options, weights=path, input_shape=(height, width, 3),
                              classifier_activation=None)  # the load-time resampling
        images = _images(height, width)
        assert _rel(model(images), fixed(images)) < 1e-5


def test_on_its_own_grid_nothing_is_resampled(tiny):
    model = _randomized(keras_vit.ViT(**tiny, input_shape=ANY))
    fixed = keras_vit.ViT(**tiny)
    fixed.set_weights(model.get_weights())
    images = _images(32, 32)
    np.testing.assert_array_equal(model(images), fixed(images))


@pytest.mark.e2e  # the default tier's time budget (10 minutes on 2 cores)
@pytest.mark.parametrize("method", ["bilinear", "bicubic"])
def test_the_in_graph_resize_is_the_load_time_one(method):
    table = np.random.default_rng(0).normal(size=(5, 7, 6)).astype("float32")
    for grid in ((5, 7), (8, 3), (1, 12), (2, 2)):
        expected = position_embedding.resize_grid(table, grid, method)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(resize_grid(table, grid, method)), expected,
                                   rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(resize_grid(table, (5, 7), method)), table)


@pytest.mark.e2e  # the default tier's time budget (10 minutes on 2 cores)
@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="a graph traced for any size is TensorFlow's")
def test_a_graph_traced_for_any_size_resamples_and_checks_the_size(tiny):
    import tensorflow as tf

    model = _randomized(keras_vit.ViT(**tiny, input_shape=ANY, position_embedding_interpolation="bicubic"))
    traced = tf.function(model, input_signature=[tf.TensorSpec((None, None, None, 3), tf.float32)])
    for height, width in ((32, 32), (48, 24)):
        images = _images(height, width)
        assert _rel(traced(images), model(images)) < 1e-5
    encoder = model_parts.patch_encoder(model)
    on_grid = np.random.default_rng(2).normal(size=(2, 4, 4, 192)).astype("float32")
    traced_encoder = tf.function(encoder, input_signature=[tf.TensorSpec((None, None, None, 192), tf.float32)])
    np.testing.assert_array_equal(traced_encoder(on_grid), encoder(on_grid))  # its own grid: exactly the table
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"patch size 8.*\[36\] \[32\]"):
        traced(_images(36, 32, batch=1))


def test_a_size_that_is_not_a_multiple_of_the_patch_size_is_refused(tiny):
    model = keras_vit.ViT(**tiny, input_shape=ANY)
    with pytest.raises(ValueError, match=r"divisible by the patch size 8.*\(36, 32\)"):
        model(_images(36, 32, batch=1))
    with pytest.raises(ValueError, match=r"image_size.*patch size 8.*height 30 -> 24 or 32"):
        keras_vit.ViT(**{**tiny, "image_size": (30, 32)}, input_shape=ANY)


@pytest.mark.e2e  # the default tier's time budget (10 minutes on 2 cores)
def test_a_hybrid_of_any_size_is_refused_naming_the_way_out(tiny):
    with pytest.raises(ValueError, match=r"input_shape=\(None, None, 3\), hybrid='r'.*input_shape=\(height, width"):
        keras_vit.ViT(**{**tiny, "patch_size": 32, "image_size": 64}, hybrid="r", input_shape=ANY)


@pytest.mark.e2e  # the default tier's time budget (10 minutes on 2 cores)
def test_image_size_is_the_grid_the_table_covers(tiny):
    model = keras_vit.ViT(**{**tiny, "image_size": (32, 48)}, input_shape=ANY)
    assert model_parts.patch_encoder(model).position_embedding.shape == (1, 1 + 4 * 6, 32)
    assert model.get_config()["image_size"] == (32, 48) and model.get_config()["input_shape"] == ANY
    assert model.predict(_images(64, 16), verbose=0).shape == (2, 5)
    half = keras_vit.ViT(**{**tiny, "image_size": 64}, input_shape=(None, 16, 3))  # one axis fixed
    assert model_parts.patch_encoder(half).grid == (8, 2)
    assert half(_images(24, 16)).shape == (2, 5)


@pytest.mark.e2e  # the default tier's time budget (10 minutes on 2 cores)
def test_named_constructors_take_any_size():
    model = keras_vit.ViT_Ti16(input_shape=ANY, weights=None, classes=3)
    assert model.input_shape == (None, None, None, 3)
    assert model_parts.patch_encoder(model).grid == (14, 14)  # the variant's 224
    assert model(_images(32, 48, batch=1)).shape == (1, 3)


@pytest.mark.e2e  # the default tier's time budget (10 minutes on 2 cores)
def test_keras_round_trip_config_and_own_file(tiny, tmp_path):
    model = _randomized(keras_vit.ViT(**tiny, input_shape=ANY, position_embedding_interpolation="bicubic"))
    images = _images(40, 24)
    expected = model(images)
    path = str(tmp_path / "any.keras")
    model.save(path)
    reloaded = keras.saving.load_model(path)
    np.testing.assert_allclose(reloaded(images), expected, rtol=1e-6, atol=1e-7)
    rebuilt = type(model).from_config(model.get_config())
    rebuilt.set_weights(model.get_weights())
    np.testing.assert_allclose(rebuilt(images), expected, rtol=1e-6, atol=1e-7)
    again = keras_vit.ViT(weights=path)  # a file of any size gives a model of any size
    assert again.input_shape == (None, None, None, 3) and model_parts.patch_encoder(again).grid == (4, 4)
    np.testing.assert_allclose(again(images), expected, rtol=1e-6, atol=1e-7)
    larger = keras_vit.ViT(weights=path, input_shape=ANY, image_size=48, classes=2)  # a new table size and head
    assert model_parts.patch_encoder(larger).grid == (6, 6)
    assert larger(images).shape == (2, 2)


@pytest.mark.e2e  # the default tier's time budget (10 minutes on 2 cores)
@pytest.mark.parametrize("pooling, shape", [(None, (2, 1 + 5 * 3, 32)), ("token", (2, 32)), ("avg", (2, 32)),
                                            ("max", (2, 32))])
def test_include_top_false_with_every_pooling(tiny, pooling, shape):
    model = keras_vit.ViT(**tiny, input_shape=ANY, include_top=False, pooling=pooling)
    assert model.output_shape == ((None, None, 32) if pooling is None else (None, 32))
    assert tuple(model(_images(40, 24)).shape) == shape


@pytest.mark.e2e  # the default tier's time budget (10 minutes on 2 cores)
def test_fit_on_a_batch_of_one_size(tiny):
    model = keras_vit.ViT(**tiny, input_shape=ANY, classifier_activation=None)
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(_images(24, 40, batch=4), np.array([0, 1, 2, 3]), epochs=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))


@pytest.mark.e2e  # the default tier's time budget (10 minutes on 2 cores)
def test_patch_encoder_on_a_grid_config_round_trips():
    layer = PatchEncoder(8, grid=(2, 3), interpolation="bicubic")
    out = layer(np.zeros((1, 4, 5, 12), "float32"))
    assert tuple(out.shape) == (1, 21, 8) and layer.position_embedding.shape == (1, 7, 8)
    assert PatchEncoder.from_config(layer.get_config()).interpolation == "bicubic"
    with pytest.raises(ValueError, match="interpolation='nearest'"):
        PatchEncoder(8, interpolation="nearest")
