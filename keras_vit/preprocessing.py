"""Input scaling and readable predictions for the pretrained ViTs.

`preprocess_input` scales [0, 255] images the way the checkpoints expect: the official vit_jax models (and
the imagenet21k / AugReg heads) take x / 127.5 - 1 in [-1, 1] (vit_jax input pipeline, paper Appendix B.1);
`mode="imagenet"` subtracts the ImageNet mean and divides by its standard deviation, as many timm models do.

The official scaling has one home here: `to_model_range` ([0, 255] -> [-1, 1]) and its inverse
`from_model_range`, `rescaling_layer` (the same scaling as the model's own `preprocessing` layer,
`include_preprocessing=True`) and `scales_own_input` (whether a model has that layer, so takes raw pixels);
`model_inputs` combines the two for a batch of [0, 255] images.

`decode_predictions` and `class_names` use label lists shipped in `keras_vit/data/` (no download), taken from
timm's `timm/data/_info/` (Apache-2.0): the ImageNet-1k synsets in the standard sorted-WordNet-id order, the
Google ImageNet-21k order of the 21843-class imagenet21k heads (timm maps 21843 classes to
`imagenet21k_goog_synsets.txt`), and the first WordNet lemma of each synset as the name.

Example:
    >>> import numpy as np
    >>> preprocess_input(np.array([0.0, 127.5, 255.0]))
    array([-1.,  0.,  1.])
    >>> decode_predictions(np.eye(1000)[[1]], top=1)
    [[('n01443537', 'goldfish', 1.0)]]
"""

import functools
import importlib.resources

import keras
import numpy as np

from keras_vit import model_parts

MODES = ("inception", "imagenet")
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
_LABEL_FILES = {1000: "imagenet1k_classes.txt", 21843: "imagenet21k_classes.txt"}


def to_model_range(x):
    """[0, 255] -> [-1, 1] (x / 127.5 - 1), the input scaling of the official checkpoints; any array or tensor
    of floats (numpy, TensorFlow, Keras, ...).

    Example:
        >>> to_model_range(np.array([0.0, 255.0]))
        array([-1.,  1.])
    """
    return x / 127.5 - 1.0


def from_model_range(x):
    """[-1, 1] -> [0, 255], the inverse of `to_model_range` (for a model that scales its own input)."""
    return (x + 1.0) * 127.5


def rescaling_layer(name: str = model_parts.PREPROCESSING) -> keras.layers.Layer:
    """The `to_model_range` scaling as a Keras layer: what `keras_vit.ViT(include_preprocessing=True)` puts first."""
    return keras.layers.Rescaling(1.0 / 127.5, offset=-1.0, name=name)


def scales_own_input(model) -> bool:
    """Whether `model` scales [0, 255] pixels itself (it has the `preprocessing` layer of `rescaling_layer`)."""
    return model_parts.preprocessing(model) is not None


def model_inputs(model, images):
    """Images in [0, 255] as `model` expects them: as they are when it scales its own input, else
    `to_model_range(images)`."""
    return images if scales_own_input(model) else to_model_range(images)


def preprocess_input(x, mode="inception"):
    """Scales images with values in [0, 255] to the range a pretrained ViT expects.

    Args:
        x: images (..., H, W, C), channels last: a numpy array (or nested list) or a backend / Keras tensor.
        mode: `"inception"`: x / 127.5 - 1, in [-1, 1] (the official checkpoints); `"imagenet"`:
            (x / 255 - mean) / std per RGB channel with the ImageNet mean and std (needs C = 3).

    Returns:
        A float array for numpy input (float32 unless the input was float64), else a tensor of the backend.

    Raises:
        ValueError: an unknown mode, or `"imagenet"` mode on images without 3 channels.

    Example:
        >>> preprocess_input(np.full((1, 2, 2, 3), 255.0, "float32"), mode="imagenet")[0, 0, 0]
        array([2.2489083, 2.4285715, 2.64     ], dtype=float32)
    """
    if mode not in MODES:
        raise ValueError(f"`mode` must be one of {MODES}. Received: mode={mode!r}")
    if isinstance(x, (list, tuple)):
        x = np.asarray(x)
    if isinstance(x, np.ndarray):
        return _scale(x if x.dtype.kind == "f" else x.astype(np.float32), mode, np)
    dtype = keras.backend.standardize_dtype(x.dtype)
    x = x if "float" in dtype else keras.ops.cast(x, "float32")
    return _scale(x, mode, keras.ops)


