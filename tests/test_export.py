"""SavedModel export for TF Serving (keras_vit/export): signatures, served outputs without Keras, bad input.

All offline on a tiny model. The served outputs are compared with the Keras model run here on images
decoded by PIL and resized by a numpy bilinear written from the definition (tests/export_fixtures.py).
"""

import base64
import functools
import io
import json
import logging
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import keras_vit
from export_fixtures import (
    SIZE,
    animated_gif,
    TINY,
    encode,
    gif_with_comment_blocks,
    gif_with_screen,
    keras_reference,
    lossless_images,
    pil_rgb,
    random_image,
    resize_bilinear,
    tiny_vit,
    with_huge_png_header,
)
from bomb_fixtures import (
    gif_of_extension_bytes,
    gif_of_frames,
    gif_with_hidden_frame,
    png_inflate_bomb,
    progressive_jpeg,
)
from keras_vit.export import export_saved_model

HERE = os.path.dirname(os.path.abspath(__file__))
SAVED_MODEL_CLI = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
LABELS = ["cat", "dog", "ship", "tree", "bird"]
MAX_PIXELS = 64 * 64
MAX_BATCH = 8
TOP_K = 3


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(keras model, version directory) of a tiny classifier exported once for the module."""
    model = tiny_vit()
    base = tmp_path_factory.mktemp("export") / "tiny_vit"
    path = export_saved_model(
        model, base, top_k=TOP_K, labels=LABELS, max_pixels=MAX_PIXELS, max_batch_size=MAX_BATCH
    )
    return model, path


@pytest.fixture(scope="module")
def loaded(exported):
    return tf.saved_model.load(exported[1])


def _reference_pixels(encoded: dict) -> np.ndarray:
    return np.stack([resize_bilinear(pil_rgb(image), SIZE, SIZE) for image in encoded.values()])


def _run_cli(*args):
    result = subprocess.run([SAVED_MODEL_CLI, *args], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_layout_of_the_version_directory(exported):
    _, path = exported
    assert os.path.basename(path) == "1"
    for name in ("saved_model.pb", "variables/variables.index", "assets/labels.txt"):
        assert os.path.exists(os.path.join(path, name)), name
    with open(os.path.join(path, "assets", "labels.txt")) as file:
        assert file.read().split("\n")[:5] == LABELS
    warmup = os.path.join(path, "assets.extra", "tf_serving_warmup_requests")
    if _has_serving_api():
        assert os.path.getsize(warmup) > 0
    assert not [name for name in os.listdir(os.path.dirname(path)) if name.startswith(".staging")]


@pytest.mark.e2e
def test_saved_model_cli_show_lists_the_signatures(exported):
    out = _run_cli("show", "--dir", exported[1], "--all")
    blocks = {b.split("']")[0]: b for b in out.split("signature_def['")[1:]}
    assert {"serving_default", "predict_images"} <= set(blocks)
    default = blocks["serving_default"]
    assert "inputs['images']" in default and "DT_STRING" in default.split("outputs")[0]
    for output, dtype in (("scores", "DT_FLOAT"), ("classes", "DT_INT32"), ("labels", "DT_STRING")):
        section = default.split(f"outputs['{output}']")[1].split("outputs[")[0]
        assert f"dtype: {dtype}" in section and f"shape: (-1, {TOP_K})" in section, (output, section)
    floats = blocks["predict_images"]
    assert "DT_FLOAT" in floats.split("outputs")[0]
    assert "outputs['probabilities']" in floats and "shape: (-1, 5)" in floats


@pytest.mark.e2e
def test_saved_model_cli_run_serves_each_signature(exported, tmp_path):
    """`saved_model_cli run` loads through the TF1 session loader, the code path of TF Serving itself."""
    model, path = exported
    image = random_image((40, 36, 3), 11)
    jpeg = tf.io.encode_jpeg(image).numpy()  # ends with FFD9: safe in a fixed-width numpy bytes array
    np.save(tmp_path / "encoded.npy", np.array([jpeg, jpeg]))
    out = _run_cli("run", "--dir", path, "--tag_set", "serve", "--signature_def", "serving_default",
                   "--inputs", f"images={tmp_path / 'encoded.npy'}")
    assert "Result for output key labels" in out and "Result for output key scores" in out
    pixels = np.stack([random_image((SIZE, SIZE, 3), 12)]).astype(np.float32)
    np.save(tmp_path / "pixels.npy", pixels)
    out = _run_cli("run", "--dir", path, "--tag_set", "serve", "--signature_def", "predict_images",
                   "--inputs", f"images={tmp_path / 'pixels.npy'}", "--outdir", str(tmp_path), "--overwrite")
    served = np.load(tmp_path / "probabilities.npy")
    np.testing.assert_allclose(served, keras_reference(model, pixels), atol=1e-5)


def _has_serving_api():
    try:
        import tensorflow_serving.apis  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def served_without_keras(exported, tmp_path_factory):
    """(request, outputs) of one fresh process with `sys.modules['keras'] = None` serving the export."""
    _, path = exported
    tmp_path = tmp_path_factory.mktemp("fresh")
    encoded = {**lossless_images(), "jpeg": tf.io.encode_jpeg(random_image((50, 28, 3), 9)).numpy()}
    pixels = np.random.default_rng(3).uniform(0, 255, (3, SIZE, SIZE, 3)).astype(np.float32)
    np.save(tmp_path / "pixels.npy", pixels)
    request = {"encoded": [base64.b64encode(b).decode() for b in encoded.values()],
               "pixels": str(tmp_path / "pixels.npy")}
    (tmp_path / "request.json").write_text(json.dumps(request))
    result_path = tmp_path / "result.npz"
    subprocess.run(
        [sys.executable, os.path.join(HERE, "export_serve_without_keras.py"), path,
         str(tmp_path / "request.json"), str(result_path)],
        check=True, timeout=300, capture_output=True,
    )
    return (encoded, pixels), dict(np.load(result_path))


def test_served_without_keras_equals_the_keras_model(exported, served_without_keras):
    """Both signatures load and serve without Keras; outputs equal the Keras model's to 1e-5."""
    model, _ = exported
    (encoded, pixels), result = served_without_keras
    assert json.loads(str(result["keras_modules"])) == []
    assert set(result["signatures"]) == {"serving_default", "predict_images"}

    # JPEG: decoded by TensorFlow here too (PIL's libjpeg rounds differently); resize and model are independent.
    encoded = dict(encoded)
    jpeg = encoded.pop("jpeg")
    reference_pixels = np.concatenate(
        [_reference_pixels(encoded), resize_bilinear(tf.io.decode_jpeg(jpeg).numpy(), SIZE, SIZE)[None]]
    )
    probabilities = keras_reference(model, reference_pixels)
    top = np.argsort(-probabilities, axis=1)[:, :TOP_K]
    np.testing.assert_array_equal(result["serving_default/classes"], top)
    np.testing.assert_allclose(result["serving_default/scores"], np.take_along_axis(probabilities, top, 1), atol=1e-5)
    np.testing.assert_array_equal(result["serving_default/labels"], np.array(LABELS)[top])
    assert result["serving_default/classes"].dtype == np.int32
    np.testing.assert_allclose(result["predict_images/probabilities"], keras_reference(model, pixels), atol=1e-5)


