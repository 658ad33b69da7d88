"""keras_vit.preprocessing: input scaling (hand-computed values) and the shipped ImageNet label lists."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.preprocessing import class_names, decode_predictions, preprocess_input


def test_inception_mode_maps_0_255_to_minus1_1():
    x = np.array([[0, 51, 127.5, 255]], np.float32)
    np.testing.assert_allclose(preprocess_input(x), [[-1.0, -0.6, 0.0, 1.0]], atol=1e-7)
    out = preprocess_input(np.array([0, 255], np.uint8))  # integer images become float32
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, [-1.0, 1.0])
    tensor = preprocess_input(keras.ops.convert_to_tensor(x))  # backend tensors stay tensors
    np.testing.assert_allclose(keras.ops.convert_to_numpy(tensor), [[-1.0, -0.6, 0.0, 1.0]], atol=1e-7)


def test_imagenet_mode_uses_mean_and_std():
    x = np.zeros((1, 1, 2, 3), np.float32)
    x[0, 0, 1] = [255.0, 255.0, 255.0]
    expected = [[-0.485 / 0.229, -0.456 / 0.224, -0.406 / 0.225], [0.515 / 0.229, 0.544 / 0.224, 0.594 / 0.225]]
    np.testing.assert_allclose(preprocess_input(x, mode="imagenet")[0, 0], expected, rtol=1e-6)
    tensor = preprocess_input(keras.ops.convert_to_tensor(x), mode="imagenet")
    np.testing.assert_allclose(keras.ops.convert_to_numpy(tensor)[0, 0], expected, rtol=1e-6)


def test_preprocess_bad_input():
    with pytest.raises(ValueError, match="mode='torch'"):
        preprocess_input(np.zeros((1, 2, 2, 3)), mode="torch")
    with pytest.raises(ValueError, match=r"shape=\(1, 2, 2, 1\)"):
        preprocess_input(np.zeros((1, 2, 2, 1)), mode="imagenet")


def test_symbolic_input_inside_a_model():
    inputs = keras.Input((2, 2, 3))
    model = keras.Model(inputs, preprocess_input(inputs))
    np.testing.assert_allclose(model.predict(np.full((1, 2, 2, 3), 255.0), verbose=0), np.ones((1, 2, 2, 3)))


def test_imagenet1k_names():
    names = class_names(1000)
    assert len(names) == 1000
    assert names[:3] == ["tench", "goldfish", "great_white_shark"]
    assert names[207] == "golden_retriever"
    assert names[281] == "tabby"
    assert names[999] == "toilet_tissue"


def test_imagenet21k_names_in_google_order():
    names = class_names(21843)
    assert len(names) == 21843
    assert names[:3] == ["organism", "benthos", "heterotroph"]  # n00004475, n00005787, n00006024


def test_class_names_bad_count():
    for bad in (10, 21841, "1000", True):
        with pytest.raises(ValueError, match="classes="):
            class_names(bad)


def test_decode_predictions_orders_by_score():
    preds = np.zeros((2, 1000), np.float32)
    preds[0, [1, 207, 0]] = [0.5, 0.3, 0.2]
    preds[1, 999] = 0.9
    decoded = decode_predictions(preds, top=3)
    assert decoded[0] == [("n01443537", "goldfish", 0.5), ("n02099601", "golden_retriever", pytest.approx(0.3)),
                          ("n01440764", "tench", pytest.approx(0.2))]
    assert decoded[1][0] == ("n15075141", "toilet_tissue", pytest.approx(0.9))
    assert len(decode_predictions(keras.ops.convert_to_tensor(preds))[1]) == 5  # default top=5, tensors accepted


def test_decode_predictions_21k():
    preds = np.zeros((1, 21843))
    preds[0, 2] = 3.0
    assert decode_predictions(preds, top=1) == [[("n00006024", "heterotroph", 3.0)]]


def test_decode_predictions_bad_input():
    for shape in ((1000,), (1, 10), (2, 1000, 1)):
        with pytest.raises(ValueError, match="preds.shape="):
            decode_predictions(np.zeros(shape))
    for top in (0, 1001, 2.5):
        with pytest.raises(ValueError, match="top="):
            decode_predictions(np.zeros((1, 1000)), top=top)


def test_public_api():
    assert keras_vit.preprocess_input is preprocess_input
    assert keras_vit.decode_predictions is decode_predictions
