"""TFLite (float, dynamic-range int8) and ONNX exports of the float signature, against the Keras model."""

import numpy as np
import pytest

from export_fixtures import SIZE, keras_reference, tiny_vit
from keras_vit.export import export_onnx, export_tflite, tflite


@pytest.fixture(scope="module")
def pixels():
    return np.random.default_rng(0).uniform(0, 255, (3, SIZE, SIZE, 3)).astype(np.float32)


@pytest.mark.parametrize("gelu_approximate", [True, False])
def test_tflite_float_matches_keras(tmp_path, pixels, gelu_approximate):
    model = tiny_vit(gelu_approximate=gelu_approximate)
    path = export_tflite(model, tmp_path / "model.tflite")
    np.testing.assert_allclose(tflite.run(path, pixels), keras_reference(model, pixels), atol=1e-4)


def test_tflite_dynamic_int8_is_smaller_and_close(tmp_path, pixels):
    model = tiny_vit(hidden_size=64, mlp_dim=128)
    float_path = export_tflite(model, tmp_path / "model.tflite")
    int8_path = export_tflite(model, tmp_path / "model_int8.tflite", quantize="dynamic_int8")
    assert (tmp_path / "model_int8.tflite").stat().st_size < 0.5 * (tmp_path / "model.tflite").stat().st_size
    reference = keras_reference(model, pixels)
    quantized = tflite.run(int8_path, pixels)
    assert quantized.shape == reference.shape
    np.testing.assert_allclose(quantized.sum(axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(quantized, reference, atol=0.05)  # int8 weights: close, not equal
    assert np.abs(tflite.run(float_path, pixels) - reference).max() < np.abs(quantized - reference).max()


def test_tflite_refuses_to_overwrite_and_bad_quantize(tmp_path):
    model = tiny_vit(num_layers=1)
    (tmp_path / "model.tflite").write_bytes(b"keep")
    with pytest.raises(ValueError, match="already exists"):
        export_tflite(model, tmp_path / "model.tflite")
    assert (tmp_path / "model.tflite").read_bytes() == b"keep"
    with pytest.raises(ValueError, match="quantize"):
        export_tflite(model, tmp_path / "other.tflite", quantize="int4")


@pytest.mark.parametrize("gelu_approximate", [True, False])
def test_onnx_matches_keras_and_exact_gelu_converts(tmp_path, pixels, gelu_approximate):
    """Exact GELU lowers to TF's Erfc, which tf2onnx leaves unconverted; the export rewrites it as 1 - Erf."""
    pytest.importorskip("tf2onnx")
    onnx = pytest.importorskip("onnx")
    onnxruntime = pytest.importorskip("onnxruntime")
    model = tiny_vit(gelu_approximate=gelu_approximate)
    path = export_onnx(model, tmp_path / "model.onnx")
    op_types = {node.op_type for node in onnx.load(path).graph.node}
    assert "Erfc" not in op_types
    assert ("Erf" in op_types) == (not gelu_approximate)
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["images"]
    assert [o.name for o in session.get_outputs()] == ["probabilities"]
    (served,) = session.run(None, {"images": pixels})
    np.testing.assert_allclose(served, keras_reference(model, pixels), atol=1e-4)
