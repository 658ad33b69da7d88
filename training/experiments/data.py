"""The data of the runs of `training.experiments`: its splits, the app's check of a folder dataset's images,
nested class-stratified subsets of the training split, and the endless augmented batches of one subset.

A `setup` here is a `training.experiments.app.Setup`.
"""

from __future__ import annotations

import numpy as np


def nested_subsets(labels, fractions, seed=0) -> dict:
    """Nested, class-stratified subsets of a split: {fraction: sorted example indices}.

    Every class's examples are shuffled (by `seed`) and ranked; an example's place in the one order is its
    rank relative to its class size (ties broken at random), so every prefix of the order holds each class in
    proportion, and a subset is a prefix: the smaller subsets are contained in the larger ones. The same
    labels, fractions and seed give the same subsets.

    Args:
        labels: int array (N,) of the split's labels.
        fractions: fractions of the split in (0, 1]; a subset has max(1, round(f * N)) examples.
        seed: seed of the order.

    Example:
        >>> labels = np.array([0, 0, 0, 0, 1, 1, 1, 1])
        >>> subsets = nested_subsets(labels, (0.25, 0.5, 1.0))
        >>> [len(subsets[f]) for f in (0.25, 0.5, 1.0)], labels[subsets[0.25]].tolist()
        ([2, 4, 8], [0, 1])
    """
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    keys = np.empty(len(labels))
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        keys[members] = (np.arange(len(members)) + 0.5) / len(members)
    order = np.lexsort((rng.permutation(len(labels)), keys))
    return {f: np.sort(order[: max(1, int(round(f * len(labels))))]) for f in fractions}


def splits(setup) -> tuple[str, str]:
    """(train split, eval split) of `setup`: its own, else the dataset's defaults."""
    from training.sources import default_splits

    default_train, default_eval = default_splits(setup.dataset, setup.data_dir)
    return setup.train_split or default_train, setup.eval_split or default_eval


def check_images(setup, train_split: str, eval_split: str, log=print) -> frozenset:
    """The training app's check of a folder dataset's images before anything trains
    (`training.image_checks.check_images`: headers, the pixel limit, a full decode of both splits): the bad files
    to skip with `skip_bad_images`, else `training.sources.InvalidDatasetError` naming them."""
    from training import image_checks
    from training.sources import shown_path

    limit = image_checks.DEFAULT_MAX_IMAGE_PIXELS if setup.max_image_pixels is None else setup.max_image_pixels
    skip = image_checks.check_images(setup.dataset, (train_split, eval_split), skip=setup.skip_bad_images,
                                     max_pixels=limit or None, log=log)
    if skip:
        log(f"skipping {len(skip)} image file(s) of {shown_path(setup.dataset)} that cannot be used "
            f"(--skip_bad_images), e.g. {shown_path(min(skip))}")
    return skip


def split_labels(source) -> np.ndarray:
    """The labels of a `training.sources.Source`, in element order (the images are not decoded)."""
    return np.concatenate([np.asarray(labels) for _, labels in source.elements.map(
        lambda image, label: (0, label)).batch(4096).as_numpy_iterator()])


def train_dataset(source, indices, cfg, seed):
    """Endless training batches of the examples `indices` of `source`, with the app's augmentation
    (`training.data.train_image`, `cfg`'s crop and flip, stateless per element) and one-hot labels."""
    import tensorflow as tf

    from training import data

    keep = np.zeros(source.num_examples, bool)
    keep[np.asarray(indices)] = True
    keep = tf.constant(keep)
    size = (cfg.image_size, cfg.image_size)
    num_classes = source.num_classes

    def kept(index, element):
        return keep[index]

    def decoded(index, element):
        image, label = element
        return source.decode(image), label

    ds = source.elements.enumerate().filter(kept).map(decoded, num_parallel_calls=tf.data.AUTOTUNE).cache()
    ds = ds.shuffle(len(indices), seed=seed, reshuffle_each_iteration=True).repeat().enumerate()

    def prepare(index, element):
        image, label = element
        image = data.train_image(image, size, tf.stack([tf.constant(seed, tf.int64), index]), cfg.crop,
                                 cfg.crop_min_area, cfg.flip)
        return image, tf.one_hot(label, num_classes)

    ds = ds.map(prepare, num_parallel_calls=tf.data.AUTOTUNE).batch(cfg.global_batch_size, drop_remainder=True)
    ds = ds.map(lambda images, labels: (data.to_model_range(images), labels))
    options = tf.data.Options()
    options.deterministic = True
    return ds.with_options(options).prefetch(tf.data.AUTOTUNE)
