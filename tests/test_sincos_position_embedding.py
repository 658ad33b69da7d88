"""`position_embedding="sincos2d"`: big_vision's fixed 2-D sin-cos position embedding, as an option of `keras_vit.ViT`,
its layer and the training app; checkpoints with a learned table are refused for it."""

import math

import numpy as np
import pytest
from harness import run_layer_test
from numpy_reference import random_official_params

import keras_vit
from keras_vit import model_parts
from keras_vit.checkpoints import loading
from keras_vit.layers import PatchEncoder
from keras_vit.layers.patch_encoder import sincos_2d

TINY = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64, classes=3)


def test_the_table_is_big_vision_s_formula_computed_by_hand():
    rows, cols, width = 2, 3, 8
    table = sincos_2d((rows, cols), width)
    quarter = width // 4
    for index in range(rows * cols):
        y, x = divmod(index, cols)  # row-major, as Patches cuts the image
        for k in range(quarter):
            omega = 10_000.0 ** -(k / (quarter - 1))
            expected = [math.sin(x * omega), math.cos(x * omega), math.sin(y * omega), math.cos(y * omega)]
            got = [table[0, index, part * quarter + k] for part in range(4)]
            np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="divisible by 4. Received: width=6"):
        sincos_2d((2, 2), 6)
    np.testing.assert_array_equal(sincos_2d(3, 8), sincos_2d((3, 3), 8))
    for grid in ((0, 3), (2.5, 2), (1, 2, 3)):
        with pytest.raises(ValueError, match=r"positive int or a \(rows, cols\) pair. Received: grid="):
            sincos_2d(grid, 8)


def test_the_layer_passes_the_layer_checks(tmp_path):
    patches = np.random.default_rng(0).normal(size=(2, 6, 12)).astype("float32")
    run_layer_test(PatchEncoder, dict(hidden_size=8, position_embedding="sincos2d", grid=(2, 3)), patches,
                   expected_output_shape=(2, 7, 8), expected_num_trainable_weights=3, tmp_path=tmp_path)
    layer = PatchEncoder(8, use_class_token=False, position_embedding="sincos2d", grid=(2, 3))
    out = layer(np.zeros((1, 6, 12), "float32"))  # zero patches: the projection gives its bias, zero at start
    np.testing.assert_allclose(np.asarray(out), sincos_2d((2, 3), 8), atol=1e-6)
    np.testing.assert_array_equal(layer.patch_position_table(), sincos_2d((2, 3), 8))  # what section 4.5 reads
    with pytest.raises(ValueError, match="needs the patch `grid`"):
        PatchEncoder(8, position_embedding="sincos2d")


def test_the_model_has_no_position_weights_and_round_trips(tmp_path, images):
    model = keras_vit.ViT(**TINY, position_embedding="sincos2d", classifier="gap")
    learned = keras_vit.ViT(**TINY, classifier="gap")
    assert learned.count_params() - model.count_params() == 16 * 32  # a 4x4 grid of width 32, no weights
    assert model_parts.patch_encoder(model).position_embedding is None
    assert model.get_config()["position_embedding"] == "sincos2d"
    with pytest.raises(ValueError, match="divisible by 4. Received: hidden_size=30"):
        keras_vit.ViT(**{**TINY, "hidden_size": 30, "num_heads": 2}, position_embedding="sincos2d")


def test_a_sincos_model_transfers_and_a_learned_checkpoint_is_refused(tmp_path):
    model = keras_vit.ViT(**TINY, position_embedding="sincos2d")
    path = str(tmp_path / "sincos.weights.h5")
    model.save_weights(path)
    bigger = keras_vit.ViT(weights=path, image_size=48, classes=5)  # nothing to resample: the table is computed
    assert bigger.arguments["position_embedding"] == "sincos2d" and bigger.output_shape == (None, 5)
    np.testing.assert_array_equal(model_parts.patch_encoder(bigger).projection.kernel.numpy(),
                                  model_parts.patch_encoder(model).projection.kernel.numpy())
    with pytest.raises(ValueError, match=r"position_embedding='learned' \(checkpoint: 'sincos2d'\)"):
        keras_vit.ViT(weights=path, position_embedding="learned")
    npz = str(tmp_path / "official.npz")
    np.savez(npz, **random_official_params(np.random.default_rng(0)))
    with pytest.raises(ValueError, match=r"position_embedding='sincos2d' \(checkpoint: 'learned'\)"):
        keras_vit.ViT(weights=npz, position_embedding="sincos2d")
    params = random_official_params(np.random.default_rng(0))
    del params["Transformer/posembed_input/pos_embedding"]  # a published layout always has one
    np.savez(npz, **params)
    with pytest.raises(ValueError, match="official.npz' does not look like a ViT checkpoint: it has no "
                                         "'Transformer/posembed_input/pos_embedding'"):
        keras_vit.ViT(weights=npz, position_embedding="sincos2d")
    with pytest.raises(ValueError, match="official.npz' does not look like a ViT checkpoint"):
        loading.load_weights(model, npz)  # into a model that has no table: still refused


def test_section_4_5_inspection_reads_the_fixed_table(tmp_path):
    from keras_vit.inspect.report import write_report

    model = keras_vit.ViT(**TINY, position_embedding="sincos2d")
    summary = write_report(model, np.zeros((1, 32, 32, 3)), str(tmp_path))
    assert any(path.endswith("position_similarity.png") for path in summary["files"])


def test_the_app_builds_it_from_its_flag():
    from training.config import make_config
    from training.model import model_from_config

    cfg = make_config(None, dataset="folder:/data/x", image_size=16, position_embedding="sincos2d")
    assert model_from_config(cfg, num_classes=3).arguments["position_embedding"] == "sincos2d"
    with pytest.raises(ValueError, match="--position_embedding=sincos2d applies to ViT models only"):
        make_config(None, dataset="folder:/data/x", model="bit_tiny", position_embedding="sincos2d")
