"""One call that runs every section 4.5 analysis on a model and writes the PNGs and an index.html."""

import html
import json
import os

import numpy as np

from keras_vit import model_parts, preprocessing
from keras_vit.inspect import plots
from keras_vit.inspect.attention import attention_probabilities, token_geometry
from keras_vit.inspect.distance import mean_attention_distance
from keras_vit.inspect.filters import embedding_filters
from keras_vit.inspect.rollout import attention_rollout, rollout_maps
from keras_vit.inspect.similarity import position_embedding_similarity

FIGURES = {
    "attention_rollout.png": "Attention rollout from the output token to the input (Figure 6, Appendix D.8)",
    "attention_distance.png": "Mean attention distance per head and layer (Figure 7, right)",
    "position_similarity.png": "Cosine similarity of the position embeddings (Figure 7, centre)",
    "embedding_filters.png": "Principal components of the patch-embedding filters (Figure 7, left)",
}


def model_inputs(model, images):
    """Images in [0, 255] as the model expects them: raw when it has its own `preprocessing` layer,
    otherwise scaled to [-1, 1] as all official checkpoints expect (x / 127.5 - 1)."""
    return preprocessing.model_inputs(model, np.asarray(images, dtype=np.float32))


def _patch_filters(model):
    """The embedding filters as images, or None when the patch embedding does not see pixels (hybrids)."""
    patch_size = model_parts.patches(model).patch_size
    channels = model.input_shape[-1]
    kernel = np.asarray(model_parts.patch_encoder(model).projection.kernel)
    if kernel.shape[0] != patch_size * patch_size * channels:
        return None
    return embedding_filters(kernel, patch_size, channels)


def _write_index(out_dir, figures, summary):
    rows = "".join(
        f"<tr><td>{layer + 1}</td><td>{np.mean(d):.2f}</td><td>{' '.join(f'{v:.1f}' for v in d)}</td></tr>"
        for layer, d in enumerate(summary["mean_attention_distance"])
    )
    sections = "".join(
        f"<h2>{html.escape(FIGURES[name])}</h2><img src='{name}' alt='{name}' style='max-width:100%'>"
        for name in figures
    )
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>keras_vit inspection</title></head><body>"
        f"<h1>{html.escape(summary['model'])}: what the ViT learned (paper section 4.5)</h1>"
        f"<p>Images: {html.escape(', '.join(summary['images']))}. Patch grid {summary['grid_shape']}, "
        f"{summary['patch_size']} pixels per patch; uniform attention would give a mean distance of "
        f"{summary['uniform_attention_distance']:.2f} px.</p>{sections}"
        "<h2>Mean attention distance (pixels)</h2><table border='1' cellpadding='3'>"
        f"<tr><th>layer</th><th>mean over heads</th><th>per head</th></tr>{rows}</table></body></html>"
    )
    path = os.path.join(out_dir, "index.html")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(page)
    return path


def write_report(model, images, out_dir, names=None, inputs=None):
    """Runs rollout, attention distance, position similarity and embedding filters; writes the report.

    Args:
        model: a keras_vit model with fixed input size.
        images: array (B, H, W, C) in [0, 255] at the model's input size, as shown in the overlays.
        out_dir: folder for the PNGs, `index.html` and `summary.json` (created if missing).
        names: optional B image names for titles.
        inputs: what the model eats; default `model_inputs(model, images)`.

    Returns:
        dict: `files` (written paths), `mean_attention_distance` ((layers, heads) list in pixels,
        averaged over the images), `uniform_attention_distance` (the value for uniform attention),
        `grid_shape`, `patch_size`, `model`, `images`.

    Example:
        >>> import numpy as np, keras_vit
        >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4,
        ...                       mlp_dim=64, classes=5)
        >>> summary = write_report(model, np.zeros((1, 32, 32, 3)), "/tmp/report")
        >>> len(summary["files"])
        6
    """
    os.makedirs(out_dir, exist_ok=True)
    images = np.asarray(images, dtype=np.float32)
    names = list(names) if names is not None else [f"image {i}" for i in range(len(images))]
    inputs = model_inputs(model, images) if inputs is None else inputs
    geometry = token_geometry(model)

    probabilities = attention_probabilities(model, inputs)
    maps = rollout_maps(attention_rollout(probabilities), geometry.grid_shape, geometry.num_prefix_tokens,
                        image_shape=geometry.image_shape)
    distances = mean_attention_distance(probabilities, geometry.grid_shape, geometry.patch_size,
                                        geometry.num_prefix_tokens)
    patches = geometry.grid_shape[0] * geometry.grid_shape[1]
    uniform = mean_attention_distance(np.full((1, 1, patches, patches), 1.0 / patches), geometry.grid_shape,
                                      geometry.patch_size)
    similarity = position_embedding_similarity(model_parts.patch_encoder(model).patch_position_table(),
                                               geometry.grid_shape)
    filters = _patch_filters(model)

    def out(name):
        return os.path.join(out_dir, name)

    figures = ["attention_rollout.png", "attention_distance.png", "position_similarity.png"]
    plots.plot_attention_overlays(images, maps, out(figures[0]), titles=names)
    plots.plot_attention_distance(distances, out(figures[1]), image_size=max(geometry.image_shape),
                                  uniform_distance=float(uniform[0]))
    plots.plot_position_similarity(similarity, out(figures[2]))
    if filters is not None:
        figures.append("embedding_filters.png")
        plots.plot_embedding_filters(filters, out(figures[3]))

    summary = {
        "model": model.name,
        "images": names,
        "grid_shape": list(geometry.grid_shape),
        "patch_size": list(geometry.patch_size),
        "mean_attention_distance": distances.tolist(),
        "uniform_attention_distance": float(uniform[0]),
    }
    with open(out("summary.json"), "w", encoding="utf-8") as handle:
        json.dump(summary, handle, indent=1)
    files = [out(name) for name in figures] + [out("summary.json"), _write_index(out_dir, figures, summary)]
    return {**summary, "files": files}
