"""Reads `.safetensors` files (header or tensors) with the `safetensors` library, never with pickle.

Shared by the timm and Hugging Face readers and by format detection. `safetensors` is an optional
dependency (`pip install "keras-vit-applications[safetensors]"`), imported only when a file is read.

Example:
    >>> import numpy as np, os, tempfile
    >>> from safetensors.numpy import save_file
    >>> path = os.path.join(tempfile.mkdtemp(), "model.safetensors")
    >>> save_file({"cls_token": np.zeros((1, 1, 8), np.float32)}, path)
    >>> read_keys(path)
    ['cls_token']
"""

import os

import numpy as np

def _safetensors():
    from keras_vit import extras

    safetensors = extras.require("safetensors", "safetensors", "reading .safetensors checkpoints")
    extras.require("safetensors.numpy", "safetensors", "reading .safetensors checkpoints")  # the numpy front end
    try:  # registers numpy's bfloat16 dtype so bfloat16 files can be read; keras depends on ml_dtypes
        import ml_dtypes  # noqa: F401
    except ImportError:
        pass
    return safetensors


def _corrupt(path, error):
    return ValueError(
        f"Not a readable safetensors file (truncated or corrupt?): {error}. Received: path={path!r}"
    )


def read_keys(path) -> list[str]:
    """Tensor names in the file's header, without reading the tensors.

    Raises:
        ValueError: a truncated or corrupt file (the header does not parse or does not cover the file).
    """
    safetensors = _safetensors()
    path = os.fspath(path)
    try:
        with safetensors.safe_open(path, framework="numpy") as handle:
            return list(handle.keys())
    except Exception as error:  # SafetensorError derives from Exception only
        raise _corrupt(path, error) from error


def load(path) -> dict[str, np.ndarray]:
    """All tensors of the file as numpy arrays; float16 and bfloat16 are widened to float32.

    Raises:
        ValueError: a truncated or corrupt file, or a dtype numpy cannot hold.
    """
    safetensors = _safetensors()
    path = os.fspath(path)
    try:
        tensors = safetensors.numpy.load_file(path)
    except Exception as error:  # SafetensorError, or TypeError for a dtype numpy lacks
        raise _corrupt(path, error) from error
    return {name: _widen(array) for name, array in tensors.items()}


def _widen(array: np.ndarray) -> np.ndarray:
    if array.dtype.kind in "fV" and array.dtype.itemsize < 4:  # float16, bfloat16 (ml_dtypes kind "V")
        return np.asarray(array, dtype=np.float32)
    return array
