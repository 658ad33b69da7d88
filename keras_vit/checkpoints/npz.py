"""Reader of the official ViT `.npz` checkpoints (vit_jax, big_vision, AugReg) into a `Checkpoint`.

The files are read with `np.lib.format.read_array(..., allow_pickle=False)`: arrays only, never pickled
objects. Names, dtypes and shapes are first read from the zip and .npy headers (a member whose header
disagrees with its size is refused), and an array's data is decompressed only when the loader assigns it, so
a small file claiming gigabytes of unused or mis-shaped zeros is refused without reading them. Every
spelling the official code has used is translated to the released pre-Linen names of
docs/REFERENCE.md:

- block sublayers in Linen numbering (`LayerNorm_0`, `MultiHeadDotProductAttention_0`, `LayerNorm_1`,
  `MlpBlock_0`) -> (`LayerNorm_0`, `MultiHeadDotProductAttention_1`, `LayerNorm_2`, `MlpBlock_3`);
- a `params/` or `opt/target/` prefix (training-state files) is dropped; the optimizer state beside
  `opt/target/` (other `opt/...` arrays) is skipped and the skip logged on the `"keras_vit"` logger;
- big_vision's top-level `pos_embedding` -> `Transformer/posembed_input/pos_embedding`;
- scanned blocks stored once as `Transformer/encoderblock/...` with a leading depth axis are split into
  `Transformer/encoderblock_{i}/...`;
- bfloat16 arrays (stored by numpy as 2-byte void) are widened to float32;
- the hybrid's GroupNorm vectors, stored (1, 1, 1, C) by pre-Linen Flax, are squeezed to (C,)
  (`keras_vit.checkpoints.resnet_names.canonical_resnet_array`).

Example:
    >>> import numpy as np, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "x.npz")
    >>> np.savez(path, **{"params/cls": np.zeros((1, 1, 8), "float32")})
    >>> read(path).params["cls"].shape
    (1, 1, 8)
"""

import logging
import math
import re
import zipfile
import zlib

import numpy as np

from keras_vit.checkpoints.canonical import Checkpoint, LazyArray

PREFIXES = ("params/", "opt/target/")
_LINEN_BLOCK_NAMES = {
    "MultiHeadDotProductAttention_0": "MultiHeadDotProductAttention_1",
    "LayerNorm_1": "LayerNorm_2",
    "MlpBlock_0": "MlpBlock_3",
}
_SCANNED = "Transformer/encoderblock/"
_READ_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, KeyError, NotImplementedError,
                RuntimeError)  # RuntimeError: an encrypted member; NotImplementedError: an unknown compression
_MAX_NDIM = 8  # a scanned attention kernel, the deepest array of any ViT checkpoint, has 4 axes
_MAX_ELEMENTS = 1 << 32  # 16 GiB of float32 in one array: more than any published ViT holds in all of them


def _strip_prefix(key: str) -> str:
    changed = True
    while changed:
        changed = False
        for prefix in PREFIXES:
            if key.startswith(prefix):
                key, changed = key[len(prefix):], True
    return key


def _rename_block_part(rest: str) -> str:
    """`rest` is a key inside one block, e.g. `MlpBlock_0/Dense_0/kernel`."""
    head, sep, tail = rest.partition("/")
    return _LINEN_BLOCK_NAMES.get(head, head) + sep + tail


