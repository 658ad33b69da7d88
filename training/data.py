"""tf.data input pipelines: tensorflow-datasets by name, an ImageFolder directory, or the embedded digits.

Training follows the official ViT input pipeline (google-research/vision_transformer `input_pipeline.py`):
decode, Inception crop (`sample_distorted_bounding_box`, area in [crop_min_area, 1], aspect 3/4..4/3),
resize to the training resolution, random horizontal flip; evaluation resizes to the resolution without a
centre crop. Images are then scaled from [0, 255] to [-1, 1], the preprocessing of every published ViT
checkpoint. Batches are formed with the given (per-replica) batch size and prefetched.

Determinism and resumption: the training stream is a pure function of `seed` and the element index. Epoch
`e` is the (sharded) split shuffled with a seed derived from `(seed, e)`, its elements numbered with global
indices `e * n + i` (n: examples of this pipeline's shard), and every element's crop and flip use stateless
random ops keyed by `(seed, index)`. Resuming at element `k` starts the stream at epoch `k // n`, whose order
does not depend on the earlier epochs, so whole epochs are skipped without reading them; only the `k % n`
elements already consumed in the current epoch are read again (undecoded) and dropped. The resumed stream
equals the uninterrupted one. The Keras RandAugment / Mixup / CutMix layers (`training.augment`) draw from
their own seeded generators, which restart on resume (seeded by `seed` and the resume step), the one part
that tf.data cannot replay exactly.

Sources (`name`):
    * `"digits"`: scikit-learn's 8x8 handwritten digits (1,797 images, 10 classes; install the `demo`
      extra), a fixed 80/20 train/test split, grey levels 0..16 scaled to 0..255 and repeated to RGB.
    * `"folder:PATH"`: the tensorflow-datasets ImageFolder layout `PATH/<split>/<label>/<image>`; the
      evaluation split may be called `test`, `val` or `validation`. A class folder of `train` without images
      is refused, and so is a flat `PATH/<label>/<image>` layout (the message says where to move the
      folders). Images are the regular files with an extension of `IMAGE_EXTENSIONS` (WebP included: this
      TensorFlow decodes still WebP images); a FIFO or a folder named like one is left out, and so are other
      extensions (`check_images` warns of both). Paths go to TensorFlow as the file system's bytes, so a file
      name that is not UTF-8 is read as it is (messages show it escaped, `shown_path`); a class folder name
      that is not UTF-8 is refused (it would be a label). `check_images` finds, before training, the files the
      pipeline could not use (headers, a pixel limit, a full decode) so that they can be named, or skipped
      with `skip_files`; `find_bad_files` names the file when the pipeline fails on one later.
    * any other name: a prepared tensorflow-datasets dataset (never downloaded unless `download=True`).

Example:
    >>> ds, num_classes = make_dataset("digits", "test", image_size=32, batch_size=8)
    >>> images, labels = next(iter(ds))
    >>> images.shape, num_classes
    (TensorShape([8, 32, 32, 3]), 10)
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import math
import os
import re
import stat
import struct
import time

import numpy as np
import tensorflow as tf

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")
DEFAULT_MAX_IMAGE_PIXELS = 40_000_000  # 40 megapixels (7,300 x 5,500): a 36-megapixel camera's photos pass
SLOW_CHECK_SECONDS = 10.0  # an image check this long says how long it took
EVAL_SPLIT_NAMES = ("test", "val", "validation")
_DIGITS_SPLIT_SEED = 0


class DatasetNotFoundError(ValueError):
    """The dataset is not available locally; the message says how to prepare it."""


class InvalidDatasetError(ValueError):
    """The dataset's files cannot be used as they are; the message names them and says how to fix them."""


@dataclasses.dataclass(frozen=True)
class Source:
    """An undecoded split: `(encoded_or_array, label)` elements, a decode function, and counts."""

    elements: tf.data.Dataset
    decode: object
    num_examples: int
    num_classes: int
    class_names: tuple[str, ...]


def dataset_source(name: str, split: str, data_dir: str | None = None, download: bool = False,
                   skip_files=()) -> Source:
    """Resolves a dataset name and split to a `Source` (see the module docstring for the names).

    `skip_files`: paths of a folder dataset left out (the bad files `check_images` found).

    Raises:
        DatasetNotFoundError: when the data is not there (a missing folder, no train/ or evaluation split,
            a tfds dataset not prepared, or its download failing for a network error), with instructions.
        InvalidDatasetError: for a class folder without images, or a flat `PATH/<label>/<image>` layout.
        ValueError: for an unknown split.
    """
    if name == "digits":
        return _digits_source(split)
    if name.startswith("folder:"):
        return _folder_source(name[len("folder:"):], split, frozenset(skip_files))
    return _tfds_source(name, split, data_dir, download)