def test_warmup_requests_replay_without_keras(served_without_keras):
    _, result = served_without_keras
    warmup = json.loads(str(result["warmup"]))
    if warmup is None:
        pytest.skip("tensorflow-serving-api is not installed (pip install --no-deps tensorflow-serving-api)")
    assert [name for name, _ in warmup] == ["serving_default", "predict_images"]
    assert warmup[0][1] == {"scores": [2, TOP_K], "classes": [2, TOP_K], "labels": [2, TOP_K]}
    assert warmup[1][1] == {"probabilities": [1, 5]}


@functools.lru_cache(maxsize=None)
def _bad_requests():
    png = encode(random_image((20, 20, 3), 1), "PNG")
    gif = encode(random_image((8, 8, 3), 2), "GIF")
    jpeg = tf.io.encode_jpeg(random_image((8, 8, 3), 3)).numpy()
    sof = jpeg.index(b"\xff\xc0") + 5  # SOF0: precision, then height and width, big-endian uint16
    return {
        "corrupt PNG": (png[:60], r"could not be decoded.*index, format:\] \[1\] \[PNG\]"),
        "empty string": (b"", "Not a JPEG, PNG, GIF or BMP"),
        "not an image": (b"%PDF-1.4 a text file", "Not a JPEG, PNG, GIF or BMP"),
        # WebP is refused (docs/SERVING.md): the checks that bound the decoder's work cover these four formats
        "a WebP image": (b"RIFF\x1a\x00\x00\x00WEBPVP8L\x0d\x00\x00\x00\x2f\x00\x00\x00\x10\x07\x10\x11\x11\x88\x88\xfe\x07\x00",
                         "Not a JPEG, PNG, GIF or BMP"),
        "truncated PNG header": (png[:20], "Truncated image"),
        "PNG header claiming 100000 x 100000": (with_huge_png_header(png, 100_000, 100_000), "too large"),
        "PNG over the export's pixel limit": (encode(random_image((80, 80, 3), 4), "PNG"), "too large"),
        "GIF header claiming 65535 x 65535": (gif[:6] + b"\xff\xff\xff\xff" + gif[10:], "too large"),
        "animated GIF whose frames exceed the limit": (animated_gif(frames=3, size=40), "too large"),
        # the decoder allocates each frame at its own descriptor's size, whatever the screen says
        "GIF with a 1x1 screen and one 100x100 frame": (gif_with_screen(animated_gif(1, 100), 1, 1),
                                                         r"too large.*\[1\] \[100\] \[100\] \[1\]"),
        "GIF with a 1x1 screen and two 50x50 frames": (gif_with_screen(animated_gif(2, 50), 1, 1), "too large"),
        # giflib reads a sub-block after an extension with none: a frame behind it must still be found
        "GIF with a 1x1 screen and a 100x100 frame behind an empty extension": (
            gif_with_hidden_frame(animated_gif(1, 100)), r"too large.*\[1\] \[100\] \[100\] \[1\]"),
        "JPEG header claiming 65000 x 65000": (jpeg[:sof] + b"\xfd\xe8\xfd\xe8" + jpeg[sof + 4:], "too large"),
        # work bombs, refused before decoding under the default work limits (16 scans, 4096 GIF blocks, IDAT
        # at most 2x the raw size + 64 KiB)
        "progressive JPEG with its last scan repeated: 20 scans": (progressive_jpeg(16, repeats=10),
                                                                   r"Too many scans.*\[1\] \[17\]"),
        "GIF with a 1x1 screen then 200 KB of 0x21 bytes": (gif_of_extension_bytes(200_000), "Too many blocks"),
        "GIF of 1100 one-pixel frames (4400 blocks)": (gif_of_frames(1100), "Too many blocks"),
        "1x1 PNG whose IDAT inflates to 80 MB": (png_inflate_bomb(80 << 20), "PNG image data too large"),
    }


