"""Tells which checkpoint format a local path holds, from its kind (file or folder), magic bytes and, for
safetensors, the tensor names in its header.

    official_npz    a zip archive (`.npz`) of the official vit_jax / big_vision checkpoints
    timm            a `.safetensors` file with timm names (`patch_embed.proj.weight`, `blocks.{i}.`)
    huggingface     a transformers ViT folder (config.json + model.safetensors), or such a `.safetensors` file
    keras_weights   an HDF5 file (`.weights.h5`) saved by Keras
    keras_model     a Keras `.keras` archive (a zip, told from an `.npz` by its name)

Each format's container is checked whole before it is named (a complete zip, an HDF5 file that opens, a `.keras`
archive holding `model.weights.h5`): a truncated download is said here, with the file's name.

Nothing is unpickled: `.bin`, `.pth`, `.pt` and `.ckpt` files are refused with a hint to convert them.

Example:
    >>> import numpy as np, os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "ViT-B_16.npz")
    >>> np.savez(path, cls=np.zeros((1, 1, 8)))
    >>> detect_format(path)
    'official_npz'
"""

import os
import zipfile

from keras_vit.checkpoints import safetensors_file, untrusted
from keras_vit.checkpoints.layouts import looks_like_huggingface, looks_like_timm, resolve_files

FORMATS = ("official_npz", "timm", "huggingface", "keras_weights", "keras_model")

_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
_PICKLE_SUFFIXES = (".bin", ".pth", ".pt", ".ckpt", ".pkl", ".pickle")


def detect_format(path) -> str:
    """The format of a checkpoint path: one of `FORMATS`.

    Args:
        path: a file or a Hugging Face model folder.

    Returns:
        `"official_npz"`, `"timm"`, `"huggingface"`, `"keras_weights"` or `"keras_model"`.

    Raises:
        ValueError: a missing path, a pickle-based or unknown file, or a truncated or corrupt one.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        resolve_files(path)  # raises if the folder lacks the weights or config.json
        return "huggingface"
    if not os.path.lexists(path):
        raise ValueError(f"The checkpoint path does not exist. Received: path={path!r}")
    untrusted.check_regular_file(path)  # a FIFO, a device or a dangling link: named, never opened
    if path.lower().endswith(_PICKLE_SUFFIXES):
        raise ValueError(
            "Pickle-based PyTorch files are not read (unpickling runs arbitrary code); use the model's "
            f".safetensors file instead. Received: path={path!r}"
        )
    if path.lower().endswith(".keras"):
        check_keras_archive(path)
        return "keras_model"
    with open(path, "rb") as handle:
        head = handle.read(9)
    magic = head[:8]
    if magic.startswith(_ZIP_MAGIC) or path.lower().endswith(".npz"):
        if not zipfile.is_zipfile(path):
            raise ValueError(
                f"The .npz checkpoint {path!r} is truncated or corrupt (not a complete zip archive). If it was "
                f"downloaded, delete it and download again. Received: path={path!r}"
            )
        return "official_npz"
    if magic == _HDF5_MAGIC or path.lower().endswith(".h5"):
        _check_hdf5(path)
        return "keras_weights"
    if path.lower().endswith(".safetensors") or _looks_like_safetensors(head):
        names = safetensors_file.read_keys(path)
        if looks_like_timm(names):
            return "timm"
        if looks_like_huggingface(names):
            return "huggingface"
        raise ValueError(
            "The safetensors file holds neither timm nor Hugging Face ViT tensor names. "
            f"Received: path={path!r} with tensors {sorted(names)[:10]}"
        )
    raise ValueError(
        "Unknown checkpoint format: expected an official .npz, a timm or Hugging Face .safetensors, a Hugging "
        f"Face ViT folder or a Keras .weights.h5. Received: path={path!r}"
    )


def check_keras_archive(path: str) -> None:
    """A `.keras` file must be a complete zip archive holding `model.weights.h5`.

    Raises:
        ValueError: naming the file and its size, for a truncated or otherwise corrupt archive.
    """
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
        problem = None if "model.weights.h5" in names else "its zip archive holds no model.weights.h5"
    except (zipfile.BadZipFile, OSError):
        problem = "it is not a valid zip/.keras archive (truncated or damaged)"
    if problem:
        raise ValueError(
            f"The .keras file {path!r} ({os.path.getsize(path):,} bytes) is corrupt: {problem}. Save the model "
            f"again with `model.save(...)` (or copy the file again). Received: path={path!r}"
        )


def _looks_like_safetensors(head: bytes) -> bool:
    """A safetensors file starts with a little-endian u64 header length followed by '{'."""
    return len(head) == 9 and head[8:] == b"{" and 0 < int.from_bytes(head[:8], "little") < 100_000_000


def _check_hdf5(path: str) -> None:
    try:
        import h5py
    except ImportError:  # keras needs h5py for .weights.h5 anyway; the loader will say so
        return
    try:
        with h5py.File(path, "r"):
            pass
    except OSError as error:
        raise ValueError(f"The HDF5 weights file is truncated or corrupt: {error}. Received: path={path!r}") from error
