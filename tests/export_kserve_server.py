"""Serves an exported SavedModel over HTTP with KServe's model server, which speaks TF Serving's REST API
(`POST /v1/models/NAME:predict` with `{"instances": [{"b64": ...}]}`). Run by tests/test_export_http.py
in a separate virtual environment holding kserve and tensorflow-cpu (kserve pins protobuf 6, the project
venv has 7); Keras is blocked, as in TF Serving. Listens on 127.0.0.1 only and exits by itself after
KVIT_SERVER_SECONDS.

    KVIT_SAVED_MODEL=... KVIT_MODEL_NAME=... KVIT_PORT=... python export_kserve_server.py
"""

import os
import sys
import threading

sys.modules["keras"] = None  # the SavedModel must serve without Keras
sys.argv = sys.argv[:1]  # kserve parses the command line when imported

import base64  # noqa: E402

import tensorflow as tf  # noqa: E402
import uvicorn  # noqa: E402

_config_init = uvicorn.Config.__init__


def _loopback_only(self, *args, **kwargs):
    """kserve hard-codes host 0.0.0.0; this test server listens on the loopback interface only."""
    kwargs["host"] = "127.0.0.1"
    _config_init(self, *args, **kwargs)


uvicorn.Config.__init__ = _loopback_only

import kserve  # noqa: E402
from kserve.errors import InvalidInput  # noqa: E402


def _encoded(instance):
    """TF Serving REST row format: `{"b64": ...}` or `{"images": {"b64": ...}}`."""
    if isinstance(instance, dict) and "images" in instance:
        instance = instance["images"]
    if not isinstance(instance, dict) or "b64" not in instance:
        raise InvalidInput('each instance must be {"b64": "<base64 image>"}')
    return base64.b64decode(instance["b64"])


class SavedModelPredictor(kserve.Model):
    """`serving_default` of a SavedModel behind KServe's V1 (TF Serving REST) endpoint."""

    def __init__(self, name, path):
        super().__init__(name)
        self.path = path
        self.load()

    def load(self):
        self.signature = tf.saved_model.load(self.path).signatures["serving_default"]
        self.ready = True
        return self.ready

    def predict(self, payload, headers=None, response_headers=None):
        images = tf.constant([_encoded(instance) for instance in payload["instances"]])
        try:
            outputs = self.signature(images=images)
        except tf.errors.InvalidArgumentError as error:  # what TF Serving answers with HTTP 400
            raise InvalidInput(error.message[:2000]) from None
        rows = {k: v.numpy().tolist() for k, v in outputs.items()}
        rows["labels"] = [[label.decode() for label in row] for row in rows["labels"]]
        return {"predictions": [{k: v[i] for k, v in rows.items()} for i in range(len(images))]}

def main():
    seconds = float(os.environ.get("KVIT_SERVER_SECONDS", "120"))
    threading.Timer(seconds, lambda: os._exit(0)).start()  # bounded: stops by itself
    model = SavedModelPredictor(os.environ["KVIT_MODEL_NAME"], os.environ["KVIT_SAVED_MODEL"])
    kserve.ModelServer(http_port=int(os.environ["KVIT_PORT"]), enable_grpc=False, workers=1).start([model])


if __name__ == "__main__":
    main()
