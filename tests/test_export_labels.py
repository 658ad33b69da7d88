"""keras_vit.export.labels: the class names a Hugging Face checkpoint's config.json gives (`id2label`)."""

import json

from keras_vit.export import labels


def test_huggingface_labels_come_from_id2label_of_the_folder_or_beside_the_file(tmp_path):
    config = {"model_type": "vit", "id2label": {"0": "cat", "1": "dog", "2": "fox"}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "model.safetensors").write_bytes(b"")
    assert labels.huggingface_labels(str(tmp_path), 3) == ["cat", "dog", "fox"]
    assert labels.huggingface_labels(tmp_path / "model.safetensors", 3) == ["cat", "dog", "fox"]
    assert labels.huggingface_labels(str(tmp_path), 4) is None  # another head: its names do not apply
    (tmp_path / "config.json").write_text(json.dumps({"id2label": {str(i): f"LABEL_{i}" for i in range(3)}}))
    assert labels.huggingface_labels(str(tmp_path), 3) is None  # transformers' placeholders: the defaults apply
    assert labels.huggingface_labels(str(tmp_path / "missing"), 3) is None
    assert labels.huggingface_labels("imagenet21k", 3) is None  # a published name, not a folder
