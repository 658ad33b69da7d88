"""The one in-memory form every checkpoint reader produces: arrays in the official layout.

Readers (official .npz in any spelling, timm and Hugging Face safetensors, ...) translate their file into a
`Checkpoint` whose `params` use the released pre-Linen official .npz key names (docs/REFERENCE.md):
no `params/` or `opt/target/` prefix, one entry per block (`Transformer/encoderblock_{i}/...`), attention
kernels (D, heads, head_dim), patch embedding kernel HWIO (P, P, C, D). The loader maps this layout onto a
Keras model by explicit layer names; nothing else needs to know a foreign format.

A value may be a `LazyArray` (the `.npz` reader's): its shape and dtype are known from the file's headers and
its data is read on the first `np.asarray`, so a load is checked against the model before anything is
decompressed, and arrays the model does not use never are.

Example:
    >>> import numpy as np
    >>> ckpt = Checkpoint(params={"cls": np.zeros((1, 1, 8))}, source="official", path="x.npz",
    ...                   gelu_approximate=True, layer_norm_epsilon=1e-6)
    >>> ckpt.source
    'official'
"""

import dataclasses
import math
import os

import numpy as np

DISTILLATION_TOKEN = "dist"
"""The official-layout key of DeiT's distillation token (1, 1, D) (timm `dist_token`, transformers
`deit.embeddings.distillation_token`), beside `cls`; the official code has none, so keras_vit names it."""
DISTILLATION_HEAD = "head_dist"
"""The official-layout prefix of DeiT's distillation head (`head_dist/kernel` (D, classes), `head_dist/bias`)."""


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A checkpoint translated to the official layout.

    Args:
        params: arrays by official key (`embedding/kernel`, `cls`,
            `Transformer/posembed_input/pos_embedding`, `Transformer/encoderblock_{i}/...`,
            `Transformer/encoder_norm/...`, optional `pre_logits/...`, `head/...`; DeiT's `dist` and
            `head_dist/...`; hybrid models add the
            ResNet stem's top-level `conv_root/...`, `gn_root/...`, `block{s}/unit{u}/...` keys).
        source: where it came from: `"official"`, `"timm"` or `"huggingface"`.
        path: the file or folder it was read from (for messages).
        gelu_approximate: the GELU form the checkpoint was trained with (official Flax: tanh form, True;
            timm and Hugging Face: exact erf, False).
        layer_norm_epsilon: the LayerNorm epsilon of the source (1e-6 official and timm; HF config value).
        arguments: for a keras_vit file (source `"keras_vit"`), the `keras_vit.ViT` arguments of the model that
            wrote it (`keras_vit.checkpoints.own`); None for other sources, which carry only their shapes.
    """

    params: dict[str, np.ndarray]
    source: str
    path: str
    gelu_approximate: bool
    layer_norm_epsilon: float
    arguments: dict | None = None


class LazyArray:
    """An array known by its shape and dtype, computed on the first `np.asarray(...)` and then kept.

    Args:
        shape: the array's shape.
        dtype: its dtype.
        compute: a function of no arguments returning the array.

    Example:
        >>> lazy = LazyArray((2, 3), "float32", lambda: np.ones((2, 3), "float32"))
        >>> lazy[0].shape, np.asarray(lazy.reshape((3, 2))).tolist()
        ((3,), [[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]])
    """

    def __init__(self, shape, dtype, compute):
        self.shape = tuple(int(n) for n in shape)
        self.dtype = np.dtype(dtype)
        self._compute = compute
        self._value = None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def __array__(self, dtype=None, copy=None):
        if self._value is None:
            self._value = np.asarray(self._compute())
        value = self._value if dtype is None else self._value.astype(dtype, copy=False)
        return value.copy() if copy else value

    def __getitem__(self, index: int) -> "LazyArray":
        """Row `index` of the first axis (one block of a scanned array)."""
        return LazyArray(self.shape[1:], self.dtype, lambda: np.asarray(self)[index])

    def reshape(self, *shape) -> "LazyArray":
        shape = tuple(shape[0]) if len(shape) == 1 and not isinstance(shape[0], int) else shape
        if math.prod(shape) != self.size:
            raise ValueError(f"Cannot reshape an array of shape {self.shape} to {shape}.")
        return LazyArray(shape, self.dtype, lambda: np.asarray(self).reshape(shape))


LISTED = 12
"""Keys shown per category in an error message."""


def listing(title, keys) -> str:
    """`title (n): k1, k2, ...` with at most `LISTED` keys, for error messages."""
    keys = sorted(keys)
    more = f" ... and {len(keys) - LISTED} more" if len(keys) > LISTED else ""
    return f"{title} ({len(keys)}): {', '.join(keys[:LISTED])}{more}"


def _non_finite(named_arrays) -> list[str]:
    """`name (n of N values)` for each floating-point array holding NaN or Inf."""
    found = []
    for name, array in named_arrays:
        array = np.asarray(array)
        if array.dtype.kind in "biu":
            continue
        count = array.size - int(np.count_nonzero(np.isfinite(array)))
        if count:
            found.append(f"{name} ({count:,} of {array.size:,} values)")
    return found


def check_finite(named_arrays, path) -> None:
    """Refuses weights holding NaN or Inf: every prediction of the model would be NaN.

    Args:
        named_arrays: (tensor name, array) pairs, as they would be assigned (after the cast to the variable
            dtype, so a float64 value beyond the float32 range counts as the Inf it becomes).
        path: the file, for the message.

    Raises:
        ValueError: naming the file, the tensors and how many values are not finite.
    """
    found = _non_finite(named_arrays)
    if found:
        raise ValueError(
            f"The weights file {os.fspath(path)!r} is damaged: it holds NaN or Inf values (or values too large "
            f"for float32, which become Inf), so every prediction would be NaN. "
            f"{listing('tensors with non-finite values', found)}. "
            "Delete the file and download or export it again; nothing was loaded."
        )
