"""The reader registry: one reader per checkpoint format of `keras_vit.checkpoints.detect`, each returning the
canonical (official-layout) `Checkpoint`.

    official_npz    keras_vit.checkpoints.npz.read
    timm            keras_vit.checkpoints.timm.read (needs the head count, which timm files do not store)
    huggingface     keras_vit.checkpoints.huggingface.read

Keras files (`keras_weights`, `keras_model`) hold no checkpoint to translate: they are loaded with
`model.load_weights` (`keras_vit.loading`), and `read_checkpoint` refuses them with a hint.

Example:
    >>> import numpy as np, os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "ViT-B_16.npz")
    >>> np.savez(path, cls=np.zeros((1, 1, 8), "float32"))
    >>> read_checkpoint(path).source
    'official'
"""

import os

from keras_vit.checkpoints.canonical import Checkpoint
from keras_vit.checkpoints.detect import detect_format


def _read_npz(path, num_heads):
    from keras_vit.checkpoints import npz

    return npz.read(path)


def _read_timm(path, num_heads):
    from keras_vit.checkpoints import timm

    return timm.read(path, num_heads=num_heads)


def _read_huggingface(path, num_heads):
    from keras_vit.checkpoints import huggingface

    return huggingface.read(path)


READERS = {"official_npz": _read_npz, "timm": _read_timm, "huggingface": _read_huggingface}
"""Format (`detect_format`) -> reader(path, num_heads) -> `Checkpoint`."""


def read_checkpoint(path, num_heads: int | None = None, file_format: str | None = None) -> Checkpoint:
    """Reads any supported checkpoint file or folder into the canonical (official) layout.

    Args:
        path: an official `.npz`, a timm `.safetensors`, a Hugging Face folder or `model.safetensors`.
        num_heads: heads per block, for timm files (which do not store it); inferred from the width if None.
        file_format: the format `detect_format` told already (`keras_vit.checkpoints.weights_files.resolve`);
            None: told here.

    Raises:
        ValueError: an unknown, pickle-based, truncated or corrupt file, or a Keras `.weights.h5` / `.keras`.
    """
    path = os.fspath(path)
    kind = detect_format(path) if file_format is None else file_format
    if kind in READERS:
        return READERS[kind](path, num_heads)
    raise ValueError(
        "A Keras .weights.h5 or .keras file holds no checkpoint to read; build the model and pass the file as "
        f"`weights=` (or use `model.load_weights`). Received: path={path!r}"
    )
