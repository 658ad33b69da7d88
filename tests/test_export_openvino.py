"""OpenVINO IR export (`export_openvino`, `--format=openvino`): float32 exact, bf16 and int8 close to float32, the
precision hint recorded and applied, the batch bound in the IR, and the refusals (nothing half-written)."""

import json
import os

import numpy as np
import pytest

from export_fixtures import SIZE, keras_reference, tiny_vit
from keras_vit.export import __main__ as export_main
from keras_vit.export import calibration, export_openvino, precision

ov_export = pytest.importorskip("keras_vit.export.openvino")
pytest.importorskip("openvino")


@pytest.fixture(scope="module")
def model():
    return tiny_vit(hidden_size=64, mlp_dim=128)


@pytest.fixture(scope="module")
def pixels():
    return np.random.default_rng(0).uniform(0, 255, (4, SIZE, SIZE, 3)).astype(np.float32)


def calibration_folder(path, count=10, size=SIZE):
    from PIL import Image

    os.makedirs(path, exist_ok=True)
    rng = np.random.default_rng(1)
    for index in range(count):
        Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(os.path.join(path, f"{index}.png"))
    return str(path)


@pytest.mark.e2e  # the default tier's time budget (10 minutes on 2 cores)
def test_float32_matches_keras_and_records_its_hint(model, pixels, tmp_path):
    path = export_openvino(model, tmp_path / "ov", max_batch_size=8)
    assert path == str(tmp_path / "ov" / "1")
    compiled = ov_export.compile_model(path)
    assert str(compiled.get_property("INFERENCE_PRECISION_HINT")) in ("f32", "<Type: 'float32'>")
    np.testing.assert_allclose(compiled(pixels)[0], keras_reference(model, pixels), atol=1e-5)
    sidecar = json.load(open(os.path.join(path, ov_export.SIDECAR)))
    assert sidecar["plugin_config"] == {"INFERENCE_PRECISION_HINT": "f32"} and sidecar["max_batch_size"] == 8
    assert sidecar["labels"] == "labels.txt"  # the IR has no place for them: a file beside it
    assert open(os.path.join(path, "labels.txt")).read().split("\n")[:2] == ["class_0", "class_1"]
    with pytest.raises(RuntimeError):  # the batch bound lives in the IR: 9 images are refused by OpenVINO itself
        compiled(np.zeros((9, SIZE, SIZE, 3), np.float32))


@pytest.mark.e2e  # the default tier's time budget (10 minutes on 2 cores)
def test_bfloat16_is_the_same_ir_served_in_bf16(model, pixels, tmp_path):
    path = export_openvino(model, tmp_path / "ov", precision="bfloat16")
    compiled = ov_export.compile_model(path)
    assert "bf" in str(compiled.get_property("INFERENCE_PRECISION_HINT")).lower() or "bfloat" in str(
        compiled.get_property("INFERENCE_PRECISION_HINT"))
    # bf16 keeps 8 bits of mantissa: probabilities within 0.04 of float32 here, the same class first (measured:
    # ~0.006 on an Intel Xeon with AMX, 0.029 on an AMD EPYC with AVX512-BF16, where OpenVINO keeps more in bf16)
    served, reference = compiled(pixels)[0], keras_reference(model, pixels)
    np.testing.assert_allclose(served, reference, atol=0.04)
    np.testing.assert_array_equal(served.argmax(axis=1), reference.argmax(axis=1))


@pytest.mark.e2e  # the default tier's time budget (10 minutes on 2 cores)
def test_int8_is_calibrated_and_close(pixels, tmp_path, capsys):
    logits = tiny_vit(hidden_size=64, mlp_dim=128, classifier_activation=None)
    path = export_openvino(logits, tmp_path / "ov", precision="int8",
                           calibration_images=calibration_folder(tmp_path / "calibration"))
    assert capsys.readouterr().out == ""  # NNCF's progress bars are not the tool's output
    quantized = ov_export.compile_model(path)(pixels)[0]
    reference = keras_reference(logits, pixels)
    error = np.abs(quantized - reference).max() / np.abs(reference).max()
    assert error < 0.1, error  # weights and activations in int8 (measured here: 0.02)
    with open(os.path.join(path, "model.xml")) as file:
        assert "FakeQuantize" in file.read()  # the matmuls' inputs are quantized


