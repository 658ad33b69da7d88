"""Matplotlib figures for section 4.5 of the paper, written as PNG files (Agg backend, no display needed).

Each function takes the numpy output of one analysis function and a path, and returns the path.
matplotlib is an optional dependency: `pip install "keras-vit-applications[inspect]"` (importing this module
without it raises `keras_vit.extras.MissingExtra` saying so).
"""

from keras_vit import extras

matplotlib = extras.require("matplotlib", "inspect", "drawing the figures of keras_vit.inspect")
matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

_DPI = 110


def _display_image(image):
    """An image as float RGB in [0, 1] for imshow: [0, 255] data is scaled, [-1, 1] data is shifted."""
    image = np.asarray(image, dtype=np.float64)
    if image.ndim == 3 and image.shape[-1] == 1:
        image = np.repeat(image, 3, axis=-1)
    low, high = image.min(), image.max()
    if high > 1.0 + 1e-6:
        image = image / 255.0
    elif low < -1e-6:
        image = (image + 1.0) / 2.0
    return np.clip(image, 0.0, 1.0)


def _save(fig, path):
    fig.savefig(path, dpi=_DPI, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_attention_overlays(images, maps, path, titles=None, label="attention rollout (max = 1)"):
    """Each image beside its attention map drawn over it, with a labelled colour bar (Figure 6).

    Image and map are drawn with the same pixel extent, so a map upsampled to the image size lies exactly
    on it; a coarser map is stretched over the same extent.

    Args:
        images: array (B, H, W, C) in [0, 255] or [-1, 1] (C = 1 or 3).
        maps: array (B, h, w) in [0, 1], e.g. `rollout_maps(..., image_shape=(H, W))`.
        path: PNG file to write.
        titles: optional list of B strings.
        label: colour-bar label.

    Returns:
        `path`.

    Example:
        >>> import numpy as np
        >>> plot_attention_overlays(np.zeros((1, 8, 8, 3)), np.ones((1, 8, 8)), "/tmp/overlay.png")
        '/tmp/overlay.png'
    """
    images, maps = np.asarray(images), np.asarray(maps)
    if len(images) != len(maps):
        raise ValueError(f"`images` and `maps` must have the same length. Received: {len(images)} and {len(maps)}")
    count = len(images)
    fig, axes = plt.subplots(count, 2, figsize=(6.8, 3.2 * count), squeeze=False, layout="constrained")
    for i in range(count):
        height, width = images[i].shape[:2]
        extent = (0, width, height, 0)
        picture = _display_image(images[i])
        axes[i, 0].imshow(picture, extent=extent, interpolation="nearest")
        axes[i, 0].set_title(titles[i] if titles else f"image {i}", fontsize=9)
        axes[i, 1].imshow(picture, extent=extent, interpolation="nearest")
        overlay = axes[i, 1].imshow(maps[i], extent=extent, cmap="inferno", alpha=0.6, vmin=0.0, vmax=1.0,
                                    interpolation="nearest")
        axes[i, 1].set_title("attention overlay", fontsize=9)
        for axis in axes[i]:
            axis.set_xlim(0, width)
            axis.set_ylim(height, 0)
            axis.set_xlabel("x (pixels)", fontsize=8)
            axis.tick_params(labelsize=7)
        axes[i, 0].set_ylabel("y (pixels)", fontsize=8)
        bar = fig.colorbar(overlay, ax=axes[i, 1], fraction=0.046, pad=0.02)
        bar.set_label(label, fontsize=8)
        bar.ax.tick_params(labelsize=7)
    return _save(fig, path)


def similarity_mosaic(similarity):
    """The grid of grids of Figure 7 (centre) as one image: tile (i, j) is `similarity[i, j]`, tiles separated
    by a blank (NaN) line, so that one imshow draws it however large the grid.

    Example:
        >>> similarity_mosaic(np.ones((2, 2, 2, 2))).shape
        (5, 5)
    """
    similarity = np.asarray(similarity, dtype=np.float64)
    rows, cols = similarity.shape[:2]
    mosaic = np.full((rows * (rows + 1) - 1, cols * (cols + 1) - 1), np.nan)
    for i in range(rows):
        for j in range(cols):
            mosaic[i * (rows + 1):i * (rows + 1) + rows, j * (cols + 1):j * (cols + 1) + cols] = similarity[i, j]
    return mosaic


def filter_panel(component):
    """A principal component (P, P, C) scaled to [0, 1] on its own (its sign and scale are arbitrary), as an
    RGB image, or (P, P) for one channel."""
    panel = np.asarray(component, dtype=np.float64)
    panel = (panel - panel.min()) / max(panel.max() - panel.min(), 1e-12)
    return panel if panel.shape[-1] == 3 else panel[..., 0]


def plot_position_similarity(similarity, path):
    """The grid of grids of Figure 7 (centre): tile (i, j) is patch (i, j)'s similarity to every patch.

    Args:
        similarity: array (rows, columns, rows, columns) from `position_embedding_similarity`.
        path: PNG file to write.

    Returns:
        `path`.

    Example:
        >>> import numpy as np
        >>> plot_position_similarity(np.ones((2, 2, 2, 2)), "/tmp/similarity.png")
        '/tmp/similarity.png'
    """
    similarity = np.asarray(similarity, dtype=np.float64)
    rows, cols = similarity.shape[:2]
    mosaic = similarity_mosaic(similarity)
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="white")
    size = min(9.0, 2.5 + 0.35 * cols)
    fig, axis = plt.subplots(figsize=(size + 1.2, size))
    image = axis.imshow(mosaic, cmap=cmap, vmin=-1.0, vmax=1.0, interpolation="nearest")
    axis.set_xticks([j * (cols + 1) + (cols - 1) / 2 for j in range(cols)], [str(j + 1) for j in range(cols)])
    axis.set_yticks([i * (rows + 1) + (rows - 1) / 2 for i in range(rows)], [str(i + 1) for i in range(rows)])
    axis.tick_params(length=0, labelsize=7)
    axis.set_xlabel("input patch column")
    axis.set_ylabel("input patch row")
    axis.set_title("position embedding similarity", fontsize=10)
    bar = fig.colorbar(image, ax=axis, fraction=0.046, pad=0.04)
    bar.set_label("cosine similarity")
    return _save(fig, path)


