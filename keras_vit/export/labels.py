"""Class labels of an exported model: given, or the package's ImageNet names, or `class_{i}`.

A trained `.keras` model keeps its labels in a sidecar file beside it: `<path without .keras>.labels.txt`
(`model.labels.txt` beside `model.keras`), one label a line (`sidecar_path`, `write`, `read`); the export CLI
uses it when no `--labels` is given. A Hugging Face checkpoint names its classes in its `config.json`
(`id2label`): `huggingface_labels` reads them.
"""

import io
import json
import logging
import os

logger = logging.getLogger(__name__)

KNOWN_CLASS_COUNTS = (1000, 21843)
"""ImageNet-1k and ImageNet-21k: the class counts `keras_vit.preprocessing.class_names` knows."""


def default_labels(classes: int) -> list[str]:
    """`keras_vit.preprocessing.class_names(classes)` for ImageNet-1k/21k heads, else `class_{i}`."""
    if classes in KNOWN_CLASS_COUNTS:
        try:
            from keras_vit.preprocessing import class_names
        except ImportError:
            logger.warning("keras_vit.preprocessing.class_names is unavailable: labels are class_{i}.")
        else:
            return [str(name) for name in class_names(classes)]
    return [f"class_{i}" for i in range(classes)]


def huggingface_labels(weights, classes: int) -> list[str] | None:
    """The class names in the `id2label` of a Hugging Face checkpoint's `config.json` (`weights`: its folder, its
    `.safetensors` file or that `config.json`), when it names exactly `classes` classes `0..classes-1` with names of
    its own (not the `LABEL_{i}` transformers writes by default); else None.
    """
    path = os.fspath(weights) if isinstance(weights, (str, os.PathLike)) else None
    if path is None:
        return None
    config = path if path.endswith(".json") else os.path.join(
        path if os.path.isdir(path) else os.path.dirname(path), "config.json")
    try:
        if not os.path.isfile(config) or os.path.getsize(config) > 16 * 2**20:  # a regular file of a config's size
            return None
        with open(config, encoding="utf-8") as file:
            id2label = json.load(file).get("id2label")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(id2label, dict) or set(id2label) != {str(i) for i in range(classes)}:  # JSON keys: text
        return None
    labels = [str(id2label[str(i)]) for i in range(classes)]
    return None if labels == [f"LABEL_{i}" for i in range(classes)] else labels


def resolve(labels, classes: int) -> list[str]:
    """Checks user labels (one per class, one line each) or makes the default ones.

    Raises:
        ValueError: wrong count, or a label holding a line break (the label file has one label a line).
    """
    labels = default_labels(classes) if labels is None else [str(label) for label in labels]
    if len(labels) != classes:
        raise ValueError(
            f"`labels` must hold one label per class ({classes}). Received: {len(labels)} labels"
        )
    bad = [label for label in labels if "\n" in label or "\r" in label]
    if bad:
        raise ValueError(f"Labels must not contain line breaks. Received: {bad[0]!r}")
    return labels


def write(path: str, labels: list[str]) -> None:
    """One label a line, UTF-8."""
    with open(path, "w", encoding="utf-8") as file:
        file.write("\n".join(labels) + "\n")


def read(path: str) -> list[str]:
    """The labels of a label file: one a line, blank lines skipped.

    Raises:
        ValueError: when the file is not UTF-8 text (e.g. an image given as the labels), naming it and the first
            byte that is not.
    """
    with open(path, "rb") as file:
        data = file.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(
            f"The labels file {path} is not a UTF-8 text file of one label a line: byte 0x{data[error.start]:02x} at "
            f"offset {error.start} is not UTF-8 (starts with {data[:8]!r}). Give a text file with one class name a "
            f"line, in the order of the model's classes. Received: {path}"
        ) from None
    return [line.rstrip("\r\n") for line in io.StringIO(text, newline=None) if line.strip()]  # as open() reads


def sidecar_path(model_path) -> str:
    """The labels file beside a `.keras` model: `runs/x/model.keras` -> `runs/x/model.labels.txt`.

    Example:
        >>> sidecar_path("runs/x/model.keras")
        'runs/x/model.labels.txt'
    """
    path = os.fspath(model_path)
    return (path[: -len(".keras")] if path.endswith(".keras") else path) + ".labels.txt"
