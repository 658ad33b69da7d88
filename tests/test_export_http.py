"""Opt-in (`pytest -m external`: needs a TF Serving-compatible server in its own environment): an exported SavedModel served over real HTTP in TF Serving's REST format.

No TF Serving binary installs from the registries this project can reach, so the server is KServe's model
server (`kserve` on PyPI), whose V1 protocol is TF Serving's REST API: `POST /v1/models/NAME:predict` with
`{"instances": [{"b64": ...}]}`, errors as HTTP 400. kserve 0.21 pins protobuf < 7 while the project's
TensorFlow environment has protobuf 7, so it lives in its own virtual environment, with tensorflow-cpu
(the two agree on protobuf 6.33; `pip check` is clean):

    python3 -m venv .venv-kserve && .venv-kserve/bin/pip install kserve tensorflow-cpu

The test finds that interpreter at `.venv-kserve/bin/python` or `$KERAS_VIT_KSERVE_PYTHON`. The server
listens on 127.0.0.1 only, and the test sends a bounded number of requests and stops it; the server also
exits by itself after 180 s.
"""

import base64

import numpy as np
import pytest
import tensorflow as tf

from export_fixtures import encode, random_image, tiny_vit
import kserve_client
from kserve_client import post
from keras_vit.export import export_saved_model

SERVER_SECONDS = 180


@pytest.mark.external  # a TF Serving-compatible server in its own environment
def test_tf_serving_rest_round_trip(tmp_path):
    model_name = "vit_tiny"
    path = export_saved_model(tiny_vit(), tmp_path / model_name, top_k=3)
    server, base = kserve_client.start(path, model_name, SERVER_SECONDS)
    try:
        images = [encode(random_image((40, 30, 3), 1), "PNG"),
                  tf.io.encode_jpeg(random_image((20, 50, 3), 2)).numpy()]
        status, reply = post(f"{base}:predict", {"instances": [{"b64": base64.b64encode(b).decode()} for b in images]})
        assert status == 200, reply
        expected = tf.saved_model.load(path).signatures["serving_default"](images=tf.constant(images))
        predictions = reply["predictions"]
        assert len(predictions) == 2
        np.testing.assert_allclose([p["scores"] for p in predictions], expected["scores"].numpy(), atol=1e-6)
        assert [p["classes"] for p in predictions] == expected["classes"].numpy().tolist()
        assert [p["labels"] for p in predictions] == [[f"class_{c}" for c in row] for row in expected["classes"].numpy()]

        status, reply = post(f"{base}:predict", {"instances": [{"b64": base64.b64encode(b"not an image").decode()}]})
        assert status == 400 and "Not a JPEG, PNG, GIF or BMP" in reply
        status, _ = post(f"{base}:predict", {"instances": [{"b64": base64.b64encode(images[0]).decode()}]})
        assert status == 200  # the server survived the bad request
    finally:
        kserve_client.stop(server)