def plot_attention_distance(distances, path, image_size=None, uniform_distance=None):
    """The scatter of Figure 7 (right): mean attention distance of every head against network depth.

    Args:
        distances: array (layers, heads) in pixels from `mean_attention_distance`.
        path: PNG file to write.
        image_size: optional image side in pixels, drawn as a reference line.
        uniform_distance: optional distance of uniform attention over the grid, drawn as a reference line
            (a head near it attends globally; far below it, locally).

    Returns:
        `path`.

    Example:
        >>> import numpy as np
        >>> plot_attention_distance(np.ones((2, 3)), "/tmp/distance.png")
        '/tmp/distance.png'
    """
    distances = np.asarray(distances, dtype=np.float64)
    if distances.ndim != 2:
        raise ValueError(f"`distances` must have shape (layers, heads). Received: shape={distances.shape}")
    layers, heads = distances.shape
    fig, axis = plt.subplots(figsize=(5.0, 3.8))
    depth = np.repeat(np.arange(1, layers + 1), heads)
    head = np.tile(np.arange(1, heads + 1), layers)
    cmap = matplotlib.colormaps["tab20" if heads > 10 else "tab10"].resampled(heads)
    norm = matplotlib.colors.BoundaryNorm(np.arange(heads + 1) + 0.5, heads)
    points = axis.scatter(depth, distances.ravel(), c=head, cmap=cmap, norm=norm, s=18)
    if image_size:
        axis.axhline(image_size, color="grey", linestyle=":", linewidth=1, label=f"image size ({image_size} px)")
    if uniform_distance:
        axis.axhline(uniform_distance, color="black", linestyle="--", linewidth=1,
                     label=f"uniform attention ({uniform_distance:.1f} px)")
    if image_size or uniform_distance:
        axis.legend(fontsize=8, loc="lower right")
    axis.set_xlabel("network depth (layer)")
    axis.set_ylabel("mean attention distance (pixels)")
    axis.set_xticks(range(1, layers + 1))
    axis.set_ylim(bottom=0)
    axis.set_title("mean attention distance, one dot per head", fontsize=10)
    bar = fig.colorbar(points, ax=axis, fraction=0.046, pad=0.04, ticks=np.arange(1, heads + 1, max(1, heads // 8)))
    bar.set_label("head")
    return _save(fig, path)


def plot_embedding_filters(filters, path, columns=7):
    """The filter grid of Figure 7 (left): principal components of the patch-embedding filters.

    Each component is scaled to [0, 1] on its own (its sign and scale are arbitrary), so the panels show
    patterns, not magnitudes.

    Args:
        filters: array (k, P, P, C) from `embedding_filters`.
        path: PNG file to write.
        columns: panels per row.

    Returns:
        `path`.

    Example:
        >>> import numpy as np
        >>> plot_embedding_filters(np.random.default_rng(0).normal(size=(3, 4, 4, 3)), "/tmp/filters.png")
        '/tmp/filters.png'
    """
    filters = np.asarray(filters, dtype=np.float64)
    count = len(filters)
    columns = min(columns, count)
    rows = -(-count // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(1.1 * columns, 1.1 * rows + 0.5), squeeze=False)
    for index, axis in enumerate(axes.ravel()):
        axis.set_axis_off()
        if index >= count:
            continue
        panel = filter_panel(filters[index])
        axis.imshow(panel, cmap=None if panel.ndim == 3 else "gray", interpolation="nearest")
        axis.set_title(f"PC {index + 1}", fontsize=7)
    fig.suptitle(f"patch-embedding filters: first {count} principal components", fontsize=9)
    return _save(fig, path)
