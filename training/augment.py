"""Batch augmentations from Keras 3's own layers: RandAugment, Mixup, CutMix (AugReg, Steiner et al. 2021).

The layers come from Keras core by default, or from keras-cv (`library="keras_cv"`, `--augment_library`), the
package Keras 3 absorbed them from (in maintenance, an optional extra); `LIBRARIES` maps the app's values to
each library's keywords. keras-cv's RandAugment keeps its own policy defaults (each op applied with rate 10/11,
the magnitude drawn with standard deviation 0.15); Keras core's always applies its `num_ops` ops.

They run inside the tf.data pipeline on batches of images in [0, 255] (before the [-1, 1] scaling), on any
Keras backend. Mixup and CutMix mix one-hot labels, so the batches they produce carry float label rows.
With both enabled, each batch gets one of them with probability 1/2 (as timm does).

Example:
    >>> import tensorflow as tf
    >>> augment = make_batch_transform(num_classes=10, randaugment=(2, 15), mixup=0.2, seed=0)
    >>> images, labels = augment(tf.zeros([4, 32, 32, 3]), tf.constant([0, 1, 2, 3]), tf.constant(0, tf.int64))
    >>> labels.shape
    TensorShape([4, 10])
"""

from __future__ import annotations

import importlib

import tensorflow as tf

from keras_vit import extras

# RandAugment magnitudes in the AugReg/big_vision configs run on a 0..30 scale; Keras takes a factor in [0, 1].
MAX_MAGNITUDE = 30.0

# The augmentation layers of each library (training.config.AUGMENT_LIBRARIES): the module whose `layers` hold
# RandAugment, MixUp and CutMix, and the keyword each takes for the app's values (the rest are named alike).
LIBRARIES = {
    "keras": dict(module="keras", num_ops="num_ops", magnitude="factor", cutmix="factor"),
    "keras_cv": dict(module="keras_cv", num_ops="augmentations_per_image", magnitude="magnitude", cutmix="alpha"),
}


MissingLibraryError = extras.MissingExtra
"""The augmentation library asked for is not installed; the message names the extra that installs it."""


def layers_of(library="keras"):
    """The module of `library`'s augmentation layers (`keras.layers` or `keras_cv.layers`).

    Raises:
        MissingLibraryError: when the library is not installed (keras-cv is an optional extra, `keras-cv`).
    """
    module = LIBRARIES[library]["module"]
    if module == "keras":  # keras_vit's own dependency
        return importlib.import_module(module).layers
    extra = extras.package_of(module)  # keras-cv: the extra is named as the package
    return extras.require(module, extra, f"--augment_library={library}").layers


def make_batch_transform(num_classes, randaugment=None, mixup=0.0, cutmix=0.0, seed=0, library="keras"):
    """Returns `fn(images, labels, batch_index) -> (images, labels)`, or None when nothing is enabled; the
    layers it applies are its `layers` attribute.

    Args:
        num_classes: width of the one-hot labels that Mixup / CutMix produce.
        randaugment: None, or `(num_ops, magnitude)` with magnitude on the 0..30 scale.
        mixup: Beta(alpha, alpha) parameter of Mixup; 0 disables it.
        cutmix: Beta(alpha, alpha) parameter of CutMix; 0 disables it.
        seed: seed of the layers' random generators (and of the per-batch Mixup/CutMix choice).
        library: `"keras"` (Keras core) or `"keras_cv"`: where the layers come from (`LIBRARIES`).

    Raises:
        MissingLibraryError: for `library="keras_cv"` without keras-cv installed (when a layer is needed).
    """
    if randaugment is None and not mixup and not cutmix:
        return None
    layers, keyword = layers_of(library), LIBRARIES[library]
    rand_augment = None
    if randaugment is not None:
        num_ops, magnitude = randaugment
        rand_augment = layers.RandAugment(
            value_range=(0, 255), seed=seed,
            **{keyword["num_ops"]: int(num_ops), keyword["magnitude"]: min(1.0, magnitude / MAX_MAGNITUDE)},
        )
    mixers = []
    if mixup:
        mixers.append(layers.MixUp(alpha=float(mixup), seed=seed + 1))
    if cutmix:
        mixers.append(layers.CutMix(**{keyword["cutmix"]: float(cutmix)}, seed=seed + 2))

    def transform(images, labels, batch_index):
        images = tf.cast(images, tf.float32)
        if rand_augment is not None:
            images = rand_augment(images, training=True)
        if mixers:
            labels = tf.one_hot(labels, num_classes)
            data = {"images": images, "labels": labels}
            if len(mixers) == 1:
                data = mixers[0](data, training=True)
            else:
                coin = tf.random.stateless_uniform([], seed=tf.stack([tf.cast(seed, tf.int64), batch_index]))
                data = tf.cond(coin < 0.5, lambda: mixers[0](data, training=True), lambda: mixers[1](data, training=True))
            images, labels = data["images"], data["labels"]
        return images, labels

    transform.layers = tuple(layer for layer in (rand_augment, *mixers) if layer is not None)  # what it applies
    return transform
