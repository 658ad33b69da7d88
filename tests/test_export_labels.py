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


def test_a_labels_file_that_is_not_utf8_text_is_refused_in_one_line_naming_it(tmp_path):
    import pytest

    text = tmp_path / "labels.txt"
    text.write_bytes("cat\r\n\nchien\u00e9\ndog".encode("utf-8"))
    assert labels.read(str(text)) == ["cat", "chien\u00e9", "dog"]
    image = tmp_path / "labels.png"
    image.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(20))
    with pytest.raises(ValueError) as info:
        labels.read(str(image))
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"The labels file {image} is not a UTF-8 text file of one "
                                                         "label a line: byte 0x89 at offset 0 is not UTF-8")
