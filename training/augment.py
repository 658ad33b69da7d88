"""Batch augmentations from Keras 3's own layers: RandAugment, Mixup, CutMix (AugReg, Steiner et al. 2021).

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

import keras
import tensorflow as tf

# RandAugment magnitudes in the AugReg/big_vision configs run on a 0..30 scale; Keras takes a factor in [0, 1].
MAX_MAGNITUDE = 30.0


def make_batch_transform(num_classes, randaugment=None, mixup=0.0, cutmix=0.0, seed=0):
    """Returns `fn(images, labels, batch_index) -> (images, labels)`, or None when nothing is enabled.

    Args:
        num_classes: width of the one-hot labels that Mixup / CutMix produce.
        randaugment: None, or `(num_ops, magnitude)` with magnitude on the 0..30 scale.
        mixup: Beta(alpha, alpha) parameter of Mixup; 0 disables it.
        cutmix: Beta(alpha, alpha) parameter of CutMix; 0 disables it.
        seed: seed of the layers' random generators (and of the per-batch Mixup/CutMix choice).
    """
    if randaugment is None and not mixup and not cutmix:
        return None
    rand_augment = None
    if randaugment is not None:
        num_ops, magnitude = randaugment
        rand_augment = keras.layers.RandAugment(
            value_range=(0, 255), num_ops=int(num_ops), factor=min(1.0, magnitude / MAX_MAGNITUDE), seed=seed
        )
    mixers = []
    if mixup:
        mixers.append(keras.layers.MixUp(alpha=float(mixup), seed=seed + 1))
    if cutmix:
        mixers.append(keras.layers.CutMix(factor=float(cutmix), seed=seed + 2))

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

    return transform
