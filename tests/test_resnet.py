"""The hybrid's ResNet stem (StdConv2D, ResNetUnit, ResNetStem), its official names and the R50+ViT-B/16
model, against the independent numpy forward of tests/numpy_reference.py (written from the official Flax code,
google-research/vision_transformer, vit_jax/models_resnet.py and vit_jax/models_vit.py); the other published
hybrids: tests/test_hybrids.py."""

import keras
import numpy as np
import pytest
from harness import assert_layer_round_trip, assert_model_round_trip
from numpy_reference import (conv_same, max_pool_same, numpy_stem, random_official_params,
                             random_resnet_params, standardize, vit_forward)

import keras_vit
from keras_vit import model_parts
from keras_vit.checkpoints.resnet_names import canonical_resnet_array, is_resnet_key, resnet_targets
from keras_vit.layers.resnet import ResNetStem, ResNetUnit, StdConv2D
from keras_vit.variants import VARIANTS

TINY_STEM = dict(block_units=(2, 1, 1), width=8, groups=4)
"""Three stages (stride 16) like R50, the first with an identity-shortcut unit; channels 8 -> 128."""


def r50_vit_count(image=224, classes=1000, block_units=(3, 4, 9), width=64, d=768, mlp=3072, layers=12, patch=1):
    """Parameters of a hybrid (R50+ViT-B/16 by default) written out from the official architecture (not from
    keras_vit): `patch` is the embedding's side on the stem's map, whose stride is 2 (conv_root) * 2 (max pool)
    * 2 per stage after the first."""
    stride = 4 * 2 ** max(len(block_units) - 1, 0)
    n = 7 * 7 * 3 * width + 2 * width  # conv_root (no bias) + gn_root
    c = width
    for s, count in enumerate(block_units):
        f = width * 2**s
        for u in range(count):
            n += c * f + 9 * f * f + f * 4 * f + 2 * (f + f + 4 * f)
            if c != 4 * f or (s > 0 and u == 0):
                n += c * 4 * f + 2 * 4 * f
            c = 4 * f
    tokens = (image // (stride * patch)) ** 2 + 1
    block = 2 * 2 * d + 4 * (d * d + d) + (d * mlp + mlp) + (mlp * d + d)
    return n + (patch * patch * c * d + d) + d + tokens * d + layers * block + 2 * d + d * classes + classes


def np_(x):
    return keras.ops.convert_to_numpy(x)


def _assign(targets, params):
    assert set(targets) == set(params)
    for key, variable in targets.items():
        value = canonical_resnet_array(key, params[key])
        assert tuple(variable.shape) == value.shape, key
        variable.assign(value)


# ---------------------------------------------------------------- numerics

def test_numpy_reference_conv_and_pool_agree_with_hand_computed_values():
    x = np.arange(16, dtype=float).reshape(1, 4, 4, 1)
    # 3x3 ones kernel, stride 2, SAME on 4x4: pad (0, 1); output (0, 0) sums rows 0-2, cols 0-2.
    y = conv_same(x, np.ones((3, 3, 1, 1)), 2)
    assert y.shape == (1, 2, 2, 1)
    assert y[0, 0, 0, 0] == sum([0, 1, 2, 4, 5, 6, 8, 9, 10])
    assert y[0, 1, 1, 0] == sum([10, 11, 14, 15])
    assert max_pool_same(x)[0, :, :, 0].tolist() == [[10, 11], [14, 15]]
    w = np.array([1.0, 3.0]).reshape(1, 1, 2, 1)
    np.testing.assert_allclose(standardize(w, eps=0.0).ravel(), [-1.0, 1.0])


def test_std_conv_standardizes_the_kernel_and_pads_like_xla():
    layer = StdConv2D(5, 3, strides=2)
    x = np.random.default_rng(0).standard_normal((2, 9, 6, 4)).astype("float32")
    out = np_(layer(x))
    w = np_(layer.kernel).astype("float64")
    np.testing.assert_allclose(out, conv_same(x.astype("float64"), standardize(w), 2), rtol=1e-4, atol=1e-4)
    assert out.shape == (2, 5, 3, 5) == layer.compute_output_shape(x.shape)


@pytest.mark.parametrize("shape", [(2, 32, 32, 3), (1, 30, 22, 3)])
def test_stem_matches_independent_numpy_forward(shape):
    stem = ResNetStem(**TINY_STEM)
    x = np.random.default_rng(1).uniform(-1, 1, shape).astype("float32")
    stem.build(x.shape)
    params = random_resnet_params(np.random.default_rng(2), TINY_STEM["block_units"], TINY_STEM["width"])
    _assign(resnet_targets(stem), params)
    expected = numpy_stem({k: v.astype("float64") for k, v in params.items()}, x.astype("float64"),
                          TINY_STEM["block_units"], TINY_STEM["groups"])
    out = np_(stem(x))
    assert out.shape == expected.shape == stem.compute_output_shape(x.shape)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


def test_unit_projects_its_shortcut_when_channels_or_stride_change():
    for filters, strides, channels, projects in [(4, 1, 16, False), (4, 2, 16, True), (4, 1, 8, True)]:
        unit = ResNetUnit(filters, strides=strides, groups=2)
        unit.build((None, 8, 8, channels))
        assert (unit.conv_proj is not None) == projects
        assert len(unit.weights) == 9 + 3 * projects


def test_r50_stem_shapes_strides_and_zero_initialised_last_norm():
    stem = ResNetStem()
    assert stem.compute_output_shape((None, 224, 224, 3)) == (None, 14, 14, 1024)
    assert stem.compute_output_shape((None, 384, 384, 3)) == (None, 24, 24, 1024)
    assert [u.name for u in stem.units][:4] == ["block1_unit1", "block1_unit2", "block1_unit3", "block2_unit1"]
    assert len(stem.units) == 16 and stem.stride == 16
    assert [u.strides for u in stem.units if u.strides != 1] == [2, 2]
    stem.build((None, 64, 64, 3))
    assert all(np.all(np_(u.gn3.gamma) == 0) for u in stem.units)  # official gn3 scale_init=zeros
    assert np.all(np_(stem.gn_root.gamma) == 1) and np.all(np_(stem.units[0].gn1.gamma) == 1)


# ---------------------------------------------------------------- official names

def test_resnet_targets_cover_the_official_r50_keys_once():
    stem = ResNetStem()
    stem.build((None, 224, 224, 3))
    targets = resnet_targets(stem)
    expected = random_resnet_params(np.random.default_rng(0), (3, 4, 9), 64)  # official layout (numpy_reference)
    assert sorted(targets) == sorted(expected)
    assert {k: tuple(v.shape) for k, v in targets.items()} == {k: v.shape for k, v in expected.items()}
    assert len({id(v) for v in targets.values()}) == len(targets) == len(stem.weights)
    proj_units = sorted(k.split("/conv_proj")[0] for k in targets if "conv_proj" in k)
    assert proj_units == ["block1/unit1", "block2/unit1", "block3/unit1"]
    assert all(is_resnet_key(k) for k in targets)
    assert not is_resnet_key("embedding/kernel") and not is_resnet_key("Transformer/encoder_norm/scale")


def test_pre_linen_group_norm_shapes_are_squeezed():
    a = np.arange(4, dtype="float32").reshape(1, 1, 1, 4)
    assert canonical_resnet_array("block1/unit1/gn_proj/scale", a).shape == (4,)
    assert canonical_resnet_array("gn_root/bias", a).shape == (4,)
    kernel = np.zeros((1, 1, 1, 4), "float32")
    assert canonical_resnet_array("block1/unit1/conv1/kernel", kernel).shape == (1, 1, 1, 4)


def test_resnet_targets_needs_a_built_layer():
    with pytest.raises(ValueError, match="not built"):
        resnet_targets(ResNetStem(**TINY_STEM))


# ---------------------------------------------------------------- layer contract

def test_layers_round_trip(tmp_path):
    x = np.random.default_rng(3).standard_normal((2, 32, 32, 3)).astype("float32")
    assert_layer_round_trip(StdConv2D(4, 3, strides=2, name="std_conv"), x, tmp_path, atol=1e-5)
    feats = np.random.default_rng(4).standard_normal((2, 8, 8, 16)).astype("float32")
    assert_layer_round_trip(ResNetUnit(4, groups=2, name="identity_unit"), feats, tmp_path, atol=1e-5)
    assert_layer_round_trip(ResNetUnit(8, strides=2, groups=4, name="proj_unit"), feats, tmp_path, atol=1e-5)
    stem = ResNetStem(**TINY_STEM, name="stem")
    assert stem.get_config()["block_units"] == [2, 1, 1]
    assert_layer_round_trip(stem, x, tmp_path, atol=1e-5)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(block_units=(3, 0)), r"block_units.*Received: block_units=\(3, 0\)"),
        (dict(block_units=3), r"block_units.*Received: block_units=3"),
        (dict(width=12, groups=8), r"divisible by `groups`.*width=12, groups=8"),
        (dict(width=0), r"width.*Received: width=0"),
    ],
)
def test_stem_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ResNetStem(**kwargs)


