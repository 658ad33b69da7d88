"""keras_vit.inspect: rollout, attention distance, position similarity, filters, attention access, CLI."""

import math

import keras
import numpy as np
import pytest
from numpy_reference import attention as reference_attention
from numpy_reference import encoder_block as reference_block
from numpy_reference import layer_norm
from test_layers import _block_params as official_block_params  # block weights under the .npz names

import keras_vit
from keras_vit import inspect, model_parts


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# --- rollout -----------------------------------------------------------------------------------------


def test_rollout_rows_sum_to_one():
    rng = np.random.default_rng(0)
    attentions = [_softmax(rng.normal(size=(2, 3, 5, 5)) * 3) for _ in range(4)]
    rollout = inspect.attention_rollout(attentions)
    assert rollout.shape == (2, 5, 5)
    np.testing.assert_allclose(rollout.sum(-1), 1.0, atol=1e-12)


def test_rollout_of_attention_on_self_is_identity():
    eye = np.broadcast_to(np.eye(6), (2, 4, 6, 6))
    np.testing.assert_allclose(inspect.attention_rollout([eye, eye, eye]), np.broadcast_to(np.eye(6), (2, 6, 6)))


def test_rollout_matches_hand_computation():
    # Uniform attention over 2 tokens: each layer gives A = (U + I) / 2 = [[.75, .25], [.25, .75]];
    # two layers: A @ A = [[.625, .375], [.375, .625]].
    uniform = np.full((1, 2, 2, 2), 0.5)
    np.testing.assert_allclose(inspect.attention_rollout([uniform, uniform])[0], [[0.625, 0.375], [0.375, 0.625]])


def test_rollout_maps_read_class_row_or_token_mean():
    rollout = np.zeros((1, 5, 5))
    rollout[0, 0, 3] = 1.0  # the class token draws only from patch token 3 = grid cell (1, 0)
    rollout[0, 1:, 1:] = np.eye(4)
    maps = inspect.rollout_maps(rollout, (2, 2), num_prefix_tokens=1)
    np.testing.assert_allclose(maps[0], [[0.0, 0.0], [1.0, 0.0]])
    gap = np.broadcast_to(np.eye(4), (1, 4, 4)).copy()
    gap[0, :, 1] = 3.0  # every token draws most from patch 1 = grid cell (0, 1); column means 1/4, 3, 1/4, 1/4
    np.testing.assert_allclose(inspect.rollout_maps(gap, (2, 2), 0)[0], [[1 / 12, 1.0], [1 / 12, 1 / 12]])


def test_resize_bilinear_matches_tensorflow_half_pixel_resize():
    import tensorflow as tf

    maps = np.random.default_rng(1).uniform(size=(2, 3, 4))
    expected = tf.image.resize(maps[..., None], (12, 10), method="bilinear").numpy()[..., 0]
    np.testing.assert_allclose(inspect.resize_bilinear(maps, (12, 10)), expected, atol=1e-6)


def test_rollout_rejects_bad_shapes():
    with pytest.raises(ValueError, match="Received: shape"):
        inspect.attention_rollout([np.ones((2, 5, 5))])
    with pytest.raises(ValueError, match="T = 2\\*2 \\+ 1"):
        inspect.rollout_maps(np.ones((1, 4, 4)), (2, 2), 1)


# --- attention distance ------------------------------------------------------------------------------


def test_distance_is_zero_for_attention_on_self():
    eye = np.broadcast_to(np.eye(17), (2, 3, 17, 17))
    np.testing.assert_allclose(inspect.mean_attention_distance(eye, (4, 4), 16, num_prefix_tokens=1), 0.0)