def check_images(name: str, splits, skip: bool = False, *, max_pixels: int | None = DEFAULT_MAX_IMAGE_PIXELS,
                 decode: bool = True, log=None) -> frozenset:
    """Checks every file of a folder dataset's `splits` before anything trains; returns the bad paths (to skip).

    A file is bad when the pipeline could not use it: its header is not a JPEG, PNG, GIF, BMP or WebP one, says
    no size, or more pixels than `max_pixels` (the frames of a GIF count: TensorFlow decodes them all), or the
    file is truncated (`image_problem`); or, with `decode`, TensorFlow's own decoder (`tf.io.decode_image`, as
    the pipeline calls it) rejects its body, e.g. a PNG corrupt after a valid header (`undecodable`: one
    parallel pass; BMPs are skipped, their exact size proves them whole). Entries of a class folder that are not
    regular files (a FIFO, a folder, a broken link named `x.png`) and files with other extensions are not
    listed; `log` gets a `warning: ...` line for them (and a line when the check took long). Other datasets are
    not checked (an empty set).

    Raises:
        InvalidDatasetError: naming the first bad files, unless `skip`.
    """
    if not name.startswith("folder:"):
        return frozenset()
    root = name[len("folder:"):]
    started = time.perf_counter()
    listings = [_folder_listing(root, split) for split in dict.fromkeys(splits)]
    paths = [path for listing in listings for path in listing.paths]
    if log is not None:
        for line in _ignored_warnings(name, [entry for listing in listings for entry in listing.ignored]):
            log(line)
    with concurrent.futures.ThreadPoolExecutor(16) as pool:  # I/O bound: many small reads
        headers = list(pool.map(lambda path: _inspect(path, max_pixels), paths))
    problems = {path: problem for path, (problem, _) in zip(paths, headers) if problem}
    if decode:
        problems.update(undecodable([path for path, (problem, kind) in zip(paths, headers)
                                     if problem is None and kind != "BMP"]))
    elapsed = time.perf_counter() - started
    if log is not None and elapsed >= SLOW_CHECK_SECONDS:
        how = "headers and a full decode" if decode else "headers only"
        log(f"checked {len(paths)} image files of {name} in {elapsed:.0f}s ({how})")
    bad = [(path, problems[path]) for path in paths if path in problems]
    if bad and not skip:
        raise InvalidDatasetError(bad_files_message(name, bad, len(paths)))
    return frozenset(path for path, _ in bad)


def bad_files_message(name: str, bad, total: int | None = None) -> str:
    """One line naming the first bad files of `bad` ((path, problem) pairs) and the ways out."""
    shown = "; ".join(f"{shown_path(path)} ({problem})" for path, problem in bad[:5])
    more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
    of = f" of {total}" if total is not None else ""
    large = " (downscale an image over the pixel limit, or raise --max_image_pixels)" if any(
        PIXEL_LIMIT_NOTE in problem for _, problem in bad) else ""
    return (f"{len(bad)}{of} files of dataset={name!r} cannot be used: {shown}{more}. Delete or replace them{large}, "
            f"or pass --skip_bad_images to train and evaluate without them.")


def find_bad_files(name: str, split: str, skip_files=(), max_pixels: int | None = DEFAULT_MAX_IMAGE_PIXELS) -> list:
    """(path, problem) of every file of a folder dataset's `split` that the pipeline cannot use now (headers and a
    full decode), less `skip_files`: what made the pipeline fail mid-run (a file changed after the check, or one
    checked by its header only)."""
    if not name.startswith("folder:"):
        return []
    paths = [path for path in _folder_listing(name[len("folder:"):], split).paths if path not in skip_files]
    problems = {path: problem for path in paths for problem, _ in [_inspect(path, max_pixels)] if problem}
    problems.update(undecodable([path for path in paths if path not in problems]))
    return [(path, problems[path]) for path in paths if path in problems]


def undecodable(paths) -> dict:
    """{path: TensorFlow's reason} for the files that the pipeline's decoder (`tf.io.decode_image`, 3 channels,
    first frame) rejects: one parallel tf.data pass over `paths`, then a second decode of the failures alone to
    get their messages."""
    if not paths:
        return {}
    encoded = np.array([os.fsencode(path) for path in paths], dtype=object)
    ds = tf.data.Dataset.from_tensor_slices((np.arange(len(paths), dtype=np.int64), encoded))
    ds = ds.map(lambda index, path: (index, tf.shape(_decode_file(path))), deterministic=False,
                num_parallel_calls=max(1, min(8, os.cpu_count() or 1)))  # a bounded number of images in memory
    decoded = np.zeros(len(paths), bool)
    for indices, _ in ds.ignore_errors().batch(1024).as_numpy_iterator():
        decoded[indices] = True
    failures = {}
    for index in np.flatnonzero(~decoded):
        try:
            _decode_file(tf.constant(encoded[index]))
        except tf.errors.OpError as error:
            failures[paths[index]] = f"cannot be decoded: {tf_reason(error)}"
    return failures


def tf_reason(error) -> str:
    """The first line of a TensorFlow error without its `{{function_node ...}}` prefix and `[Op:...]` suffix."""
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", str(getattr(error, "message", error))).strip()
    text = re.sub(r"\s*\[Op:\w+\]( name: ?\S*)?$", "", text.splitlines()[0] if text else "")
    return re.sub(r"\s*\[\[\{\{node [^]]*\]\]$", "", text)[:200] or type(error).__name__


def shown_path(path) -> str:
    """A path (str or bytes) as text for a message: bytes that are not UTF-8 shown escaped (`caf\\xe9.png`)."""
    raw = path if isinstance(path, bytes) else os.fsencode(path)
    return raw.decode("utf-8", "backslashreplace")