# ---------------------------------------------------------------- the hybrid ViT

TINY_HYBRID = dict(image_size=32, patch_size=16, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, classes=5)


def _official_params_of(model):
    """The model's weights in the official layout: ViT part read by attribute, ResNet via resnet_targets."""
    from test_layers import _block_params

    enc = model_parts.patch_encoder(model)
    channels = enc.projection.kernel.shape[0]
    params = {
        "embedding/kernel": np_(enc.projection.kernel).reshape(1, 1, channels, -1),
        "embedding/bias": np_(enc.projection.bias), "cls": np_(enc.class_token),
        "Transformer/posembed_input/pos_embedding": np_(enc.position_embedding),
        "Transformer/encoder_norm/scale": np_(model_parts.encoder_norm(model).gamma),
        "Transformer/encoder_norm/bias": np_(model_parts.encoder_norm(model).beta),
        "head/kernel": np_(model_parts.head(model).kernel), "head/bias": np_(model_parts.head(model).bias),
    }
    for i in range(TINY_HYBRID["num_layers"]):
        for k, v in _block_params(model_parts.encoder_blocks(model)[i]).items():
            params[f"Transformer/encoderblock_{i}/{k}"] = v
    params.update({k: np_(v) for k, v in resnet_targets(model_parts.resnet_stem(model)).items()})
    return {k: np.asarray(v, "float64") for k, v in params.items()}


