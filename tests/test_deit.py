"""DeiT's distillation token (`keras_vit.ViT(distillation_token=True)`, arXiv 2012.12877): the model (two prefix
tokens, `head` and `head_dist`, their mean), its refusals, its checkpoints (timm's `VisionTransformerDistilled` and
transformers' `DeiTForImageClassificationWithTeacher` / `DeiTForImageClassification`, saved by the real libraries
in tests/data/torch_golden: tests/data/make_torch_golden.py deit), transfers of one's own distilled model, resampling,
inspection and the published names (served from a local file:// URL, never the network)."""

import logging

import keras
import numpy as np
import pytest
from foreign_checkpoints import GOLDEN, rel_err

import keras_vit
from keras_vit import model_parts, weights
from keras_vit.checkpoints import huggingface, loading, position_embedding, timm
from keras_vit.variants import VARIANTS, Variant

TINY = dict(image_size=16, patch_size=4, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32, classes=3)
TIMM = str(GOLDEN / "timm_deit_distilled.safetensors")
HF_TEACHER = str(GOLDEN / "hf_deit_teacher")
HF_SINGLE = str(GOLDEN / "hf_deit_single")


@pytest.fixture(scope="module")
def expected():
    return np.load(GOLDEN / "expected_deit.npz")


def _randomise(model, seed=0):
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        weight.assign(rng.normal(0, 0.3, weight.shape).astype(weight.dtype))
    return model


def _heads(model, images):
    both = keras.Model(model.input, [model_parts.head(model).output, model_parts.distillation_head(model).output])
    return both.predict(images, verbose=0)


# ---------------------------------------------------------------- the model


def test_two_prefix_tokens_two_heads_and_the_softmax_of_their_mean():
    model = _randomise(keras_vit.ViT(**TINY, distillation_token=True))
    encoder = model_parts.patch_encoder(model)
    assert encoder.num_prefix_tokens == 2 and tuple(encoder.position_embedding.shape) == (1, 2 + 16, 16)
    assert tuple(encoder.distillation_token.shape) == (1, 1, 16)
    head, head_dist = model_parts.head(model), model_parts.distillation_head(model)
    assert head.units == head_dist.units == 3 and model_parts.output_activation(model) == "softmax"
    images = np.random.default_rng(1).uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    cls, dist = _heads(model, images)
    mean = (cls + dist) / 2
    softmax = np.exp(mean - mean.max(-1, keepdims=True))
    np.testing.assert_allclose(model.predict(images, verbose=0), softmax / softmax.sum(-1, keepdims=True), atol=1e-6)
    tokens = keras_vit.ViT(**TINY, distillation_token=True, include_top=False)
    tokens.set_weights(model.get_weights()[:len(tokens.weights)])
    sequence = tokens.predict(images, verbose=0)
    assert sequence.shape == (2, 18, 16)
    for pooling, want in (("token", sequence[:, 0]), ("avg", sequence[:, 2:].mean(1)), ("max", sequence[:, 2:].max(1))):
        pooled = keras_vit.ViT(**TINY, distillation_token=True, include_top=False, pooling=pooling)
        pooled.set_weights(tokens.get_weights())
        np.testing.assert_allclose(pooled.predict(images, verbose=0), want, atol=1e-6, err_msg=pooling)


@pytest.mark.e2e  # the default tier's time budget (10 minutes on 2 cores)
def test_heads_start_at_zero_officially_and_glorot_from_scratch():
    official = keras_vit.ViT(**TINY, distillation_token=True, initialization="official")
    assert not np.any(model_parts.distillation_head(official).kernel.numpy())
    scratch = keras_vit.ViT(**TINY, distillation_token=True)
    assert np.any(model_parts.distillation_head(scratch).kernel.numpy())


@pytest.mark.parametrize("arguments, match", [
    (dict(classifier="gap"), r"needs classifier=\"token\". Received: classifier='gap'"),
    (dict(representation_size=8), r"no pre_logits.*Received: representation_size=8"),
    (dict(distillation_token="yes"), r"distillation_token"),
])
def test_refusals(arguments, match):
    with pytest.raises(ValueError, match=match):
        keras_vit.ViT(**{**TINY, "distillation_token": True, **arguments})


