"""`python -m keras_vit.export`: builds or loads a model, writes versions, refuses to overwrite."""

import os
import subprocess
import sys

import pytest
import tensorflow as tf

from export_fixtures import SIZE, tiny_vit
from keras_vit.export.__main__ import main


@pytest.fixture(scope="module")
def keras_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "tiny.keras"
    tiny_vit(num_layers=1).save(path)
    return str(path)


@pytest.mark.e2e
def test_module_entry_point_exports_and_refuses_to_overwrite(keras_file, tmp_path, capsys):
    base = str(tmp_path / "tiny")
    command = ["--model", keras_file, "--out", base]
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}  # importing TF set it here
    first = subprocess.run([sys.executable, "-m", "keras_vit.export", *command], capture_output=True, text=True,
                           timeout=300, env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    assert f"wrote {os.path.join(base, '1')}" in first.stdout
    assert first.stderr == ""  # a quiet start, and no TensorFlow or absl log lines while exporting
    stamp = os.path.getmtime(os.path.join(base, "1", "saved_model.pb"))
    assert main([*command, "--version", "1"]) == 1  # a failure of the work, not a usage error
    err = capsys.readouterr().err
    assert "Version 1 already exists" in err and "--overwrite" in err
    assert os.path.getmtime(os.path.join(base, "1", "saved_model.pb")) == stamp
    assert os.listdir(base) == ["1"]


def test_an_existing_version_is_refused_in_the_words_of_the_flags_before_building(tmp_path, capsys):
    base = tmp_path / "tiny"
    (base / "1").mkdir(parents=True)
    assert main(["--model=vit_ti16", "--weights=none", f"--out={base}", "--version=1"]) == 1
    captured = capsys.readouterr()
    assert captured.err == (f"error: Version 1 already exists at {str(base / '1')!r}; pass a new version, or "
                            f"--overwrite to replace it. Received: --out={str(base)!r}, --version=1\n")
    assert "building" not in captured.out


@pytest.mark.e2e  # moved from the default tier (its time budget)
def test_next_version_and_overwrite(keras_file, tmp_path, capsys):
    base = str(tmp_path / "tiny")
    assert main(["--model", keras_file, "--out", base]) == 0
    assert main(["--model", keras_file, "--out", base]) == 0
    limits = ["--max_pixels", "5000", "--max_jpeg_scans", "7", "--max_gif_blocks", "99", "--max_png_idat_ratio", "1.25"]
    assert main(["--model", keras_file, "--out", base, "--version", "2", "--overwrite", "--top_k", "2", *limits]) == 0
    assert sorted(os.listdir(base)) == ["1", "2"]
    loaded = tf.saved_model.load(os.path.join(base, "2"))
    assert loaded.signatures["serving_default"].structured_outputs["scores"].shape.as_list() == [None, 2]
    recorded = {name: value.numpy().item() for name, value in loaded.serving_limits().items()}
    assert recorded == dict(max_pixels=5000, max_batch_size=64, max_request_pixels=268435456, max_jpeg_scans=7,
                            max_gif_blocks=99, max_png_idat_ratio=1.25)


@pytest.mark.e2e
def test_labels_file_and_features_export(keras_file, tmp_path):
    (tmp_path / "labels.txt").write_text("cat\ndog\nship\ntree\nbird\n", encoding="utf-8")
    base = str(tmp_path / "tiny")
    assert main(["--model", keras_file, "--out", base, "--labels", str(tmp_path / "labels.txt")]) == 0
    with open(os.path.join(base, "1", "assets", "labels.txt"), encoding="utf-8") as file:
        assert file.read() == "cat\ndog\nship\ntree\nbird\n"
    args = ["--model", "vit_ti16", "--weights", "none", "--image_size", "32", "--pooling", "token"]
    assert main([*args, "--out", str(tmp_path / "features")]) == 0
    served = tf.saved_model.load(os.path.join(tmp_path, "features", "1"))
    assert served.signatures["features"](images=tf.zeros([1, 32, 32, 3]))["features"].shape == (1, 192)


@pytest.mark.e2e  # moved from the default tier (its time budget)
def test_labels_sidecar_beside_the_keras_file(tmp_path, capsys):
    """`<model>.labels.txt` beside `<model>.keras` (what training writes) names the classes; `--labels` wins."""
    model_path = tmp_path / "model.keras"
    tiny_vit(num_layers=1).save(model_path)
    (tmp_path / "model.labels.txt").write_text("circle\nsquare\ntriangle\nstar\nheart\n", encoding="utf-8")
    base = str(tmp_path / "served")
    assert main(["--model", str(model_path), "--out", base]) == 0
    out = capsys.readouterr().out
    assert f"labels: 5 from {tmp_path / 'model.labels.txt'}" in out and "exporting a SavedModel" in out
    with open(os.path.join(base, "1", "assets", "labels.txt"), encoding="utf-8") as file:
        assert file.read().split() == ["circle", "square", "triangle", "star", "heart"]
    (tmp_path / "given.txt").write_text("a\nb\nc\nd\ne\n", encoding="utf-8")
    assert main(["--model", str(model_path), "--out", base, "--labels", str(tmp_path / "given.txt")]) == 0
    with open(os.path.join(base, "2", "assets", "labels.txt"), encoding="utf-8") as file:
        assert file.read().split() == ["a", "b", "c", "d", "e"]


@pytest.mark.e2e  # moved from the default tier (its time budget)
def test_weights_keras_file_with_a_variant_name(keras_file, tmp_path):
    """`--weights model.keras` loads the trained model itself (here a tiny one, not a ViT-B/16)."""
    base = str(tmp_path / "b16")
    assert main(["--model", "vit_b16", "--weights", keras_file, "--out", base]) == 0
    served = tf.saved_model.load(os.path.join(base, "1"))
    assert served.signatures["predict_images"](images=tf.zeros([1, SIZE, SIZE, 3]))["probabilities"].shape == (1, 5)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--model", "vit_z99"], "Unknown model. Received: 'vit_z99'"),
        (["--model", "missing.keras"], "does not exist"),
        (["--model", "vit_b16"], "--weights is required"),
        (["--model", "vit_b16", "--weights", "imagenet-foo"], "neither none, a published name"),
        (["--model", "vit_b16", "--weights", "none", "--pooling", "mean"], "flag --pooling=mean"),
        (["--model", "vit_b16", "--weights", "none", "--max_pixels", "99999999999999999999"],
         "flag --max_pixels=99999999999999999999: 99999999999999999999 is not an integer in the range [1, "),
        (["--model", "vit_b16", "--weights", "none", "--max_pixels", "0"], "flag --max_pixels=0"),
        (["--model", "vit_b16", "--weights", "none", "--max_pixels", "5000", "--max_request_pixels", "4000"],
         "--max_request_pixels must be at least --max_pixels (a request of one image at the pixel limit must "
         "fit). Received: --max_request_pixels=4000, --max_pixels=5000"),
        (["--model", "vit_b16", "--weights", "none", "--max_jpeg_scans", "0"], "flag --max_jpeg_scans=0"),
        (["--model", "vit_b16", "--weights", "none", "--max_gif_blocks", "9999999"], "flag --max_gif_blocks=9999999"),
        (["--model", "vit_b16", "--weights", "none", "--max_png_idat_ratio", "nan"],
         "--max_png_idat_ratio must be a number from 1.0 to 1032.0. Received: --max_png_idat_ratio=nan"),
    ],
)
def test_bad_flags_exit_2_with_a_message(tmp_path, capsys, args, message):
    assert main([*args, "--out", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.startswith("error: ") and err.count("\n") == 1, err
    assert not os.path.exists(tmp_path / "m")


@pytest.mark.parametrize("flag", [["--image_size", "64"], ["--classes", "3"], ["--pooling", "token"]])
def test_architecture_flags_are_refused_with_a_keras_model(keras_file, tmp_path, capsys, flag):
    assert main(["--model", keras_file, "--out", str(tmp_path / "m"), *flag]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and f"{flag[0]} cannot apply to a .keras model" in err and err.count("\n") == 1
    assert main(["--model", "vit_b16", "--weights", keras_file, "--out", str(tmp_path / "m"), *flag]) == 2
    assert not os.path.exists(tmp_path / "m")


def test_tflite_format_writes_the_precision_asked_once(keras_file, tmp_path, capsys):
    base = str(tmp_path / "tiny")
    assert main(["--model", keras_file, "--out", base, "--format", "tflite"]) == 0
    assert sorted(os.listdir(os.path.join(base, "tflite"))) == ["model.tflite"]
    assert main(["--model", keras_file, "--out", base, "--format", "tflite", "--precision", "int8"]) == 0
    assert sorted(os.listdir(os.path.join(base, "tflite"))) == ["model.tflite", "model_int8.tflite"]
    assert main(["--model", keras_file, "--out", base, "--format", "tflite"]) == 1
    assert "already exists" in capsys.readouterr().err


def test_onnx_format(keras_file, tmp_path):
    pytest.importorskip("tf2onnx")
    base = str(tmp_path / "tiny")
    assert main(["--model", keras_file, "--out", base, "--format", "onnx"]) == 0
    assert os.path.getsize(os.path.join(base, "onnx", "model.onnx")) > 0


@pytest.mark.e2e
def test_a_hugging_face_folders_id2label_names_the_exported_classes(tmp_path, capsys, monkeypatch):
    """A Hugging Face checkpoint exported as it is keeps its own class names (config.json's id2label)."""
    import json
    import shutil

    import keras_vit
    from keras_vit.cli import model as cli_model

    folder = tmp_path / "hf"
    shutil.copytree(os.path.join(os.path.dirname(__file__), "data", "torch_golden", "hf_gelu"), folder)
    config = json.loads((folder / "config.json").read_text())
    config["id2label"] = {"0": "cat", "1": "dog", "2": "bird"}
    (folder / "config.json").write_text(json.dumps(config))
    base = str(tmp_path / "served")
    # the fixture is no published variant, which --model must name: the model is the checkpoint's own
    monkeypatch.setattr(cli_model, "model_from_flags", lambda flag_values: keras_vit.ViT(weights=str(folder)))
    assert main(["--model=vit_ti16", f"--weights={folder}", "--out", base]) == 0
    assert f"labels: 3 from the id2label of {folder}" in capsys.readouterr().out
    with open(os.path.join(base, "1", "assets", "labels.txt"), encoding="utf-8") as file:
        assert file.read().split() == ["cat", "dog", "bird"]