def test_distance_on_a_2x2_grid_matches_hand_computation():
    # Uniform attention over a 2x2 grid of 16-pixel patches: from any patch the distances are
    # 0, 16, 16 and 16*sqrt(2), mean (32 + 16 sqrt 2) / 4 = 13.657 px.
    expected = (32 + 16 * math.sqrt(2)) / 4
    uniform = np.full((1, 2, 4, 4), 0.25)
    np.testing.assert_allclose(inspect.mean_attention_distance(uniform, (2, 2), 16), [expected, expected])
    # With a class token holding some mass, the patch weights are renormalised: same distance.
    with_cls = np.full((1, 1, 5, 5), 0.2)
    np.testing.assert_allclose(inspect.mean_attention_distance(with_cls, (2, 2), 16, 1), [expected])
    # Each patch attends only to its horizontal neighbour, patches 16 high and 8 wide: 8 px.
    neighbour = np.array([[0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 1], [0, 0, 1, 0]], float)[None, None]
    np.testing.assert_allclose(inspect.mean_attention_distance(neighbour, (2, 2), (16, 8)), [8.0])


def test_distance_of_several_layers_is_layers_by_heads():
    layers = [np.full((2, 3, 4, 4), 0.25)] * 5
    assert inspect.mean_attention_distance(layers, (2, 2), 16).shape == (5, 3)


# --- position embedding similarity and filters -------------------------------------------------------


def test_similarity_grid_has_ones_on_its_diagonal_and_ignores_the_class_token():
    rng = np.random.default_rng(2)
    embedding = rng.normal(size=(1, 1 + 12, 8))
    similarity = inspect.position_embedding_similarity(embedding, (3, 4), 1)
    assert similarity.shape == (3, 4, 3, 4)
    flat = similarity.reshape(12, 12)
    np.testing.assert_allclose(np.diag(flat), 1.0)
    patches = embedding[0, 1:]
    a, b = patches[2], patches[7]
    np.testing.assert_allclose(similarity[0, 2, 1, 3], a @ b / np.linalg.norm(a) / np.linalg.norm(b))
    embedding[0, 0] *= 1000
    np.testing.assert_allclose(inspect.position_embedding_similarity(embedding, (3, 4), 1), similarity)


def test_embedding_filters_are_orthonormal_principal_components():
    rng = np.random.default_rng(3)
    patch, channels, width = 4, 3, 40
    kernel = rng.normal(size=(patch * patch * channels, width)) * np.linspace(3, 0.1, patch * patch * channels)[:, None]
    filters = inspect.embedding_filters(kernel, patch, channels, num_components=10)
    assert filters.shape == (10, patch, patch, channels)
    flat = filters.reshape(10, -1)
    np.testing.assert_allclose(flat @ flat.T, np.eye(10), atol=1e-10)
    # Reference: eigenvectors of the covariance of the filters (one filter per kernel column).
    eigenvalues, eigenvectors = np.linalg.eigh(np.cov(kernel))
    reference = eigenvectors[:, np.argsort(eigenvalues)[::-1][:10]].T
    np.testing.assert_allclose(np.abs(np.sum(flat * reference, axis=1)), 1.0, atol=1e-8)


def test_embedding_filters_reject_a_wrong_kernel():
    with pytest.raises(ValueError, match="Received: shape"):
        inspect.embedding_filters(np.ones((10, 4)), 4, 3)


# --- attention access on a model ---------------------------------------------------------------------


@pytest.mark.parametrize("classifier", ["token", "gap"])
def test_attention_probabilities_match_numpy_and_leave_the_model_unchanged(tiny, images, classifier):
    model = keras_vit.ViT(**tiny, classifier=classifier)
    # Non-trivial weights: random LayerNorm scales and position embeddings make attention uneven.
    rng = np.random.default_rng(4)
    for weight in model.weights:
        weight.assign(weight.numpy() + rng.normal(size=weight.shape).astype("float32") * 0.3)
    before = model.predict(images, verbose=0)
    layer_count = len(model.layers)

    probabilities = inspect.attention_probabilities(model, images)

    np.testing.assert_array_equal(model.predict(images, verbose=0), before)
    assert len(model.layers) == layer_count
    tokens = 17 if classifier == "token" else 16
    assert [p.shape for p in probabilities] == [(2, 4, tokens, tokens)] * 2
    for p in probabilities:
        np.testing.assert_allclose(p.sum(-1), 1.0, atol=1e-5)
    embed = keras.Model(model.input, model_parts.encoder_blocks(model)[0].input)
    x = np.asarray(embed(images), dtype=np.float64)
    for i, p in enumerate(probabilities):
        block = official_block_params(model_parts.encoder_blocks(model)[i])
        mha = {k.split("/", 1)[1]: v for k, v in block.items() if k.startswith("MultiHeadDotProductAttention_1/")}
        _, expected = reference_attention(layer_norm(x, block["LayerNorm_0/scale"], block["LayerNorm_0/bias"]), mha)
        np.testing.assert_allclose(p, expected, atol=2e-5)
        x = reference_block(x, block)
    assert np.abs(probabilities[0] - 1 / tokens).max() > 1e-2  # the check above is not about uniform rows


