"""keras_vit.checkpoints.timm: timm safetensors -> official layout, checked against a numpy forward in timm's
own layout (tests/foreign_checkpoints.py) through the independent official-layout forward."""

import numpy as np
import pytest
from foreign_checkpoints import GOLDEN, random_timm_tensors, rel_err, timm_forward
from numpy_reference import vit_forward

from keras_vit.checkpoints import timm

safetensors_numpy = pytest.importorskip("safetensors.numpy")

HEADS = 4


def _write(tmp_path, tensors, name="model.safetensors"):
    path = tmp_path / name
    safetensors_numpy.save_file(tensors, str(path), metadata={"format": "pt"})
    return str(path)


def _official_logits(checkpoint, images):
    params = {k: v.astype(np.float64) for k, v in checkpoint.params.items()}
    classifier = "token" if "cls" in params else "gap"
    return vit_forward(params, images.astype(np.float64), classifier=classifier,
                       approximate_gelu=checkpoint.gelu_approximate, eps=checkpoint.layer_norm_epsilon)


@pytest.mark.parametrize("options", [
    dict(),
    dict(class_token=False),
    dict(layer_scale=True),
    dict(no_embed_class=True),
    dict(qkv_bias=False),
    dict(pre_logits=24),
], ids=["token", "gap", "layer_scale", "no_embed_class", "no_qkv_bias", "pre_logits"])
def test_translation_matches_timm_forward(tmp_path, images, options):
    tensors = random_timm_tensors(np.random.default_rng(1), **options)
    checkpoint = timm.read(_write(tmp_path, tensors), num_heads=HEADS)
    assert checkpoint.source == "timm"
    assert checkpoint.gelu_approximate is False and checkpoint.layer_norm_epsilon == 1e-6
    expected = timm_forward(tensors, images, HEADS, no_embed_class=options.get("no_embed_class", False))
    assert rel_err(_official_logits(checkpoint, images), expected) < 1e-6


def test_shapes_follow_the_official_layout(tmp_path):
    checkpoint = timm.read(_write(tmp_path, random_timm_tensors(np.random.default_rng(2))), num_heads=HEADS)
    p = checkpoint.params
    assert p["embedding/kernel"].shape == (8, 8, 3, 32)
    assert p["Transformer/posembed_input/pos_embedding"].shape == (1, 17, 32)
    attention = "Transformer/encoderblock_1/MultiHeadDotProductAttention_1/"
    assert p[attention + "query/kernel"].shape == (32, 4, 8)
    assert p[attention + "value/bias"].shape == (4, 8)
    assert p[attention + "out/kernel"].shape == (4, 8, 32)
    assert p["head/kernel"].shape == (32, 5)
    assert len(p) == 4 + 2 + 2 + 2 * 16  # embedding kernel/bias, pos, cls; encoder_norm; head; 16 per block


def test_heads_inferred_from_standard_width(tmp_path, images):
    tensors = random_timm_tensors(np.random.default_rng(3), hidden=192, layers=1, mlp=64, classes=3)
    checkpoint = timm.read(_write(tmp_path, tensors))
    assert checkpoint.params["Transformer/encoderblock_0/MultiHeadDotProductAttention_1/key/kernel"].shape == (192, 3, 64)
    assert rel_err(_official_logits(checkpoint, images), timm_forward(tensors, images, 3)) < 1e-6


def test_nonstandard_width_needs_num_heads(tmp_path):
    path = _write(tmp_path, random_timm_tensors(np.random.default_rng(4)))
    with pytest.raises(ValueError, match="num_heads"):
        timm.read(path)
    with pytest.raises(ValueError, match="num_heads=5"):
        timm.read(path, num_heads=5)


def test_float16_file_is_widened(tmp_path):
    tensors = {k: v.astype(np.float16) for k, v in random_timm_tensors(np.random.default_rng(5)).items()}
    checkpoint = timm.read(_write(tmp_path, tensors), num_heads=HEADS)
    assert checkpoint.params["embedding/kernel"].dtype == np.float32
    np.testing.assert_array_equal(checkpoint.params["cls"], tensors["cls_token"].astype(np.float32))


