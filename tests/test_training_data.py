"""training.data and training.augment: sources, preprocessing, determinism, resumption, sharding, padding."""

import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from training import augment, data, sources, tfds_source

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

COLOURS = {"blue": (0, 0, 255), "green": (0, 255, 0), "red": (255, 0, 0)}


def _write_folder(root, splits=("train", "validation"), per_class=3, size=(12, 10)):
    """PNG folder where every image of a class is one flat colour, so labels can be checked from pixels."""
    for split in splits:
        for name, colour in COLOURS.items():
            os.makedirs(root / split / name)
            for i in range(per_class):
                image = np.broadcast_to(np.array(colour, np.uint8), (*size, 3))
                tf.io.write_file(str(root / split / name / f"{i}.png"), tf.io.encode_png(image))


def test_digits_eval_batches_are_resized_and_scaled_to_minus_one_one():
    from sklearn.datasets import load_digits

    ds, num_classes = data.make_dataset("digits", "test", image_size=16, batch_size=400)
    images, labels = next(iter(ds))
    assert num_classes == 10 and images.shape == (359, 16, 16, 3) and images.dtype == tf.float32
    assert float(tf.reduce_min(images)) == -1.0 and float(tf.reduce_max(images)) == pytest.approx(1.0)
    # Independent check: the split holds real digits; the label counts add up with the train split to 1797.
    train = sources.dataset_source("digits", "train")
    assert train.num_examples + 359 == len(load_digits().target)
    assert set(np.unique(labels.numpy())) == set(range(10))


def test_eval_image_is_a_plain_resize_of_the_pixels():
    source = sources.dataset_source("digits", "test")
    raw, _ = next(iter(source.elements))
    ds, _ = data.make_dataset("digits", "test", image_size=8, batch_size=1)
    image = next(iter(ds))[0][0].numpy()
    # 8x8 -> 8x8 is the identity; [0, 255] -> [-1, 1] is x / 127.5 - 1.
    np.testing.assert_allclose(image, raw.numpy() / 127.5 - 1.0, atol=1e-6)


def test_training_stream_is_deterministic_and_resumes_exactly():
    def batches(start_index, count, seed=3):
        ds, _ = data.make_dataset("digits", "train", image_size=16, batch_size=4, training=True, seed=seed,
                                  start_index=start_index)
        return [b for b, _ in zip(ds.as_numpy_iterator(), range(count))]

    full = batches(0, 5)
    resumed = batches(8, 3)  # resumed after two batches of 4
    for a, b in zip(full[2:], resumed):
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])
    other_seed = batches(0, 1, seed=4)
    assert not np.array_equal(full[0][0], other_seed[0][0])


def test_resume_skips_whole_epochs_without_reading_them():
    reads = []

    def source():
        def record(x):
            reads.append(int(x))
            return x

        return tf.data.Dataset.range(5).map(lambda x: tf.py_function(record, [x], tf.int64))

    def stream(start_index, count):
        ds = data._epochs_from(source(), 5, seed=1, shuffle_buffer=5, start_index=start_index)
        return [(int(i), int(x)) for i, x in ds.take(count)]

    full = stream(0, 15)
    assert [i for i, _ in full] == list(range(15))  # global indices e * n + i
    epochs = [[x for _, x in full[e * 5:(e + 1) * 5]] for e in range(3)]
    assert all(sorted(epoch) == list(range(5)) for epoch in epochs) and epochs[0] != epochs[1]
    reads.clear()
    assert stream(12, 3) == full[12:]  # epoch 2, two elements in
    assert len(reads) == 5  # only epoch 2's records: epochs 0 and 1 are never read (10 more reads otherwise)


def test_training_augmentation_crops_and_flips(tmp_path):
    image = tf.constant(np.arange(16 * 16 * 3).reshape(16, 16, 3) % 256, tf.uint8)
    flipped_somewhere = False
    for i in range(20):
        out = data.train_image(image, (16, 16), tf.constant([0, i], tf.int64), crop="none", flip=True)
        if np.array_equal(out.numpy(), image.numpy()[:, ::-1].astype(np.float32)):
            flipped_somewhere = True
        else:
            np.testing.assert_array_equal(out.numpy(), image.numpy().astype(np.float32))
    assert flipped_somewhere
    crops = {data.train_image(image, (16, 16), tf.constant([1, i], tf.int64), crop_min_area=0.1, flip=False)
             .numpy().tobytes() for i in range(5)}
    assert len(crops) > 1


