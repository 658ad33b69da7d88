"""Position-embedding resampling for a new image size (paper section 3.2), as a pure numpy function.

The learned 1-D position embedding (1, T, D) of a checkpoint covers a (g_h, g_w) grid of patches plus the
prefix ([class]) token. To run at another resolution the patch rows are reshaped to (g_h, g_w, D), resized
in 2-D to the new grid and flattened again; the prefix rows are kept as they are.

`"bilinear"` (the default) is the official method: `scipy.ndimage.zoom(..., order=1)`, i.e. corner-aligned
bilinear interpolation where output index i samples input coordinate i * (g_old - 1) / (g_new - 1).
`"bicubic"` is Keys' cubic convolution (a = -0.5) with half-pixel centres and clamped borders, the
convention of TensorFlow's `resize_bicubic(half_pixel_centers=True)` (timm uses a = -0.75).

Example:
    >>> import numpy as np
    >>> posemb = np.zeros((1, 1 + 14 * 14, 768), "float32")
    >>> resample_position_embedding(posemb, (24, 24)).shape
    (1, 577, 768)
"""

import math

import numpy as np

from keras_vit import variants

METHODS = variants.choices("position_embedding_interpolation")


def _bilinear_matrix(size_in: int, size_out: int) -> np.ndarray:
    """(size_out, size_in) weights of corner-aligned linear interpolation (scipy.ndimage.zoom order=1)."""
    scale = (size_in - 1) / (size_out - 1) if size_out > 1 else 1.0
    coords = np.arange(size_out, dtype=np.float64) * scale
    low = np.clip(np.floor(coords).astype(int), 0, size_in - 1)
    high = np.minimum(low + 1, size_in - 1)
    frac = coords - low
    weights = np.zeros((size_out, size_in), dtype=np.float64)
    np.add.at(weights, (np.arange(size_out), low), 1.0 - frac)
    np.add.at(weights, (np.arange(size_out), high), frac)
    return weights


def _keys_cubic(t: np.ndarray, a: float = -0.5) -> np.ndarray:
    t = np.abs(t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def _bicubic_matrix(size_in: int, size_out: int) -> np.ndarray:
    """(size_out, size_in) weights of Keys cubic convolution, half-pixel centres; taps outside the grid
    are dropped and the remaining weights renormalised (TensorFlow's convention)."""
    coords = (np.arange(size_out, dtype=np.float64) + 0.5) * size_in / size_out - 0.5
    base = np.floor(coords).astype(int)
    weights = np.zeros((size_out, size_in), dtype=np.float64)
    for offset in (-1, 0, 1, 2):
        tap = base + offset
        inside = (tap >= 0) & (tap < size_in)
        rows = np.arange(size_out)[inside]
        np.add.at(weights, (rows, tap[inside]), _keys_cubic(coords - tap)[inside])
    return weights / weights.sum(axis=1, keepdims=True)


def resize_grid(grid: np.ndarray, new_grid: tuple[int, int], method: str = "bilinear") -> np.ndarray:
    """Resizes a (g_h, g_w, D) array to (new_h, new_w, D) with `method` ("bilinear" or "bicubic")."""
    if method not in METHODS:
        raise ValueError(f"`method` must be one of {METHODS}. Received: method={method!r}")
    matrix = _bilinear_matrix if method == "bilinear" else _bicubic_matrix
    rows = matrix(grid.shape[0], new_grid[0])
    cols = matrix(grid.shape[1], new_grid[1])
    return np.einsum("ih,jw,hwd->ijd", rows, cols, grid.astype(np.float64))


def _as_grid(value, name: str) -> tuple[int, int]:
    pair = (value, value) if isinstance(value, (int, np.integer)) else tuple(value)
    if len(pair) != 2 or not all(isinstance(v, (int, np.integer)) and v > 0 for v in pair):
        raise ValueError(f"`{name}` must be a positive int or a (height, width) pair. Received: {name}={value!r}")
    return int(pair[0]), int(pair[1])


def infer_grid(num_patches: int) -> tuple[int, int]:
    """The square (g, g) grid of `num_patches` tokens; raises when it is not a perfect square."""
    side = math.isqrt(num_patches)
    if side * side != num_patches:
        raise ValueError(
            "Cannot infer the patch grid of a position embedding whose patch count is not a perfect square; "
            f"pass `old_grid=(height, width)`. Received: num_patches={num_patches}"
        )
    return side, side


def resample_position_embedding(posemb, new_grid, num_prefix_tokens: int = 1, old_grid=None,
                                method: str = "bilinear") -> np.ndarray:
    """Resamples a position embedding to a new patch grid, keeping the prefix ([class]) token rows.

    Args:
        posemb: array (1, T, D) or (T, D) with T = num_prefix_tokens + g_h * g_w.
        new_grid: the target grid, an int (square) or (height, width) in patches; may be non-square.
        num_prefix_tokens: rows before the patch rows (1 with a [class] token, 0 for a GAP model).
        old_grid: the source grid; inferred as a square when None.
        method: `"bilinear"` (official, corner-aligned as `scipy.ndimage.zoom(order=1)`) or `"bicubic"`.

    Returns:
        The resampled array with the same rank and dtype as `posemb`.

    Example:
        >>> import numpy as np
        >>> resample_position_embedding(np.zeros((5, 8)), (3, 2), num_prefix_tokens=1).shape
        (7, 8)
    """
    array = np.asarray(posemb)
    squeeze = array.ndim == 2
    if squeeze:
        array = array[None]
    if array.ndim != 3 or array.shape[0] != 1:
        raise ValueError(f"`posemb` must have shape (1, T, D) or (T, D). Received: shape={np.shape(posemb)}")
    if not 0 <= num_prefix_tokens < array.shape[1]:
        raise ValueError(
            f"`num_prefix_tokens` must be in [0, T). Received: num_prefix_tokens={num_prefix_tokens}, "
            f"T={array.shape[1]}"
        )
    prefix, patches = array[:, :num_prefix_tokens], array[0, num_prefix_tokens:]
    old = infer_grid(patches.shape[0]) if old_grid is None else _as_grid(old_grid, "old_grid")
    if old[0] * old[1] != patches.shape[0]:
        raise ValueError(
            f"`old_grid` {old} does not cover the {patches.shape[0]} patch rows of the position embedding."
        )
    new = _as_grid(new_grid, "new_grid")
    grid = resize_grid(patches.reshape(old[0], old[1], -1), new, method)
    out = np.concatenate([prefix, grid.reshape(1, new[0] * new[1], -1).astype(array.dtype)], axis=1)
    return out[0] if squeeze else out

