"""bfloat16 SavedModel export (`precision="bfloat16"`, `--precision=bfloat16`): same signatures as the float32
export, bf16 weights and matmuls inside, outputs within tolerance of float32 and the same top-1 class.

A tiny model, exported once per module in each precision.
"""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from bomb_fixtures import gif_of_extension_bytes, png_inflate_bomb, progressive_jpeg
from export_fixtures import SIZE, TINY, encode, random_image, tiny_vit
from keras_vit import model_parts
from keras_vit.export import export_saved_model
from keras_vit.export.__main__ import main
from keras_vit.export.precision import serving_model

TOP_K = 3
IMAGES = 300


def _varied_images(count=IMAGES):
    """Smooth random images, noise, flat colours, dark and bright ones: float32 0..255."""
    rng = np.random.default_rng(5)
    images = []
    for i in range(count):
        kind = i % 4
        if kind == 0:
            image = random_image((SIZE, SIZE, 3), 100 + i).astype(np.float32)
        elif kind == 1:
            image = rng.uniform(0, 255, (SIZE, SIZE, 3))
        elif kind == 2:
            image = np.broadcast_to(rng.uniform(0, 255, 3), (SIZE, SIZE, 3)) + rng.normal(0, 8, (SIZE, SIZE, 3))
        else:
            image = random_image((SIZE, SIZE, 3), 100 + i) * rng.uniform(0.1, 1.0)
        images.append(np.clip(image, 0, 255))
    return np.stack(images).astype(np.float32)


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """{precision: loaded SavedModel} of one tiny classifier (logits: no head activation)."""
    keras.utils.set_random_seed(0)
    model = tiny_vit(classifier_activation=None)
    base = tmp_path_factory.mktemp("bf16")
    loaded = {}
    for precision in ("float32", "bfloat16"):
        path = export_saved_model(model, base / precision, top_k=TOP_K, precision=precision)
        loaded[precision] = tf.saved_model.load(path)
    return loaded


def _specs(function):
    inputs = {name: (spec.dtype, tuple(spec.shape)) for name, spec in function.structured_input_signature[1].items()}
    outputs = {name: (spec.dtype, tuple(spec.shape)) for name, spec in function.structured_outputs.items()}
    return inputs, outputs


@pytest.mark.e2e  # moved from the default tier (its time budget: the two exports take ~7 s)
def test_signatures_are_those_of_the_float32_export(exports):
    high, low = exports["float32"], exports["bfloat16"]
    assert set(low.signatures) == set(high.signatures) == {"serving_default", "predict_images"}
    for name in high.signatures:
        assert _specs(low.signatures[name]) == _specs(high.signatures[name]), name
    inputs, outputs = _specs(low.signatures["serving_default"])
    assert inputs == {"images": (tf.string, (None,))}
    assert outputs["scores"] == (tf.float32, (None, TOP_K))
    assert _specs(low.signatures["predict_images"])[1] == {"logits": (tf.float32, (None, 5))}


@pytest.mark.e2e  # moved from the default tier (its time budget: the two exports take ~7 s)
def test_weights_and_matmuls_are_bfloat16(exports):
    graph = exports["bfloat16"].signatures["predict_images"].graph.as_graph_def()
    ops = [node for function in graph.library.function for node in function.node_def]
    # The weights are constants of the frozen graph (keras_vit.export.frozen): bf16 but the head's (D, classes).
    weights = [(node.attr["dtype"].type, tuple(d.size for d in node.attr["value"].tensor.tensor_shape.dim))
               for node in ops if node.op == "Const" and len(node.attr["value"].tensor.tensor_shape.dim) >= 2]
    head_shape = (TINY["hidden_size"], 5)
    assert (tf.float32.as_datatype_enum, head_shape) in weights
    bf16 = [shape for dtype, shape in weights if dtype == tf.bfloat16.as_datatype_enum]
    assert len(bf16) >= 6 * TINY["num_layers"] and head_shape not in bf16, weights  # q, k, v, out, 2 MLP kernels
    matmuls = [node for node in ops if node.op in ("MatMul", "BatchMatMulV2", "Einsum")]
    bf16 = [node for node in matmuls if node.attr["T"].type == tf.bfloat16.as_datatype_enum]
    assert matmuls and len(matmuls) - len(bf16) == 1, [(n.op, n.name) for n in matmuls if n not in bf16]  # the head