def test_token_geometry_of_a_rectangular_gap_model():
    model = keras_vit.ViT(input_shape=(16, 32, 3), patch_size=8, hidden_size=16, num_layers=1, num_heads=2,
                          mlp_dim=32, classifier="gap", include_top=False)
    geometry = inspect.token_geometry(model)
    assert geometry == inspect.TokenGeometry((16, 32), (2, 4), (8.0, 8.0), 0)


def test_hybrid_attention_and_geometry_come_from_the_stem_feature_grid(images):
    from keras_vit.inspect.report import patch_filters

    model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32,
                          classes=3, hybrid=dict(block_units=(1, 1), width=8, groups=4))
    geometry = inspect.token_geometry(model)
    assert geometry == inspect.TokenGeometry((32, 32), (4, 4), (8.0, 8.0), 1)
    (probabilities,) = inspect.attention_probabilities(model, images)
    assert probabilities.shape == (2, 2, 17, 17)
    filters, why = patch_filters(model)  # the embedding sees stem features, not pixels: no filter images
    assert filters is None and why.startswith("a hybrid's patch embedding sees the feature map of its ResNet stem")


def test_attention_model_rejects_a_non_vit():
    plain = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    with pytest.raises(ValueError, match="encoder_block_0"):
        inspect.attention_model(plain)


# --- plots and the CLI -------------------------------------------------------------------------------


def test_cli_writes_the_pngs_and_index(tiny, tmp_path, capsys):
    from PIL import Image

    from keras_vit.inspect.__main__ import main

    model_path = str(tmp_path / "tiny.keras")
    keras_vit.ViT(**tiny).save(model_path)
    paths = []
    for i in range(2):
        path = str(tmp_path / f"image_{i}.png")
        Image.fromarray(np.random.default_rng(i).integers(0, 255, (40, 48, 3), dtype=np.uint8)).save(path)
        paths.append(path)
    out = tmp_path / "report"

    assert main(["--model", model_path, f"--images={paths[0]}", "--out", str(out), "--images", paths[1]]) == 0

    names = ["attention_rollout.png", "attention_distance.png", "position_similarity.png", "embedding_filters.png"]
    for name in names:
        with Image.open(out / name) as image:
            assert image.format == "PNG" and min(image.size) > 100
    index = (out / "index.html").read_text()
    assert all(f"src='{name}'" in index for name in names)
    out_text = capsys.readouterr().out
    assert "layer  2: mean attention distance" in out_text
    assert "reading 2 images" in out_text and "writing the report" in out_text  # progress lines


def test_cli_usage_errors_exit_2_before_any_work(tiny, tmp_path, capsys):
    from keras_vit.inspect.__main__ import main

    image = tmp_path / "a.png"
    image.write_bytes(b"")
    model_path = str(tmp_path / "tiny.keras")
    keras_vit.ViT(**tiny).save(model_path)
    cases = [
        (["--model", "vit_ti16", "--out", str(tmp_path / "r"), f"--images={image}"], "Pass --weights=none explicitly"),
        (["--model", model_path, "--out", str(tmp_path / "r")], "flag --images=None: --images is required"),
        (["--model", model_path, "--out", str(tmp_path / "r"), f"--images={image}", str(image)],
         f"Positional arguments are not taken: {image}; give each as --images={image}"),  # one --images per image
        ([str(image)], f"error: Positional arguments are not taken: {image}; give each as --images={image}\n"),
        (["--model", model_path, "--out", str(tmp_path / "r"), f"--images={image}",
          f"--images={tmp_path / 'missing.png'}"], "The image file does not exist: " + str(tmp_path / "missing.png")),
        (["--model", model_path, "--image_size", "64", "--out", str(tmp_path / "r"), f"--images={image}"],
         "--image_size cannot apply to a .keras model"),
        (["--model", model_path, f"--images={image}"], "--out is required"),
    ]
    for args, message in cases:
        assert main(args) == 2, args
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "r").exists()