@pytest.mark.parametrize("case", list(_bad_requests()))
def test_bad_encoded_image_is_invalid_argument(loaded, case):
    image, message = _bad_requests()[case]
    good = encode(random_image((20, 20, 3), 5), "PNG")
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        loaded.signatures["serving_default"](images=tf.constant([good, image]))
    assert loaded.signatures["serving_default"](images=tf.constant([good]))["classes"].shape == (1, TOP_K)


def test_image_at_the_pixel_limit_is_served(loaded):
    at_limit = encode(random_image((64, 64, 3), 6), "PNG")
    assert loaded.signatures["serving_default"](images=tf.constant([at_limit]))["scores"].shape == (1, TOP_K)
    # GIFs count their frames exactly: one 64x64 frame is at the limit, so is 2 frames of 45x45 (4050)
    for gif in (animated_gif(frames=1, size=64), animated_gif(frames=2, size=45)):
        assert loaded.signatures["serving_default"](images=tf.constant([gif]))["scores"].shape == (1, TOP_K)


def _pil_frames(gif: bytes) -> list:
    """(height, width) of every frame as PIL reads each frame's own image descriptor."""
    from PIL import Image, ImageSequence

    image = Image.open(io.BytesIO(gif))
    sizes = []
    for frame in ImageSequence.Iterator(image):
        left, top, right, bottom = frame.tile[0][1] if frame.tile else (0, 0, *frame.size)
        sizes.append((bottom - top, right - left))
    return sizes


