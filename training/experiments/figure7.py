"""Figure 7 of `training.experiments`, from results.json's `figure7` (each ViT and the hybrid at initialisation
and trained): the figures (`attention_distance.png`, `position_embeddings.png`, `embedding_filters.png`), the
per-head table and the sentences of the reading.

Example:
    >>> probe = dict(attention_distance=[[2.0, 9.0]], attention_entropy=[[0.5, 1.0]])
    >>> results = dict(models={"vit": dict(label="ViT")}, figure7={"vit": dict(init=probe, trained=probe)})
    >>> [(row["head"], row["distance"], row["entropy"]) for row in head_rows(results)]
    [(1, 2.0, 0.5), (2, 9.0, 1.0)]
"""

from __future__ import annotations

import numpy as np

ENTROPY_MOVED = 0.02  # a head "moved" when its entropy relative to uniform changed by more than this


def _label(results, model):
    return results["models"][model]["label"]


def head_rows(results) -> list[dict]:
    """One row per (model, layer, head): distance and entropy relative to uniform, at init and trained."""
    rows = []
    for model in _probed(results):
        probe = results["figure7"][model]
        distance, entropy = ({w: np.asarray(probe[w][key]) for w in ("init", "trained")}
                             for key in ("attention_distance", "attention_entropy"))
        for (layer, head), value in np.ndenumerate(distance["trained"]):
            rows.append(dict(model=_label(results, model), layer=layer + 1, head=head + 1,
                             distance_init=float(distance["init"][layer, head]), distance=float(value),
                             entropy_init=float(entropy["init"][layer, head]),
                             entropy=float(entropy["trained"][layer, head])))
    return rows


def summary(results) -> dict:
    """Per model: the first and last layers' distances and entropies (mean, min, max over heads), at init and
    trained; the position-embedding structure and the filters' explained variance, at init and trained."""
    out = {}
    for model, probe in results.get("figure7", {}).items():
        if "trained" not in probe:
            continue
        row = dict(label=_label(results, model))
        for when in ("init", "trained"):
            d, e = np.asarray(probe[when]["attention_distance"]), np.asarray(probe[when]["attention_entropy"])
            for name, layer in (("first", 0), ("last", -1)):
                row[f"{name}_{when}"] = (float(d[layer].mean()), float(d[layer].min()), float(d[layer].max()))
                row[f"{name}_entropy_{when}"] = (float(e[layer].mean()), float(e[layer].min()), float(e[layer].max()))
            row[f"entropy_moved_{when}"] = e
            row[f"position_{when}"] = probe[when]["position_structure"]
            row[f"variance4_{when}"] = float(np.sum(probe[when]["filter_variance"][:4]))
        moved = np.abs(row.pop("entropy_moved_trained") - row.pop("entropy_moved_init")) > ENTROPY_MOVED
        row["heads_moved"], row["heads"] = int(moved.sum()), int(moved.size)
        row["filter_source"] = probe["trained"]["filter_source"]
        out[model] = row
    return out


def sentences(results) -> list[str]:
    """The reading's sentences on Figure 7, from `summary`."""
    rows = summary(results)
    if not rows:
        return []
    uniform = results["uniform_attention_distance"]
    parts = []
    for row in rows.values():
        parts.append(
            f"{row['label']} layer 1 {row['first_trained'][1]:.1f}-{row['first_trained'][2]:.1f} px (mean "
            f"{row['first_trained'][0]:.1f}; at initialisation {row['first_init'][0]:.1f}), last layer mean "
            f"{row['last_trained'][0]:.1f} px (init {row['last_init'][0]:.1f}); entropy relative to uniform in "
            f"layer 1 {row['first_entropy_trained'][1]:.2f}-{row['first_entropy_trained'][2]:.2f} (init "
            f"{row['first_entropy_init'][0]:.2f}); {row['heads_moved']} of {row['heads']} heads moved by more than "
            f"{ENTROPY_MOVED}")
    text = [f"Mean attention distances (uniform attention: {uniform:.1f} px): " + "; ".join(parts)]
    positions = [f"{row['label']} {row['position_trained']['neighbours']:.2f} against "
                 f"{row['position_trained']['far']:.2f} (correlation with grid distance "
                 f"{row['position_trained']['distance_correlation']:.2f}; init "
                 f"{row['position_init']['distance_correlation']:.2f})" for row in rows.values()]
    text.append("Position embeddings, mean cosine similarity of grid neighbours against far patches: "
                + "; ".join(positions))
    filters = [f"{row['label']} ({row['filter_source']}) {row['variance4_trained']:.0%} (init "
               f"{row['variance4_init']:.0%})" for row in rows.values()]
    text.append("Share of the embedding filters' variance in their first 4 principal components: "
                + "; ".join(filters))
    return text


def markdown_heads(results) -> str:
    """The per-head table (Markdown): distance and entropy relative to uniform, init -> trained."""
    lines = ["| model | layer | head | distance init [px] | distance trained [px] | entropy init | entropy trained |",
             "|---|---|---|---|---|---|---|"]
    for r in head_rows(results):
        lines.append(f"| {r['model']} | {r['layer']} | {r['head']} | {r['distance_init']:.2f} | {r['distance']:.2f} | "
                     f"{r['entropy_init']:.3f} | {r['entropy']:.3f} |")
    return "\n".join(lines)


# --- figures -----------------------------------------------------------------------------------------------


def _probed(results):
    return [m for m, p in results.get("figure7", {}).items() if "trained" in p]