def test_images_help_reads_as_one_sentence(capsys):
    from keras_vit.inspect.__main__ import main

    assert main(["--help"]) == 0
    text = " ".join(capsys.readouterr().out.split("--images: ", 1)[1].split("--out:")[0].split())
    assert text == ("An image file (any format PIL reads), e.g. --images=a.jpg --images=b.jpg for two; repeat this "
                    "option to specify a list of values (required)")


def test_shifted_patch_filters_are_the_kernels_weights_on_the_unshifted_image(tiny):
    from keras_vit.inspect.report import SHIFTED_FILTERS, figure_titles, patch_filters

    model = keras_vit.ViT(**tiny, tokenizer="shifted_patches")
    p, d = tiny["patch_size"], tiny["hidden_size"]
    # Where the image's own pixels land in a shifted patch: the image all ones, its four shifted copies zeros.
    layout = np.asarray(model_parts.patches(model).patches(
        np.concatenate([np.ones((1, p, p, 3)), np.zeros((1, p, p, 12))], axis=-1).astype("float32")))[0, 0]
    assert layout.shape == (p * p * 15,) and layout.sum() == p * p * 3
    rng = np.random.default_rng(0)
    own = rng.normal(size=(p * p * 3, d))  # the weights on the image's pixels, in (row, column, channel) order
    kernel = rng.normal(size=(p * p * 15, d)) * 100  # the shifted copies' weights: large, must not show
    kernel[layout == 1] = own
    model_parts.patch_encoder(model).projection.kernel.assign(kernel.astype("float32"))
    filters, why = patch_filters(model)
    assert why is None
    np.testing.assert_allclose(filters, inspect.embedding_filters(own, p, 3), atol=1e-5)
    assert figure_titles(model)["embedding_filters.png"] == SHIFTED_FILTERS


def test_a_conv_stem_gap_model_says_why_filters_are_left_out_and_what_its_rollout_is(tiny, images, tmp_path):
    import json

    from keras_vit.inspect.report import GAP_ROLLOUT, write_report

    model = keras_vit.ViT(**tiny, tokenizer="conv", classifier="gap")
    summary = write_report(model, images, str(tmp_path))
    why = ('the convolutional stem (tokenizer="conv") hands the patch embedding feature maps, not pixels, so it has '
           "no pixel filters to draw")
    assert summary["left_out"] == {"embedding_filters.png": why}
    assert json.loads((tmp_path / "summary.json").read_text())["left_out"] == {"embedding_filters.png": why}
    assert not (tmp_path / "embedding_filters.png").exists()
    index = (tmp_path / "index.html").read_text()
    assert f"<h2>{GAP_ROLLOUT}</h2><img src='attention_rollout.png'" in index
    assert "<p>embedding_filters.png is left out: the convolutional stem (tokenizer=&quot;conv&quot;) hands" in index
    assert "output token" not in index and "[class] token to the input" not in index


def test_cli_prints_why_a_figure_is_left_out(tiny, tmp_path, monkeypatch, capsys):
    from PIL import Image

    from keras_vit.inspect import __main__ as tool
    from keras_vit.inspect import report

    image = str(tmp_path / "a.png")
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(image)
    monkeypatch.setattr(report, "write_report", lambda model, images, out, names: dict(
        model="m", grid_shape=[4, 4], patch_size=[8, 8], uniform_attention_distance=1.0,
        mean_attention_distance=np.ones((1, 2)), left_out={"embedding_filters.png": "a reason"}))
    assert tool.main(["--model=vit_ti16", "--weights=none", "--image_size=32", f"--images={image}",
                      f"--out={tmp_path / 'r'}"]) == 0
    assert "\nembedding_filters.png is left out: a reason\nwrote " in capsys.readouterr().out


def test_cli_rejects_an_unknown_model():
    from keras_vit.inspect.__main__ import load_model

    with pytest.raises(ValueError, match="Received: 'vit_zz'"):
        load_model("vit_zz")