def test_folder_loader_reads_labels_from_directories_and_finds_the_eval_split(tmp_path):
    _write_folder(tmp_path)
    name = f"folder:{tmp_path}"
    assert sources.default_splits(name) == ("train", "validation")
    ds, num_classes = data.make_dataset(name, "validation", image_size=8, batch_size=32)
    images, labels = next(iter(ds))
    assert num_classes == 3 and images.shape == (9, 8, 8, 3)
    names = sorted(COLOURS)
    for image, label in zip(images.numpy(), labels.numpy()):
        expected = (np.array(COLOURS[names[label]], np.float32) / 127.5) - 1.0
        np.testing.assert_allclose(image[0, 0], expected, atol=1e-6)
    train, _ = data.make_dataset(name, "train", image_size=8, batch_size=4, training=True)
    assert next(iter(train))[0].shape == (4, 8, 8, 3)


def test_a_folder_larger_than_the_shuffle_buffer_is_shuffled_whole(tmp_path):
    """A folder lists its files class by class: a shuffle buffer smaller than the split would give batches of the
    first class or two (every epoch), so a folder's file names are shuffled whole whatever the buffer."""
    _write_folder(tmp_path, splits=("train",), per_class=8, size=(4, 4))  # 24 files: blue, then green, then red
    train, _ = data.make_dataset(f"folder:{tmp_path}", "train", image_size=4, batch_size=6, training=True,
                                 shuffle_buffer=2, crop="none", flip=False)
    first_epoch = np.concatenate([labels.numpy() for _, labels in train.take(4)])
    assert np.bincount(first_epoch, minlength=3).tolist() == [8, 8, 8]  # one epoch: each file once
    assert len(set(first_epoch[:6].tolist())) >= 2 and 2 in first_epoch[:12]  # a buffer of 2 would give 0s first
    ordered, _ = data.make_dataset(f"folder:{tmp_path}", "train", image_size=4, batch_size=6, training=True,
                                   shuffle_buffer=1, crop="none", flip=False)
    listing = np.concatenate([labels.numpy() for _, labels in ordered.take(4)])
    assert listing.tolist() == [0] * 8 + [1] * 8 + [2] * 8  # a buffer of 1: no shuffling, the listing's order


def test_the_training_stream_never_ends_and_steps_per_epoch_counts_its_full_batches(tmp_path):
    _write_folder(tmp_path, per_class=3)  # 9 images in each split
    name = f"folder:{tmp_path}"
    train, _ = data.make_dataset(name, "train", image_size=8, batch_size=4, training=True)
    assert int(train.cardinality()) == tf.data.INFINITE_CARDINALITY
    assert len(list(train.take(7))) == 7  # past the 2 batches of one pass
    assert data.steps_per_epoch(name, "train", batch_size=4) == 2  # 9 images: 2 full batches, the rest dropped
    evaluation, _ = data.make_dataset(name, "validation", image_size=8, batch_size=4)
    assert [len(labels) for _, labels in evaluation] == [4, 4, 1]  # one pass, the last batch partial
    with pytest.raises(ValueError, match=r"has 9 examples, fewer than one batch.*Received: batch_size=10"):
        data.steps_per_epoch(name, "train", batch_size=10)


def test_folder_loader_ignores_stray_files_beside_the_class_folders(tmp_path):
    _write_folder(tmp_path)
    (tmp_path / "validation" / ".DS_Store").write_bytes(b"\0")
    (tmp_path / "validation" / "README.txt").write_text("not a class")
    _, num_classes = data.make_dataset(f"folder:{tmp_path}", "validation", image_size=8, batch_size=32)
    assert num_classes == 3
    (tmp_path / "validation" / "extra_class").mkdir()
    with pytest.raises(ValueError, match="extra_class"):
        data.make_dataset(f"folder:{tmp_path}", "validation", image_size=8, batch_size=32)


def test_folder_errors_name_the_problem(tmp_path):
    with pytest.raises(sources.DatasetNotFoundError, match="train"):
        data.make_dataset(f"folder:{tmp_path}", "test")
    _write_folder(tmp_path, splits=("train",))
    with pytest.raises(sources.DatasetNotFoundError, match="test, val or validation|evaluation split"):
        sources.default_splits(f"folder:{tmp_path}")


