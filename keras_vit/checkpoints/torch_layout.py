"""Translating PyTorch-layout ViT tensors (timm, Hugging Face) into the official layout.

PyTorch stores a Linear weight as (out, in) and computes `x @ W.T + b`; a Conv2d weight as (out, in, kh, kw).
The official layout (docs/REFERENCE.md) stores Dense kernels as (in, out), the patch embedding as HWIO
(P, P, C, D), attention q/k/v kernels as (D, heads, head_dim) and the output kernel as (heads, head_dim, D).
Both timm and Hugging Face order a projection's output features head-major (feature h * head_dim + d belongs
to head h), so splitting the out axis into (heads, head_dim) is exact.

`translate` applies a reader's plan (official key <- source names, transform) only after checking that the
plan uses every tensor of the file and finds every tensor it names, so no reader can drop part of a file
silently.

Example:
    >>> import numpy as np
    >>> linear_kernel(np.zeros((6, 4))).shape
    (4, 6)
    >>> heads_kernel(np.zeros((8, 8)), num_heads=2).shape
    (8, 2, 4)
"""

import numpy as np


BLOCK = "Transformer/encoderblock_{}/"
ATTENTION = "MultiHeadDotProductAttention_1/"
MLP = "MlpBlock_3/"


def linear_kernel(weight: np.ndarray) -> np.ndarray:
    """(out, in) Linear weight -> (in, out) Dense kernel."""
    return np.ascontiguousarray(weight.T)


def conv_kernel(weight: np.ndarray) -> np.ndarray:
    """(D, C, P, P) Conv2d weight -> (P, P, C, D) HWIO kernel."""
    return np.ascontiguousarray(weight.transpose(2, 3, 1, 0))


def heads_kernel(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """(heads*head_dim, D) query/key/value Linear weight -> (D, heads, head_dim)."""
    out_features, in_features = weight.shape
    return linear_kernel(weight).reshape(in_features, num_heads, out_features // num_heads)


def heads_bias(bias: np.ndarray, num_heads: int) -> np.ndarray:
    """(heads*head_dim,) bias -> (heads, head_dim)."""
    return bias.reshape(num_heads, bias.shape[0] // num_heads)


def out_kernel(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """(D, heads*head_dim) attention output Linear weight -> (heads, head_dim, D)."""
    out_features, in_features = weight.shape
    return linear_kernel(weight).reshape(num_heads, in_features // num_heads, out_features)


def count_blocks(names, prefix: str, path: str) -> int:
    """Number of blocks `{prefix}{i}.` in `names`; the indices must run 0..L-1 without gaps."""
    indices = set()
    for name in names:
        if name.startswith(prefix):
            head = name[len(prefix):].split(".", 1)[0]
            if head.isdigit():
                indices.add(int(head))
    if indices != set(range(len(indices))):
        raise ValueError(
            f"The checkpoint {path!r} has non-contiguous block indices under {prefix!r}: {sorted(indices)}"
        )
    return len(indices)


def translate(tensors: dict, plan: list, path: str, source: str) -> dict[str, np.ndarray]:
    """Applies a translation plan, after checking that it uses every tensor of the file exactly.

    Args:
        tensors: the file's arrays by name.
        plan: `(official_key, source_names, fn)` triples; the official array is `fn(*arrays)` of the named
            source arrays (`source_names` is a tuple of names).
        path: the file (for messages).
        source: `"timm"` or `"Hugging Face"` (for messages).

    Returns:
        The arrays by official key.

    Raises:
        ValueError: listing the missing and the unexpected tensor names, if there are any.
    """
    wanted = [name for _, names, _ in plan for name in names]
    missing = [name for name in wanted if name not in tensors]
    unexpected = sorted(set(tensors) - set(wanted))
    if missing or unexpected:
        raise ValueError(
            f"The {source} checkpoint {path!r} does not match the ViT layout. Missing tensors: {missing[:20]}"
            f"{' ...' if len(missing) > 20 else ''}. Unexpected tensors: {unexpected[:20]}"
            f"{' ...' if len(unexpected) > 20 else ''}"
        )
    params = {}
    for key, names, fn in plan:
        arrays = [tensors[name] for name in names]
        try:
            params[key] = fn(*arrays)
        except ValueError as error:  # a reshape or transpose that the shapes do not allow
            shapes = {name: array.shape for name, array in zip(names, arrays)}
            raise ValueError(
                f"The {source} checkpoint {path!r} has tensors of the wrong shape for {key!r}: {error}. "
                f"Received: {shapes}"
            ) from error
    return params


def identity(array: np.ndarray) -> np.ndarray:
    return array
