"""The BiT ResNet baseline (`keras_vit.BiT`, `keras_vit.BiT_R50x1`, `PreActResNetUnit`): its parameter count
from first principles, a numpy forward of the pre-activation unit, `.keras` round trips and its `weights`."""

import keras
import numpy as np
import pytest
from harness import assert_layer_round_trip, assert_model_round_trip
from numpy_reference import conv_same, group_norm, standardize

import keras_vit
from keras_vit import model_parts
from keras_vit.layers.resnet import PreActResNetUnit

TINY = dict(block_units=(1, 2), width=8, groups=4, input_shape=(32, 32, 3), classes=5)


def bit_parameters(block_units, width, classes, channels=3):
    """Parameters of a BiT ResNet v2 counted from its definition: bias-free conv kernels, GroupNorm scale and
    offset, the head's kernel and bias."""
    total = 7 * 7 * channels * width  # root conv, no norm in a v2 root
    inputs = width
    for stage, units in enumerate(block_units):
        filters = width * 2**stage
        for unit in range(units):
            total += 2 * inputs + inputs * filters  # gn1 on the input, conv1 1x1
            total += 2 * filters + 3 * 3 * filters * filters  # gn2, conv2 3x3
            total += 2 * filters + filters * 4 * filters  # gn3, conv3 1x1
            if unit == 0:
                total += inputs * 4 * filters  # conv_proj 1x1, no norm on a v2 shortcut
            inputs = 4 * filters
    return total + 2 * inputs + inputs * classes + classes  # pre-head GroupNorm, head


def test_bit_r50x1_parameter_count():
    model = keras_vit.BiT_R50x1(input_shape=(64, 64, 3))  # the count does not depend on the input size
    expected = bit_parameters((3, 4, 6, 3), 64, 1000)
    assert model.count_params() == expected == 25_549_352  # BiT-M R50x1 with a 1000-class head: ~25.5M
    assert model.output_shape == (None, 1000)
    assert model_parts.pooling(model).output.shape[-1] == 2048


def test_generic_builder_parameter_count_and_forward():
    model = keras_vit.BiT(**TINY)
    assert model.count_params() == bit_parameters((1, 2), 8, 5)
    probs = keras.ops.convert_to_numpy(model(np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3))))
    assert probs.shape == (2, 5)
    np.testing.assert_allclose(probs.sum(axis=-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(probs, 0.2, atol=1e-6)  # zero-initialised head, as BiT's


def test_pre_activation_unit_matches_numpy():
    unit = PreActResNetUnit(4, strides=2, groups=2)
    x = np.random.default_rng(1).standard_normal((2, 8, 8, 8)).astype("float32")
    y = keras.ops.convert_to_numpy(unit(x))
    rng = np.random.default_rng(2)
    for norm in (unit.gn1, unit.gn2, unit.gn3):  # non-trivial scales and offsets
        norm.gamma.assign(rng.uniform(0.5, 1.5, norm.gamma.shape))
        norm.beta.assign(rng.uniform(-0.5, 0.5, norm.beta.shape))
    y = keras.ops.convert_to_numpy(unit(x))

    def gn(layer, v):
        return group_norm(v, layer.gamma.numpy(), layer.beta.numpy(), 2)

    def conv(layer, v, stride=1):
        return conv_same(v, standardize(layer.kernel.numpy().astype(np.float64)), stride)

    x64 = x.astype(np.float64)
    preact = np.maximum(gn(unit.gn1, x64), 0)
    shortcut = conv(unit.conv_proj, preact, 2)
    h = conv(unit.conv1, preact)
    h = conv(unit.conv2, np.maximum(gn(unit.gn2, h), 0), 2)
    h = conv(unit.conv3, np.maximum(gn(unit.gn3, h), 0))
    np.testing.assert_allclose(y, h + shortcut, atol=1e-4)
    assert y.shape == (2, 4, 4, 16)


def test_identity_unit_has_no_projection():
    unit = PreActResNetUnit(4, groups=2)
    unit.build((None, 8, 8, 16))
    assert unit.conv_proj is None


def test_round_trips_in_safe_mode(tmp_path):
    feats = np.random.default_rng(3).standard_normal((2, 8, 8, 16)).astype("float32")
    assert_layer_round_trip(PreActResNetUnit(4, groups=2, name="identity_unit"), feats, tmp_path, atol=1e-5)
    assert_layer_round_trip(PreActResNetUnit(8, strides=2, groups=4, name="proj_unit"), feats, tmp_path, atol=1e-5)
    model = keras_vit.BiT(**TINY)
    for layer in model.layers:  # non-zero head and norms, so that the outputs say something
        for weight in layer.weights:
            weight.assign(np.random.default_rng(4).normal(0, 0.2, weight.shape) + (1.0 if "gamma" in weight.path else 0))
    images = np.random.default_rng(5).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    assert_model_round_trip(model, images, tmp_path, atol=1e-5)


def test_weights_file_loads_and_checkpoints_are_refused(tmp_path):
    model = keras_vit.BiT(**TINY)
    model_parts.head(model).kernel.assign(np.ones(model_parts.head(model).kernel.shape))
    path = str(tmp_path / "bit.weights.h5")
    model.save_weights(path)
    loaded = keras_vit.BiT(**TINY, weights=path)
    np.testing.assert_array_equal(model_parts.head(loaded).kernel.numpy(), 1.0)
    for weights in ("imagenet", "BiT-M-R50x1.npz", str(tmp_path / "missing.npz")):
        with pytest.raises(ValueError, match="BiT checkpoints are not supported"):
            keras_vit.BiT_R50x1(weights=weights)


@pytest.mark.parametrize("pooling, shape", [(None, (None, 4, 4, 64)), ("avg", (None, 64)), ("max", (None, 64))])
def test_without_top(pooling, shape):
    model = keras_vit.BiT(**dict(TINY, classes=None), include_top=False, pooling=pooling)
    assert model.output_shape == shape


@pytest.mark.parametrize("kwargs, match", [
    (dict(block_units=()), "block_units"),
    (dict(block_units=(1, 0)), "block_units"),
    (dict(width=12, groups=8), "divisible"),
    (dict(pooling="token", include_top=False), "pooling"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        keras_vit.BiT(**{**TINY, **kwargs})


def test_fewshot_representation_is_the_pooled_features():
    from training import fewshot

    representation = fewshot.representation_model(keras_vit.BiT(**TINY))
    assert representation.output_shape == (None, 64)


@pytest.mark.parametrize("name", ["keras_vit.bit", "keras_vit.flops", "keras_vit.layers.resnet"])
def test_docstring_examples(name):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_pre_activation_norms_start_at_identity():
    unit = PreActResNetUnit(4, groups=2)
    unit.build((None, 8, 8, 16))
    for norm in (unit.gn1, unit.gn2, unit.gn3):
        np.testing.assert_array_equal(norm.gamma.numpy(), 1.0)
    assert unit.gn_proj is None