def _reference_logits(params, images):
    features = numpy_stem(params, images.astype("float64"), TINY_STEM["block_units"], TINY_STEM["groups"])
    return vit_forward(params, features, classifier="token", approximate_gelu=True)


def test_hybrid_vit_layers_and_numpy_forward(images):
    model = keras_vit.ViT(**TINY_HYBRID, hybrid=TINY_STEM, classifier_activation=None)
    names = [layer.name for layer in model.layers]
    assert names[:4] == ["images", "resnet_stem", "patches", "patch_encoder"]
    assert model_parts.patches(model).patch_size == 1
    assert model_parts.patch_encoder(model).position_embedding.shape == (1, 5, 32)  # 2x2 grid + [class]
    rng = np.random.default_rng(5)
    model.set_weights([rng.standard_normal(w.shape).astype("float32") * 0.2 for w in model.get_weights()])
    expected = _reference_logits(_official_params_of(model), images)
    np.testing.assert_allclose(model.predict(images, verbose=0), expected, rtol=1e-4, atol=1e-4)


def test_hybrid_vit_round_trips_and_every_weight_gets_a_gradient(images, tmp_path):
    model = keras_vit.ViT(**TINY_HYBRID, hybrid=TINY_STEM)
    rng = np.random.default_rng(6)
    model.set_weights([rng.standard_normal(w.shape).astype("float32") * 0.2 for w in model.get_weights()])
    assert_model_round_trip(model, images, tmp_path, atol=1e-5)
    import tensorflow as tf

    with tf.GradientTape() as tape:
        loss = keras.ops.sum(model(images, training=True) * np.arange(5, dtype="float32"))
    grads = tape.gradient(loss, model.trainable_variables)
    stem_vars = {id(v) for v in model_parts.resnet_stem(model).trainable_variables}
    for var, grad in zip(model.trainable_variables, grads):
        if id(var) in stem_vars:
            assert grad is not None and np.any(np_(grad) != 0), var.path


def test_hybrid_vit_under_mixed_precision(images):
    keras.config.set_dtype_policy("mixed_bfloat16")
    model = keras_vit.ViT(**TINY_HYBRID, hybrid=TINY_STEM)
    stem = model_parts.resnet_stem(model)
    assert stem.conv_root.kernel.dtype == "float32" and stem.compute_dtype == "bfloat16"
    out = np_(model(images))
    assert out.dtype == np.float32 and np.all(np.isfinite(out))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(hybrid="r18"), r"Unknown hybrid stem.*'r18'.*r50"),
        (dict(hybrid="r50", patch_size=8), r"stride of its ResNet stem \(16\).*patch_size=8"),
        (dict(hybrid="r50", image_size=40), r"divisible by the patch size 16.*40"),
        (dict(hybrid=dict(block_units=(1,), depth=3), patch_size=4), r"Unknown ResNetStem arguments \['depth'\]"),
        (dict(hybrid=3), r"`hybrid` must be None.*Received: hybrid=3"),
    ],
)
def test_hybrid_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        keras_vit.ViT(**{**TINY_HYBRID, **kwargs})


