"""The small-data options of `keras_vit.ViT`: `tokenizer="conv"` / `"shifted_patches"` and `locality_attention`
(keras_vit/layers/tokenizers.py, keras_vit/layers/attention.py): values against hand computations, a gradient
through each, round trips, transfer of one's own model, and refusals on published checkpoints."""

import math

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.layers import MultiHeadSelfAttention
from keras_vit.layers.tokenizers import ConvStem, ShiftedPatches, conv_stem_widths

SMALL = dict(input_shape=(16, 16, 1), patch_size=4, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32, classes=3)
OPTIONS = [dict(tokenizer="conv"), dict(tokenizer="shifted_patches"), dict(locality_attention=True),
           dict(tokenizer="conv", locality_attention=True)]


def test_shifted_patches_concatenate_the_four_diagonal_shifts_by_half_a_patch():
    image = np.arange(16, dtype="float32").reshape(1, 4, 4, 1)  # pixel (r, c) holds 4r + c
    out = keras.ops.convert_to_numpy(ShiftedPatches(2, epsilon=1e-6)(image))
    assert out.shape == (1, 4, 2 * 2 * 5)
    # By hand, the first 2x2 patch (pixels (0,0), (0,1), (1,0), (1,1)) of the image and of each shift by one
    # pixel: the shift (dy, dx) shows the original pixel (r + dy, c + dx), zero outside the image.
    original = [0, 1, 4, 5]
    up_left = [0, 0, 0, 0]  # (r-1, c-1): only (1, 1) -> (0, 0) is inside, and it holds 0
    up_right = [0, 0, 1, 2]  # (r-1, c+1): (1, 0) -> (0, 1) = 1; (1, 1) -> (0, 2) = 2
    down_left = [0, 4, 0, 8]  # (r+1, c-1): (0, 1) -> (1, 0) = 4; (1, 1) -> (2, 0) = 8
    down_right = [5, 6, 9, 10]  # (r+1, c+1)
    # (row, column, channel) order, the five images as channels; then the LayerNorm (unit scale, zero bias)
    expected = np.stack([original, up_left, up_right, down_left, down_right], axis=-1).reshape(-1).astype("float64")
    np.testing.assert_allclose(out[0, 0], (expected - expected.mean()) / np.sqrt(expected.var() + 1e-6), rtol=1e-5)


def test_locality_attention_never_attends_to_itself_and_learns_its_temperature():
    layer = MultiHeadSelfAttention(num_heads=2, locality=True)
    x = np.random.default_rng(0).standard_normal((2, 5, 8)).astype("float32")
    _, probs = layer(x, return_attention_scores=True)
    probs = keras.ops.convert_to_numpy(probs)
    np.testing.assert_array_equal(probs[:, :, np.arange(5), np.arange(5)], 0.0)
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-6)
    assert float(layer.temperature.numpy()) == pytest.approx(math.log(4 ** -0.5))  # head_dim 4
    # softmax over the other tokens of q.k * exp(temperature), by hand with numpy for one head
    q = (x.reshape(-1, 8) @ layer.query.kernel.numpy().reshape(8, -1) + layer.query.bias.numpy().reshape(-1))
    k = (x.reshape(-1, 8) @ layer.key.kernel.numpy().reshape(8, -1) + layer.key.bias.numpy().reshape(-1))
    q, k = q.reshape(2, 5, 2, 4)[0, :, 0], k.reshape(2, 5, 2, 4)[0, :, 0]
    logits = q @ k.T * 0.5
    np.fill_diagonal(logits, -np.inf)
    expected = np.exp(logits - logits.max(-1, keepdims=True))
    np.testing.assert_allclose(probs[0, 0], expected / expected.sum(-1, keepdims=True), rtol=1e-4, atol=1e-6)


def test_conv_stem_widths_and_refusals():
    assert conv_stem_widths(16, 768) == (96, 192, 384, 768)  # 768 / 8, / 4, / 2, / 1
    assert conv_stem_widths(4, 32) == (16, 32)  # at least 16
    assert ConvStem((16, 32)).stride == 4
    with pytest.raises(ValueError, match=r"power of two.*patch_size=6"):
        keras_vit.ViT(**{**SMALL, "input_shape": (12, 12, 1), "patch_size": 6}, tokenizer="conv")
    with pytest.raises(ValueError, match="tokenizer"):
        keras_vit.ViT(**SMALL, tokenizer="cnn")
    with pytest.raises(ValueError, match=r"locality_attention"):
        keras_vit.ViT(**SMALL, locality_attention="yes")
    with pytest.raises(ValueError, match=r"hybrid.*tokenizer='conv'|tokenizer='conv'.*hybrid"):
        keras_vit.ViT(image_size=32, patch_size=16, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32,
                      hybrid=dict(block_units=(1, 1, 1), width=8), tokenizer="conv")