@pytest.mark.e2e  # the default tier's time budget (10 minutes on 2 cores)
def test_other_tokenizers_and_hybrids_take_it():
    for arguments in (dict(tokenizer="conv"), dict(tokenizer="shifted_patches"), dict(position_embedding="sincos2d"),
                      dict(hybrid=dict(block_units=(1,), width=8, groups=4))):
        model = keras_vit.ViT(**TINY, distillation_token=True, **arguments)
        assert model.output_shape == (None, 3) and model_parts.patch_encoder(model).num_prefix_tokens == 2


@pytest.mark.e2e  # the default tier's time budget (10 minutes on 2 cores)
def test_a_distilled_student_trains_in_the_distiller_and_softmax_is_refused():
    student = keras_vit.ViT(**TINY, distillation_token=True, classifier_activation=None)
    distiller = keras_vit.Distiller(student, keras_vit.ViT(**TINY, classifier_activation=None))
    assert len(distiller.heads.outputs) == 2
    with pytest.raises(ValueError, match="applies softmax to its heads' mean"):
        keras_vit.Distiller(keras_vit.ViT(**TINY, distillation_token=True), keras_vit.ViT(**TINY))


# ---------------------------------------------------------------- published layouts, made by the real libraries


def test_timm_distilled_reproduces_timms_output_and_tokens(expected):
    checkpoint = timm.read(TIMM, num_heads=2)
    assert checkpoint.params["dist"].shape == (1, 1, 16)
    assert checkpoint.params["Transformer/posembed_input/pos_embedding"].shape == (1, 2 + 16, 16)
    assert checkpoint.params["head_dist/kernel"].shape == (16, 3)
    model = keras_vit.ViT(weights=TIMM, num_heads=2, classifier_activation=None)
    assert model.arguments["distillation_token"] is True
    assert rel_err(model.predict(expected["images"], verbose=0), expected["timm_deit_distilled"]) < 1e-4
    tokens = keras_vit.ViT(weights=TIMM, num_heads=2, include_top=False)
    assert rel_err(tokens.predict(expected["images"], verbose=0), expected["timm_deit_distilled_tokens"]) < 1e-4


def test_transformers_with_teacher_reproduces_its_logits_and_both_heads(expected):
    checkpoint = huggingface.read(HF_TEACHER)
    assert {"dist", "head/kernel", "head_dist/kernel"} <= set(checkpoint.params)
    model = keras_vit.ViT(weights=HF_TEACHER, classifier_activation=None)
    images = expected["images"]
    assert rel_err(model.predict(images, verbose=0), expected["hf_deit_teacher"]) < 1e-4
    cls, dist = _heads(model, images)
    assert rel_err(cls, expected["hf_deit_teacher_cls"]) < 1e-4
    assert rel_err(dist, expected["hf_deit_teacher_dist"]) < 1e-4


@pytest.mark.e2e  # the default tier's time budget (10 minutes on 2 cores)
def test_transformers_without_teacher_has_the_token_and_one_head(expected):
    checkpoint = huggingface.read(HF_SINGLE)
    assert "dist" in checkpoint.params and "head/kernel" in checkpoint.params
    assert "head_dist/kernel" not in checkpoint.params
    with pytest.raises(ValueError, match=r"a distillation token but a single head.*include_top=False.*classes=N"):
        keras_vit.ViT(weights=HF_SINGLE)
    tokens = keras_vit.ViT(weights=HF_SINGLE, include_top=False)
    assert rel_err(tokens.predict(expected["images"], verbose=0), expected["hf_deit_single_tokens"]) < 1e-4
    tuned = keras_vit.ViT(weights=HF_SINGLE, classes=5)
    assert not np.any(model_parts.head(tuned).kernel.numpy())
    assert not np.any(model_parts.distillation_head(tuned).kernel.numpy())