@pytest.mark.parametrize("case", ["one frame", "three frames", "screen 1x1", "comment blocks", "local palettes"])
def test_gif_frames_reads_every_frame_descriptor(case):
    from keras_vit.export.decode import gif_frames

    gif = {
        "one frame": animated_gif(1, 9),
        "three frames": animated_gif(3, 12),
        "screen 1x1": gif_with_screen(animated_gif(2, 30), 1, 1),
        "comment blocks": gif_with_comment_blocks(animated_gif(2, 7), 500),
        "local palettes": encode(random_image((33, 21, 3), 8), "GIF"),
    }[case]
    frames = _pil_frames(gif)
    expected = [len(frames), max(h for h, _ in frames), max(w for _, w in frames)]
    assert [int(x) for x in gif_frames(tf.constant(gif))] == expected


def test_gif_frames_stops_at_a_truncated_or_unknown_block():
    from keras_vit.export.decode import gif_frames

    gif = animated_gif(3, 10)
    assert int(gif_frames(tf.constant(gif[:-30]))[0]) == 3  # the last frame's data is cut: still counted
    start = 13 + (3 * (2 << (gif[10] & 7)) if gif[10] & 0x80 else 0)
    assert int(gif_frames(tf.constant(gif[:start] + b"\x99" + gif[start:]))[0]) == 0


def test_refusals_name_the_image_index(loaded):
    good = encode(random_image((20, 20, 3), 5), "PNG")
    too_large = encode(random_image((80, 80, 3), 4), "PNG")
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"image index, height, width, frames:\] \[2\]"):
        loaded.signatures["serving_default"](images=tf.constant([good, good, too_large]))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"Not a JPEG.*image index:\] \[0\]"):
        loaded.signatures["serving_default"](images=tf.constant([b"nonsense", good]))


def test_too_many_images_is_invalid_argument(loaded):
    good = encode(random_image((20, 20, 3), 5), "PNG")
    with pytest.raises(tf.errors.InvalidArgumentError, match="Too many images"):
        loaded.signatures["serving_default"](images=tf.constant([good] * (MAX_BATCH + 1)))
    with pytest.raises(tf.errors.InvalidArgumentError, match="Too many images"):
        loaded.signatures["predict_images"](images=tf.zeros([MAX_BATCH + 1, SIZE, SIZE, 3]))


@pytest.mark.parametrize("shape", [(1, 16, SIZE, 3), (1, SIZE, SIZE, 4), (2, SIZE, SIZE + 8, 3)])
def test_float_batch_of_the_wrong_size_is_invalid_argument(loaded, shape):
    with pytest.raises(tf.errors.InvalidArgumentError, match=rf"\(batch, {SIZE}, {SIZE}, 3\)"):
        loaded.signatures["predict_images"](images=tf.zeros(shape))


@pytest.mark.parametrize("shape", [(SIZE, SIZE, 3), (1, 1, SIZE, SIZE, 3), ()])
def test_float_batch_of_the_wrong_rank_is_invalid_argument(loaded, shape):
    with pytest.raises(tf.errors.InvalidArgumentError, match=rf"\(batch, {SIZE}, {SIZE}, 3\).*received shape"):
        loaded.signatures["predict_images"](images=tf.zeros(shape))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, 1e30, -1e6, 255.01, -0.01])