@pytest.mark.e2e  # three .keras saves and rebuilds (tests/test_options.py keeps one per option in the default tier)
@pytest.mark.parametrize("options", OPTIONS[1:], ids=lambda o: "+".join(f"{k}={v}" for k, v in o.items()))
def test_own_model_with_options_transfers_to_other_classes_and_size(options, tmp_path):
    model = keras_vit.ViT(**SMALL, **options)
    rng = np.random.default_rng(2)
    for variable in model.weights:  # moving statistics and temperatures too, so that a skipped one shows
        variable.assign(rng.uniform(0.5, 1.5, variable.shape).astype("float32"))
    path = str(tmp_path / "own.keras")
    model.save(path)
    images = rng.random((2, 16, 16, 1)).astype("float32")
    np.testing.assert_allclose(keras_vit.ViT(weights=path)(images), model(images), rtol=1e-5)
    other = keras_vit.ViT(weights=path, classes=5, image_size=24)
    assert other.output_shape == (None, 5)
    for variable in model.weights:
        if "head" in variable.path or "position_embedding" in variable.path:
            continue
        match = [v for v in other.weights if v.path == variable.path]
        assert len(match) == 1, variable.path
        np.testing.assert_array_equal(match[0].numpy(), variable.numpy(), err_msg=variable.path)
    with pytest.raises(ValueError, match=r"tokenizer='patches' \(checkpoint: '|locality_attention=False \(checkpoint"):
        keras_vit.ViT(weights=path, tokenizer="patches", locality_attention=False)


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: "+".join(f"{k}={v}" for k, v in o.items()))
def test_published_layout_checkpoints_refuse_the_options(options, tmp_path):
    paper = keras_vit.ViT(**{**SMALL, "input_shape": (16, 16, 3)})
    path = str(tmp_path / "official.npz")
    from keras_vit.checkpoints import keras_names

    np.savez(path, **{key: (v.numpy().reshape(4, 4, 3, 16) if key == "embedding/kernel" else v.numpy())
                      for key, v in keras_names.targets(paper).items()})
    assert keras_vit.ViT(weights=path).get_config()["tokenizer"] == "patches"
    with pytest.raises(ValueError, match="does not match the requested architecture") as error:
        keras_vit.ViT(weights=path, **options)
    assert all(f"{key}={value!r} (checkpoint: " in str(error.value) for key, value in options.items())


def test_the_scratch_recipe_turns_on_what_won_and_one_flag_gives_the_papers_architecture():
    from training.config import make_config
    from training.recipes import SMALL_DATA_ARCHITECTURE

    assert SMALL_DATA_ARCHITECTURE == dict(tokenizer="shifted_patches")  # benchmarks/TRAINING.md, "Small-data options"
    chosen = make_config(None, dataset="folder:/data/letters", image_size=28)
    assert chosen.tokenizer == "shifted_patches" and chosen.locality_attention is None
    assert "small-data options --tokenizer=shifted_patches (--tokenizer=patches for the paper's" in chosen.recipe_reason
    assert chosen.model_kwargs()["tokenizer"] == "shifted_patches"
    paper = make_config(None, dataset="folder:/data/letters", image_size=28, tokenizer="patches")
    assert paper.tokenizer == "patches" and "small-data options" not in paper.recipe_reason
    assert make_config(None, dataset="folder:/data/letters", locality_attention=True).tokenizer is None
    # not for the demo, a named recipe, a BiT, or a fine-tune (a checkpoint's architecture is its own)
    assert make_config(None, dataset="digits").tokenizer is None
    assert make_config("scratch", dataset="folder:/data/letters").tokenizer is None
    assert make_config(None, dataset="folder:/data/letters", model="bit_tiny").tokenizer is None
    assert make_config(None, dataset="folder:/data/letters", model="vit_r50_b16").tokenizer is None  # its stem
    assert make_config(None, dataset="folder:/data/letters", weights="imagenet21k").tokenizer is None
