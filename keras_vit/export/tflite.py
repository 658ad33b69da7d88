"""TFLite export of the float signature: float32 (batch, H, W, 3) in 0..255 -> probabilities (or logits,
or features), with the [-1, 1] scaling in the graph. `quantize="dynamic_int8"` stores the weights as int8
(dynamic-range quantisation: about 4x smaller, activations stay float).

Run the file with the LiteRT interpreter (`pip install ai-edge-litert`); `tf.lite.Interpreter` works too.
"""

import os

import numpy as np
import tensorflow as tf

from keras_vit.export import signatures

QUANTIZE = (None, "dynamic_int8")


def float_function(model, spec):
    """(tf.Module holding the variables, concrete function float32 [None, H, W, 3] -> {name: output})."""
    outputs = signatures.pixels_to_outputs(model, spec)
    root = tf.Module()
    root.model_variables = list(model.variables)

    def forward(images):
        return {spec.output_name: outputs(images)}

    images = tf.TensorSpec([None, spec.height, spec.width, 3], tf.float32, name="images")
    root.forward = tf.function(forward, input_signature=[images])
    return root, root.forward.get_concrete_function()


def frozen(concrete):
    """`concrete` with its variables folded into constants.

    The converter's own freezing reads Keras 3 variables wrongly (garbage weights with TF 2.21 and Keras
    3.15, through both `from_concrete_functions` and `from_saved_model`; Keras' own LiteRT export avoids it
    by keeping resource variables, which leaves nothing to quantise). Folding them first is exact.
    """
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    return convert_variables_to_constants_v2(concrete)


def export(model, path, quantize=None, preprocessing="auto", overwrite=False) -> str:
    """Writes `model` as a TFLite flatbuffer at `path` and returns `path`.

    Args:
        model: a model `keras_vit.export.export_saved_model` accepts.
        path: the `.tflite` file to write.
        quantize: None (float32) or `"dynamic_int8"` (int8 weights).
        preprocessing: as `export_saved_model`.
        overwrite: replace an existing file.

    Example:
        >>> export(model, "vit.tflite")  # doctest: +SKIP
    """
    if quantize not in QUANTIZE:
        raise ValueError(f"`quantize` must be one of {QUANTIZE}. Received: quantize={quantize!r}")
    path = os.fspath(path)
    if os.path.exists(path) and not overwrite:
        raise ValueError(f"{path!r} already exists; pass overwrite=True (`--overwrite`). Received: path={path!r}")
    spec = signatures.inspect_model(model, preprocessing)
    _, concrete = float_function(model, spec)
    converter = tf.lite.TFLiteConverter.from_concrete_functions([frozen(concrete)])
    if quantize == "dynamic_int8":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    flatbuffer = converter.convert()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "wb") as file:
        file.write(flatbuffer)
    return path


def interpreter(path):
    """A LiteRT interpreter for `path` (`ai_edge_litert`), or `tf.lite.Interpreter` when LiteRT is absent."""
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        Interpreter = tf.lite.Interpreter
    return Interpreter(model_path=os.fspath(path))


def run(path, images: np.ndarray) -> np.ndarray:
    """Runs the TFLite file on float32 images (batch, H, W, 3) in 0..255; returns its one output."""
    runner = interpreter(path)
    source = runner.get_input_details()[0]
    runner.resize_tensor_input(source["index"], images.shape)
    runner.allocate_tensors()
    runner.set_tensor(source["index"], np.asarray(images, np.float32))
    runner.invoke()
    return runner.get_tensor(runner.get_output_details()[0]["index"])
