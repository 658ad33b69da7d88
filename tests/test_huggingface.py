"""keras_vit.checkpoints.huggingface: transformers ViT folders -> official layout, checked against a numpy
forward in transformers' own layout (tests/foreign_checkpoints.py) through the official-layout forward."""

import json

import numpy as np
import pytest
from foreign_checkpoints import GOLDEN, hf_config, hf_forward, random_hf_tensors, rel_err, write_hf_folder
from numpy_reference import vit_forward

from keras_vit.checkpoints import huggingface

pytest.importorskip("safetensors.numpy")


def _official(checkpoint, images, include_top=True):
    params = {k: v.astype(np.float64) for k, v in checkpoint.params.items()}
    return vit_forward(params, images.astype(np.float64), classifier="token",
                       approximate_gelu=checkpoint.gelu_approximate, eps=checkpoint.layer_norm_epsilon,
                       include_top=include_top)


@pytest.mark.parametrize("hidden_act, eps, approximate", [
    ("gelu", 1e-12, False), ("gelu_pytorch_tanh", 1e-6, True), ("gelu_new", 1e-5, True),
])
def test_classification_model_matches_transformers_forward(tmp_path, images, hidden_act, eps, approximate):
    config = hf_config(hidden_act=hidden_act, layer_norm_eps=eps)
    tensors = random_hf_tensors(np.random.default_rng(1), config)
    folder = write_hf_folder(tmp_path / "vit", config, tensors)
    for path in (folder, folder / "model.safetensors"):  # the folder, or the file with config.json beside it
        checkpoint = huggingface.read(path)
        assert checkpoint.source == "huggingface"
        assert checkpoint.gelu_approximate is approximate and checkpoint.layer_norm_epsilon == eps
        _, _, logits = hf_forward(tensors, config, images)
        assert rel_err(_official(checkpoint, images), logits) < 1e-6


def test_config_without_qkv_bias(tmp_path, images):
    """transformers' ViTConfig(qkv_bias=False): no biases in the file, none in the checkpoint."""
    config = {**hf_config(), "qkv_bias": False}
    tensors = random_hf_tensors(np.random.default_rng(8), config)
    assert "vit.encoder.layer.0.attention.attention.query.bias" not in tensors
    checkpoint = huggingface.read(write_hf_folder(tmp_path / "vit", config, tensors))
    assert not [key for key in checkpoint.params if key.endswith("/bias") and "MultiHeadDotProductAttention_1/" in key
                and not key.endswith("out/bias")]  # the reader invents no biases the file lacks
    assert rel_err(_official(checkpoint, images), hf_forward(tensors, config, images)[2]) < 1e-6


def test_vit_model_pooler_becomes_pre_logits(tmp_path, images):
    config = hf_config()
    tensors = random_hf_tensors(np.random.default_rng(2), config, classes=0, prefix="", pooler=True)
    checkpoint = huggingface.read(write_hf_folder(tmp_path / "vit", config, tensors))
    assert "head/kernel" not in checkpoint.params
    hidden, pooled, _ = hf_forward(tensors, config, images, prefix="")
    tokens = _official(checkpoint, images, include_top=False)
    assert rel_err(tokens, hidden) < 1e-6
    p = checkpoint.params
    assert rel_err(np.tanh(tokens[:, 0] @ p["pre_logits/kernel"] + p["pre_logits/bias"]), pooled) < 1e-6


def test_shapes_follow_the_official_layout(tmp_path):
    config = hf_config()
    checkpoint = huggingface.read(write_hf_folder(tmp_path / "vit", config, random_hf_tensors(np.random.default_rng(3), config)))
    attention = "Transformer/encoderblock_0/MultiHeadDotProductAttention_1/"
    assert checkpoint.params[attention + "query/kernel"].shape == (32, 4, 8)
    assert checkpoint.params[attention + "out/kernel"].shape == (4, 8, 32)
    assert checkpoint.params["embedding/kernel"].shape == (8, 8, 3, 32)
    assert len(checkpoint.params) == 40


def test_missing_config_names_the_path(tmp_path):
    config = hf_config()
    folder = write_hf_folder(tmp_path / "vit", config, random_hf_tensors(np.random.default_rng(4), config))
    (folder / "config.json").unlink()
    for path in (folder, folder / "model.safetensors"):
        with pytest.raises(ValueError, match=r"config\.json.*" + str(folder)):
            huggingface.read(path)


