"""Mean attention distance per head and layer, in pixels (paper section 4.5, Figure 7 right).

Pure numpy, from the attention probabilities of `keras_vit.inspect.attention_probabilities`.
"""

import numpy as np


def patch_distances(grid_shape, patch_size):
    """Euclidean distances in pixels between the centres of all pairs of patches of a grid.

    Args:
        grid_shape: (rows, columns) of the patch grid, patches numbered row-major.
        patch_size: side of a patch in pixels, a number or (height, width).

    Returns:
        float64 array (N, N) with N = rows * columns.

    Example:
        >>> patch_distances((1, 2), 16)
        array([[ 0., 16.],
               [16.,  0.]])
    """
    rows, cols = grid_shape
    height, width = np.broadcast_to(np.asarray(patch_size, dtype=np.float64), (2,))
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    centres = np.stack([r.ravel() * height, c.ravel() * width], axis=-1)
    return np.linalg.norm(centres[:, None] - centres[None, :], axis=-1)


def mean_attention_distance(attention, grid_shape, patch_size, num_prefix_tokens=0):
    """How far each head looks: the attention-weighted distance between query and key patches, in pixels.

    For every query patch the distances to all key patches are weighted by the attention probabilities
    and summed; the result is averaged over query patches and images. Prefix tokens (the [class] token)
    have no position, so they are dropped from queries and keys and each query's weights over the patch
    keys are renormalised to sum to 1. This is the "attention distance" of Figure 7 (right), analogous to
    a receptive-field size in CNNs.

    Args:
        attention: one layer's probabilities (B, heads, T, T), or a sequence of L such layers.
        grid_shape: (rows, columns) of the patch grid.
        patch_size: side of a patch in pixels (a number or (height, width)).
        num_prefix_tokens: tokens before the patch tokens (1 for token models, 2 with DeiT's distillation
            token, 0 for GAP models).

    Returns:
        float64 array (heads,) for one layer, or (L, heads) for a sequence of layers.

    Example:
        >>> import numpy as np
        >>> mean_attention_distance(np.full((1, 1, 4, 4), 0.25), (2, 2), 16).round(3)
        array([13.657])
    """
    if isinstance(attention, (list, tuple)) or np.ndim(attention) == 5:
        return np.stack([mean_attention_distance(a, grid_shape, patch_size, num_prefix_tokens) for a in attention])
    attention = np.asarray(attention, dtype=np.float64)
    rows, cols = grid_shape
    if attention.ndim != 4 or attention.shape[-1] != attention.shape[-2] or (
        attention.shape[-1] != rows * cols + num_prefix_tokens
    ):
        raise ValueError(
            f"`attention` must have shape (batch, heads, T, T) with T = {rows}*{cols} + {num_prefix_tokens}. "
            f"Received: shape={attention.shape}"
        )
    weights = attention[..., num_prefix_tokens:, num_prefix_tokens:]
    weights = weights / np.maximum(weights.sum(axis=-1, keepdims=True), 1e-12)
    per_query = (weights * patch_distances(grid_shape, patch_size)).sum(axis=-1)  # (B, heads, N)
    return per_query.mean(axis=(0, 2))


def uniform_attention_distance(grid_shape, patch_size):
    """The mean attention distance of uniform attention over the patches of a grid, in pixels: the reference
    of a head that does not prefer any distance.

    Example:
        >>> round(uniform_attention_distance((2, 2), 16), 3)
        13.657
    """
    return float(patch_distances(grid_shape, patch_size).mean())


def attention_entropy(attention, num_prefix_tokens=0):
    """How far each head's attention is from uniform: its entropy over the patch keys relative to uniform's.

    Prefix tokens are dropped from queries and keys and each query's weights renormalised, as in
    `mean_attention_distance`; the entropy of a query's weights over the N patch keys is divided by log N
    (the entropy of uniform attention), then averaged over query patches and images. 1 means uniform
    attention, 0 attention onto one key; a head attending evenly to k keys gives log k / log N.

    Args:
        attention: one layer's probabilities (B, heads, T, T), or a sequence of L such layers.
        num_prefix_tokens: tokens before the patch tokens.

    Returns:
        float64 array (heads,) for one layer, or (L, heads) for a sequence of layers, in [0, 1].

    Example:
        >>> import numpy as np
        >>> attention_entropy(np.full((1, 1, 4, 4), 0.25)), attention_entropy(np.eye(4)[None, None])
        (array([1.]), array([0.]))
    """
    if isinstance(attention, (list, tuple)) or np.ndim(attention) == 5:
        return np.stack([attention_entropy(a, num_prefix_tokens) for a in attention])
    attention = np.asarray(attention, dtype=np.float64)
    tokens = attention.shape[-1] if attention.ndim else 0
    if attention.ndim != 4 or tokens != attention.shape[-2] or tokens <= num_prefix_tokens + 1:
        raise ValueError(f"`attention` must have shape (batch, heads, T, T) with T > {num_prefix_tokens + 1} "
                         f"(num_prefix_tokens + 2 or more). Received: shape={attention.shape}")
    weights = attention[..., num_prefix_tokens:, num_prefix_tokens:]
    weights = weights / np.maximum(weights.sum(axis=-1, keepdims=True), 1e-12)
    entropy = -(weights * np.log(np.where(weights > 0, weights, 1.0))).sum(axis=-1)  # (B, heads, N)
    return entropy.mean(axis=(0, 2)) / np.log(weights.shape[-1])
