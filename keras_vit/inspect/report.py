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
    "attention_rollout.png": "Attention rollout from the [class] token to the input patches (Figure 6, Appendix D.8)",
    "attention_distance.png": "Mean attention distance per head and layer (Figure 7, right)",
    "position_similarity.png": "Cosine similarity of the position embeddings (Figure 7, centre)",
    "embedding_filters.png": "Principal components of the patch-embedding filters (Figure 7, left)",
}
"""The heading of each figure in index.html; `figure_titles` says what a given model's figures are."""

GAP_ROLLOUT = ("Attention rollout averaged over the output patch tokens, whose mean the GAP classifier reads, to the "
               "input patches (no [class] token; Figure 6, Appendix D.8)")
SHIFTED_FILTERS = ("Principal components of the patch-embedding filters over the unshifted image (shifted patches: "
                   "the kernel's weights on the image itself, not on its four shifted copies; Figure 7, left)")


def model_inputs(model, images):
    """Images in [0, 255] as the model expects them: raw when it has its own `preprocessing` layer,
    otherwise scaled to [-1, 1] as all official checkpoints expect (x / 127.5 - 1)."""
    return preprocessing.model_inputs(model, np.asarray(images, dtype=np.float32))


def figure_titles(model) -> dict:
    """The headings of `model`'s figures: `FIGURES`, with the rollout of a GAP model (no [class] token: the
    rollout rows of all patch tokens averaged, as `rollout_maps` computes it) and the filters of shifted patches
    (the unshifted slice of the kernel, `patch_filters`) said as what they are."""
    titles = dict(FIGURES)
    if not model_parts.patch_encoder(model).num_prefix_tokens:
        titles["attention_rollout.png"] = GAP_ROLLOUT
    if model_parts.patches(model).__class__.__name__ == "ShiftedPatches":
        titles["embedding_filters.png"] = SHIFTED_FILTERS
    return titles


def patch_filters(model):
    """`(filters, None)`: the principal components of the patch-embedding filters as (k, P, P, C) images; or
    `(None, why)` when the patch embedding does not see pixels.

    The plain tokenizer's kernel is (P*P*C, D). Shifted patches (`tokenizer="shifted_patches"`) concatenate
    the image and its four half-patch shifts along the channels, so their kernel is (P*P*5C, D), each pixel's 5C
    inputs ordered image, up-left, up-right, down-left, down-right: the filters drawn are its weights on the
    image itself (the first C of each pixel's 5C), the filters of the unshifted copy. A convolutional stem
    (`tokenizer="conv"`) and a hybrid's ResNet stem hand the patch embedding feature maps, not pixels: no
    filters.
    """
    if model_parts.resnet_stem(model) is not None:
        return None, ("a hybrid's patch embedding sees the feature map of its ResNet stem, not pixels, so it has no "
                      "pixel filters to draw")
    if any(layer.name == model_parts.CONV_STEM for layer in model.layers):
        return None, ('the convolutional stem (tokenizer="conv") hands the patch embedding feature maps, not '
                      "pixels, so it has no pixel filters to draw")
    layer = model_parts.patches(model)
    patch_size, channels = layer.patch_size, model.input_shape[-1]
    kernel = np.asarray(model_parts.patch_encoder(model).projection.kernel)
    if layer.__class__.__name__ == "ShiftedPatches":
        kernel = kernel.reshape(patch_size, patch_size, 5, channels, -1)[:, :, 0].reshape(-1, kernel.shape[-1])
    if kernel.shape[0] != patch_size * patch_size * channels:
        return None, (f"the patch embedding sees {kernel.shape[0]} inputs per patch, not the "
                      f"{patch_size}x{patch_size}x{channels} pixels of a patch")
    return embedding_filters(kernel, patch_size, channels), None


def _write_index(out_dir, figures, summary, titles):
    rows = "".join(
        f"<tr><td>{layer + 1}</td><td>{np.mean(d):.2f}</td><td>{' '.join(f'{v:.1f}' for v in d)}</td></tr>"
        for layer, d in enumerate(summary["mean_attention_distance"])
    )
    sections = "".join(
        f"<h2>{html.escape(titles[name])}</h2><img src='{name}' alt='{name}' style='max-width:100%'>"
        for name in figures
    ) + "".join(f"<h2>{html.escape(titles[name])}</h2><p>{html.escape(name)} is left out: {html.escape(why)}.</p>"
                for name, why in summary["left_out"].items())
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
        `grid_shape`, `patch_size`, `model`, `images`, `left_out` ({figure file: why it is not drawn}: the
        embedding filters of a model whose patch embedding does not see pixels, `patch_filters`).

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
    filters, no_filters = patch_filters(model)

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
        "left_out": {} if no_filters is None else {"embedding_filters.png": no_filters},
    }
    with open(out("summary.json"), "w", encoding="utf-8") as handle:
        json.dump(summary, handle, indent=1)
    files = [out(name) for name in figures] + [out("summary.json"),
                                               _write_index(out_dir, figures, summary, figure_titles(model))]
    return {**summary, "files": files}
