"""Principal components of the patch-embedding filters (paper section 4.5, Figure 7 left)."""

import numpy as np


def embedding_filters(kernel, patch_size, channels=3, num_components=28):
    """The leading principal components of the linear patch-embedding filters, as small images.

    Each of the D columns of the embedding kernel is a filter over a P x P x C patch. The filters are
    centred (their mean is removed) and the right singular vectors of the (D, P*P*C) filter matrix are
    the principal components, in decreasing order of explained variance. The components are orthonormal
    (unit length, mutually orthogonal); each one's sign is fixed so that its largest-magnitude entry is
    positive, which makes the output deterministic.

    Args:
        kernel: the `patch_encoder`'s `projection` kernel (P*P*C, D), with patches flattened in
            (row, column, channel) order, or an official convolution kernel (P, P, C, D).
        patch_size: P.
        channels: C.
        num_components: how many components to return (at most min(D, P*P*C)); the paper shows 28.

    Returns:
        float64 array (k, P, P, C), k = min(num_components, D, P*P*C).

    Example:
        >>> import numpy as np
        >>> kernel = np.random.default_rng(0).normal(size=(4 * 4 * 3, 16))
        >>> embedding_filters(kernel, 4, 3, num_components=5).shape
        (5, 4, 4, 3)
    """
    kernel = np.asarray(kernel, dtype=np.float64)
    size = patch_size * patch_size * channels
    if kernel.ndim == 4:
        kernel = kernel.reshape(-1, kernel.shape[-1])
    if kernel.ndim != 2 or kernel.shape[0] != size:
        raise ValueError(
            f"`kernel` must have shape ({size}, D) = (patch_size*patch_size*channels, D) or "
            f"({patch_size}, {patch_size}, {channels}, D). Received: shape={np.shape(kernel)}"
        )
    if not isinstance(num_components, int) or num_components < 1:
        raise ValueError(f"`num_components` must be a positive integer. Received: num_components={num_components!r}")
    filters = kernel.T - kernel.T.mean(axis=0, keepdims=True)  # (D, P*P*C), one filter per row
    _, _, components = np.linalg.svd(filters, full_matrices=False)
    components = components[: min(num_components, *filters.shape)]
    strongest = np.take_along_axis(components, np.abs(components).argmax(axis=1)[:, None], axis=1)
    components = components * np.where(strongest < 0, -1.0, 1.0)
    return components.reshape(-1, patch_size, patch_size, channels)


def explained_variance(kernel, num_components=None):
    """The fraction of the patch-embedding filters' variance each principal component explains, largest first.

    The components are those of `embedding_filters` (the filters centred across the D columns); random
    filters spread their variance evenly, learned ones concentrate it in a few smooth components.

    Args:
        kernel: (inputs, D) or (P, P, C, D), as `embedding_filters` takes it.
        num_components: how many fractions to return (default all, min(D, inputs)).

    Returns:
        float64 array (k,) of fractions summing to at most 1.

    Example:
        >>> import numpy as np
        >>> explained_variance(np.outer(np.arange(4.0), [1.0, -1.0, 2.0])).round(3)
        array([1., 0., 0.])
    """
    kernel = np.asarray(kernel, dtype=np.float64)
    kernel = kernel.reshape(-1, kernel.shape[-1]) if kernel.ndim == 4 else kernel
    if kernel.ndim != 2:
        raise ValueError(f"`kernel` must have shape (inputs, D) or (P, P, C, D). Received: shape={kernel.shape}")
    filters = kernel.T - kernel.T.mean(axis=0, keepdims=True)
    variance = np.linalg.svd(filters, compute_uv=False) ** 2
    fractions = variance / max(variance.sum(), 1e-300)
    return fractions[:num_components]