def test_a_file_decides_the_token_and_a_contradiction_names_both_sides():
    with pytest.raises(ValueError, match=r"distillation_token=True \(checkpoint: no distillation token\)"):
        keras_vit.ViT(weights=str(GOLDEN / "timm_token.safetensors"), num_heads=2, distillation_token=True)
    with pytest.raises(ValueError, match=r"distillation_token=False \(checkpoint: distillation token\)"):
        keras_vit.ViT(weights=TIMM, num_heads=2, distillation_token=False)
    plain = keras_vit.ViT(weights=str(GOLDEN / "timm_token.safetensors"), num_heads=2)
    assert plain.arguments["distillation_token"] is False and model_parts.distillation_head(plain) is None
    with pytest.raises(ValueError, match=r"has a distillation token, but model .* without one"):
        loading.load_weights(plain, TIMM)
    distilled = keras_vit.ViT(weights=TIMM, num_heads=2)
    with pytest.raises(ValueError, match=r"has no distillation token, but model .* with one"):
        loading.load_weights(distilled, str(GOLDEN / "timm_token.safetensors"))


@pytest.mark.e2e  # the default tier's time budget (10 minutes on 2 cores)
def test_load_time_resampling_keeps_both_prefix_rows(caplog):
    table = timm.read(TIMM, num_heads=2).params["Transformer/posembed_input/pos_embedding"]
    with caplog.at_level(logging.WARNING, logger="keras_vit"):
        model = keras_vit.ViT(weights=TIMM, num_heads=2, input_shape=(48, 48, 3))
    assert "class and distillation tokens kept" in caplog.text
    loaded = model_parts.patch_encoder(model).position_embedding.numpy()
    np.testing.assert_allclose(loaded, position_embedding.resample_position_embedding(table, (6, 6), 2), atol=1e-6)
    np.testing.assert_array_equal(loaded[:, :2], table[:, :2])


@pytest.mark.e2e  # the default tier's time budget (10 minutes on 2 cores)
def test_any_size_model_resamples_in_the_graph_as_at_load_time(expected):
    anywhere = keras_vit.ViT(weights=TIMM, num_heads=2, input_shape=(None, None, 3), classifier_activation=None)
    images = expected["images"]
    assert rel_err(anywhere.predict(images, verbose=0), expected["timm_deit_distilled"]) < 1e-4
    big = np.random.default_rng(2).uniform(-1, 1, (2, 48, 48, 3)).astype("float32")
    fixed = keras_vit.ViT(weights=TIMM, num_heads=2, input_shape=(48, 48, 3), classifier_activation=None)
    assert rel_err(anywhere.predict(big, verbose=0), fixed.predict(big, verbose=0)) < 1e-4


# ---------------------------------------------------------------- one's own distilled model


def test_own_file_round_trips_and_transfers_to_other_classes_and_sizes(tmp_path, caplog):
    model = _randomise(keras_vit.ViT(**TINY, distillation_token=True, classifier_activation=None))
    images = np.random.default_rng(3).uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    path = str(tmp_path / "deit.keras")
    model.save(path)
    reloaded = keras.saving.load_model(path)
    np.testing.assert_array_equal(reloaded.predict(images, verbose=0), model.predict(images, verbose=0))
    again = keras_vit.ViT(weights=path)
    assert again.arguments["distillation_token"] is True
    np.testing.assert_array_equal(again.predict(images, verbose=0), model.predict(images, verbose=0))
    with caplog.at_level(logging.WARNING, logger="keras_vit"):
        tuned = keras_vit.ViT(weights=path, classes=7, input_shape=(24, 24, 3))
    assert "the heads (head and head_dist) are new" in caplog.text
    assert model_parts.distillation_head(tuned).units == 7
    assert not np.any(model_parts.distillation_head(tuned).kernel.numpy())
    source = model_parts.patch_encoder(model).position_embedding.numpy()
    np.testing.assert_allclose(model_parts.patch_encoder(tuned).position_embedding.numpy(),
                               position_embedding.resample_position_embedding(source, (6, 6), 2), atol=1e-6)
    np.testing.assert_array_equal(model_parts.patch_encoder(tuned).distillation_token.numpy(),
                                  model_parts.patch_encoder(model).distillation_token.numpy())
    features = keras_vit.ViT(weights=path, include_top=False, pooling="avg")
    assert features.output_shape == (None, 16)
    with pytest.raises(ValueError, match=r"distillation_token=False \(checkpoint: distillation token\)"):
        keras_vit.ViT(weights=path, distillation_token=False)