def _as_float(array: np.ndarray) -> np.ndarray:
    if array.dtype.kind == "V" and array.dtype.itemsize == 2:  # bfloat16 saved without ml_dtypes
        return (array.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    if array.dtype.kind not in "fiu":
        raise ValueError(f"unsupported array dtype {array.dtype}")
    return array


def normalise(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Translates any official spelling to the canonical (released pre-Linen, per-block) key layout.

    Raises:
        ValueError: when two spellings of the same key are both present.
    """
    out: dict[str, np.ndarray] = {}

    def put(key, value, original):
        if key in out:
            raise ValueError(f"The checkpoint holds two arrays for {key!r} (one of them is {original!r}).")
        out[key] = value

    for original, value in arrays.items():
        key = _strip_prefix(original)
        if key == "pos_embedding":
            put("Transformer/posembed_input/pos_embedding", value, original)
        elif key.startswith(_SCANNED):
            rest = _rename_block_part(key[len(_SCANNED):])
            for i in range(value.shape[0]):
                put(f"Transformer/encoderblock_{i}/{rest}", value[i], original)
        else:
            match = re.match(r"^(Transformer/encoderblock_\d+)/(.*)$", key)
            put(f"{match.group(1)}/{_rename_block_part(match.group(2))}" if match else key, value, original)
    return out


def _header(stream, name: str):
    """(shape, fortran_order, dtype) of the .npy member `name`, read from its header alone."""
    version = np.lib.format.read_magic(stream)
    readers = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
    if version not in readers:
        raise ValueError(f"member {name!r} has an unsupported .npy format version {version}")
    return readers[version](stream)


def _check_member(info: zipfile.ZipInfo, stream) -> tuple[tuple, np.dtype]:
    """The shape and dtype of one member from its headers, or a ValueError saying why it is not a sane array.

    The data size its .npy header claims (shape x itemsize) must be what the zip says it decompresses to: a
    member that lies about either is refused before anything is decompressed.
    """
    name = info.filename
    shape, _, dtype = _header(stream, name)
    if dtype.hasobject:
        raise ValueError(f"member {name!r} holds pickled Python objects (dtype {dtype}), which are never loaded "
                         "(allow_pickle=False)")
    if not (dtype.kind in "fiu" or (dtype.kind == "V" and dtype.itemsize == 2 and dtype.fields is None)):
        raise ValueError(f"member {name!r} has an unsupported array dtype {dtype}")
    if len(shape) > _MAX_NDIM or any(n < 0 for n in shape) or math.prod(shape) > _MAX_ELEMENTS:
        raise ValueError(f"member {name!r} claims an unreasonable shape {shape}")
    claimed = math.prod(shape) * dtype.itemsize
    if info.file_size - stream.tell() != claimed:
        raise ValueError(
            f"member {name!r} claims shape {shape} of {dtype} ({claimed:,} bytes) but the zip says it holds "
            f"{info.file_size - stream.tell():,} bytes of data"
        )
    return shape, dtype


def _reader(path: str, member: str):
    """The function that decompresses one member (called by `LazyArray` when the data is needed)."""

    def read():
        try:
            with zipfile.ZipFile(path) as archive, archive.open(member) as stream:
                return _as_float(np.lib.format.read_array(stream, allow_pickle=False))
        except _READ_ERRORS as error:
            raise _unreadable(path, error) from error

    return read


def _unreadable(path: str, error: Exception) -> ValueError:
    return ValueError(
        f"Cannot read the .npz checkpoint {path!r}: the file is truncated, corrupt or not an array "
        f"archive ({type(error).__name__}: {error}). If it was downloaded, delete it and download again."
    )


def read_lazy(path: str) -> dict[str, LazyArray]:
    """Every array of an `.npz` file as a `LazyArray`: names, shapes and dtypes come from the zip and .npy
    headers, and no data is decompressed until an array is converted with `np.asarray`.

    Raises:
        ValueError: for a file that is not a readable `.npz` (truncated, corrupt, pickled objects, members
            whose headers disagree with their sizes, duplicate names).
    """
    path = str(path)
    arrays = {}
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if info.is_dir():
                    continue
                if not info.filename.endswith(".npy"):
                    raise ValueError(f"member {info.filename!r} is not a .npy array")
                key = info.filename[: -len(".npy")]
                if key in arrays:
                    raise ValueError(f"the archive holds two members named {info.filename!r}")
                with archive.open(info) as stream:
                    shape, dtype = _check_member(info, stream)
                wide = np.float32 if dtype.kind == "V" else dtype  # bfloat16 is widened when read
                arrays[key] = LazyArray(shape, wide, _reader(path, info.filename))
    except _READ_ERRORS as error:
        raise _unreadable(path, error) from error
    if not arrays:
        raise ValueError(f"The .npz checkpoint {path!r} holds no arrays.")
    return arrays


def read_arrays(path: str) -> dict[str, np.ndarray]:
    """All arrays of an `.npz` file, read eagerly (so a truncated member fails here, not later).

    Raises:
        ValueError: for a file that is not a readable `.npz` (truncated, corrupt, pickled objects).
    """
    return {key: np.asarray(value) for key, value in read_lazy(path).items()}


def read(path: str) -> Checkpoint:
    """Reads an official `.npz` checkpoint in any of its spellings.

    Args:
        path: the `.npz` file.

    Returns:
        A `Checkpoint` in the canonical layout, with the official Flax GELU (tanh form) and epsilon 1e-6.

    Raises:
        ValueError: for an unreadable file.
    """
    from keras_vit.checkpoints.resnet_names import canonical_resnet_array, is_resnet_key

    arrays = read_lazy(path)
    state = [k for k in arrays if k.startswith("opt/") and not k.startswith("opt/target/")]
    if state and any(k.startswith("opt/target/") for k in arrays):
        logging.getLogger("keras_vit").info("Skipped %d optimizer-state arrays of %s (%s, ...).", len(state), path,
                                            state[0])
        arrays = {k: v for k, v in arrays.items() if k not in state}
    params = normalise(arrays)
    params = {k: canonical_resnet_array(k, v) if is_resnet_key(k) else v for k, v in params.items()}
    return Checkpoint(params=params, source="official", path=str(path), gelu_approximate=True,
                      layer_norm_epsilon=1e-6)
