"""What a `weights` argument names, and where its file is: a published name (downloaded once into the Keras
cache through `keras_vit.download`), a checkpoint path, or a Keras `.weights.h5` / `.keras` path.

`keras_vit.weights` is the table of published files; this module turns a `weights` argument into a local path
(and its table entry), so that `keras_vit.ViT`, `keras_vit.loading.load_weights`, the converter and the CLIs
answer the same question the same way.

Example:
    >>> is_path("imagenet21k"), is_path("./imagenet21k"), is_keras_weights("model.weights.h5")
    (False, True, True)
"""

import os
import zipfile

from keras_vit.checkpoints import download
from keras_vit import weights as weights_table

FILE_SUFFIXES = (".npz", ".h5", ".keras", ".safetensors", ".json", ".bin", ".pth", ".pt", ".ckpt")
"""Endings that make a string a path rather than a published name."""

KERAS_SUFFIXES = (".h5", ".keras")


def none_if_none(weights):
    """None for `weights=None` or `"none"` (any case, the command-line tools' spelling of random weights), else
    `weights`: Python and the CLIs take the same values.

    Example:
        >>> none_if_none("None"), none_if_none("imagenet21k")
        (None, 'imagenet21k')
    """
    return None if weights is None or (isinstance(weights, str) and weights.lower() == "none") else weights


def is_path(weights) -> bool:
    """Whether `weights` names a file or folder (rather than a published name).

    Raises:
        ValueError: when `weights` is neither a string nor a path.
    """
    if isinstance(weights, os.PathLike):
        return True
    if not isinstance(weights, str):
        raise ValueError(
            "`weights` must be None, a published name or the path to a weights file or folder. "
            f"Received: weights={weights!r}"
        )
    if weights_table.is_name(weights):
        return False
    return "/" in weights or os.sep in weights or weights.lower().endswith(FILE_SUFFIXES) or os.path.exists(weights)


def is_keras_weights(weights) -> bool:
    """Whether `weights` is a Keras `.weights.h5` or `.keras` path (loaded with `model.load_weights`)."""
    return weights is not None and is_path(weights) and os.fspath(weights).lower().endswith(KERAS_SUFFIXES)


def check_keras_archive(path: str) -> None:
    """A `.keras` file must be a complete zip archive holding `model.weights.h5`.

    Raises:
        ValueError: naming the file and its size, for a truncated or otherwise corrupt archive.
    """
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
        problem = None if "model.weights.h5" in names else "its zip archive holds no model.weights.h5"
    except (zipfile.BadZipFile, OSError):
        problem = "it is not a valid zip/.keras archive (truncated or damaged)"
    if problem:
        raise ValueError(
            f"The .keras file {path!r} ({os.path.getsize(path):,} bytes) is corrupt: {problem}. Save the model "
            f"again with `model.save(...)` (or copy the file again). Received: path={path!r}"
        )


def resolve_path(weights, variant: str | None) -> tuple[str, "weights_table.WeightsEntry | None"]:
    """The local path for `weights` (downloading a published name into the Keras cache) and its table entry.

    Args:
        weights: a published name or a path.
        variant: the variant table key (`"B16"`) whose file a published name means; None when unknown.

    Raises:
        ValueError: an unknown name (listing the known ones) or a path that does not exist.
        keras_vit.WeightsDownloadError: a published file that cannot be downloaded (an `OSError`).
    """
    if is_path(weights):
        path = os.fspath(weights)
        if not os.path.exists(path):
            raise ValueError(f"The weights file does not exist. Received: weights={weights!r}")
        return path, None
    if not weights_table.is_name(weights):
        raise ValueError(
            f"Unknown weights name. Received: weights={weights!r}. Known names: "
            f"{', '.join(repr(n) for n in weights_table.all_names())} (not every variant has every one), "
            f"{weights_table.IMAGENET_ALIAS!r} (each variant's best ImageNet-1k fine-tune), "
            "None, or the path to a .npz, .safetensors, Hugging Face folder or .weights.h5 file."
        )
    entry = weights_table.get_entry(variant, weights)
    return download.fetch(entry), entry