@pytest.mark.e2e  # the default tier's time budget (10 minutes on 2 cores)
def test_inspection_drops_both_prefix_tokens_and_rolls_out_from_class():
    from keras_vit import inspect

    model = _randomise(keras_vit.ViT(**TINY, distillation_token=True))
    images = np.random.default_rng(4).uniform(-1, 1, (1, 16, 16, 3)).astype("float32")
    probabilities = inspect.attention_probabilities(model, images)
    geometry = inspect.token_geometry(model)
    assert geometry.num_prefix_tokens == 2 and geometry.grid_shape == (4, 4)
    assert probabilities[0].shape[-1] == 18
    distances = inspect.mean_attention_distance(probabilities, geometry.grid_shape, geometry.patch_size, 2)
    assert distances.shape == (1, 2) and np.all(np.isfinite(distances))
    rollout = inspect.attention_rollout(probabilities)
    maps = inspect.rollout_maps(rollout, geometry.grid_shape, geometry.num_prefix_tokens)
    assert maps.shape == (1, 4, 4)
    row = rollout[0, 0, 2:]
    np.testing.assert_allclose(maps[0].ravel(), row / row.max(), rtol=1e-5)


# ---------------------------------------------------------------- the published names


def test_published_deit_entries():
    entry = weights.get_entry("B16", "deit_distilled_in1k")
    assert entry.url == ("https://huggingface.co/timm/deit_base_distilled_patch16_224.fb_in1k/resolve/main/"
                         "model.safetensors")
    assert (entry.image_size, entry.imagenet_top1, entry.gelu_approximate) == (224, 83.4, False)
    assert weights.get_entry("B16", "deit_distilled_in1k_384").imagenet_top1 == 85.2
    assert {v: weights.get_entry(v, "deit_in1k").imagenet_top1 for v in ("Ti16", "S16", "B16")} == {
        "Ti16": 72.2, "S16": 79.8, "B16": 81.8}
    assert {v: weights.get_entry(v, "deit_distilled_in1k").imagenet_top1 for v in ("Ti16", "S16")} == {
        "Ti16": 74.5, "S16": 81.2}
    assert weights.get_entry("B16", "imagenet").name == "augreg_in21k_ft_in1k"  # DeiT is not the best 1k file


@pytest.mark.e2e  # the default tier's time budget (10 minutes on 2 cores)
def test_a_published_distilled_name_downloads_from_its_host_and_loads(tmp_path, monkeypatch, expected):
    """The download path of a DeiT entry, served from a file:// host: the golden timm file as a tiny variant's."""
    monkeypatch.setitem(VARIANTS, "G8", Variant("G8", "G", 8, 16, 2, 2, 32))
    path = "timm/deit_golden_distilled_patch8_32.fb_in1k/resolve/main/model.safetensors"
    served = tmp_path / "served" / path
    served.parent.mkdir(parents=True)
    served.write_bytes((GOLDEN / "timm_deit_distilled.safetensors").read_bytes())
    entry = weights.WeightsEntry("deit_distilled_in1k", "G8", path, None, 32, 3, None, gelu_approximate=False,
                                 preprocessing="imagenet", host=(tmp_path / "served").as_uri() + "/")
    monkeypatch.setitem(weights.WEIGHTS, ("G8", "deit_distilled_in1k"), entry)
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras_home"))
    model = keras_vit.ViT(patch_size=8, hidden_size=16, num_layers=2, num_heads=2, mlp_dim=32,
                          weights="deit_distilled_in1k", classifier_activation=None)
    assert (tmp_path / "keras_home" / "keras_vit" / entry.file_name).exists()
    assert model.arguments["distillation_token"] is True
    assert rel_err(model.predict(expected["images"], verbose=0), expected["timm_deit_distilled"]) < 1e-4
