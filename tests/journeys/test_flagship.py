"""The flagship journey as a user runs it, at ViT-B/16 size and in the order users take the steps, each call
repeated: a published-layout checkpoint (a local official `.npz`) -> fine-tune with `model.fit` -> LoRA after that
first fit -> save the adapters -> reload them on a fresh base -> merge -> export every format -> serve each
export with repeated requests of several batch sizes (the SavedModel through `tf.saved_model.load`, the TF1
session loader TF Serving uses, and a real TF Serving-compatible HTTP server) -> `model.quantize` -> save / load.

64 px images: the failures this tier exists for depend on the model's width and depth, not on its token count
(17 tokens here), and 64 px keeps a B/16 training step around a second on 2 cores. The steps share one model and
run in file order; a step whose predecessor failed fails on its missing state.
"""

import base64
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_vit
from export_fixtures import encode
from keras_vit import lora, quantization
from keras_vit.export import export_onnx, export_openvino, export_saved_model, export_tflite
from numpy_reference import random_official_params

pytestmark = pytest.mark.journeys

SIZE, CLASSES = 64, 3
B16 = dict(image_size=224, patch_size=16, hidden=768, layers=12, heads=12, mlp=3072, classes=1000)
"""The official ViT-B/16 layout at 224 px (a 14x14 position grid), 1000 classes: the file a user fine-tunes from."""
BATCH_SIZES = (1, 1, 8, 3, 1)
"""The requests sent to each served export, in order: the same size twice, then others (the SavedModel of
ViT-B/16 answered only its first request on main 9a09833)."""


def build(checkpoint):
    return keras_vit.ViT_B16(weights=checkpoint, input_shape=(SIZE, SIZE, 3), classes=CLASSES,
                             classifier_activation=None)


def numpy(tensor):
    return keras.ops.convert_to_numpy(tensor)


@pytest.fixture(scope="module")
def journey(tmp_path_factory):
    """The state the steps hand on: folders, data, and the models as they are after each step."""
    root = tmp_path_factory.mktemp("journey")
    checkpoint = str(root / "ViT-B_16.npz")
    np.savez(checkpoint, **random_official_params(np.random.default_rng(0), **B16))
    rng = np.random.default_rng(1)
    pixels = rng.integers(0, 256, (16, SIZE, SIZE, 3), dtype=np.uint8)
    return {"root": root, "checkpoint": checkpoint, "pixels": pixels, "labels": np.arange(16) % CLASSES,
            "x": keras_vit.preprocess_input(pixels.astype("float32"))}


def test_fine_tune_a_pretrained_file_with_fit(journey):
    model = build(journey["checkpoint"])
    x, y = journey["x"], journey["labels"]
    first = model.predict(x, verbose=0)
    np.testing.assert_array_equal(model.predict(x, verbose=0), first)
    model.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9, global_clipnorm=1.0),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    before = numpy(model.get_layer("encoder_block_11").attention.query.kernel)
    history = model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    assert not np.array_equal(numpy(model.get_layer("encoder_block_11").attention.query.kernel), before)
    model.save(journey["root"] / "fine_tuned.keras")  # the base the adapters will be trained on
    journey["model"] = model


def test_lora_after_the_first_fit_trains_the_adapters(journey):
    model, x, y = journey["model"], journey["x"], journey["labels"]
    model.enable_lora(4)  # no new compile: a user's next line is fit
    frozen = {w.path: numpy(w) for w in model.weights if not w.trainable}
    adapters = {w.path: numpy(w) for w in model.trainable_weights if "lora_kernel_b" in w.path}
    assert len(adapters) == 24  # query and value of 12 blocks
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    assert [path for path, value in frozen.items()
            if not np.array_equal(numpy(_variable(model, path)), value)] == []
    assert all(not np.array_equal(numpy(_variable(model, path)), value) for path, value in adapters.items())
    for _ in range(2):
        np.testing.assert_allclose(model.predict(x, verbose=0), numpy(model(x, training=False)), atol=1e-4)


def _variable(model, path):
    return next(w for w in model.weights if w.path == path)


def test_the_adapters_file_reproduces_the_task_on_a_fresh_base(journey, caplog):
    model = journey["model"]
    path = str(journey["root"] / "task.lora.h5")
    model.save_lora_weights(path)
    build(journey["checkpoint"]).load_lora_weights(path)  # the published base: not the one they were trained on
    assert "trained on a base whose query/value kernels differ" in caplog.text
    caplog.clear()
    fresh = keras.saving.load_model(journey["root"] / "fine_tuned.keras")
    fresh.load_lora_weights(path)
    assert "differ" not in caplog.text
    x = journey["x"][:4]
    np.testing.assert_allclose(numpy(fresh(x, training=False)), numpy(model(x, training=False)), atol=1e-4)
    journey["merged"] = fresh.merge_lora()
    np.testing.assert_allclose(numpy(journey["merged"](x, training=False)), numpy(model(x, training=False)),
                               atol=1e-4)


