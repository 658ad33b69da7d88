"""Puts weights into a built model. Today: Keras `.weights.h5` files of the same architecture."""

import os

import keras


def load_weights(model: keras.Model, weights) -> None:
    """Loads `weights` into `model` or raises; never leaves a silent partial load.

    Args:
        model: a built keras_vit model.
        weights: path to a Keras `.weights.h5` file.

    Raises:
        ValueError: unknown name, missing file or a file that does not match the architecture.
    """
    path = os.fspath(weights)
    if not path.endswith(".weights.h5"):
        raise ValueError(
            "`weights` must be None or the path to a Keras `.weights.h5` file. "
            f"Received: weights={weights!r}"
        )
    if not os.path.exists(path):
        raise ValueError(f"The weights file does not exist. Received: weights={weights!r}")
    try:
        model.load_weights(path)
    except ValueError as error:
        raise ValueError(
            f"The weights file {path!r} does not match the architecture of model {model.name!r}: {error}"
        ) from error