def _touch_images(folder, count=1):
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        (folder / f"{i}.png").write_bytes(b"\x89PNG\r\n\x1a\n")


def test_missing_folder_says_the_path_does_not_exist(tmp_path):
    name = f"folder:{tmp_path / 'nowhere'}"
    for call in (lambda: sources.default_splits(name), lambda: sources.dataset_source(name, "train")):
        with pytest.raises(sources.DatasetNotFoundError, match="does not exist") as info:
            call()
        assert "No evaluation split" not in str(info.value)


def test_flat_layout_says_what_was_expected_and_what_was_found(tmp_path):
    for label in ("a", "b", "c"):
        _touch_images(tmp_path / label, 2)
    name = f"folder:{tmp_path}"
    for call in (lambda: sources.default_splits(name), lambda: sources.dataset_source(name, "test")):
        with pytest.raises(sources.InvalidDatasetError) as info:
            call()
        message = str(info.value)
        assert f"{tmp_path}/train/<label>/<image>" in message
        assert f"{tmp_path}/test|val|validation/<label>/<image>" in message
        assert "3 folder(s) holding images directly: a, b, c" in message
        assert f"Move them under {tmp_path / 'train'}/" in message and "test split" in message
        assert "No evaluation split" not in message


def test_train_without_eval_split_lists_what_is_beside_train(tmp_path):
    _touch_images(tmp_path / "train" / "cat")
    _touch_images(tmp_path / "holdout" / "cat")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(sources.DatasetNotFoundError, match="No evaluation split") as info:
        sources.default_splits(f"folder:{tmp_path}")
    assert "test|val|validation" in str(info.value) and "holdout, notes.txt" in str(info.value)


# One process each, in the end-to-end tier (the unit tests above check the messages without a process).
@pytest.mark.e2e
@pytest.mark.parametrize("layout", ["missing", "flat", "no_eval"])
def test_training_app_prints_one_error_line_for_a_bad_folder(tmp_path, layout):
    root = tmp_path / "images"
    if layout == "flat":
        for label in ("a", "b"):
            _touch_images(root / label)
    elif layout == "no_eval":
        _touch_images(root / "train" / "a")
    result = subprocess.run(
        [sys.executable, "-m", "training.train", f"--dataset=folder:{root}", f"--workdir={tmp_path / 'run'}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    expected = {"missing": "does not exist", "flat": "holding images directly", "no_eval": "No evaluation split"}
    assert expected[layout] in lines[0]


def test_missing_tfds_dataset_explains_how_to_prepare_it_without_downloading(tmp_path):
    with pytest.raises(sources.DatasetNotFoundError, match="download_and_prepare") as info:
        data.make_dataset("cifar10", "train", data_dir=str(tmp_path))
    assert "--data_dir" in str(info.value)
    assert not any(tmp_path.rglob("*.tfrecord*"))


def test_without_tensorflow_datasets_a_tfds_name_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)  # as in an install without the `train` extra
    with pytest.raises(sources.DatasetNotFoundError, match=r"not installed: `pip install -e \"\.\[train\]\"`"):
        data.make_dataset("cifar10", "train", data_dir=str(tmp_path))

def test_tfds_dataset_through_mock_data():
    import tensorflow_datasets as tfds

    with tfds.testing.mock_data(num_examples=12):
        ds, num_classes = data.make_dataset("mnist", "test", image_size=8, batch_size=5)
        shapes = [images.shape for images, _ in ds]
        train, _ = data.make_dataset("cifar10", "train", image_size=8, batch_size=4, training=True)
        images, labels = next(iter(train))
    assert num_classes == 10 and shapes == [(5, 8, 8, 3), (5, 8, 8, 3), (2, 8, 8, 3)]  # grey -> RGB
    assert images.shape == (4, 8, 8, 3) and labels.dtype == tf.int32


def test_sharding_splits_the_data_between_pipelines():
    seen = []
    for pipeline in range(2):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pipeline,
                                             num_replicas_in_sync=2)
        ds, _ = data.make_dataset("digits", "test", image_size=8, batch_size=1000, input_context=context)
        seen.append(next(iter(ds))[0].numpy().reshape(-1, 8 * 8 * 3))
    assert len(seen[0]) + len(seen[1]) == 359 and abs(len(seen[0]) - len(seen[1])) <= 1
    full = next(iter(data.make_dataset("digits", "test", image_size=8, batch_size=1000)[0]))[0].numpy()
    full = full.reshape(-1, 8 * 8 * 3)
    np.testing.assert_array_equal(seen[0], full[0::2])  # ds.shard(2, i) takes elements i, i + 2, ...
    np.testing.assert_array_equal(seen[1], full[1::2])


