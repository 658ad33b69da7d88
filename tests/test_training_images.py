"""A folder dataset's images when they are bad: corrupt bodies behind valid headers (found before training, or
named when the pipeline fails on one, with nothing trained lost), images over the pixel limit, entries that are
not regular files, names that are not UTF-8, WebP, and the same check in `training.experiments`. Every file is
generated here; tiny models, a few steps."""

import contextlib
import io
import json
import os
import struct
import threading
import zlib

import numpy as np
import pytest
import tensorflow as tf

from training import config, image_checks, loop, sources

TINY = dict(image_size=8, patch_size=4, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32, global_batch_size=4,
            log_every=1, show_predictions=0, export=False, jit_compile=False, steps=2)
CLASSES = ("blue", "green", "red")


def run(workdir, **overrides):
    """`loop.run` on the tiny config; returns what it printed."""
    names = ("skip_bad_images", "max_image_pixels", "image_check", "resume_with_changes")
    options = {k: overrides.pop(k) for k in names if k in overrides}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        loop.run(config.make_config("demo", workdir=str(workdir), **{**TINY, **overrides}), **options)
    return out.getvalue()


def png(height=12, width=10, value=0):
    return tf.io.encode_png(np.full((height, width, 3), value, np.uint8)).numpy()


def write_folder(root, per_class=2, splits=("train", "validation")):
    for split in splits:
        for i, name in enumerate(CLASSES):
            os.makedirs(root / split / name)
            for j in range(per_class):
                (root / split / name / f"{j}.png").write_bytes(png(value=80 * i + j))
    return f"folder:{root}"


def corrupt_png():
    """A PNG whose header, size and IEND are valid but whose image data is not (TensorFlow: `Invalid PNG data`)."""
    encoded = bytearray(tf.io.encode_png(np.random.default_rng(0).integers(0, 255, (12, 10, 3), np.uint8)).numpy())
    start = encoded.index(b"IDAT") + 8
    encoded[start:start + 32] = bytes(32)
    return bytes(encoded)


def corrupt_jpeg():
    """A JPEG with a valid frame header and end marker but a broken Huffman table (TensorFlow refuses it)."""
    encoded = bytearray(tf.io.encode_jpeg(np.random.default_rng(0).integers(0, 255, (12, 10, 3), np.uint8)).numpy())
    table = encoded.index(b"\xff\xc4")
    encoded[table + 5:table + 21] = b"\xff" * 16  # 16 code counts of 255: "Bogus Huffman table definition"
    return bytes(encoded)


def png_claiming(width, height):
    """A well-formed PNG whose IHDR claims `width` x `height` (with a few bytes of image data)."""
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


def pil_bytes(frames, kind, **save):
    from PIL import Image

    images = [Image.fromarray(frame) for frame in frames]
    buffer = io.BytesIO()
    images[0].save(buffer, kind, save_all=len(images) > 1, append_images=images[1:], **save)
    return buffer.getvalue()


def decodes(encoded):
    try:
        tf.io.decode_image(encoded, channels=3, expand_animations=False)
        return True
    except tf.errors.OpError:
        return False


# --- corrupt bodies -----------------------------------------------------------------------------------------