def test_float_batch_with_pixels_outside_0_255_is_invalid_argument(loaded, bad):
    pixels = np.zeros((3, SIZE, SIZE, 3), np.float32)
    pixels[1, 4, 5, 2] = bad
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"NaN, infinite or out-of-range.*0\.\.255.*:\] \[1\]"):
        loaded.signatures["predict_images"](images=pixels)


def test_float_batch_at_the_ends_of_the_range_is_served(loaded):
    pixels = np.zeros((2, SIZE, SIZE, 3), np.float32)
    pixels[1] = 255.0
    assert loaded.signatures["predict_images"](images=pixels)["probabilities"].shape == (2, 5)


@pytest.mark.e2e  # moved from the default tier (its time budget)
def test_headless_model_exports_features(tmp_path):
    model = keras_vit.ViT(**{k: v for k, v in TINY.items()}, include_top=False,
                          pooling="token")
    path = export_saved_model(model, tmp_path / "features")
    served = tf.saved_model.load(path)
    assert set(served.signatures) == {"serving_default", "features"}
    encoded = lossless_images()
    out = served.signatures["serving_default"](images=tf.constant(list(encoded.values())))
    np.testing.assert_allclose(out["features"].numpy(), keras_reference(model, _reference_pixels(encoded)), atol=1e-5)
    pixels = np.random.default_rng(4).uniform(0, 255, (2, SIZE, SIZE, 3)).astype(np.float32)
    out = served.signatures["features"](images=tf.constant(pixels))
    np.testing.assert_allclose(out["features"].numpy(), keras_reference(model, pixels), atol=1e-5)
    assert not os.path.exists(os.path.join(path, "assets", "labels.txt"))


@pytest.mark.e2e  # moved from the default tier (its time budget)
def test_logits_head_serves_logits_and_softmax_scores(tmp_path):
    model = tiny_vit(classifier_activation=None)
    served = tf.saved_model.load(export_saved_model(model, tmp_path / "logits", top_k=10))
    pixels = np.random.default_rng(5).uniform(0, 255, (2, SIZE, SIZE, 3)).astype(np.float32)
    logits = keras_reference(model, pixels)
    served_logits = served.signatures["predict_images"](images=pixels)["logits"].numpy()
    np.testing.assert_allclose(served_logits, logits, rtol=1e-5, atol=1e-5)  # logits reach ~15: relative
    png = [encode(p.astype(np.uint8), "PNG") for p in pixels.round()]
    out = served.signatures["serving_default"](images=tf.constant(png))
    reference = keras_reference(model, pixels.round())
    softmax = np.exp(reference - reference.max(1, keepdims=True))
    softmax /= softmax.sum(1, keepdims=True)
    assert out["scores"].shape == (2, 5)  # top_k is capped at the number of classes
    np.testing.assert_allclose(out["scores"].numpy(), -np.sort(-softmax, axis=1), atol=1e-5)
    assert [label.decode() for label in out["labels"].numpy()[0]] == [f"class_{i}" for i in out["classes"][0]]


@pytest.mark.e2e  # moved from the default tier (its time budget)
def test_imagenet_head_gets_the_package_class_names(tmp_path):
    from keras_vit import preprocessing
    path = export_saved_model(tiny_vit(num_layers=1, classes=1000), tmp_path / "in1k")
    with open(os.path.join(path, "assets", "labels.txt"), encoding="utf-8") as file:
        labels = file.read().split("\n")[:-1]
    assert labels == preprocessing.class_names(1000)
    assert labels[207] == "golden_retriever"
    png = encode(random_image((9, 9, 3), 0), "PNG")
    out = tf.saved_model.load(path).signatures["serving_default"](images=tf.constant([png]))
    assert [label.decode() for label in out["labels"].numpy()[0]] == [labels[i] for i in out["classes"].numpy()[0]]


@pytest.mark.e2e  # moved from the default tier (its time budget)
def test_model_with_its_own_preprocessing_is_not_scaled_twice(tmp_path):
    model = tiny_vit(include_preprocessing=True)
    served = tf.saved_model.load(export_saved_model(model, tmp_path / "pre"))
    pixels = np.random.default_rng(6).uniform(0, 255, (2, SIZE, SIZE, 3)).astype(np.float32)
    own_scaling = model(pixels, training=False).numpy()  # the model's `preprocessing` layer scales 0..255
    np.testing.assert_allclose(served.signatures["predict_images"](images=pixels)["probabilities"].numpy(),
                               own_scaling, atol=1e-5)


