"""Starts KServe's model server (TF Serving's REST API, `export_kserve_server.py`) on 127.0.0.1 in its own virtual
environment and talks to it: shared by the external tier (test_export_http.py) and the journeys tier.

kserve pins protobuf < 7 while the project's environment has protobuf 7, so it lives in `.venv-kserve`
(`python3 -m venv .venv-kserve && .venv-kserve/bin/pip install kserve tensorflow-cpu`; .ci/run installs it) or
at `$KERAS_VIT_KSERVE_PYTHON`.
"""

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def kserve_python():
    candidates = [os.environ.get("KERAS_VIT_KSERVE_PYTHON"), os.path.join(ROOT, ".venv-kserve", "bin", "python")]
    for python in filter(None, candidates):
        if os.path.exists(python):
            return python
    missing = pytest.fail if os.environ.get("KERAS_VIT_REQUIRE_SERVER") == "1" else pytest.skip  # .ci/run sets it
    missing(
        "KServe's model server is not installed: kserve pins protobuf<7 and the project venv has protobuf 7, so "
        "it needs its own venv: `python3 -m venv .venv-kserve && .venv-kserve/bin/pip install kserve "
        "tensorflow-cpu` (or set KERAS_VIT_KSERVE_PYTHON)"
    )


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def post(url, body, timeout=60):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")


def wait_ready(url, server, deadline):
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


def start(saved_model: str, model_name: str, seconds: int = 180) -> tuple:
    """(server process, its model URL) of `saved_model` served as `model_name`, once ready; the server exits by
    itself after `seconds`."""
    python, port = kserve_python(), free_port()
    env = {**os.environ, "KVIT_SAVED_MODEL": saved_model, "KVIT_MODEL_NAME": model_name, "KVIT_PORT": str(port),
           "KVIT_SERVER_SECONDS": str(seconds)}
    server = subprocess.Popen([python, os.path.join(HERE, "export_kserve_server.py")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}/v1/models/{model_name}"
    try:
        wait_ready(base, server, time.monotonic() + 150)
    except BaseException:
        stop(server)
        raise
    return server, base


def stop(server) -> None:
    server.terminate()
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait(timeout=30)
