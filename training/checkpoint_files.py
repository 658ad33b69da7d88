"""The checkpoint files of a run's `checkpoints/` folder, as listed (not globbed), on any file system TensorFlow
reads (`tf.io.gfile`): which `ckpt-N` exist, newest first.

Example:
    >>> import tempfile
    >>> on_disk(tempfile.mkdtemp())
    []
"""

from __future__ import annotations

import os
import re

import tensorflow as tf


def listdir(directory) -> list[str]:
    """The names in `directory` (listed, not globbed), none when it does not exist."""
    if not tf.io.gfile.isdir(directory):
        return []
    return [name.rstrip("/") for name in tf.io.gfile.listdir(directory)]


def on_disk(directory) -> list[tuple[int, str]]:
    """`(number, prefix)` of every `ckpt-N.index` in `directory`, the newest (highest N) first."""
    found = [re.fullmatch(r"ckpt-(\d+)\.index", name) for name in listdir(directory)]
    return sorted(((int(m.group(1)), os.path.join(directory, m.group(0)[:-len(".index")])) for m in found if m),
                  reverse=True)
