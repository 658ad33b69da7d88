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
import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
import tensorflow as tf

from export_fixtures import encode, random_image, tiny_vit
from keras_vit.export import export_saved_model

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SERVER_SECONDS = 180


def _kserve_python():
    candidates = [os.environ.get("KERAS_VIT_KSERVE_PYTHON"), os.path.join(ROOT, ".venv-kserve", "bin", "python")]
    for python in filter(None, candidates):
        if os.path.exists(python):
            return python
    pytest.skip(
        "KServe's model server is not installed: kserve pins protobuf<7 and the project venv has protobuf 7, so "
        "it needs its own venv: `python3 -m venv .venv-kserve && .venv-kserve/bin/pip install kserve "
        "tensorflow-cpu` (or set KERAS_VIT_KSERVE_PYTHON)"
    )


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _post(url, body, timeout=60):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")


def _wait_ready(url, server, deadline):
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"the server exited with {server.returncode}: {server.stdout.read()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=5) as reply:
                if json.loads(reply.read()).get("ready"):
                    return
        except (urllib.error.URLError, ConnectionError, json.JSONDecodeError):
            pass
        time.sleep(1)
    pytest.fail("the server did not become ready in time")


@pytest.mark.external  # a TF Serving-compatible server in its own environment
def test_tf_serving_rest_round_trip(tmp_path):
    python = _kserve_python()
    model_name = "vit_tiny"
    path = export_saved_model(tiny_vit(), tmp_path / model_name, top_k=3)
    port = _free_port()
    env = {**os.environ, "KVIT_SAVED_MODEL": path, "KVIT_MODEL_NAME": model_name, "KVIT_PORT": str(port),
           "KVIT_SERVER_SECONDS": str(SERVER_SECONDS)}
    server = subprocess.Popen([python, os.path.join(HERE, "export_kserve_server.py")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}/v1/models/{model_name}"
    try:
        _wait_ready(base, server, time.monotonic() + 150)
        images = [encode(random_image((40, 30, 3), 1), "PNG"),
                  tf.io.encode_jpeg(random_image((20, 50, 3), 2)).numpy()]
        status, reply = _post(f"{base}:predict", {"instances": [{"b64": base64.b64encode(b).decode()} for b in images]})
        assert status == 200, reply
        expected = tf.saved_model.load(path).signatures["serving_default"](images=tf.constant(images))
        predictions = reply["predictions"]
        assert len(predictions) == 2
        np.testing.assert_allclose([p["scores"] for p in predictions], expected["scores"].numpy(), atol=1e-6)
        assert [p["classes"] for p in predictions] == expected["classes"].numpy().tolist()
        assert [p["labels"] for p in predictions] == [[f"class_{c}" for c in row] for row in expected["classes"].numpy()]

        status, reply = _post(f"{base}:predict", {"instances": [{"b64": base64.b64encode(b"not an image").decode()}]})
        assert status == 400 and "Not a JPEG, PNG, GIF or BMP" in reply
        status, _ = _post(f"{base}:predict", {"instances": [{"b64": base64.b64encode(images[0]).decode()}]})
        assert status == 200  # the server survived the bad request
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=30)