def test_pad_eval_batches_masks_the_padding():
    ds = tf.data.Dataset.from_tensor_slices((tf.ones([5, 2, 2, 3]), tf.range(5))).batch(2)
    padded = list(data.pad_eval_batches(ds, batch_size=2, num_batches=4).as_numpy_iterator())
    assert len(padded) == 4 and all(images.shape == (2, 2, 2, 3) for images, _, _ in padded)
    np.testing.assert_array_equal(np.concatenate([mask for _, _, mask in padded]), [1, 1, 1, 1, 1, 0, 0, 0])
    assert data.eval_batches_per_pipeline(359, global_batch_size=64, num_pipelines=2) == 6  # ceil(180 / 32)


def test_batch_transform_mixes_one_hot_labels():
    transform = augment.make_batch_transform(num_classes=4, randaugment=(2, 10), mixup=0.4, cutmix=1.0, seed=1)
    images = tf.random.stateless_uniform([6, 16, 16, 3], seed=[1, 2], maxval=255.0)
    out, labels = transform(images, tf.constant([0, 1, 2, 3, 0, 1]), tf.constant(0, tf.int64))
    assert out.shape == images.shape and labels.shape == (6, 4)
    np.testing.assert_allclose(labels.numpy().sum(-1), 1.0, atol=1e-5)
    assert float(tf.reduce_min(out)) >= 0.0 and float(tf.reduce_max(out)) <= 255.0
    assert augment.make_batch_transform(num_classes=4) is None


def test_download_offline_fails_at_once_naming_the_host_and_how_to_prepare_it_elsewhere(tmp_path, monkeypatch):
    import tensorflow_datasets as tfds

    attempts, checked = [], []
    monkeypatch.setattr(tfds.core.DatasetBuilder, "download_and_prepare", lambda self, *a, **k: attempts.append(1))
    for variable in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(tfds_source, "_connect_error",
                        lambda host, port, timeout: checked.append((host, port)) or "Network is unreachable")
    with pytest.raises(sources.DatasetNotFoundError) as info:
        data.make_dataset("cifar10", "train", data_dir=str(tmp_path), download=True)
    assert checked == [("www.cs.toronto.edu", 443)] and not attempts  # tfds' retries never start
    assert str(info.value).startswith(
        "Could not download dataset 'cifar10' with tensorflow-datasets (network error: www.cs.toronto.edu cannot be "
        "reached: Network is unreachable). ")
    assert "--download --data_dir=DIR` there, then copy DIR here" in str(info.value)
    # Through a proxy, the proxy is what must answer.
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    checked.clear()
    with pytest.raises(sources.DatasetNotFoundError, match="the proxy proxy.example cannot be reached"):
        data.make_dataset("cifar10", "train", data_dir=str(tmp_path), download=True)
    assert checked == [("proxy.example", 3128)] and not attempts


def test_download_goes_on_to_tensorflow_datasets_when_the_host_answers(tmp_path, monkeypatch):
    import tensorflow_datasets as tfds

    def fail(self, *args, **kwargs):
        raise ConnectionResetError(104, "Connection reset by peer")

    monkeypatch.setattr(tfds.core.DatasetBuilder, "download_and_prepare", fail)
    monkeypatch.setattr(tfds_source, "_connect_error", lambda host, port, timeout: None)
    with pytest.raises(sources.DatasetNotFoundError, match=r"network error: \[Errno 104\] Connection reset by peer"):
        data.make_dataset("cifar10", "train", data_dir=str(tmp_path), download=True)


def test_connect_error_says_why_a_port_does_not_answer():
    import socket

    with socket.socket() as unused:  # a local port nothing listens on: refused at once, no network needed
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
        assert tfds_source._connect_error("127.0.0.1", port, timeout=5) == "Connection refused"
        unused.listen()
        assert tfds_source._connect_error("127.0.0.1", port, timeout=5) is None