def _requests(journey):
    """(encoded PNGs, the merged model's logits for them), for each request size in `BATCH_SIZES`."""
    merged, pixels = journey["merged"], journey["pixels"]
    start = 0
    for size in BATCH_SIZES:
        chosen = pixels[start:start + size]
        start = (start + size) % 8
        logits = numpy(merged(keras_vit.preprocess_input(chosen.astype("float32")), training=False))
        yield [encode(image, "PNG") for image in chosen], logits


@pytest.fixture(scope="module")
def saved_model(journey):
    previous = os.umask(0o022)
    try:
        return export_saved_model(journey["merged"], journey["root"] / "vit_b16", top_k=CLASSES)
    finally:
        os.umask(previous)


def _check_reply(scores, classes, logits):
    """A `serving_default` reply: the softmax of the model's logits, every class in order of score."""
    exp = np.exp(logits - logits.max(axis=1, keepdims=True))  # numpy: the TF1 test runs inside a graph
    probabilities = exp / exp.sum(axis=1, keepdims=True)
    np.testing.assert_array_equal(np.sort(classes, axis=1), np.tile(np.arange(CLASSES), (len(logits), 1)))
    np.testing.assert_allclose(np.take_along_axis(probabilities, np.asarray(classes), axis=1), scores, atol=1e-5)


def test_the_saved_model_answers_every_request(saved_model, journey):
    assert oct(os.stat(saved_model).st_mode & 0o777) == oct(0o755)  # a server of another user can read it
    serve = tf.saved_model.load(saved_model).signatures["serving_default"]
    for images, logits in _requests(journey):
        reply = serve(images=tf.constant(images))
        _check_reply(reply["scores"].numpy(), reply["classes"].numpy(), logits)


def test_the_tf1_session_loader_answers_every_request(saved_model, journey):
    """TF Serving's loader: a TF1 session over the MetaGraph, one `Session.run` a request."""
    requests = list(_requests(journey))  # the Keras model's answers, computed outside the TF1 graph
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], saved_model)
        signature = meta.signature_def["serving_default"]
        feed = signature.inputs["images"].name
        fetch = {key: signature.outputs[key].name for key in ("scores", "classes")}
        for images, logits in requests:
            reply = session.run(fetch, {feed: images})
            _check_reply(reply["scores"], reply["classes"], logits)


def test_a_tf_serving_compatible_http_server_answers_every_request(saved_model, journey):
    import kserve_client

    server, base = kserve_client.start(saved_model, "vit_b16", seconds=300)
    try:
        for images, logits in _requests(journey):
            status, reply = kserve_client.post(f"{base}:predict", {
                "instances": [{"b64": base64.b64encode(image).decode()} for image in images]})
            assert status == 200, reply
            predictions = reply["predictions"]
            _check_reply(np.array([p["scores"] for p in predictions]), [p["classes"] for p in predictions],
                         logits)
    finally:
        kserve_client.stop(server)


def _float_requests(journey):
    """(pixels in 0..255, the merged model's logits): what the float exports take and answer."""
    for images, logits in _requests(journey):
        yield np.stack([tf.io.decode_png(image).numpy() for image in images]).astype("float32"), logits


def test_tflite_answers_every_request(journey):
    from keras_vit.export import tflite

    path = export_tflite(journey["merged"], journey["root"] / "vit_b16.tflite")
    for pixels, logits in _float_requests(journey):
        np.testing.assert_allclose(tflite.run(path, pixels), logits, atol=1e-4)


def test_onnx_answers_every_request(journey):
    onnxruntime = pytest.importorskip("onnxruntime")
    path = export_onnx(journey["merged"], journey["root"] / "vit_b16.onnx")
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    for pixels, logits in _float_requests(journey):
        np.testing.assert_allclose(session.run(None, {"images": pixels})[0], logits, atol=1e-4)


def test_openvino_answers_every_request(journey):
    openvino_export = pytest.importorskip("keras_vit.export.openvino")
    path = export_openvino(journey["merged"], journey["root"] / "vit_b16_ov", max_batch_size=8)
    assert oct(os.stat(path).st_mode & 0o777) == oct(0o777 & ~_umask())
    compiled = openvino_export.compile_model(path)
    for pixels, logits in _float_requests(journey):
        np.testing.assert_allclose(compiled(pixels)[0], logits, atol=1e-4)


def _umask():
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_quantize_save_and_load(journey):
    merged, x = journey["merged"], journey["x"][:4]
    merged.quantize("int8")
    expected = merged.predict(x, verbose=0)
    path = str(journey["root"] / "vit_b16_int8.keras")
    merged.save(path)
    for _ in range(2):
        reloaded = keras.saving.load_model(path)
        assert len(quantization.quantized_layers(reloaded)) == 1 + 12 * 6 + 1
        assert not [layer.path for layer in reloaded._flatten_layers()  # each layer built in its own policy
                    if isinstance(layer._dtype_policy, keras.dtype_policies.DTypePolicyMap)]
        np.testing.assert_array_equal(reloaded.predict(x, verbose=0), expected)
        np.testing.assert_array_equal(reloaded.predict(x, verbose=0), expected)
    assert not lora.enabled_layers(reloaded)
