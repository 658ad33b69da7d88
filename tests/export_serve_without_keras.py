"""Serves an exported SavedModel in a process where Keras cannot be imported (run by tests/test_export.py).

    python export_serve_without_keras.py SAVED_MODEL_DIR REQUEST.json RESULT.npz

REQUEST.json: {"encoded": [base64 images], "pixels": "float batch .npy path"}. Writes both signatures'
outputs, the warmup replay results and proof that keras stayed out of the process.
"""

import sys

sys.modules["keras"] = None  # any `import keras` now raises ImportError, before TensorFlow is imported

import base64  # noqa: E402
import json  # noqa: E402

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def replay_warmup(loaded, path):
    """Runs every PredictionLog request of the warmup file against `loaded`; -> [(signature, outputs)]."""
    try:
        from tensorflow_serving.apis import prediction_log_pb2
    except ImportError:
        return None
    replies = []
    for record in tf.data.TFRecordDataset(path).as_numpy_iterator():
        log = prediction_log_pb2.PredictionLog.FromString(record)
        request = log.predict_log.request
        inputs = {name: tf.constant(tf.make_ndarray(proto)) for name, proto in request.inputs.items()}
        outputs = loaded.signatures[request.model_spec.signature_name](**inputs)
        replies.append([request.model_spec.signature_name, {k: list(v.shape) for k, v in outputs.items()}])
    return replies


def main(saved_model_dir, request_path, result_path):
    with open(request_path) as file:
        request = json.load(file)
    loaded = tf.saved_model.load(saved_model_dir)
    encoded = tf.constant([base64.b64decode(image) for image in request["encoded"]])
    served = {k: v.numpy() for k, v in loaded.signatures["serving_default"](images=encoded).items()}
    float_name = [name for name in loaded.signatures if name != "serving_default"][0]
    pixels = tf.constant(np.load(request["pixels"]))
    floats = {k: v.numpy() for k, v in loaded.signatures[float_name](images=pixels).items()}
    warmup = replay_warmup(loaded, f"{saved_model_dir}/assets.extra/tf_serving_warmup_requests")
    keras_loaded = [name for name, module in sys.modules.items() if name.startswith("keras") and module is not None]
    np.savez(
        result_path,
        **{f"serving_default/{k}": v.astype(str) if v.dtype == object else v for k, v in served.items()},
        **{f"{float_name}/{k}": v for k, v in floats.items()},
        signatures=np.array(sorted(loaded.signatures)),
        warmup=np.array(json.dumps(warmup)),
        keras_modules=np.array(json.dumps(keras_loaded)),
    )


if __name__ == "__main__":
    main(*sys.argv[1:4])