def _heads(axis, init, trained, reference, label):
    """One dot per head against depth: at initialisation (grey rings) joined to the same head trained
    (coloured by head), and the uniform-attention reference line."""
    layers, heads = trained.shape
    depth = np.repeat(np.arange(1, layers + 1), heads) + np.tile(np.linspace(-0.25, 0.25, heads), layers)
    step = 0.3 / max(heads, 2)  # init left of trained, joined: a head that did not move draws a flat line
    for x, start, end in zip(depth, init.ravel(), trained.ravel()):
        axis.plot([x - step, x + step], [start, end], color="0.6", linewidth=0.8)
    axis.scatter(depth - step, init.ravel(), facecolors="none", edgecolors="0.35", s=26, label="at initialisation")
    axis.scatter(depth + step, trained.ravel(), c=np.tile(np.arange(heads), layers), cmap="tab10", vmin=0, vmax=9,
                 s=30, label="trained (colour: head)")
    axis.axhline(reference, color="black", linestyle="--", linewidth=1, label=label)
    axis.set_xticks(range(1, layers + 1))
    axis.grid(True, alpha=0.3)


def plot_attention_distance(plt, results, path):
    """Figure 7 right: per model, one dot per head against depth, at initialisation and trained, with the
    uniform-attention line; the distance in the top row (the paper's axis from 0), the entropy relative to
    uniform attention in the bottom row (its own range, where small moves show)."""
    models = _probed(results)
    count = max(1, len(models))
    fig, axes = plt.subplots(2, count, figsize=(4.2 * count, 7.0), squeeze=False)
    uniform = results["uniform_attention_distance"]
    top, low = uniform, 1.0
    for column, model in enumerate(models):
        probe = results["figure7"][model]
        distance, entropy = ([np.asarray(probe[w][key]) for w in ("init", "trained")]
                             for key in ("attention_distance", "attention_entropy"))
        top, low = max(top, *(d.max() for d in distance)), min(low, *(e.min() for e in entropy))
        _heads(axes[0][column], *distance, uniform, f"uniform ({uniform:.1f} px)")
        _heads(axes[1][column], *entropy, 1.0, "uniform (1)")
        axes[0][column].set_title(_label(results, model), fontsize=10)
        axes[1][column].set_xlabel("Network depth (layer)")
    for axis in axes[0]:
        axis.set_ylim(0, 1.1 * top)
    for axis in axes[1]:
        axis.set_ylim(low - 0.1 * (1.0 - low) - 0.005, 1.0 + 0.1 * (1.0 - low) + 0.005)
    axes[0][0].set_ylabel("Mean attention distance (pixels)")
    axes[1][0].set_ylabel("Attention entropy / uniform's")
    if models:
        axes[0][0].legend(fontsize=7, loc="lower left")
    setup = results["setup"]
    fig.suptitle(f"Attention per head ({setup['attention_images']} test images, {setup['image_size']}x"
                 f"{setup['image_size']} px, patch grid {setup['image_size'] // 4}x{setup['image_size'] // 4})",
                 fontsize=10)
    return fig


def plot_position_embeddings(plt, results, path):
    """Figure 7 centre: each model's position-embedding similarity, at initialisation and trained."""
    from keras_vit.inspect.plots import similarity_mosaic

    models = _probed(results)
    fig, axes = plt.subplots(2, max(1, len(models)), figsize=(3.6 * max(1, len(models)), 7.4), squeeze=False)
    image = None
    for column, model in enumerate(models):
        for row, when in enumerate(("init", "trained")):
            probe = results["figure7"][model][when]
            axis = axes[row][column]
            image = axis.imshow(similarity_mosaic(probe["position_similarity"]), cmap="viridis", vmin=-1, vmax=1,
                                interpolation="nearest")
            axis.set_xticks([])
            axis.set_yticks([])
            structure = probe["position_structure"]
            axis.set_title(f"{_label(results, model)}, {'trained' if when == 'trained' else 'at init'}\n"
                           f"neighbours {structure['neighbours']:.2f}, far {structure['far']:.2f}, "
                           f"r={structure['distance_correlation']:.2f}", fontsize=8)
    if image is not None:
        fig.colorbar(image, ax=axes.ravel().tolist(), fraction=0.03, pad=0.02).set_label("cosine similarity")
    fig.suptitle("Position-embedding similarity: tile (i, j) = patch (i, j) against every patch "
                 "(r: correlation with grid distance)", fontsize=9)
    return fig


def plot_embedding_filters(plt, results, path):
    """Figure 7 left: the first principal components of each model's embedding filters, init and trained."""
    from keras_vit.inspect.plots import filter_panel

    rows = [(m, w) for m in _probed(results) for w in ("init", "trained")]
    columns = max([len(results["figure7"][m][w]["filters"]) for m, w in rows] + [1])
    fig, axes = plt.subplots(max(1, len(rows)), columns, figsize=(0.75 * columns + 1.5, 0.95 * max(1, len(rows))),
                             squeeze=False)
    for axis in axes.ravel():
        axis.set_axis_off()
    for r, (model, when) in enumerate(rows):
        probe = results["figure7"][model][when]
        for c, component in enumerate(probe["filters"]):
            panel = filter_panel(component)
            axes[r][c].imshow(panel, cmap=None if panel.ndim == 3 else "gray", interpolation="nearest")
        axes[r][0].text(-0.3, 0.5, f"{_label(results, model)} {when}\n{probe['filter_source']}\n"
                        f"PC1-4: {np.sum(probe['filter_variance'][:4]):.0%} of variance", fontsize=6,
                        ha="right", va="center", transform=axes[r][0].transAxes)
    fig.suptitle("Embedding filters: principal components 1, 2, ... (each scaled to its own range)", fontsize=9)
    return fig


PLOTS = {"attention_distance.png": plot_attention_distance, "position_embeddings.png": plot_position_embeddings,
         "embedding_filters.png": plot_embedding_filters}