def test_the_check_before_training_agrees_with_tensorflow_on_corrupt_bodies(tmp_path):
    """Files of every format, intact and corrupted in the middle (headers and end markers intact): the check
    (headers and a full decode) calls bad exactly the files TensorFlow's decoder rejects."""
    pixels = np.random.default_rng(1).integers(0, 255, (24, 20, 3), np.uint8)
    files = {"png": tf.io.encode_png(pixels).numpy(), "jpg": tf.io.encode_jpeg(pixels).numpy(),
             "gif": pil_bytes([pixels], "GIF"), "bmp": pil_bytes([pixels], "BMP"), "webp": pil_bytes([pixels], "WEBP")}
    root = tmp_path / "images"
    folder = write_folder(root, per_class=1)
    expected = {}
    for kind, encoded in files.items():
        for where in (0.4, 0.6):
            broken = bytearray(encoded)
            at = int(len(broken) * where)
            broken[at:at + 24] = bytes(range(24))
            for name, content in ((f"good_{where}.{kind}", encoded), (f"broken_{where}.{kind}", bytes(broken))):
                path = root / "train" / "red" / name
                path.write_bytes(content)
                expected[str(path)] = decodes(content)
    expected[str(root / "train" / "red" / "tables.jpg")] = False
    (root / "train" / "red" / "tables.jpg").write_bytes(corrupt_jpeg())
    assert not all(expected.values()) and any(expected.values())
    bad = image_checks.check_images(folder, ("train", "validation"), skip=True)
    assert {path: path not in bad for path in expected} == expected
    assert image_checks.check_images(folder, ("train",), skip=True, decode=False) < bad  # headers alone miss some


@pytest.mark.e2e  # moved from the default tier (its time budget)
def test_a_corrupt_png_or_jpeg_body_in_either_split_stops_the_run_before_training_naming_it(tmp_path):
    root = tmp_path / "images"
    folder = write_folder(root)
    (root / "train" / "red" / "body.png").write_bytes(corrupt_png())
    (root / "validation" / "blue" / "tables.jpg").write_bytes(corrupt_jpeg())
    with pytest.raises(sources.InvalidDatasetError) as info:
        run(tmp_path / "run", dataset=folder)
    message = str(info.value)
    assert message.startswith("2 of 14 files") and "--skip_bad_images" in message
    assert f"{root / 'train' / 'red' / 'body.png'} (cannot be decoded: Invalid PNG data" in message
    assert f"{root / 'validation' / 'blue' / 'tables.jpg'} (cannot be decoded: " in message
    assert not (tmp_path / "run" / "checkpoints").exists()  # found before anything trained
    out = run(tmp_path / "run", dataset=folder, skip_bad_images=True)
    assert out.startswith("skipping 2 image file(s)")
    assert "on 6 validation images after 2 steps" in out.strip().splitlines()[-1]


def unshuffled_folder(tmp_path, bad_split):
    """12 good training images and a corrupt one sorted last (`zz.png`) in `bad_split`, read in order
    (shuffle_buffer=1): with batches of 4 the training pipeline reaches it at step 4."""
    root = tmp_path / "images"
    folder = write_folder(root, per_class=4)
    (root / bad_split / "red" / "zz.png").write_bytes(corrupt_png())
    return folder, root / bad_split / "red" / "zz.png"