# `--download`: tensorflow-datasets' download path imports everything it needs; checked in a process whose socket
# functions raise, so nothing touches the network.
_OFFLINE_DOWNLOAD = textwrap.dedent("""
    import socket, sys

    def unreachable(*args, **kwargs):
        raise OSError(101, "Network is unreachable (blocked by the test)")

    socket.getaddrinfo = unreachable
    socket.create_connection = unreachable
    socket.socket.connect = lambda self, *args, **kwargs: unreachable()
    socket.socket.connect_ex = lambda self, *args, **kwargs: unreachable()
    import time
    time.sleep = lambda seconds: None  # the HTTP retries' back-off (minutes in all) against a blocked network

    from training import sources

    try:
        sources.dataset_source("cifar10", "train", data_dir=sys.argv[1], download=True)
    except BaseException as error:
        chain, e = [], error
        while e is not None:
            chain.append(e)
            e = e.__cause__ or e.__context__
        for e in chain:
            print("CHAIN", type(e).__module__ + "." + type(e).__name__,
                  "import" if isinstance(e, ImportError) else ("os" if isinstance(e, OSError) else "other"))
        print("TOP", type(error).__name__)
        print("MESSAGE", str(error).replace("\\n", " "))
    else:
        print("TOP none")
""")


@pytest.mark.e2e
def test_download_path_fails_on_the_network_not_on_a_missing_module(tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", _OFFLINE_DOWNLOAD, str(tmp_path / "tfds")],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "NO_PROXY": "*"},
    )
    out = result.stdout
    chain = re.findall(r"^CHAIN (\S+) (\S+)$", out, re.M)
    assert chain, result.stdout + result.stderr[-3000:]
    assert not [name for name, kind in chain if kind == "import"], out  # e.g. importlib_resources
    assert any(kind == "os" for _, kind in chain), out  # the blocked socket: a network error
    assert "TOP DatasetNotFoundError" in out, out  # wrapped: `python -m training.train` prints one line
    message = re.search(r"^MESSAGE (.*)$", out, re.M).group(1)
    assert "Could not download dataset 'cifar10'" in message and "network error" in message
    assert "Network is unreachable" in message and "--data_dir" in message


def test_validation_split_holds_out_a_seeded_part_of_each_class_of_a_train_only_or_flat_folder(tmp_path):
    _write_folder(tmp_path / "nested", splits=("train",), per_class=5)
    _write_folder(tmp_path / "flat", splits=("train",), per_class=5)
    for name in os.listdir(tmp_path / "flat" / "train"):  # the flat layout: PATH/<label>/<image>
        os.rename(tmp_path / "flat" / "train" / name, tmp_path / "flat" / name)
    os.rmdir(tmp_path / "flat" / "train")
    for root in ("nested", "flat"):
        name = f"folder:{tmp_path / root}"
        fit, held_out = sources.default_splits(name, validation_split=0.4, seed=3)
        assert (fit, held_out) == ("fit[validation_split=0.4,seed=3]", "held_out[validation_split=0.4,seed=3]")
        train, evaluation = (sources.folder_listing(str(tmp_path / root), split) for split in (fit, held_out))
        assert evaluation.class_names == ("blue", "green", "red")
        assert sorted(evaluation.labels) == [0, 0, 1, 1, 2, 2] and sorted(train.labels) == [0, 0, 0, 1, 1, 1, 2, 2, 2]
        assert not set(train.paths) & set(evaluation.paths) and len(set(train.paths) | set(evaluation.paths)) == 15
        again = sources.folder_listing(str(tmp_path / root), held_out)
        other_seed = sources.folder_listing(str(tmp_path / root), sources.held_out_splits(0.4, seed=4)[1])
        assert again.paths == evaluation.paths and other_seed.paths != evaluation.paths
        images, labels = next(iter(data.make_dataset(name, held_out, image_size=8, batch_size=32)[0]))
        assert images.shape == (6, 8, 8, 3)
        for image, label in zip(images.numpy(), labels.numpy()):  # each held-out image is of its class's colour
            expected = np.array(COLOURS[evaluation.class_names[label]], np.float32) / 127.5 - 1.0
            np.testing.assert_allclose(image[0, 0], expected, atol=1e-6)
    with pytest.raises(ValueError, match=r"--validation_split holds out part of an image folder.*--dataset=cifar10"):
        sources.default_splits("cifar10", validation_split=0.2)
    with pytest.raises(ValueError, match=r"in \(0, 1\). Received: validation_split=1.0"):
        sources.held_out_splits(1.0, seed=0)
