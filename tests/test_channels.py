"""Images with other channels: a clear error for a batch the model was not built for, a checkpoint's kernel adapted
to another channel count (timm's `in_chans`), and a channels-first setting refused."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import model_parts

TINY = dict(image_size=16, patch_size=8, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32, classes=3)


@pytest.fixture(scope="module")
def rgb(tmp_path_factory):
    model = keras_vit.ViT(**TINY)
    rng = np.random.default_rng(0)
    for variable in model.weights:
        variable.assign(rng.normal(0, 0.2, variable.shape).astype("float32"))
    path = str(tmp_path_factory.mktemp("rgb") / "rgb.weights.h5")
    model.save_weights(path)
    return model, path


def test_a_grayscale_batch_into_an_rgb_model_names_the_channels(rgb):
    model, _ = rgb
    with pytest.raises(ValueError, match=r"takes images with 3 channels.*\(2, 16, 16, 1\) with 1"):
        model(np.zeros((2, 16, 16, 1), "float32"))


def test_a_one_channel_model_from_a_three_channel_file_sees_grey_as_rgb(rgb):
    model, path = rgb
    grey = keras_vit.ViT(weights=path, input_shape=(16, 16, 1))
    images = np.random.default_rng(1).uniform(-1, 1, (2, 16, 16, 1)).astype("float32")
    np.testing.assert_allclose(grey.predict(images, verbose=0), model.predict(np.repeat(images, 3, axis=-1),
                                                                              verbose=0), atol=1e-5)


def test_more_channels_repeat_the_colour_kernels_scaled(rgb):
    model, path = rgb
    four = keras_vit.ViT(weights=path, input_shape=(16, 16, 4))
    kernel = model_parts.patch_encoder(model).projection.kernel.numpy().reshape(8, 8, 3, 16)
    expected = np.concatenate([kernel, kernel[:, :, :1]], axis=2) * 0.75  # timm's adapt_input_conv for in_chans=4
    adapted = model_parts.patch_encoder(four).projection.kernel.numpy().reshape(8, 8, 4, 16)
    np.testing.assert_allclose(adapted, expected, rtol=1e-6)


def test_a_shifted_patch_file_is_not_adapted(tmp_path):
    model = keras_vit.ViT(**TINY, tokenizer="shifted_patches")
    model.save(str(tmp_path / "s.keras"))
    with pytest.raises(ValueError, match="cannot be adapted to 1"):
        keras_vit.ViT(weights=str(tmp_path / "s.keras"), input_shape=(16, 16, 1))


def test_channels_first_is_refused():
    keras.config.set_image_data_format("channels_first")
    try:
        with pytest.raises(ValueError, match="channels-last.*'channels_first'"):
            keras_vit.ViT(**TINY)
        with pytest.raises(ValueError, match="channels-last"):
            keras_vit.BiT_R50x1(weights=None, input_shape=(32, 32, 3), classes=2)
    finally:
        keras.config.set_image_data_format("channels_last")


def test_a_grayscale_batch_after_an_rgb_predict_names_the_channels(rgb):
    """Keras' predict function traced for RGB raised a shape TypeError on the next grayscale batch (main 9a09833)."""
    model, _ = rgb
    model.predict(np.zeros((2, 16, 16, 3), "float32"), verbose=0)
    for method in (model.predict, model.evaluate):
        with pytest.raises(ValueError, match=r"takes images with 3 channels.*\(2, 16, 16, 1\) with 1"):
            method(np.zeros((2, 16, 16, 1), "float32"), verbose=0)
