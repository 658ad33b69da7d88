"""The tf.data input pipeline of a dataset split: decode, crop, resize, flip, scale to [-1, 1] and batch.

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

Epochs: with `training=True` the dataset never ends (it is the app's step-indexed stream, each epoch shuffled by
its own seed), so `model.fit` on it needs `steps_per_epoch` (`steps_per_epoch(name, split, batch_size)`: the full
batches of one pass); with `training=False` it is one ordered pass over the split (finite, for evaluation or
`validation_data`).

Sources: `training.sources` (`"digits"`, `"folder:PATH"`, a tensorflow-datasets name); the checks of a folder
dataset's image files: `training.image_checks`.

Example:
    >>> ds, num_classes = make_dataset("digits", "test", image_size=32, batch_size=8)
    >>> images, labels = next(iter(ds))
    >>> images.shape, num_classes
    (TensorShape([8, 32, 32, 3]), 10)
    >>> steps_per_epoch("digits", "train", batch_size=64)  # 1,438 images: 22 full batches a pass
    22
"""

from __future__ import annotations

import math

import tensorflow as tf

from training.sources import dataset_source


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
        training: shuffle, repeat forever, Inception-crop and flip; else one ordered pass, resized. The repeated
            dataset has no end: `model.fit(ds, steps_per_epoch=steps_per_epoch(name, split, batch_size), ...)`.
        seed: seed of the shuffle and of the per-element crops and flips.
        crop: `"inception"` (random-resized crop) or `"none"` (resize only) for training.
        crop_min_area: smallest crop area as a fraction of the image (0.05 in the official code).
        flip: random horizontal flips while training.
        shuffle_buffer: shuffle buffer size in elements; 1 does not shuffle. A folder's file names are shuffled
            whole each epoch for any other value.
        start_index: number of training elements (of this pipeline) already consumed: resume point.
        input_context: shards the data across input pipelines (workers) under `tf.distribute`.
        batch_transform: optional `fn(images, labels, batch_index) -> (images, labels)` applied to each
            training batch in [0, 255] before scaling (RandAugment, Mixup, CutMix).
        download: let tensorflow-datasets download and prepare a missing dataset.
        skip_files: paths of a folder dataset to leave out (`training.image_checks.check_images`).

    Returns:
        `(dataset, num_classes)`: batches of float32 images in [-1, 1], shape (B, S, S, 3), and labels
        (int32, or float one-hot rows when `batch_transform` mixes labels). With `training=True` the dataset
        is infinite (its cardinality is `tf.data.INFINITE_CARDINALITY`); with `training=False` finite.
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
        whole = source.shuffle_whole and shuffle_buffer > 1  # a buffer of 1: no shuffling, the listing's order
        ds = _epochs_from(ds, num_examples, seed, num_examples if whole else shuffle_buffer, start_index)

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
        # Said, not only true: `len(ds)` refuses and `ds.cardinality()` tells user code that it never ends.
        ds = ds.apply(tf.data.experimental.assert_cardinality(tf.data.INFINITE_CARDINALITY))
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


def steps_per_epoch(name: str, split: str, batch_size: int, data_dir: str | None = None, skip_files=()) -> int:
    """The full batches of one pass over `split`: `model.fit`'s `steps_per_epoch` for the endless training
    dataset of `make_dataset(..., training=True)` (which drops the last partial batch of the stream).

    Raises:
        ValueError: a `batch_size` that is not positive, or a split with fewer examples than one batch.
    """
    if batch_size <= 0:
        raise ValueError(f"`batch_size` must be positive. Received: batch_size={batch_size}")
    num_examples = dataset_source(name, split, data_dir, skip_files=skip_files).num_examples
    if num_examples < batch_size:
        raise ValueError(f"Split {split!r} of dataset {name!r} has {num_examples} examples, fewer than one batch: pass "
                         f"a batch_size of at most {num_examples}. Received: batch_size={batch_size}")
    return num_examples // batch_size


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