@pytest.mark.parametrize("extra, feature", [
    ({"fc_norm.weight": np.ones(32, np.float32), "fc_norm.bias": np.zeros(32, np.float32)}, "fc_norm"),
    ({"blocks.0.attn.q_norm.weight": np.ones(8, np.float32)}, "q/k normalisation"),
    ({"reg_token": np.zeros((1, 4, 32), np.float32)}, "register tokens"),
    ({"norm_pre.weight": np.ones(32, np.float32)}, "norm_pre"),
])
def test_unsupported_timm_features_are_refused(tmp_path, extra, feature):
    tensors = random_timm_tensors(np.random.default_rng(6))
    tensors.update(extra)
    with pytest.raises(ValueError, match=feature):
        timm.read(_write(tmp_path, tensors), num_heads=HEADS)


def test_wrong_names_list_missing_and_unexpected(tmp_path):
    tensors = random_timm_tensors(np.random.default_rng(7))
    tensors["blocks.1.mlp.fc3.weight"] = tensors.pop("blocks.1.mlp.fc2.weight")
    with pytest.raises(ValueError, match=r"Missing tensors: \['blocks.1.mlp.fc2.weight'\].*blocks.1.mlp.fc3.weight"):
        timm.read(_write(tmp_path, tensors), num_heads=HEADS)


def test_wrong_shape_is_reported(tmp_path):
    tensors = random_timm_tensors(np.random.default_rng(8))
    tensors["blocks.0.attn.qkv.weight"] = tensors["blocks.0.attn.qkv.weight"][:95]
    with pytest.raises(ValueError, match="wrong shape"):
        timm.read(_write(tmp_path, tensors), num_heads=HEADS)


def test_truncated_and_foreign_files(tmp_path):
    path = _write(tmp_path, random_timm_tensors(np.random.default_rng(9)))
    data = open(path, "rb").read()
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="truncated or corrupt"):
        timm.read(str(truncated), num_heads=HEADS)
    other = _write(tmp_path, {"vit.embeddings.cls_token": np.zeros((1, 1, 8), np.float32)}, "other.safetensors")
    with pytest.raises(ValueError, match="not a timm ViT checkpoint"):
        timm.read(other)
    with pytest.raises(ValueError, match="does not exist"):
        timm.read(str(tmp_path / "missing.safetensors"))


@pytest.mark.parametrize("name", ["timm_token", "timm_gap", "timm_layer_scale", "timm_no_embed_class"])
def test_files_saved_by_timm_reproduce_timm_logits(name):
    expected = np.load(GOLDEN / "expected.npz")
    checkpoint = timm.read(GOLDEN / f"{name}.safetensors", num_heads=2)
    assert rel_err(_official_logits(checkpoint, expected["images"]), expected[name]) < 1e-5


def test_keras_model_loads_timm_file(tmp_path, images):
    import keras_vit

    tensors = random_timm_tensors(np.random.default_rng(10), layer_scale=True)
    model = keras_vit.ViT(weights=_write(tmp_path, tensors), num_heads=HEADS, classifier_activation=None)
    assert rel_err(model.predict(images, verbose=0), timm_forward(tensors, images, HEADS)) < 1e-4


@pytest.mark.parametrize("name", ["timm_token", "timm_gap", "timm_no_embed_class"])
def test_keras_model_reproduces_timm_logits(name):
    import keras_vit

    expected = np.load(GOLDEN / "expected.npz")
    model = keras_vit.ViT(weights=str(GOLDEN / f"{name}.safetensors"), num_heads=2, classifier_activation=None)
    # float32 Keras vs float32 torch: ~5e-7 measured; the wrong GELU form alone gives 7e-5 to 1e-4 here.
    assert rel_err(model.predict(expected["images"], verbose=0), expected[name]) < 2e-5
