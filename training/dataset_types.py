"""What a dataset source is (`Source`) and the errors the data path raises, each with its own exit status in the
app (`training.train`): a dataset that is not there, files that cannot be used, an image that failed mid-run.

Example:
    >>> ImageFailedMidRunError("x").exit_status
    5
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf


class DatasetNotFoundError(ValueError):
    """The dataset is not available locally; the message says how to prepare it."""


class InvalidDatasetError(ValueError):
    """The dataset's files cannot be used as they are; the message names them and says how to fix them."""


class ImageFailedMidRunError(InvalidDatasetError):
    """An image file failed in the input pipeline of a run under way (deleted, changed or unreadable since the
    check before training, or checked by its header only): the message names it and the state saved before it.
    `python -m training.train` exits with `exit_status` (5) for it."""

    exit_status = 5


@dataclasses.dataclass(frozen=True)
class Source:
    """An undecoded split: `(encoded_or_array, label)` elements, a decode function, and counts."""

    elements: tf.data.Dataset
    decode: object
    num_examples: int
    num_classes: int
    class_names: tuple[str, ...]
    shuffle_whole: bool = False
    """The elements are file names, listed class by class: each training epoch is shuffled whole (a few bytes an
    element) whatever the shuffle buffer, but 1 (no shuffling); a buffer smaller than the split would give batches
    of one or two classes at a time."""


def identity_decode(image):
    """The decode function of elements that are already images (arrays)."""
    return image