# ---------------------------------------------------------------- R50+ViT-B/16

def test_r50_b16_parameter_count_matches_the_official_architecture():
    # timm's vit_base_resnet50_384 (the port of the official R50+ViT-B_16 at 384, 1000 classes) has
    # 98,950,952 parameters (timm model card: 99.0M); our count written from the official code agrees.
    assert r50_vit_count(image=384) == 98_950_952
    variant = VARIANTS["R50_B16"]
    assert (variant.hybrid, variant.patch_size, variant.hidden_size) == ("r50", 16, 768)
    model = keras_vit.ViT_R50_B16(weights=None)
    assert model.name == "vit_r50_b16"
    assert model.count_params() == r50_vit_count(image=224) == 98_659_112
    assert model_parts.resnet_stem(model).output.shape == (None, 14, 14, 1024)
    assert model_parts.patch_encoder(model).position_embedding.shape == (1, 197, 768)
    assert "R50+ViT-B/16" in keras_vit.ViT_R50_B16.__doc__


# ---------------------------------------------------------------- loading an official-layout hybrid .npz

@pytest.mark.parametrize("gn_shape_4d", [True, False])
def test_hybrid_loads_an_official_layout_npz_exactly(images, tmp_path, gn_shape_4d):
    """A tiny R50+ViT-style file in the released layout (pre-Linen (1, 1, 1, C) GroupNorm vectors, or the
    Linen (C,) ones), loaded by `weights=path`, reproduces the numpy forward run on the file's arrays."""
    rng = np.random.default_rng(7)
    params = random_resnet_params(rng, TINY_STEM["block_units"], TINY_STEM["width"], gn_shape_4d=gn_shape_4d)
    params.update(random_official_params(rng, image_size=2, patch_size=1, channels=128, hidden=32, layers=2,
                                         heads=4, mlp=64, classes=5))
    path = tmp_path / "R50+ViT-tiny.npz"
    np.savez(path, **params)
    model = keras_vit.ViT(hybrid=TINY_STEM, weights=str(path), classifier_activation=None)
    assert model_parts.resnet_stem(model).get_config()["block_units"] == [2, 1, 1]
    expected = _reference_logits({k: canonical_resnet_array(k, v).astype("float64") for k, v in params.items()},
                                 images)
    np.testing.assert_allclose(model.predict(images, verbose=0), expected, rtol=1e-4, atol=1e-4)


def test_a_root_only_hybrid_checkpoint_loads_exactly(tmp_path, images):
    """`resnet.num_layers = ()` in the official configs: conv_root, gn_root, relu, max pool (stride 4)."""
    from numpy_reference import numpy_stem, random_resnet_params

    rng = np.random.default_rng(4)
    params = random_resnet_params(rng, (), 8)
    params.update(random_official_params(rng, image_size=8, patch_size=1, channels=8, hidden=32, layers=2, heads=4,
                                         mlp=64, classes=5))
    path = tmp_path / "R+ViT-root-only.npz"
    np.savez(path, **params)
    model = keras_vit.ViT(hybrid=dict(block_units=(), width=8, groups=4), weights=str(path),
                          classifier_activation=None)
    assert model_parts.resnet_stem(model).block_units == () and model.input_shape == (None, 32, 32, 3)
    assert model_parts.patches(model).patch_size == 1
    params64 = {k: v.astype("float64") for k, v in params.items()}
    expected = vit_forward(params64, numpy_stem(params64, images.astype("float64"), (), 4))
    np.testing.assert_allclose(model.predict(images, verbose=0), expected, rtol=1e-4, atol=1e-4)


def test_a_hybrid_checkpoint_with_larger_patches_loads(tmp_path):
    """2x2 patches on the root's stride-4 map, as R+ViT-Ti/16's 8x8 (issue 27; numerics: tests/test_hybrids.py)."""
    from numpy_reference import random_resnet_params

    rng = np.random.default_rng(4)
    params = random_resnet_params(rng, (), 8)
    params.update(random_official_params(rng, image_size=8, patch_size=2, channels=8))
    np.savez(tmp_path / "R+ViT-Ti_16-like.npz", **params)
    model = keras_vit.ViT(hybrid=dict(block_units=(), width=8, groups=4), weights=str(tmp_path / "R+ViT-Ti_16-like.npz"))
    assert model.input_shape == (None, 32, 32, 3) and model_parts.patches(model).patch_size == 2