@pytest.mark.e2e  # moved from the default tier (its time budget)
def test_an_image_that_fails_during_training_is_named_and_the_state_reached_is_saved(tmp_path, capsys):
    folder, bad = unshuffled_folder(tmp_path, "train")
    workdir = tmp_path / "run"
    options = dict(dataset=folder, shuffle_buffer=1, steps=6, checkpoint_every=100, image_check="headers")
    with pytest.raises(sources.InvalidDatasetError) as info:
        run(workdir, **options)
    message = str(info.value)
    assert f"{bad} (cannot be decoded: Invalid PNG data" in message and "at training step 4" in message
    assert "checked by its header only (--image_check=headers)" in message
    assert f"The state of step 3 is saved ({workdir / 'checkpoints' / 'ckpt-3'})" in message
    assert "--skip_bad_images" in message
    # ckpt-3 is the state after step 3, not touched by the failed step 4: the same as an uninterrupted run's.
    os.rename(bad, bad.with_suffix(".aside"))
    run(tmp_path / "reference", **{**options, "checkpoint_every": 3})
    os.rename(bad.with_suffix(".aside"), bad)
    failed, reference = (tf.train.load_checkpoint(str(w / "checkpoints" / "ckpt-3"))
                         for w in (workdir, tmp_path / "reference"))
    names = [k for k in reference.get_variable_to_shape_map() if k.startswith(("model/", "optimizer/", "step"))]
    assert len(names) > 40 and int(failed.get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE")) == 3
    for name in names:
        np.testing.assert_array_equal(failed.get_tensor(name), reference.get_tensor(name), err_msg=name)
    # The advised rerun resumes from step 3 without the file and finishes.
    out = run(workdir, **options, skip_bad_images=True)
    assert "at step 3" in out and "skipping 1 more image file(s) of train that failed in the pipeline" in out
    assert "after 6 steps" in out.strip().splitlines()[-1]


def deleting_after_build(monkeypatch, path):
    """Deletes `path` once the training pipeline is built (listed) and before it reads anything."""
    class Deleting(loop.Batches):
        def __init__(self, make_dataset, start):
            def made(step):
                dataset = make_dataset(step)
                if path.exists():
                    path.unlink()
                return dataset
            super().__init__(made, start)

    monkeypatch.setattr(loop, "Batches", Deleting)


@pytest.mark.e2e
def test_an_image_deleted_mid_run_is_named_after_saving_the_state_or_skipped(tmp_path, monkeypatch):
    """Was a raw NotFoundError (exit status 1, the divergence status), nothing saved, no file named."""
    root = tmp_path / "images"
    folder = write_folder(root, per_class=4)
    gone = root / "train" / "red" / "zz.png"
    gone.write_bytes(png(value=7))
    deleting_after_build(monkeypatch, gone)
    options = dict(dataset=folder, shuffle_buffer=1, steps=5, checkpoint_every=100)
    with pytest.raises(sources.ImageFailedMidRunError) as info:
        run(tmp_path / "run", **options)
    message = str(info.value)
    assert info.value.exit_status == 5 and "\n" not in message
    assert f"{gone} (unreadable: No such file or directory)" in message and "at training step 4" in message
    assert "so it was changed or deleted since" in message
    assert f"The state of step 3 is saved ({tmp_path / 'run' / 'checkpoints' / 'ckpt-3'})" in message
    assert (tmp_path / "run" / "checkpoints" / "ckpt-3.index").exists()
    gone.write_bytes(png(value=7))
    out = run(tmp_path / "skipped", **options, skip_bad_images=True)
    assert f"skipping 1 more image file(s) of train that failed in the pipeline (--skip_bad_images): {gone}" in out
    assert "after 5 steps" in out.strip().splitlines()[-1]


@pytest.mark.e2e  # moved from the default tier (its time budget)
def test_skip_bad_images_skips_an_image_that_fails_during_training(tmp_path):
    folder, bad = unshuffled_folder(tmp_path, "train")
    out = run(tmp_path / "run", dataset=folder, shuffle_buffer=1, steps=6, image_check="headers",
              skip_bad_images=True)
    assert f"skipping 1 more image file(s) of train that failed in the pipeline (--skip_bad_images): {bad}" in out
    assert "after 6 steps" in out.strip().splitlines()[-1]


@pytest.mark.e2e  # moved from the default tier (its time budget)
def test_a_failed_final_evaluation_still_writes_the_model_checkpoint_and_metrics(tmp_path):
    folder, bad = unshuffled_folder(tmp_path, "validation")
    workdir = tmp_path / "run"
    with pytest.raises(sources.InvalidDatasetError) as info:
        run(workdir, dataset=folder, steps=3, image_check="headers")
    message = str(info.value)
    assert f"{bad} (cannot be decoded: Invalid PNG data" in message and "in the final evaluation" in message
    assert "Training finished (3 steps)" in message and "the rerun only evaluates" in message
    assert (workdir / "model.keras").exists() and (workdir / "model.labels.txt").exists()
    assert (workdir / "checkpoints" / "ckpt-3.index").exists()
    metrics = json.loads((workdir / "metrics.json").read_text())
    assert metrics["steps"] == 3 and str(bad) in metrics["eval_error"] and "eval_accuracy" not in metrics
    out = run(workdir, dataset=folder, steps=3, skip_bad_images=True)  # the check skips it; only evaluates
    assert "compiling the training step" not in out and "on 12 validation images after 3 steps" in out
    assert "eval_accuracy" in json.loads((workdir / "metrics.json").read_text())


# --- the pixel limit ----------------------------------------------------------------------------------------


def test_images_over_the_pixel_limit_are_refused_from_their_headers_naming_the_file_and_its_size(tmp_path):
    root = tmp_path / "images"
    folder = write_folder(root)
    huge = root / "train" / "red" / "huge.png"
    huge.write_bytes(png_claiming(100_000, 100_000))  # no pixels behind it: the header is enough
    frames = [np.full((40, 40, 3), 60 * i, np.uint8) for i in range(3)]
    (root / "train" / "blue" / "animated.gif").write_bytes(pil_bytes(frames, "GIF"))
    with pytest.raises(sources.InvalidDatasetError) as info:
        image_checks.check_images(folder, ("train", "validation"))
    message = str(info.value)
    assert (f"{huge} (PNG of 100000x100000 = 10,000,000,000 pixels, over the pixel limit of 40,000,000 "
            f"(--max_image_pixels))") in message
    assert "raise --max_image_pixels" in message and "animated.gif" not in message
    # A GIF's frames count: TensorFlow decodes them all.
    with pytest.raises(sources.InvalidDatasetError, match=r"animated.gif \(GIF of 40x40 x 3 frames = 4,800 pixels"):
        image_checks.check_images(folder, ("train",), max_pixels=4000, skip=False)
    assert image_checks.check_images(folder, ("train",), max_pixels=None, skip=True) == {str(huge)}  # decode: no pixels


@pytest.mark.e2e  # moved from the default tier (its time budget)
def test_the_pixel_limit_flag_refuses_in_one_line_or_skips(tmp_path, capsys):
    from test_training_reliability import cli

    root = tmp_path / "images"
    folder = write_folder(root)
    (root / "train" / "red" / "large.png").write_bytes(png(50, 60))
    status, _, err = cli(capsys, tmp_path / "run", "--max_image_pixels=1000", dataset=folder, steps=2,
                         global_batch_size=4)
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 1 and lines[0].startswith("error: 1 of 13 files")
    assert "large.png (PNG of 60x50 = 3,000 pixels, over the pixel limit of 1,000 (--max_image_pixels))" in lines[0]
    status, out, _ = cli(capsys, tmp_path / "run", "--max_image_pixels=1000", "--skip_bad_images", dataset=folder,
                         steps=2, global_batch_size=4)
    assert status == 0 and out.startswith("skipping 1 image file(s)")


def test_a_gif_frame_larger_than_its_screen_counts_at_its_own_size(tmp_path):
    """giflib allocates each frame at its own descriptor's size: a 1x1 screen holding a 60x50 frame is 3,000
    pixels (as serving counts it), not 1."""
    from bomb_fixtures import gif_with_hidden_frame

    root = tmp_path / "images"
    folder = write_folder(root)
    big = pil_bytes([np.full((50, 60, 3), 90, np.uint8)], "GIF")
    small_screen = root / "train" / "red" / "screen.gif"
    small_screen.write_bytes(big[:6] + struct.pack("<HH", 1, 1) + big[10:])
    hidden = root / "train" / "blue" / "hidden.gif"
    hidden.write_bytes(gif_with_hidden_frame(big))
    assert tf.io.decode_gif(small_screen.read_bytes()).shape[1:3] == (50, 60)  # what TensorFlow allocates
    with pytest.raises(sources.InvalidDatasetError) as info:
        image_checks.check_images(folder, ("train",), max_pixels=2000)
    message = str(info.value)
    assert (f"{small_screen} (GIF of 60x50 (frames larger than its 1x1 screen) = 3,000 pixels, over the pixel "
            f"limit of 2,000 (--max_image_pixels))") in message and str(hidden) in message
    assert image_checks.check_images(folder, ("train",), max_pixels=2000, skip=True) == {str(small_screen),
                                                                                         str(hidden)}


def test_decoding_bombs_are_refused_before_any_decode_naming_the_limit_or_skipped(tmp_path, monkeypatch):
    """The scans of a JPEG, the blocks of a GIF and a PNG's compressed data against its raw size are bounded
    as serving bounds them, from the bytes in the header pass (small bombs at low limits)."""
    from bomb_fixtures import gif_of_frames, png, progressive_jpeg

    root = tmp_path / "images"
    folder = write_folder(root)
    bombs = {"scans.jpg": progressive_jpeg(16, repeats=7), "blocks.gif": gif_of_frames(11),
             "inflate.png": png(1, 1, [zlib.compress(bytes(4)), bytes(70_000)])}  # 70 KB of IDAT for 4 raw bytes
    for name, data in bombs.items():
        (root / "train" / "green" / name).write_bytes(data)
    (root / "train" / "blue" / "fine.jpg").write_bytes(progressive_jpeg(16))  # 10 scans: within 12
    monkeypatch.setenv("KERAS_VIT_MAX_JPEG_SCANS", "12")
    monkeypatch.setenv("KERAS_VIT_MAX_GIF_BLOCKS", "40")
    with pytest.raises(sources.InvalidDatasetError) as info:
        image_checks.check_images(folder, ("train", "validation"), decode=False)
    message = str(info.value)
    assert message.startswith("3 of 16 files") and "fine.jpg" not in message
    assert (f"{root / 'train' / 'green' / 'scans.jpg'} (progressive JPEG of more than 12 scans (each a decoding "
            f"pass over the whole image; counted 13 before stopping), over the limit of 12 "
            f"(KERAS_VIT_MAX_JPEG_SCANS=N raises it))") in message
    assert "blocks.gif (GIF of more than 40 blocks" in message and "KERAS_VIT_MAX_GIF_BLOCKS=N" in message
    assert "inflate.png (PNG of 70," in message and "for 4 raw bytes, over the limit of 2 times" in message
    assert "KERAS_VIT_MAX_PNG_IDAT_RATIO=R raises it" in message
    assert "re-encode an image over a decoding limit" in message and "--skip_bad_images" in message
    skipped = image_checks.check_images(folder, ("train",), skip=True, decode=False)
    assert skipped == {str(root / "train" / "green" / name) for name in bombs}
    monkeypatch.setenv("KERAS_VIT_MAX_JPEG_SCANS", "20")  # raised: the JPEG passes
    assert str(root / "train" / "green" / "scans.jpg") not in image_checks.check_images(
        folder, ("train",), skip=True, decode=False)


# --- entries that are not images ----------------------------------------------------------------------------


@pytest.mark.e2e  # the default tier's time budget (10 minutes on 2 cores)
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes")
def test_a_fifo_named_like_an_image_is_left_out_with_a_warning_not_read(tmp_path):
    root = tmp_path / "images"
    folder = write_folder(root)
    os.mkfifo(root / "train" / "red" / "x.png")  # reading it would block forever
    (root / "train" / "green" / "folder.jpg").mkdir()
    (root / "train" / "blue" / "scan.tif").write_bytes(b"II*\0")
    lines, result = [], []
    worker = threading.Thread(
        target=lambda: result.append(image_checks.check_images(folder, ("train",), log=lines.append)), daemon=True)
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive(), "the check blocked on the FIFO"
    assert result == [frozenset()]
    assert lines[0].startswith("warning: left out 2 entries of")
    assert f"{root / 'train' / 'red' / 'x.png'} (a named pipe (FIFO))" in lines[0]
    assert f"{root / 'train' / 'green' / 'folder.jpg'} (a folder)" in lines[0]
    assert lines[1].startswith("warning: left out 1 file of") and "(.tif: 1)" in lines[1]
    assert sources.dataset_source(folder, "train").num_examples == 6
    out = run(tmp_path / "run", dataset=folder)
    assert "named pipe" in out and "after 2 steps" in out.strip().splitlines()[-1]


@pytest.mark.e2e  # moved from the default tier (its time budget)
def test_file_names_that_are_not_utf8_are_read_and_named_escaped(tmp_path):
    root = tmp_path / "images"
    folder = write_folder(root)
    red = os.fsencode(root / "train" / "red")
    with open(red + b"/caf\xe9.png", "wb") as f:  # Latin-1 bytes: not UTF-8
        f.write(png(value=200))
    assert sources.dataset_source(folder, "train").num_examples == 7
    with open(red + b"/bad\xff.png", "wb") as f:
        f.write(corrupt_png())
    with pytest.raises(sources.InvalidDatasetError) as info:
        image_checks.check_images(folder, ("train", "validation"))
    message = str(info.value)
    message.encode("utf-8")  # printable as it is
    assert "red/bad\\xff.png (cannot be decoded: Invalid PNG data" in message
    out = run(tmp_path / "run", dataset=folder, skip_bad_images=True)  # café.png trains, bad\xff.png is skipped
    assert "bad\\xff.png" in out.splitlines()[0] and "[train: 7 images" in out


def test_a_class_folder_name_that_is_not_utf8_is_refused_naming_it(tmp_path):
    root = tmp_path / "images"
    folder = write_folder(root)
    os.mkdir(os.fsencode(root / "train") + b"/gr\xfcn")
    with open(os.fsencode(root / "train") + b"/gr\xfcn/0.png", "wb") as f:
        f.write(png())
    with pytest.raises(sources.InvalidDatasetError) as info:
        sources.dataset_source(folder, "train")
    message = str(info.value)
    message.encode("utf-8")
    assert f"{root / 'train'}/gr\\xfcn has a name that is not UTF-8 text" in message and "Rename it" in message


@pytest.mark.e2e  # moved from the default tier (its time budget)
def test_webp_images_are_listed_and_trained_an_animated_one_is_refused(tmp_path):
    pixels = np.random.default_rng(2).integers(0, 255, (12, 10, 3), np.uint8)
    root = tmp_path / "images"
    folder = write_folder(root)
    (root / "train" / "red" / "still.webp").write_bytes(pil_bytes([pixels], "WEBP"))
    assert sources.dataset_source(folder, "train").num_examples == 7
    assert image_checks.check_images(folder, ("train", "validation")) == frozenset()
    assert "[train: 7 images" in run(tmp_path / "run", dataset=folder)
    animated = root / "train" / "blue" / "moving.webp"
    animated.write_bytes(pil_bytes([pixels, 255 - pixels], "WEBP"))
    assert not decodes(animated.read_bytes())  # TensorFlow decodes animated WebP only as RGBA
    with pytest.raises(sources.InvalidDatasetError, match=r"moving.webp \(animated WebP"):
        image_checks.check_images(folder, ("train",), decode=False)


# --- python -m training.experiments -------------------------------------------------------------------------


def test_experiments_check_the_images_before_training(tmp_path, capsys):
    from training.experiments import app as experiments
    from training.experiments import data as experiments_data

    root = tmp_path / "images"
    folder = write_folder(root, per_class=4, splits=("train", "test"))
    (root / "train" / "red" / "body.png").write_bytes(corrupt_png())
    status = experiments.main([f"--out={tmp_path / 'out'}", f"--dataset={folder}", "--models=vit_small",
                               "--fractions=1", "--seeds=1", "--steps=1", "--global_batch_size=4", "--shots=1",
                               "--studies=data_size", "--image_size=8", "--nojit_compile"])
    err = capsys.readouterr().err
    assert status == 1 and err.count("\n") == 1 and err.startswith("error: 1 of 25 files"), err
    assert f"{root / 'train' / 'red' / 'body.png'} (cannot be decoded: Invalid PNG data" in err
    setup = experiments.Setup(dataset=folder, skip_bad_images=True)
    lines = []
    skipped = experiments_data.check_images(setup, "train", "test", log=lines.append)
    assert skipped == {str(root / "train" / "red" / "body.png")}
    assert lines[0].startswith("skipping 1 image file(s)")