def image_problem(path: str, max_pixels: int | None = None) -> str | None:
    """Why the pipeline could not use the file at `path` (None: it looks usable), from its header and tail.

    Checks the magic bytes, a non-zero width and height, the number of pixels against `max_pixels` (None: no
    limit; a GIF's are its screen size times its frames, all of which `tf.io.decode_image` decodes), and
    truncation: the end marker near the end of a JPEG or PNG, a GIF's blocks up to its trailer, the exact size
    TensorFlow requires of a BMP, the RIFF size of a WebP (an animated WebP is refused: TensorFlow decodes it
    only as RGBA). Pixels are not decoded (`undecodable` does).
    """
    return _inspect(path, max_pixels)[0]


PIXEL_LIMIT_NOTE = "over the pixel limit"


def _inspect(path, max_pixels):
    """(problem or None, format) of the file at `path`; the header checks of `image_problem`."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(64)
            f.seek(max(0, size - 4096))
            tail = f.read()
            if not head:
                return "empty file", None
            if head.startswith(b"\xff\xd8\xff"):
                kind, found = "JPEG", _jpeg_size(f, tail)
            elif head.startswith(b"\x89PNG\r\n\x1a\n"):
                kind, found = "PNG", _png_size(head, tail)
            elif head[:6] in (b"GIF87a", b"GIF89a"):
                f.seek(0)
                kind, found = "GIF", _gif_size(head, f.read())
            elif head.startswith(b"BM"):
                kind, found = "BMP", _bmp_size(head, size)
            elif head.startswith(b"RIFF") and head[8:12] == b"WEBP":
                kind, found = "WebP", _webp_size(head, size)
            else:
                return f"not a JPEG, PNG, GIF, BMP or WebP image (starts with {head[:8]!r})", None
    except OSError as error:
        return f"unreadable: {error.strerror or error}", None
    if isinstance(found, str):
        return found, kind
    width, height, frames = found
    pixels = width * height * frames
    if max_pixels and pixels > max_pixels:
        of = f" x {frames} frames" if frames > 1 else ""
        return (f"{kind} of {width}x{height}{of} = {pixels:,} pixels, {PIXEL_LIMIT_NOTE} of {max_pixels:,} "
                f"(--max_image_pixels)"), kind
    return None, kind


def _png_size(head, tail):
    if len(head) < 24 or head[12:16] != b"IHDR" or 0 in struct.unpack(">II", head[16:24]):
        return "PNG without a valid IHDR size"
    end = tail.rfind(b"IEND")
    if end < 0 or len(tail) - end < 8:  # chunk type, then its 4-byte CRC
        return "truncated PNG (no IEND chunk at the end)"
    width, height = struct.unpack(">II", head[16:24])
    return width, height, 1


def _gif_size(head, blob):
    """(width, height, frames) of a GIF, walking its blocks to the trailer; a problem string if it cannot."""
    if len(head) < 13 or 0 in struct.unpack("<HH", head[6:10]):
        return "GIF without a valid screen size"
    width, height = struct.unpack("<HH", head[6:10])
    flags, position, frames = blob[10], 13, 0
    if flags & 0x80:  # global colour table
        position += 3 * (2 << (flags & 7))

    def skip_sub_blocks(position):
        while position < len(blob):
            length = blob[position]
            position += 1 + length
            if length == 0:
                return position
        return None

    while position is not None and position < len(blob):
        block = blob[position]
        if block == 0x3B:  # trailer
            return (width, height, frames) if frames else "GIF without an image"
        if block == 0x21:  # extension: label, then sub-blocks
            position = skip_sub_blocks(position + 2)
        elif block == 0x2C:  # image descriptor (10 bytes), local colour table, LZW code size, sub-blocks
            if position + 10 > len(blob):
                break
            local = blob[position + 9]
            position += 10 + (3 * (2 << (local & 7)) if local & 0x80 else 0) + 1
            position = skip_sub_blocks(position)
            frames += 1
        else:
            return f"corrupt GIF (an unknown block 0x{block:02x} at byte {position})"
    return "truncated GIF (no trailer after its last block)"


def _bmp_size(head, size):
    if len(head) < 30:
        return "truncated BMP header"
    offset = struct.unpack("<I", head[10:14])[0]
    width, height, _, bits = struct.unpack("<iiHH", head[18:30])
    if width <= 0 or height == 0:
        return f"BMP with an invalid size {width}x{height}"
    if bits not in (8, 24, 32):
        return f"BMP of {bits} bits per pixel (TensorFlow decodes 8, 24 or 32)"
    expected = offset + (bits * width + 31) // 32 * 4 * abs(height)
    if size != expected:  # TensorFlow's own check: header + rows, no more, no less
        return f"BMP of {size} bytes where its header says {expected}"
    return width, abs(height), 1


def _webp_size(head, size):
    riff_size = struct.unpack("<I", head[4:8])[0] + 8
    if size < riff_size:
        return f"truncated WebP ({size} of {riff_size} bytes)"
    chunk, data = head[12:16], head[20:]
    if chunk == b"VP8 " and len(data) >= 10 and data[3:6] == b"\x9d\x01\x2a":
        width, height = (v & 0x3FFF for v in struct.unpack("<HH", data[6:10]))
    elif chunk == b"VP8L" and len(data) >= 5 and data[0] == 0x2F:
        bits = int.from_bytes(data[1:5], "little")
        width, height = (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    elif chunk == b"VP8X" and len(data) >= 10:
        if data[0] & 0x02:
            return "animated WebP (TensorFlow decodes animated WebP only as RGBA, not to RGB)"
        width, height = int.from_bytes(data[4:7], "little") + 1, int.from_bytes(data[7:10], "little") + 1
    else:
        return "WebP without a valid VP8, VP8L or VP8X header"
    if not width or not height:
        return "WebP without a valid size"
    return width, height, 1


def _jpeg_size(f, tail):
    position, size = 2, None
    for _ in range(10_000):  # segment by segment to the frame header (SOFn) that holds the size
        f.seek(position)
        segment = f.read(9)
        if len(segment) < 4 or segment[0] != 0xFF:
            return "JPEG without a frame header (truncated or corrupt)"
        marker = segment[1]
        if marker == 0xFF:  # fill byte
            position += 1
            continue
        if marker in (0x01, 0xD8) or 0xD0 <= marker <= 0xD7:  # markers without a length
            position += 2
            continue
        if marker in (0xD9, 0xDA):
            return "JPEG without a frame header (truncated or corrupt)"
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            if len(segment) < 9 or 0 in struct.unpack(">HH", segment[5:9]):
                return "JPEG without a valid size"
            height, width = struct.unpack(">HH", segment[5:9])
            size = width, height, 1
            break
        length = struct.unpack(">H", segment[2:4])[0]
        if length < 2:
            return "JPEG with a corrupt segment length"
        position += 2 + length
    else:
        return "JPEG without a frame header"
    if b"\xff\xd9" not in tail:
        return "truncated JPEG (no end-of-image marker at the end)"
    return size


def default_splits(name: str, data_dir: str | None = None) -> tuple[str, str]:
    """(train split, eval split) for a dataset: `train` and the first of test/val/validation present."""
    if name == "digits":
        return "train", "test"
    if name.startswith("folder:"):
        root = name[len("folder:"):]
        _check_folder_layout(root)
        for split in EVAL_SPLIT_NAMES:
            if os.path.isdir(os.path.join(root, split)):
                return "train", split
        beside = sorted(set(os.listdir(root)) - {"train"})
        found = f"found only {_listing(shown_path(b) for b in beside)}" if beside else "it holds nothing else"
        raise DatasetNotFoundError(
            f"No evaluation split in image folder {root!r}: expected {_EVAL_LAYOUT.format(root=shown_path(root))} next "
            f"to {shown_path(os.path.join(root, 'train'))}/, but beside train/ {found}. Move some images of each class "
            f"there "
            f"(or name the evaluation folder test, val or validation). Received: dataset={name!r}"
        )
    splits = _tfds_builder(name, data_dir).info.splits
    for split in EVAL_SPLIT_NAMES:
        if split in splits:
            return "train", split
    return "train", "train"


def make_dataset(
    name: str,
    split: str,
    data_dir: str | None = None,
    image_size: int = 224,
    batch_size: int = 32,
    training: bool = False,
    seed: int = 0,
    *,
    crop: str = "inception",
    crop_min_area: float = 0.05,
    flip: bool = True,
    shuffle_buffer: int = 10_000,
    start_index: int = 0,
    input_context: tf.distribute.InputContext | None = None,
    batch_transform=None,
    download: bool = False,
    skip_files=(),
) -> tuple[tf.data.Dataset, int]:
    """Builds the input pipeline of one split.

    Args:
        name: `"digits"`, `"folder:PATH"` or a tensorflow-datasets name.
        split: split name (`"train"`, `"test"`, a tfds slice such as `"train[:90%]"`).
        data_dir: tensorflow-datasets data directory (None: tfds' default, `~/tensorflow_datasets`).
        image_size: side of the square output images.
        batch_size: the batch size of this pipeline (per replica under `tf.distribute`).
        training: shuffle, repeat forever, Inception-crop and flip; else one ordered pass, resized.
        seed: seed of the shuffle and of the per-element crops and flips.
        crop: `"inception"` (random-resized crop) or `"none"` (resize only) for training.
        crop_min_area: smallest crop area as a fraction of the image (0.05 in the official code).
        flip: random horizontal flips while training.
        shuffle_buffer: shuffle buffer size in elements.
        start_index: number of training elements (of this pipeline) already consumed: resume point.
        input_context: shards the data across input pipelines (workers) under `tf.distribute`.
        batch_transform: optional `fn(images, labels, batch_index) -> (images, labels)` applied to each
            training batch in [0, 255] before scaling (RandAugment, Mixup, CutMix).
        download: let tensorflow-datasets download and prepare a missing dataset.
        skip_files: paths of a folder dataset to leave out (`check_images`).

    Returns:
        `(dataset, num_classes)`: batches of float32 images in [-1, 1], shape (B, S, S, 3), and labels
        (int32, or float one-hot rows when `batch_transform` mixes labels).
    """
    source = dataset_source(name, split, data_dir, download, skip_files)
    ds = source.elements
    num_examples = source.num_examples
    if input_context is not None and input_context.num_input_pipelines > 1:
        pipelines, pipeline_id = input_context.num_input_pipelines, input_context.input_pipeline_id
        ds = ds.shard(pipelines, pipeline_id)
        num_examples = len(range(pipeline_id, num_examples, pipelines))
    size = (image_size, image_size)
    if training:
        ds = _epochs_from(ds, num_examples, seed, shuffle_buffer, start_index)

        def prepare(index, element):
            image, label = element
            element_seed = tf.stack([tf.cast(seed, tf.int64), index])
            image = train_image(source.decode(image), size, element_seed, crop, crop_min_area, flip)
            return image, label

        ds = ds.map(prepare, num_parallel_calls=tf.data.AUTOTUNE)
        ds = ds.batch(batch_size, drop_remainder=True)
        first_batch = start_index // batch_size
        ds = tf.data.Dataset.zip(tf.data.Dataset.counter(first_batch), ds)

        def finish(batch_index, batch):
            images, labels = batch
            if batch_transform is not None:
                images, labels = batch_transform(images, labels, batch_index)
            return to_model_range(images), labels

        ds = ds.map(finish, num_parallel_calls=None if batch_transform is not None else tf.data.AUTOTUNE)
    else:
        ds = ds.map(
            lambda image, label: (to_model_range(eval_image(source.decode(image), size)), label),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
        ds = ds.batch(batch_size)
    options = tf.data.Options()
    options.deterministic = True
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return ds.with_options(options).prefetch(tf.data.AUTOTUNE), source.num_classes


def _epochs_from(elements, num_examples, seed, shuffle_buffer, start_index):
    """Endless `(global index, element)` stream from `start_index`: epoch `e` shuffled by a seed from `(seed, e)`.

    Earlier epochs are never built, so a resume reads only the part of its current epoch already consumed.
    """
    if num_examples <= 0:
        raise ValueError(f"The training split has no examples for this input pipeline. Received: {num_examples}")
    start_epoch, offset = divmod(int(start_index), num_examples)
    base_seed = tf.constant(seed, tf.int64)

    def epoch(e):
        epoch_seed = tf.random.stateless_uniform(
            [], seed=tf.stack([base_seed, e]), minval=None, maxval=None, dtype=tf.int64
        )
        # The graph-level seed would join the shuffle seed (and, when it is 0, make tf.data test the tensor
        # seed in Python); clearing it in this function's graph makes the order depend on `seed` alone.
        tf.compat.v1.get_default_graph().seed = None
        shuffled = elements.shuffle(shuffle_buffer, seed=epoch_seed, reshuffle_each_iteration=False)
        return shuffled.enumerate(start=e * num_examples)

    return tf.data.Dataset.counter(start_epoch).flat_map(epoch).skip(offset)


TRANSLATE = 0.08  # the largest shift of crop="translate", as a fraction of the side (the plain Keras ViT's)


def train_image(image, size, seed, crop="inception", crop_min_area=0.05, flip=True):
    """Crop (Inception, translate or none) + resize + flip of one uint8 image, stateless in `seed` ((2,) int)."""
    seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), 2)
    if crop == "inception":
        begin, crop_size, _ = tf.image.stateless_sample_distorted_bounding_box(
            tf.shape(image),
            tf.zeros([0, 0, 4], tf.float32),
            seed=seeds[0],
            area_range=(crop_min_area, 1.0),
            aspect_ratio_range=(3.0 / 4.0, 4.0 / 3.0),
            min_object_covered=0.0,
            max_attempts=10,
            use_image_if_no_bounding_boxes=True,
        )
        image = tf.slice(image, begin, crop_size)
    image = tf.image.resize(image, size, method="bilinear")
    if crop == "translate":
        image = _translate(image, size, seeds[0])
    if flip:
        image = tf.image.stateless_random_flip_left_right(image, seeds[1])
    image.set_shape((*size, 3))
    return image


def _translate(image, size, seed):
    """A random shift by up to `TRANSLATE` of each side, in fractions of a pixel (bilinear), the borders
    reflected: `keras.layers.RandomTranslation`'s transform, stateless in `seed`."""
    shift = tf.random.stateless_uniform([2], seed, -TRANSLATE, TRANSLATE) * tf.constant(size, tf.float32)
    # The projective transform maps output (x, y) to input (x - dx, y - dy): [1, 0, -dx, 0, 1, -dy, 0, 0].
    transform = tf.stack([1.0, 0.0, -shift[1], 0.0, 1.0, -shift[0], 0.0, 0.0])[None]
    return tf.raw_ops.ImageProjectiveTransformV3(
        images=image[None], transforms=transform, output_shape=tf.constant(size, tf.int32),
        fill_value=0.0, interpolation="BILINEAR", fill_mode="REFLECT")[0]


def eval_image(image, size):
    """Resize to the evaluation resolution (no centre crop), float32 in [0, 255]."""
    image = tf.image.resize(image, size, method="bilinear")
    image.set_shape((*size, 3))
    return image


def to_model_range(images):
    """[0, 255] -> [-1, 1] (x / 127.5 - 1), the preprocessing of the published ViT checkpoints."""
    from keras_vit import preprocessing

    return preprocessing.to_model_range(tf.cast(images, tf.float32))


def pad_eval_batches(ds: tf.data.Dataset, batch_size: int, num_batches: int) -> tf.data.Dataset:
    """Pads a finite batched eval dataset to exactly `num_batches` full batches of `(images, labels, mask)`.

    Under `tf.distribute`, every replica must run the same number of steps with the same shapes; padded
    examples carry mask 0 and do not count.
    """

    def pad(images, labels):
        n = tf.shape(images)[0]
        mask = tf.concat([tf.ones([n]), tf.zeros([batch_size - n])], axis=0)
        images = tf.pad(images, [[0, batch_size - n], [0, 0], [0, 0], [0, 0]])
        labels = tf.pad(labels, [[0, batch_size - n]])
        return images, labels, mask

    ds = ds.map(pad)
    spec = ds.element_spec
    filler = tf.data.Dataset.from_tensors(
        tuple(tf.zeros([batch_size, *s.shape[1:]], s.dtype) for s in spec)
    ).repeat()
    ds = ds.concatenate(filler).take(num_batches)

    def fix_shapes(images, labels, mask):
        images.set_shape([batch_size, *spec[0].shape[1:]])
        labels.set_shape([batch_size])
        mask.set_shape([batch_size])
        return images, labels, mask

    return ds.map(fix_shapes).prefetch(tf.data.AUTOTUNE)


def eval_batches_per_pipeline(num_examples: int, global_batch_size: int, num_pipelines: int) -> int:
    """Eval steps so that every pipeline's shard (at most ceil(n / pipelines) examples) is covered."""
    per_pipeline = math.ceil(num_examples / num_pipelines)
    return max(1, math.ceil(per_pipeline / (global_batch_size // num_pipelines)))


# --- sources -------------------------------------------------------------------------------------------


def _identity_decode(image):
    return image


def _digits_source(split: str) -> Source:
    try:
        from sklearn.datasets import load_digits
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise DatasetNotFoundError(
            "The embedded digits need scikit-learn: pip install -e '.[demo]' (or pip install scikit-learn)."
        ) from error
    digits = load_digits()
    images = np.round(digits.images * (255.0 / 16.0)).astype(np.uint8)
    images = np.repeat(images[..., None], 3, axis=-1)
    order = np.random.default_rng(_DIGITS_SPLIT_SEED).permutation(len(images))
    num_test = len(images) // 5
    indices = {"test": order[:num_test], "train": order[num_test:]}
    if split not in indices:
        raise ValueError(f"The digits have splits 'train' and 'test'. Received: split={split!r}")
    index = np.sort(indices[split])
    elements = tf.data.Dataset.from_tensor_slices((images[index], digits.target[index].astype(np.int32)))
    return Source(elements, _identity_decode, len(index), 10, tuple(str(i) for i in range(10)))


def _decode_file(path):
    image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
    image.set_shape((None, None, 3))
    return image


_TRAIN_LAYOUT = "{root}/train/<label>/<image>"
_EVAL_LAYOUT = "{root}/test|val|validation/<label>/<image>"


def _listing(names, limit=8) -> str:
    """`a, b, c` (the first `limit` names, then how many more)."""
    names = list(names)
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more if names else "nothing"


def _holds_images(folder: str) -> bool:
    with os.scandir(folder) as entries:
        return any(e.is_file() and e.name.lower().endswith(IMAGE_EXTENSIONS) for e in entries)


def _check_folder_layout(root: str) -> None:
    """Refuses a folder dataset that is not `PATH/train/<label>/<image>`, saying what was found instead.

    Raises:
        DatasetNotFoundError: `root` does not exist (or is not a folder), or holds no `train` folder and no
            class folders of images either.
        InvalidDatasetError: a flat `PATH/<label>/<image>` layout (class folders directly under `root`) or
            images directly in `root`: the message names them and says where to move them.
    """
    name = f"folder:{root}"
    shown = shown_path(root)
    expected = f"{_TRAIN_LAYOUT.format(root=shown)} and {_EVAL_LAYOUT.format(root=shown)}"
    if not os.path.exists(root):
        raise DatasetNotFoundError(
            f"Image folder {root!r} does not exist: check the path after 'folder:' (expected {expected}). "
            f"Received: dataset={name!r}"
        )
    if not os.path.isdir(root):
        raise DatasetNotFoundError(
            f"{root!r} is a file, not an image folder: expected {expected}. Received: dataset={name!r}"
        )
    if os.path.isdir(os.path.join(root, "train")):
        return
    entries = sorted(os.listdir(root))
    folders = [e for e in entries if os.path.isdir(os.path.join(root, e))]
    class_folders = [f for f in folders if _holds_images(os.path.join(root, f))]
    if class_folders:
        raise InvalidDatasetError(
            f"Image folder {root!r} has no train/ folder: expected {expected}, but found {len(class_folders)} "
            f"folder(s) holding images directly: {_listing(shown_path(f) for f in class_folders)}. Move them under "
            f"{shown_path(os.path.join(root, 'train'))}/ and put a test split beside it "
            f"({shown}/test/<label>/<image>, the "
            f"same labels). Received: dataset={name!r}"
        )
    if _holds_images(root):
        raise InvalidDatasetError(
            f"Image folder {root!r} holds images directly and no train/ folder: expected {expected} (one folder "
            f"per class). Received: dataset={name!r}"
        )
    found = f"found {_listing(shown_path(e) for e in entries)}" if entries else "it is empty"
    raise DatasetNotFoundError(
        f"Image folder {root!r} has no train/ folder: expected {expected}, but {found}. "
        f"Received: dataset={name!r}"
    )


@dataclasses.dataclass(frozen=True)
class FolderListing:
    """The files of one split of a folder dataset: image paths and labels, and the entries left out."""

    class_names: tuple
    paths: list
    labels: list
    ignored: list  # (path, why): not regular files, other extensions


def _folder_files(root: str, split: str) -> tuple[tuple[str, ...], list, list]:
    """(class names from `train`, image paths of `split`, their labels), in sorted order."""
    listing = _folder_listing(root, split)
    return listing.class_names, listing.paths, listing.labels


def _folder_listing(root: str, split: str) -> FolderListing:
    """The image files of `split` (regular files with an image extension, sorted), their labels (class folders
    of `train`, sorted) and the entries left out with why."""
    train_dir = os.path.join(root, "train")
    split_dir = os.path.join(root, split)
    _check_folder_layout(root)
    if not os.path.isdir(split_dir):
        beside = sorted(e for e in os.listdir(root) if os.path.isdir(os.path.join(root, e)))
        raise DatasetNotFoundError(
            f"Image folder {root!r} has no split {split!r}: expected {shown_path(root)}/{split}/<label>/<image>; "
            f"the splits there are {_listing(shown_path(b) for b in beside)}. "
            f"Received: dataset='folder:{shown_path(root)}', "
            f"split={split!r}"
        )
    class_names = tuple(sorted(d for d in os.listdir(train_dir) if os.path.isdir(os.path.join(train_dir, d))))
    if not class_names:
        raise DatasetNotFoundError(f"No class folders in {train_dir!r}. Received: dataset='folder:{shown_path(root)}'")
    _check_class_names(root, class_names)
    paths, labels, ignored = [], [], []
    for label, class_name in enumerate(class_names):
        class_dir = os.path.join(split_dir, class_name)
        if not os.path.isdir(class_dir):
            continue
        with os.scandir(class_dir) as entries:
            entries = sorted(entries, key=lambda e: e.name)
        for entry in entries:
            if not entry.name.lower().endswith(IMAGE_EXTENSIONS):
                if not entry.name.startswith("."):  # hidden files (.DS_Store) are left out silently
                    ignored.append((entry.path, None))
                continue
            kind = _not_regular(entry)
            if kind:
                ignored.append((entry.path, kind))
                continue
            paths.append(entry.path)
            labels.append(label)
    unknown = sorted({d for d in os.listdir(split_dir) if os.path.isdir(os.path.join(split_dir, d))} - set(class_names))
    if unknown:
        raise ValueError(f"Split {split!r} has labels that 'train' lacks. Received: {unknown}")
    return FolderListing(class_names, paths, labels, ignored)


def _not_regular(entry) -> str | None:
    """What a directory entry named like an image is when it is not a regular file (None: it is one)."""
    try:
        mode = os.stat(entry.path).st_mode  # follows a symbolic link to its target
    except OSError as error:
        return "a broken symbolic link" if entry.is_symlink() else f"unreadable: {error.strerror or error}"
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device file"
    return "not a regular file"


def _ignored_warnings(name, ignored) -> list[str]:
    """`warning: ...` lines for the entries of a folder dataset left out (`FolderListing.ignored`)."""
    lines = []
    odd = [(path, kind) for path, kind in ignored if kind]
    if odd:
        shown = "; ".join(f"{shown_path(path)} ({kind})" for path, kind in odd[:5])
        more = f" and {len(odd) - 5} more" if len(odd) > 5 else ""
        lines.append(f"warning: left out {_count(len(odd), 'entry', 'entries')} of {shown_path(name)} named like "
                     f"images that are not regular files (they could not be read as images, and a FIFO would "
                     f"block): {shown}{more}")
    other = [path for path, kind in ignored if not kind]
    if other:
        counts = {}
        for path in other:
            extension = os.path.splitext(path)[1].lower() or "(no extension)"
            counts[extension] = counts.get(extension, 0) + 1
        by_extension = ", ".join(f"{shown_path(e)}: {n}" for e, n in sorted(counts.items(), key=lambda x: -x[1]))
        lines.append(f"warning: left out {_count(len(other), 'file')} of {shown_path(name)} that are not images by "
                     f"their extension ({by_extension}), e.g. {shown_path(other[0])}; the loader reads "
                     f"{', '.join(IMAGE_EXTENSIONS)} (convert other formats to one of them)")
    return lines


def _count(n, one, many=None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


def _check_class_names(root, class_names) -> None:
    """Refuses class folder names that are not UTF-8 text: they become the model's labels."""
    for class_name in class_names:
        try:
            class_name.encode("utf-8")
        except UnicodeEncodeError:
            path = shown_path(os.path.join(root, "train", class_name))
            raise InvalidDatasetError(
                f"The class folder {path} has a name that is not UTF-8 text (shown with its bytes escaped): class "
                f"names become the model's labels (model.labels.txt, the exported model's labels), which are "
                f"text. Rename it in every split (e.g. to {shown_path(class_name)!r} without the escaped bytes). "
                f"Received: dataset='folder:{shown_path(root)}'"
            ) from None


def _check_class_folders(root: str, class_names, skip_files) -> None:
    """Refuses a `train` class folder without (usable) images: the head would get a class never trained."""
    empty = []
    for class_name in class_names:
        class_dir = os.path.join(root, "train", class_name)
        with os.scandir(class_dir) as entries:
            if not any(e.name.lower().endswith(IMAGE_EXTENSIONS) and e.path not in skip_files and not _not_regular(e)
                       for e in entries):
                empty.append(shown_path(class_dir))
    if empty:
        skipped = " (after skipping the bad images)" if skip_files else ""
        raise InvalidDatasetError(
            f"{len(empty)} class folder(s) of {os.path.join(root, 'train')!r} hold no images{skipped}: "
            f"{', '.join(empty[:5])}{' ...' if len(empty) > 5 else ''}. Each would be a class of the head that is "
            f"never trained: add images ({', '.join(IMAGE_EXTENSIONS)}) to it or delete the folder. "
            f"Received: dataset='folder:{shown_path(root)}'"
        )


def _folder_source(root: str, split: str, skip_files: frozenset = frozenset()) -> Source:
    class_names, paths, labels = _folder_files(root, split)
    _check_class_folders(root, class_names, skip_files)
    if skip_files:
        kept = [i for i, path in enumerate(paths) if path not in skip_files]
        paths, labels = [paths[i] for i in kept], [labels[i] for i in kept]
    if not paths:
        raise DatasetNotFoundError(f"No images ({', '.join(IMAGE_EXTENSIONS)}) under {os.path.join(root, split)!r}.")
    # The file system's bytes, not text: a file name that is not UTF-8 is read as it is.
    encoded = np.array([os.fsencode(path) for path in paths], dtype=object)
    elements = tf.data.Dataset.from_tensor_slices((encoded, np.asarray(labels, np.int32)))
    return Source(elements, _decode_file, len(paths), len(class_names), class_names)


def _tfds():
    """`tensorflow_datasets`, or a DatasetNotFoundError saying how to install it (it is the `train` extra)."""
    try:
        import tensorflow_datasets as tfds
    except ModuleNotFoundError as error:
        if error.name != "tensorflow_datasets":
            raise
        raise DatasetNotFoundError(
            "tensorflow-datasets datasets need the package tensorflow-datasets, which is not installed: "
            "`pip install -e \".[train]\"` in the repository (or `pip install tensorflow-datasets "
            "importlib_resources`). 'digits' and 'folder:PATH' need no tensorflow-datasets."
        ) from None
    return tfds


def _tfds_builder(name: str, data_dir: str | None):
    tfds = _tfds()
    try:
        return tfds.builder(name, data_dir=data_dir)
    except Exception as error:  # tfds raises several types for unknown names
        raise DatasetNotFoundError(
            f"Unknown tensorflow-datasets name. Received: dataset={name!r}. Use a name from "
            "https://www.tensorflow.org/datasets/catalog, 'folder:PATH' or 'digits'."
        ) from error


def _tfds_source(name: str, split: str, data_dir: str | None, download: bool) -> Source:
    tfds = _tfds()
    builder = _tfds_builder(name, data_dir)
    if download:
        try:
            builder.download_and_prepare()
        except OSError as error:  # no network, DNS, HTTP (requests' errors are OSErrors); not missing modules
            raise DatasetNotFoundError(
                f"Could not download dataset {name!r} with tensorflow-datasets (network error: {error}). Check the "
                f"network (and a proxy, if any), or prepare it on a machine with internet access: `python -m "
                f"training.train --dataset={name} --download --data_dir=DIR` there, then copy DIR here and pass "
                f"--data_dir=DIR without --download."
            ) from error
    try:
        elements = builder.as_dataset(
            split=split,
            as_supervised=True,
            shuffle_files=False,
            decoders={"image": tfds.decode.SkipDecoding()},
        )
    except (AssertionError, FileNotFoundError, tf.errors.NotFoundError) as error:  # tfds: "not prepared"
        raise DatasetNotFoundError(
            f"Dataset {name!r} is not prepared in data_dir={str(builder.data_dir_root)!r}. Prepare it once on a "
            f"machine with internet access: `python -c \"import tensorflow_datasets as tfds; "
            f"tfds.builder('{name}', data_dir='DIR').download_and_prepare()\"` (or `tfds build {name} "
            f"--data_dir=DIR`), then pass --data_dir=DIR; or add --download to let this run fetch it. "
            f"Some datasets (e.g. imagenet2012) need manual downloads first; see their catalog page."
        ) from error
    image_feature = builder.info.features[builder.info.supervised_keys[0]]
    decode = image_feature.decode_example if isinstance(elements.element_spec[0], tf.TensorSpec) and \
        elements.element_spec[0].dtype == tf.string else _identity_decode

    def decode_rgb(image):
        image = decode(image)
        if image.shape.rank == 3 and image.shape[-1] == 1:
            image = tf.image.grayscale_to_rgb(image)
        image.set_shape((None, None, 3))
        return image

    cardinality = int(elements.cardinality())
    num_examples = cardinality if cardinality >= 0 else int(builder.info.splits[split].num_examples)
    label_feature = builder.info.features[builder.info.supervised_keys[1]]
    elements = elements.map(lambda image, label: (image, tf.cast(label, tf.int32)))
    return Source(elements, decode_rgb, num_examples, label_feature.num_classes, tuple(label_feature.names))