def test_folder_without_safetensors(tmp_path):
    (tmp_path / "vit").mkdir()
    (tmp_path / "vit" / "config.json").write_text(json.dumps(hf_config()))
    (tmp_path / "vit" / "pytorch_model.bin").write_bytes(b"\x80\x04pickle")
    with pytest.raises(ValueError, match="pytorch_model.bin files are not read"):
        huggingface.read(tmp_path / "vit")


def test_sharded_folder(tmp_path, images):
    from safetensors.numpy import save_file

    config = hf_config()
    tensors = random_hf_tensors(np.random.default_rng(5), config)
    folder = tmp_path / "vit"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for shard, shard_names in shards.items():
        save_file({n: tensors[n] for n in shard_names}, str(folder / shard))
    weight_map = {n: shard for shard, shard_names in shards.items() for n in shard_names}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    _, _, logits = hf_forward(tensors, config, images)
    assert rel_err(_official(huggingface.read(folder), images), logits) < 1e-6


@pytest.mark.parametrize("change, message", [
    (dict(hidden_act="relu"), "hidden_act='relu'"),
    (dict(model_type="swin"), "model_type='swin'"),  # DeiT (model_type 'deit') is read: tests/test_deit.py
    (dict(num_hidden_layers=3), "num_hidden_layers=3"),
    (dict(num_attention_heads=5), "num_heads=5"),
])
def test_bad_config(tmp_path, change, message):
    config = hf_config()
    tensors = random_hf_tensors(np.random.default_rng(6), config)
    folder = write_hf_folder(tmp_path / "vit", {**config, **change}, tensors)
    with pytest.raises(ValueError, match=message):
        huggingface.read(folder)


def test_wrong_names_and_truncated_file(tmp_path):
    config = hf_config()
    tensors = random_hf_tensors(np.random.default_rng(7), config)
    tensors["vit.encoder.layer.0.attention.attention.keys.weight"] = tensors.pop(
        "vit.encoder.layer.0.attention.attention.key.weight")
    folder = write_hf_folder(tmp_path / "vit", config, tensors)
    with pytest.raises(ValueError, match=r"Missing tensors: \['vit.encoder.layer.0.attention.attention.key.weight'\]"):
        huggingface.read(folder)
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[:-100])
    with pytest.raises(ValueError, match="truncated or corrupt"):
        huggingface.read(folder)


@pytest.mark.parametrize("name", ["hf_gelu", "hf_gelu_tanh"])
def test_folders_saved_by_transformers_reproduce_their_logits(name):
    expected = np.load(GOLDEN / "expected.npz")
    checkpoint = huggingface.read(GOLDEN / name)
    assert rel_err(_official(checkpoint, expected["images"]), expected[name]) < 1e-5


def test_vit_model_saved_by_transformers():
    expected = np.load(GOLDEN / "expected.npz")
    checkpoint = huggingface.read(GOLDEN / "hf_model" / "model.safetensors")
    tokens = _official(checkpoint, expected["images"], include_top=False)
    assert rel_err(tokens, expected["hf_model_hidden"]) < 1e-5
    p = checkpoint.params
    assert rel_err(np.tanh(tokens[:, 0] @ p["pre_logits/kernel"] + p["pre_logits/bias"]), expected["hf_model_pooled"]) < 1e-5


@pytest.mark.parametrize("name", ["hf_gelu", "hf_gelu_tanh"])
def test_keras_model_reproduces_transformers_logits(name):
    import keras_vit

    expected = np.load(GOLDEN / "expected.npz")
    model = keras_vit.ViT(weights=str(GOLDEN / name), classifier_activation=None)
    # float32 Keras vs float32 torch: ~5e-7 measured; the wrong GELU form alone gives 7e-5 to 1e-4 here.
    assert rel_err(model.predict(expected["images"], verbose=0), expected[name]) < 2e-5


def test_keras_model_loads_hf_file_with_config_beside(tmp_path, images):
    import keras_vit

    config = hf_config(hidden_act="gelu_new", layer_norm_eps=1e-5)
    tensors = random_hf_tensors(np.random.default_rng(9), config)
    folder = write_hf_folder(tmp_path / "vit", config, tensors)
    model = keras_vit.ViT(weights=str(folder / "model.safetensors"), classifier_activation=None)
    assert rel_err(model.predict(images, verbose=0), hf_forward(tensors, config, images)[2]) < 1e-4
    tokens = keras_vit.ViT(weights=str(folder), include_top=False).predict(images, verbose=0)
    assert rel_err(tokens, hf_forward(tensors, config, images)[0]) < 1e-4