def _logits(loaded, pixels, batch=50):  # the export refuses more than 64 images a request
    signature = loaded.signatures["predict_images"]
    return np.concatenate([signature(images=tf.constant(pixels[i:i + batch]))["logits"].numpy()
                           for i in range(0, len(pixels), batch)])


@pytest.mark.e2e  # moved from the default tier (its time budget: the two exports take ~7 s)
def test_outputs_within_tolerance_and_top1_agrees_with_float32(exports):
    pixels = _varied_images()
    high, low = _logits(exports["float32"], pixels), _logits(exports["bfloat16"], pixels)
    assert low.dtype == np.float32
    assert np.linalg.norm(low - high) / np.linalg.norm(high) < 2e-2
    agree = low.argmax(1) == high.argmax(1)
    assert np.mean(agree) >= 0.98
    # A flip is only allowed where float32's top two are a tie at bf16 precision: margin below twice the
    # largest logit deviation (oneDNN's bf16 accumulation order varies between runs, so such ties do flip).
    top2 = np.sort(high, 1)[:, -2:]
    decided = top2[:, 1] - top2[:, 0] > 2 * np.abs(low - high).max()
    assert decided.mean() >= 0.8 and agree[decided].mean() >= 0.99


@pytest.mark.e2e  # moved from the default tier (its time budget: the two exports take ~7 s)
def test_serving_default_scores_and_classes_match_float32(exports):
    encoded = tf.constant([encode(random_image((SIZE + 8 * i, SIZE, 3), 40 + i), "PNG") for i in range(8)])
    high = exports["float32"].signatures["serving_default"](images=encoded)
    low = exports["bfloat16"].signatures["serving_default"](images=encoded)
    assert low["scores"].dtype == tf.float32
    # Softmax scores of this tiny model's large logits (head weights ~ N(0, 2)) move several times the
    # logits' ~1% bf16 deviation where two classes are close; the logits themselves are checked above.
    np.testing.assert_allclose(low["scores"].numpy(), high["scores"].numpy(), atol=6e-2)
    assert np.mean(low["classes"].numpy()[:, 0] == high["classes"].numpy()[:, 0]) >= 7 / 8
    assert low["labels"].dtype == tf.string


@pytest.mark.e2e  # moved from the default tier (its time budget: the two exports take ~7 s)
@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_both_precisions_enforce_the_request_limits(exports, precision):
    """The limits guard the decoding and the float input before the model: the same in bf16."""
    loaded = exports[precision]
    serving = loaded.signatures["serving_default"]
    limits = {name: value.numpy().item() for name, value in loaded.serving_limits().items()}
    assert limits["max_jpeg_scans"] == 16 and limits["max_gif_blocks"] == 4096
    for bomb, message in ((progressive_jpeg(16, repeats=10), "Too many scans"),
                          (gif_of_extension_bytes(200_000), "Too many blocks"),
                          (png_inflate_bomb(80 << 20), "PNG image data too large")):
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            serving(images=tf.constant([bomb]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="out-of-range"):
        loaded.signatures["predict_images"](images=tf.fill([1, SIZE, SIZE, 3], -1e6))


def test_serving_model_keeps_float32_models_and_refuses_unknown_precisions():
    model = tiny_vit(num_layers=1)
    assert serving_model(model, "float32") is model
    low = serving_model(model, "bfloat16")
    assert low is not model and model_parts.encoder_blocks(model)[0].dtype_policy.name == "float32"
    with pytest.raises(ValueError, match="precision"):
        export_saved_model(model, "/nonexistent/never", precision="float16")


@pytest.mark.e2e  # moved from the default tier (its time budget)
def test_cli_precision_flag(tmp_path, capsys):
    keras_file = str(tmp_path / "tiny.keras")
    tiny_vit(num_layers=1).save(keras_file)
    base = str(tmp_path / "served")
    assert main(["--model", keras_file, "--out", base, "--precision", "bfloat16", "--freeze_weights", "false"]) == 0
    loaded = tf.saved_model.load(os.path.join(base, "1"))
    dtypes = {v.name.split(":")[0]: v.dtype for v in loaded.model_variables}  # variables, as asked
    head = {name for name in dtypes if model_parts.HEAD in name}
    assert head and {dtypes[name] for name in head} == {tf.float32}
    assert {dtypes[name] for name in dtypes if name not in head} == {tf.bfloat16}
    assert main(["--model", keras_file, "--out", base, "--precision", "bfloat16", "--format", "tflite"]) == 2
    assert "--format=tflite writes --precision=float32|int8. Received: --precision=bfloat16" in capsys.readouterr().err