@pytest.mark.e2e  # moved from the default tier (its time budget)
def test_versions_are_next_free_and_never_overwritten(tmp_path):
    model = tiny_vit(num_layers=1)
    base = tmp_path / "m"
    assert export_saved_model(model, base).endswith(os.sep + "1")
    assert export_saved_model(model, base, version=7).endswith(os.sep + "7")
    assert export_saved_model(model, base).endswith(os.sep + "8")
    stamp = os.path.getmtime(base / "7" / "saved_model.pb")
    with pytest.raises(ValueError, match="Version 7 already exists"):
        export_saved_model(model, base, version=7)
    assert os.path.getmtime(base / "7" / "saved_model.pb") == stamp
    assert export_saved_model(model, base, version=7, overwrite=True).endswith(os.sep + "7")
    assert sorted(os.listdir(base)) == ["1", "7", "8"]


@pytest.mark.e2e  # moved from the default tier (its time budget)
def test_export_without_the_serving_api_skips_the_warmup_file(tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "tensorflow_serving", None)
    monkeypatch.setitem(sys.modules, "tensorflow_serving.apis", None)
    with caplog.at_level(logging.WARNING):
        path = export_saved_model(tiny_vit(), tmp_path / "m")
    assert not os.path.exists(os.path.join(path, "assets.extra", "tf_serving_warmup_requests"))
    assert "pip install --no-deps tensorflow-serving-api" in caplog.text
    assert tf.saved_model.load(path).signatures["predict_images"](images=tf.zeros([1, SIZE, SIZE, 3]))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(top_k=0), "top_k"),
        (dict(max_pixels=-1), "max_pixels"),
        (dict(version=-3), "version"),
        (dict(preprocessing="imagenet"), "preprocessing"),
        (dict(labels=["a", "b"]), "one label per class"),
        (dict(labels=["a", "b\nc", "d", "e", "f"]), "line breaks"),
    ],
)
def test_bad_arguments_raise_value_error(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        export_saved_model(tiny_vit(), tmp_path / "m", **kwargs)
    assert not os.path.exists(tmp_path / "m" / "1")


def test_token_sequence_model_is_refused(tmp_path):
    model = keras_vit.ViT(**TINY, include_top=False)
    with pytest.raises(ValueError, match="output_shape=\\(None, 17, 32\\)"):
        export_saved_model(model, tmp_path / "m")


def test_staging_left_by_a_killed_export_is_removed(tmp_path):
    import socket

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    base = tmp_path / "m"
    host = socket.gethostname()
    stale = base / f".staging-1-{host}-{dead.pid}-abc123"
    live = base / f".staging-2-{host}-{os.getpid()}-def456"  # a live process: still writing
    other_host = base / f".staging-3-another-host-{dead.pid}-ghi789"
    for folder in (stale, live, other_host):
        (folder / "variables").mkdir(parents=True)
    export_saved_model(tiny_vit(num_layers=1), base, version=5)
    assert sorted(os.listdir(base)) == sorted(["5", live.name, other_host.name])


@pytest.mark.parametrize("umask, mode", [(0o022, 0o755), (0o027, 0o750)])
def test_a_version_directory_is_readable_as_the_umask_allows(tmp_path, umask, mode):
    """mkdtemp's 0700 staging directory, renamed into place, hid every version from a server running as another
    user (main 9a09833)."""
    import stat

    from keras_vit.export import versions

    previous = os.umask(umask)
    try:
        with versions.staged(str(tmp_path / "m" / "1")) as staging:
            (tmp_path / "m" / os.path.basename(staging) / "saved_model.pb").write_bytes(b"")
    finally:
        os.umask(previous)
    assert stat.S_IMODE(os.stat(tmp_path / "m" / "1").st_mode) == mode
