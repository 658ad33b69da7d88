"""The Keras backend the training app's tools need, checked before anything heavy is imported.

`python -m training.train` drives Keras models with `tf.data`, `tf.distribute` and TensorFlow checkpoints, and
`python -m training.experiments` with `tf.data`, `tf.distribute` and TensorFlow's tracing (the FLOP counts), so they
need the TensorFlow backend; on another one (`KERAS_BACKEND=jax`) the model would be built and then fail deep
inside TensorFlow. `check_tensorflow_backend` finds the backend as
Keras will (`KERAS_BACKEND`, else the `backend` of `keras.json` in `KERAS_HOME` or `~/.keras`, else TensorFlow)
without importing Keras, and refuses another with one line that says how to recover. User code trains on any
backend with `model.fit` (docs/TRAINING.md, "`model.fit` in your own code").
"""

from __future__ import annotations

import json
import os
import sys

FIT_DOCS = 'docs/TRAINING.md, "model.fit in your own code"'


def _keras_config_path() -> str:
    """Where Keras reads its `keras.json` (keras/src/backend/config.py's rule)."""
    if "KERAS_HOME" in os.environ:
        home = os.environ["KERAS_HOME"]
    else:
        base = os.path.expanduser("~")
        home = os.path.join(base if os.access(base, os.W_OK) else "/tmp", ".keras")
    return os.path.expanduser(os.path.join(home, "keras.json"))


def keras_backend() -> tuple[str, str]:
    """`(backend, where it was set)` as Keras will choose it, without importing Keras (when Keras is already
    imported: its backend)."""
    if "keras" in sys.modules:
        import keras

        return keras.config.backend(), "Keras runs on it in this process"
    if "KERAS_BACKEND" in os.environ:
        name = os.environ["KERAS_BACKEND"]
        return name, f"KERAS_BACKEND={name} is set"
    path = _keras_config_path()
    try:
        with open(path) as f:
            name = json.load(f).get("backend")
    except (OSError, ValueError, AttributeError):
        name = None
    if isinstance(name, str) and name:
        return name, f'{path} says "backend": "{name}"'
    return "tensorflow", "the default"


def check_tensorflow_backend(tool: str, uses: str) -> None:
    """Raises `keras_vit.cli.UsageError` (one line, exit status 2) unless Keras will run on TensorFlow.

    Args:
        tool: the command, as the message names it (`training.train`).
        uses: what of TensorFlow it uses (`tf.data, tf.distribute and TF checkpoints`).
    """
    name, where = keras_backend()
    if name == "tensorflow":
        return
    from keras_vit import cli

    fix = ("Unset it or set KERAS_BACKEND=tensorflow" if where.startswith("KERAS_BACKEND=")
           else "Set KERAS_BACKEND=tensorflow")
    raise cli.UsageError(
        f"{tool} needs the TensorFlow Keras backend (it uses {uses}); {where}. "
        f"{fix}, or train on {name} in your own code with model.fit ({FIT_DOCS})."
    )
