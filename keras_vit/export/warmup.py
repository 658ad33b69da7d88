"""`assets.extra/tf_serving_warmup_requests`: requests TF Serving replays when it loads a version, so the
first real request does not pay for graph optimisation (and XLA compilation).

The records are `tensorflow.serving.PredictionLog` protos from `tensorflow-serving-api`. That package's
normal install replaces tensorflow-cpu with the full tensorflow, so it is installed with `--no-deps`
(`pip install --no-deps tensorflow-serving-api`); without it the export skips this file and logs why.
"""

import logging
import os

import numpy as np
import tensorflow as tf

WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")
logger = logging.getLogger(__name__)


def sample_images(height: int, width: int) -> list[bytes]:
    """Two encoded images of different sizes (a JPEG and a PNG colour gradient) for the encoded signature."""
    yy, xx = np.mgrid[0:height, 0:width]
    gradient = np.stack([yy * 255 // max(height - 1, 1), xx * 255 // max(width - 1, 1), 128 + 0 * yy], -1)
    gradient = gradient.astype(np.uint8)
    return [
        tf.io.encode_jpeg(gradient).numpy(),
        tf.io.encode_png(gradient[: max(height // 2, 1), : max(width // 3, 1)]).numpy(),
    ]


def requests(model_name: str, signatures: dict, height: int, width: int) -> list:
    """PredictionLog records, one per signature: encoded images for `serving_default`, a float batch for
    the other one. `signatures` maps a signature name to its input name."""
    from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

    inputs = {
        "serving_default": np.array(sample_images(height, width), dtype=object),
    }
    float_batch = np.full((1, height, width, 3), 127.5, np.float32)
    logs = []
    for name, input_name in signatures.items():
        request = predict_pb2.PredictRequest(
            model_spec=model_pb2.ModelSpec(name=model_name, signature_name=name)
        )
        request.inputs[input_name].CopyFrom(tf.make_tensor_proto(inputs.get(name, float_batch)))
        logs.append(prediction_log_pb2.PredictionLog(predict_log=prediction_log_pb2.PredictLog(request=request)))
    return logs


def write(saved_model_dir: str, model_name: str, signatures: dict, height: int, width: int) -> str | None:
    """Writes the warmup file into `saved_model_dir`; returns its path, or None when the serving protos are
    not installed."""
    try:
        records = requests(model_name, signatures, height, width)
    except ImportError as error:
        logger.warning(
            "No TF Serving warmup file written (%s): install it with "
            "`pip install --no-deps tensorflow-serving-api`.", error
        )
        return None
    path = os.path.join(saved_model_dir, WARMUP_FILE)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path) as writer:
        for record in records:
            writer.write(record.SerializeToString())
    return path