def _scale(x, mode, ops):
    if mode == "inception":
        return to_model_range(x)
    if x.shape[-1] != 3:
        raise ValueError(f"`mode='imagenet'` needs RGB images with 3 channels last. Received: shape={tuple(x.shape)}")
    mean = np.asarray(IMAGENET_MEAN) * 255.0
    std = np.asarray(IMAGENET_STD) * 255.0
    if ops is np:
        return ((x - mean) / std).astype(x.dtype)
    dtype = keras.backend.standardize_dtype(x.dtype)
    return (x - ops.convert_to_tensor(mean, dtype)) / ops.convert_to_tensor(std, dtype)


@functools.lru_cache(maxsize=None)
def _labels(classes: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(synset ids, names) of a label set shipped in keras_vit/data."""
    text = importlib.resources.files("keras_vit").joinpath("data", _LABEL_FILES[classes]).read_text("utf-8")
    rows = [line.split("\t") for line in text.splitlines()]
    if len(rows) != classes:
        raise RuntimeError(f"keras_vit/data/{_LABEL_FILES[classes]} is damaged: {len(rows)} lines, not {classes}.")
    return tuple(row[0] for row in rows), tuple(row[1] for row in rows)


def _check_classes(classes) -> int:
    if isinstance(classes, bool) or not isinstance(classes, (int, np.integer)) or int(classes) not in _LABEL_FILES:
        raise ValueError(
            "Class names ship for ImageNet-1k (1000 classes) and the Google ImageNet-21k order of the imagenet21k "
            f"heads (21843 classes). Received: classes={classes!r}"
        )
    return int(classes)


def class_names(classes: int) -> list[str]:
    """The class names, index by index, of a 1000-class (ImageNet-1k) or 21843-class (imagenet21k) head.

    Args:
        classes: 1000 or 21843.

    Returns:
        A list of `classes` short names (first WordNet lemma, spaces as underscores, e.g. `"golden_retriever"`).

    Raises:
        ValueError: any other number of classes.

    Example:
        >>> class_names(1000)[207]
        'golden_retriever'
    """
    return list(_labels(_check_classes(classes))[1])


def decode_predictions(preds, top=5):
    """The `top` classes of each prediction, best first, as Keras Applications' `decode_predictions` does.

    Args:
        preds: scores (B, 1000) for ImageNet-1k or (B, 21843) for imagenet21k heads (probabilities or
            logits; a numpy array or a tensor).
        top: how many classes to return per image (1 to the number of classes).

    Returns:
        A list with one list per image of `(class_id, class_name, score)` tuples: `class_id` is the WordNet id
        (e.g. `"n01440764"`), `class_name` the short name (e.g. `"tench"`), `score` a float.

    Raises:
        ValueError: `preds` is not 2-D with 1000 or 21843 columns, or `top` is out of range.

    Example:
        >>> decode_predictions(np.eye(1000)[[0]], top=2)[0][0]
        ('n01440764', 'tench', 1.0)
    """
    preds = np.asarray(keras.ops.convert_to_numpy(preds))
    if preds.ndim != 2 or preds.shape[1] not in _LABEL_FILES:
        raise ValueError(
            "`decode_predictions` expects a batch of predictions of shape (samples, 1000) or (samples, 21843). "
            f"Received: preds.shape={preds.shape}"
        )
    classes = preds.shape[1]
    if isinstance(top, bool) or not isinstance(top, (int, np.integer)) or not 1 <= top <= classes:
        raise ValueError(f"`top` must be an int between 1 and {classes}. Received: top={top!r}")
    ids, names = _labels(classes)
    order = np.argsort(-preds, axis=1, kind="stable")[:, :top]
    return [[(ids[i], names[i], float(row[i])) for i in best] for row, best in zip(preds, order)]
