"""What a `weights` argument names, where its file is and what format it holds: a published name (downloaded once
into the Keras cache through `keras_vit.download`), a checkpoint path, a Keras `.weights.h5` / `.keras` path, or a
training run's folder (its `model.keras`).

`keras_vit.weights` is the table of published files; `resolve` turns a `weights` argument into a `WeightsSource`
(the local path, its format told by `keras_vit.checkpoints.detect`, its table entry), so that `keras_vit.ViT`,
`keras_vit.loading.load_weights`, the converter and the CLIs answer the same question the same way, in one call.

Example:
    >>> is_path("imagenet21k"), is_path("./imagenet21k"), is_keras_weights("model.weights.h5")
    (False, True, True)
    >>> import numpy as np, os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "ViT-B_16.npz")
    >>> np.savez(path, cls=np.zeros((1, 1, 8), "float32"))
    >>> resolve(path, None).format
    'official_npz'
"""

import dataclasses
import os

from keras_vit import weights as weights_table
from keras_vit.checkpoints import detect, download, runs, untrusted

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


def is_own(weights) -> bool:
    """Whether `weights` is a Keras `.keras` / `.weights.h5` path or a training run's workdir."""
    return is_keras_weights(weights) or runs.is_run(weights)


@dataclasses.dataclass(frozen=True)
class WeightsSource:
    """A `weights` argument resolved (`resolve`): what to open and how."""

    path: str
    """The local file or folder: a download in the Keras cache, the path given, or a run's `model.keras`."""
    format: str
    """One of `keras_vit.checkpoints.detect.FORMATS`."""
    entry: "weights_table.WeightsEntry | None" = None
    """The table entry of a published name; None for a path."""

    @property
    def is_keras(self) -> bool:
        """A Keras file by its name (`.keras`, `.weights.h5`, as Keras saves them): one's own model
        (`own.open_model`), not a checkpoint to read. An HDF5 file of another name is refused by the readers."""
        return is_keras_weights(self.path)


def resolve(weights, variant: str | None) -> WeightsSource:
    """The local file `weights` names (downloading a published name into the Keras cache), its format and its
    table entry.

    Args:
        weights: a published name, a path, or a training run's folder.
        variant: the variant table key (`"B16"`) whose file a published name means; None when unknown.

    Raises:
        ValueError: an unknown name (listing the known ones), a path that does not exist, an unfinished or running
            run, or a file of no known format (`detect.detect_format`).
        keras_vit.WeightsDownloadError: a published file that cannot be downloaded (an `OSError`).
    """
    entry = None
    if runs.is_run(weights):
        path = runs.model_file(weights)  # its `model.keras`: checked below as every Keras-named file
    elif is_path(weights):
        path = os.fspath(weights)
        if not os.path.lexists(path):
            raise ValueError(f"The weights file does not exist. Received: weights={weights!r}")
    elif not weights_table.is_name(weights):
        raise ValueError(
            f"Unknown weights name. Received: weights={weights!r}. Known names: "
            f"{', '.join(repr(n) for n in weights_table.all_names())} (not every variant has every one), "
            f"{weights_table.IMAGENET_ALIAS!r} (each variant's best ImageNet-1k fine-tune), "
            "None, or the path to a .npz, .safetensors, Hugging Face folder or .weights.h5 file."
        )
    else:
        entry = weights_table.get_entry(variant, weights)
        path = download.fetch(entry)
    if is_keras_weights(path):  # named as Keras saves it: the Keras loaders open it (`own`), and say what is wrong
        untrusted.check_regular_file(path)
        return WeightsSource(path, "keras_model" if path.lower().endswith(".keras") else "keras_weights", entry)
    return WeightsSource(path, detect.detect_format(path), entry)
