"""Reader of the official ViT `.npz` checkpoints (vit_jax, big_vision, AugReg) into a `Checkpoint`.

The files are read with `np.load(..., allow_pickle=False)`: arrays only, never pickled objects. Every
spelling the official code has used is translated to the released pre-Linen names of
../shared/REFERENCE.md:

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
import re
import zipfile

import numpy as np

from keras_vit.checkpoints.canonical import Checkpoint

PREFIXES = ("params/", "opt/target/")
_LINEN_BLOCK_NAMES = {
    "MultiHeadDotProductAttention_0": "MultiHeadDotProductAttention_1",
    "LayerNorm_1": "LayerNorm_2",
    "MlpBlock_0": "MlpBlock_3",
}
_SCANNED = "Transformer/encoderblock/"


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


def read_arrays(path: str) -> dict[str, np.ndarray]:
    """All arrays of an `.npz` file, read eagerly (so a truncated member fails here, not later).

    Raises:
        ValueError: for a file that is not a readable `.npz` (truncated, corrupt, pickled objects).
    """
    try:
        with np.load(path, allow_pickle=False) as data:
            if not isinstance(data, np.lib.npyio.NpzFile):
                raise ValueError("it holds a single array, not a named set of arrays (.npz)")
            arrays = {key: _as_float(data[key]) for key in data.files}
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError) as error:
        raise ValueError(
            f"Cannot read the .npz checkpoint {path!r}: the file is truncated, corrupt or not an array "
            f"archive ({type(error).__name__}: {error}). If it was downloaded, delete it and download again."
        ) from error
    if not arrays:
        raise ValueError(f"The .npz checkpoint {path!r} holds no arrays.")
    return arrays


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

    arrays = read_arrays(path)
    state = [k for k in arrays if k.startswith("opt/") and not k.startswith("opt/target/")]
    if state and any(k.startswith("opt/target/") for k in arrays):
        logging.getLogger("keras_vit").info("Skipped %d optimizer-state arrays of %s (%s, ...).", len(state), path,
                                            state[0])
        arrays = {k: v for k, v in arrays.items() if k not in state}
    params = normalise(arrays)
    params = {k: canonical_resnet_array(k, v) if is_resnet_key(k) else v for k, v in params.items()}
    return Checkpoint(params=params, source="official", path=str(path), gelu_approximate=True,
                      layer_norm_epsilon=1e-6)