def test_int8_refusals_write_nothing(model, tmp_path):
    with pytest.raises(ValueError, match="needs calibration images"):
        export_openvino(model, tmp_path / "a", precision="int8")
    with pytest.raises(ValueError, match="holds 3 images"):
        export_openvino(model, tmp_path / "b", precision="int8",
                        calibration_images=calibration_folder(tmp_path / "few", count=3))
    with pytest.raises(ValueError, match=r"is 48x48 .*the model takes 32x32"):
        export_openvino(model, tmp_path / "c", precision="int8",
                        calibration_images=calibration_folder(tmp_path / "big", size=48))
    with pytest.raises(ValueError, match="are for precision='int8'"):
        export_openvino(model, tmp_path / "d", calibration_images=str(tmp_path / "big"))
    with pytest.raises(ValueError, match="precision"):
        export_openvino(model, tmp_path / "e", precision="float16")
    assert not any(os.path.exists(tmp_path / name) for name in "abcde")


@pytest.mark.e2e  # the default tier's time budget (10 minutes on 2 cores)
def test_a_broken_calibration_image_is_named(tmp_path):
    folder = calibration_folder(tmp_path / "calibration")
    (tmp_path / "calibration" / "z.png").write_bytes(b"\x89PNG\r\n\x1a\nbroken")
    with pytest.raises(ValueError, match=r"z.png' cannot be decoded"):
        calibration.read_folder(folder, SIZE, SIZE)


def test_calibration_reads_class_sub_folders_and_refuses_what_is_not_a_file(tmp_path):
    """A training folder laid out for image_dataset_from_directory "held 0 images" (main 9a09833); a FIFO named
    like an image hung the export."""
    for label in ("cat", "dog"):
        calibration_folder(tmp_path / "train" / label, count=4)
    assert len(calibration.read_folder(tmp_path / "train", SIZE, SIZE)) == 8
    os.mkfifo(tmp_path / "train" / "0.png")
    with pytest.raises(ValueError, match=r"0.png' is not a regular file"):
        calibration.read_folder(tmp_path / "train", SIZE, SIZE)


def test_running_an_ir_imports_neither_tensorflow_nor_keras():
    import subprocess
    import sys

    code = ("import sys, keras_vit.export.openvino as ov; "
            "print(sorted(m for m in ('tensorflow', 'keras') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_host_warning_names_the_missing_instructions():
    assert precision.host_warning("bfloat16", {"avx2"}).startswith("this CPU has neither AMX-BF16")
    assert precision.host_warning("int8", {"avx2"}).startswith("this CPU has neither AMX-INT8")
    assert precision.host_warning("bfloat16", {"amx_bf16"}) is None
    assert precision.host_warning("float32", {"avx2"}) is None


@pytest.mark.parametrize("flags, message", [
    (["--format=saved_model", "--precision=int8"], "--format=saved_model writes --precision=float32|bfloat16"),
    (["--format=onnx", "--precision=bfloat16"], "--format=onnx writes --precision=float32. Received"),
    (["--format=openvino", "--precision=int8"], "--calibration_images is for --format=openvino --precision=int8"),
    (["--format=tflite", "--calibration_images=/tmp"], "--calibration_images is for"),
])
def test_cli_refuses_a_pair_a_format_cannot_do(flags, message, tmp_path, capsys):
    out = tmp_path / "m"
    assert export_main.main(["--model=vit_ti16", "--weights=none", f"--out={out}", *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and not out.exists()
