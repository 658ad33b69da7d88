"""The model's forward pass with its weights as constants of the served graph (a "frozen" SavedModel).

TensorFlow's oneDNN matmuls on CPUs with AMX read bf16 weights in a blocked tile layout. Weights held in
variables are reordered into it on every call; weights that are constants of the graph are reordered once
and kept. For ViT-B/16 in bf16 on an Intel AMX host that is 1.35x the throughput at batch 16 and 1.39x at batch 1
(benchmarks/SERVING_PATHS.md; float32 is unchanged, within noise). The outputs are the model's: the same
ops on the same values. A frozen SavedModel has no variables to restore; TF Serving, `tf.saved_model.load`
and the TF1 loader serve it as they serve any other. Keep the `.keras` file to fine-tune.

A SavedModel's graph is one protobuf, which cannot exceed 2 GiB, so weights above `FREEZE_LIMIT_BYTES`
stay variables under `freeze_weights="auto"` (ViT-L in float32, 1.2 GB; ViT-B/16 is 0.17 GB in bf16).

Example:
    >>> import numpy as np, tensorflow as tf
    >>> import keras_vit
    >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=2,
    ...                       mlp_dim=64, include_top=False, pooling="avg")
    >>> forward = frozen_forward(lambda x: model(x, training=False), 32, 32)
    >>> x = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    >>> bool(np.allclose(forward(tf.constant(x)), model(x), atol=1e-6))
    True
"""

import math

import tensorflow as tf

FREEZE_CHOICES = ("auto", True, False)
"""What `export_saved_model(freeze_weights=...)` accepts: "auto" freezes weights up to `FREEZE_LIMIT_BYTES`."""

FREEZE_LIMIT_BYTES = 1 << 30
"""The most weight bytes "auto" puts into the graph: half the 2 GiB a SavedModel's graph protobuf can hold."""


def weight_bytes(model) -> int:
    """Bytes of all of `model`'s weights in their stored dtypes."""
    return sum(math.prod(w.shape) * tf.as_dtype(w.dtype).size for w in model.weights)


def check_freeze_weights(freeze_weights):
    """Raises ValueError, naming the choices, unless `freeze_weights` is one of `FREEZE_CHOICES`."""
    if freeze_weights not in FREEZE_CHOICES or not isinstance(freeze_weights, (str, bool)):
        raise ValueError(f"`freeze_weights` must be one of {FREEZE_CHOICES}. Received: freeze_weights={freeze_weights!r}")


def should_freeze(model, freeze_weights) -> bool:
    """Whether the export puts `model`'s weights into the graph (`freeze_weights` already checked by
    `check_freeze_weights`).

    Raises:
        ValueError: `True` for weights that cannot fit a SavedModel's graph.
    """
    if freeze_weights is False:
        return False
    size = weight_bytes(model)
    if size <= FREEZE_LIMIT_BYTES:
        return True
    if freeze_weights is True:
        raise ValueError(f"The model's weights ({size / 2**30:.2f} GiB) do not fit a frozen SavedModel's graph "
                         f"(at most {FREEZE_LIMIT_BYTES / 2**30:.0f} GiB of constants; its protobuf is capped at 2 GiB). "
                         "Received: freeze_weights=True. Export with freeze_weights='auto' or False (weights as "
                         "variables).")
    return False


def frozen_forward(forward, height: int, width: int):
    """`forward` (float32 images (batch, height, width, 3) -> one tensor) traced once, with every variable it
    reads turned into a constant of its graph; returns a function of the images.

    Raises:
        ValueError: `forward` returns more (or less) than one tensor.
    """
    from tensorflow.python.framework import convert_to_constants

    concrete = tf.function(forward).get_concrete_function(tf.TensorSpec([None, height, width, 3], tf.float32))
    outputs = tf.nest.flatten(concrete.structured_outputs)
    if len(outputs) != 1:
        raise ValueError(f"A frozen forward pass serves one output tensor. Received a model whose outputs are "
                         f"{concrete.structured_outputs!r}")
    frozen = convert_to_constants.convert_variables_to_constants_v2(concrete)
    return lambda images: frozen(images)[0]  # the frozen function returns its outputs as a list
