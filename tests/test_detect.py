"""keras_vit.checkpoints.detect: format detection from file kind, magic bytes and safetensors header names."""

import numpy as np
import pytest
from foreign_checkpoints import hf_config, random_hf_tensors, random_timm_tensors, write_hf_folder

from keras_vit.checkpoints.detect import detect_format

safetensors_numpy = pytest.importorskip("safetensors.numpy")


def test_official_npz(tmp_path):
    path = tmp_path / "ViT-B_16.npz"
    np.savez(path, cls=np.zeros((1, 1, 4), np.float32))
    assert detect_format(path) == "official_npz"
    path.write_bytes(path.read_bytes()[:-30])
    with pytest.raises(ValueError, match="truncated or corrupt"):
        detect_format(path)


def test_timm_and_huggingface_safetensors(tmp_path):
    timm_path = tmp_path / "timm.safetensors"
    safetensors_numpy.save_file(random_timm_tensors(np.random.default_rng(0), layers=1), str(timm_path))
    assert detect_format(timm_path) == "timm"
    config = hf_config(layers=1)
    for prefix in ("vit.", ""):
        folder = write_hf_folder(tmp_path / f"hf{prefix}", config, random_hf_tensors(np.random.default_rng(0), config, prefix=prefix))
        assert detect_format(folder) == "huggingface"
        assert detect_format(folder / "model.safetensors") == "huggingface"
    renamed = tmp_path / "weights.bin.safe"  # no telling extension: recognised by the header
    renamed.write_bytes(timm_path.read_bytes())
    assert detect_format(renamed) == "timm"


def test_keras_weights(tmp_path):
    import keras

    path = tmp_path / "tiny.weights.h5"
    keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)]).save_weights(path)
    assert detect_format(path) == "keras_weights"
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(ValueError, match="truncated or corrupt"):
        detect_format(path)


def test_bad_inputs(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        detect_format(tmp_path / "nothing.npz")
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x04")
    with pytest.raises(ValueError, match="Pickle-based"):
        detect_format(tmp_path / "pytorch_model.bin")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ValueError, match="Unknown checkpoint format"):
        detect_format(tmp_path / "notes.txt")
    bad = tmp_path / "model.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    with pytest.raises(ValueError, match="truncated or corrupt"):
        detect_format(bad)
    other = tmp_path / "other.safetensors"
    safetensors_numpy.save_file({"conv1.weight": np.zeros((2, 2), np.float32)}, str(other))
    with pytest.raises(ValueError, match="neither timm nor Hugging Face.*conv1.weight"):
        detect_format(other)
    (tmp_path / "empty_folder").mkdir()
    with pytest.raises(ValueError, match="model.safetensors"):
        detect_format(tmp_path / "empty_folder")
