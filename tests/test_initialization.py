"""keras_vit.initialization: `scratch` (the default for weights=None) and `official` (the Flax code's); a
checkpoint is unaffected."""

import math

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import initialization, model_parts

ARGS = dict(image_size=32, patch_size=4, hidden_size=64, num_layers=2, num_heads=4, mlp_dim=128, classes=10)


def _std(variable):
    return float(np.std(keras.ops.convert_to_numpy(variable)))


def test_scratch_is_the_default_and_has_the_scales_of_keras_own_layers():
    keras.utils.set_random_seed(0)
    model = keras_vit.ViT(**ARGS)
    # What Keras draws for the same kernels: a Conv2D patchify, GlorotUniform on the multi-axis attention
    # kernels with its default (convolution-style) fans, a Dense head; Keras' code, not ours.
    conv = keras.layers.Conv2D(64, 4, strides=4)
    conv.build((None, 32, 32, 3))
    glorot = keras.initializers.GlorotUniform(seed=1)
    head = keras.layers.Dense(10)
    head.build((None, 64))
    projection = model_parts.patch_encoder(model).projection.kernel
    assert _std(projection) == pytest.approx(_std(conv.kernel), rel=0.1)
    attention = model_parts.encoder_blocks(model)[0].attention
    assert _std(attention.query.kernel) == pytest.approx(_std(glorot((64, 4, 16))), rel=0.1)
    assert _std(attention.out.kernel) == pytest.approx(_std(glorot((4, 16, 64))), rel=0.1)
    assert _std(attention.query.kernel) == pytest.approx(math.sqrt(6 / (4 * 64 + 16 * 64)) / math.sqrt(3), rel=0.1)
    assert _std(model_parts.head(model).kernel) == pytest.approx(_std(head.kernel), rel=0.15)
    limit = math.sqrt(6.0 / (48 + 16 * 64))  # Conv2D (4, 4, 3, 64): fans 4*4*3 and 4*4*64
    assert np.abs(keras.ops.convert_to_numpy(projection)).max() <= limit


def test_official_is_the_flax_codes_and_scratch_differs_from_it():
    keras.utils.set_random_seed(0)
    official = keras_vit.ViT(**ARGS, initialization="official")
    assert not np.any(keras.ops.convert_to_numpy(model_parts.head(official).kernel))  # zero head
    projection = model_parts.patch_encoder(official).projection.kernel
    assert _std(projection) == pytest.approx(1 / math.sqrt(48), rel=0.1)  # lecun_normal, fan_in 48
    query = model_parts.encoder_blocks(official)[0].attention.query.kernel
    assert _std(query) == pytest.approx(math.sqrt(6 / 128) / math.sqrt(3), rel=0.1)  # (D, D) Glorot
    scratch = keras_vit.ViT(**ARGS)
    assert _std(model_parts.patch_encoder(scratch).projection.kernel) < _std(projection) / 2


def test_scratch_is_repeatable_with_the_keras_seed_and_keeps_the_rest():
    keras.utils.set_random_seed(3)
    first = keras_vit.ViT(**ARGS)
    keras.utils.set_random_seed(3)
    again = keras_vit.ViT(**ARGS)
    for a, b in zip(first.weights, again.weights):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b))
    block = model_parts.encoder_blocks(first)[0]
    assert _std(block.mlp_dense_1.kernel) == pytest.approx(math.sqrt(6 / 192) / math.sqrt(3), rel=0.1)


@pytest.mark.parametrize("options, fan_in, patch_area", [
    (dict(tokenizer="shifted_patches"), 4 * 4 * 5 * 3, 16),  # Conv2D (4, 4, 15, 64) over the five stacked images
    (dict(tokenizer="conv"), 64, 1),  # a 1x1 Conv2D over the stem's 64 channels
    (dict(hybrid=dict(block_units=(), width=8, groups=4), patch_size=8), 2 * 2 * 8, 4),  # 2x2 patches of the root map
])
def test_the_patch_projection_has_the_fans_of_the_convolution_it_stands_for(options, fan_in, patch_area):
    keras.utils.set_random_seed(0)
    projection = model_parts.patch_encoder(keras_vit.ViT(**{**ARGS, **options})).projection.kernel
    assert projection.shape[0] == fan_in
    limit = math.sqrt(6.0 / (fan_in + patch_area * 64))  # Glorot uniform with Conv2D fans, by hand
    values = np.abs(keras.ops.convert_to_numpy(projection))
    assert values.max() <= limit and values.max() > 0.9 * limit


def test_a_hybrid_and_a_headless_model_are_initialised_too():
    tiny_stem = dict(block_units=(1, 1), width=8, groups=4)
    hybrid = keras_vit.ViT(image_size=32, patch_size=8, hybrid=tiny_stem, hidden_size=32, num_layers=1,
                           num_heads=2, mlp_dim=64, classes=3)
    assert np.any(keras.ops.convert_to_numpy(model_parts.head(hybrid).kernel))
    headless = keras_vit.ViT(**{**ARGS, "classes": None}, include_top=False)
    assert model_parts.head(headless) is None


def test_a_checkpoint_refuses_scratch_and_unknown_schemes_are_named(tmp_path):
    path = str(tmp_path / "m.weights.h5")
    keras_vit.ViT(**ARGS).save_weights(path)
    with pytest.raises(ValueError, match=r"initialization='scratch'.*Leave it unset"):
        keras_vit.ViT(**ARGS, weights=path, initialization="scratch")
    loaded = keras_vit.ViT(**ARGS, weights=path, initialization="official")
    assert loaded.count_params() > 0
    with pytest.raises(ValueError, match=r"initialization.*'glorot'"):
        keras_vit.ViT(**ARGS, initialization="glorot")
    with pytest.raises(ValueError, match=r"Unknown initialization. Received: initialization='x'"):
        initialization.initialize(keras_vit.ViT(**ARGS), "x")
