"""ONNX export of the float signature through tf2onnx (`pip install "keras-vit-applications[onnx]"`: tf2onnx, onnxruntime).

Input `images` float32 (batch, H, W, 3) in 0..255, output `probabilities` (or `logits`, or `features`),
the [-1, 1] scaling in the graph. Exact-GELU models (`gelu_approximate=False`, timm/HF weights) contain
TensorFlow's `Erfc` op, which tf2onnx does not convert: it logs "Tensorflow op ... Erfc is not supported",
still returns a model, and that model fails to load ("No Op registered for Erfc"). This module converts
Erfc as 1 - Erf (ONNX `Erf`, opset 9+), which is exact to float rounding, and fails loudly if tf2onnx logs
any other unsupported op.
"""

import logging
import os

import numpy as np
import tensorflow as tf

from keras_vit import extras
from keras_vit.export import signatures, tflite

DEFAULT_OPSET = 17


def require_tf2onnx():
    """The `tf2onnx` module, or `keras_vit.extras.MissingExtra` naming the `onnx` extra."""
    return extras.require("tf2onnx", "onnx", "the ONNX export")


def _erfc_as_one_minus_erf(ctx, node, name, args):
    """tf2onnx handler: Erfc(x) -> Sub(1, Erf(x))."""
    from tf2onnx import utils

    dtype = utils.map_onnx_to_numpy_type(ctx.get_dtype(node.input[0]))
    node.type = "Erf"
    one = ctx.make_const(utils.make_name(f"{name}_one"), np.array(1, dtype=dtype))
    ctx.insert_new_node_on_output("Sub", node.output[0], name=utils.make_name(f"{name}_erfc"),
                                  inputs=[one.output[0], node.output[0]])


class _UnsupportedOps(logging.Handler):
    """Collects the error records tf2onnx logs while converting (it does not raise on unsupported ops)."""

    def __init__(self):
        super().__init__(level=logging.ERROR)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def export(model, path, preprocessing="auto", opset=None, overwrite=False) -> str:
    """Writes `model` as an ONNX file at `path` and returns `path`.

    Args:
        model: a model `keras_vit.export.export_saved_model` accepts.
        path: the `.onnx` file to write.
        preprocessing: as `export_saved_model`.
        opset: ONNX opset (default 17).
        overwrite: replace an existing file.

    Raises:
        ValueError: `path` exists and `overwrite` is False.
        keras_vit.extras.MissingExtra: tf2onnx is not installed (an ImportError naming the `onnx` extra).
        RuntimeError: tf2onnx logged an error (an op it could not convert).

    Example:
        >>> export(model, "vit.onnx")  # doctest: +SKIP
    """
    tf2onnx = require_tf2onnx()
    path = os.fspath(path)
    if os.path.exists(path) and not overwrite:
        raise ValueError(f"{path!r} already exists; pass overwrite=True (`--overwrite`). Received: path={path!r}")
    spec = signatures.inspect_model(model, preprocessing)
    root, concrete = tflite.float_function(model, spec)
    collector = _UnsupportedOps()
    tf2onnx_logger = logging.getLogger("tf2onnx")
    tf2onnx_logger.addHandler(collector)
    try:
        model_proto, _ = tf2onnx.convert.from_function(
            root.forward,
            input_signature=[tf.TensorSpec([None, spec.height, spec.width, 3], tf.float32, name="images")],
            opset=opset or DEFAULT_OPSET,
            custom_op_handlers={"Erfc": (_erfc_as_one_minus_erf, [])},
        )
    finally:
        tf2onnx_logger.removeHandler(collector)
    if collector.messages:
        raise RuntimeError("tf2onnx could not convert the model: " + "; ".join(collector.messages))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "wb") as file:
        file.write(model_proto.SerializeToString())
    return path
