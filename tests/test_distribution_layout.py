"""`keras_vit.layout_map` (a ViT's `LayoutMap` for `keras.distribution.ModelParallel`) and
`keras_vit.distribution.initialize` (multi-host, bounded when the coordinator is unreachable).

The default tier checks the layouts and the refusals (no JAX process); the e2e tier runs `model.fit` on the JAX
backend in subprocesses (the backend is chosen at import) with two forced CPU devices per process: model parallel
equal to data parallel and to one device, and two processes as two hosts equal to one process on the same
global batch, their checkpoint read by one process (tests/distribution_worker.py).
"""

import json
import os
import socket
import subprocess
import sys
import time

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import distribution

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = os.path.join(ROOT, "tests", "distribution_worker.py")
TINY = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, classes=5)


def mesh(model=2, batch=1):
    return keras.distribution.DeviceMesh((batch, model), ["batch", "model"],
                                         devices=[f"cpu:{i}" for i in range(batch * model)])


def test_the_attention_and_mlp_kernels_are_sharded_on_the_model_axis():
    model = keras_vit.ViT(**TINY)
    layouts = keras_vit.layout_map(model, mesh())
    sharded = {}
    for variable in model.weights:
        layout = layouts[variable.path]  # raises if a path matched two keys
        if layout is not None:
            assert len(layout.axes) == len(variable.shape), variable.path
            sharded[variable.path.split("/", 1)[1]] = layout.axes
    assert sharded == {  # everything else replicated (the out bias is added after the sum over heads)
        "attention/query/kernel": (None, "model", None), "attention/query/bias": ("model", None),
        "attention/key/kernel": (None, "model", None), "attention/key/bias": ("model", None),
        "attention/value/kernel": (None, "model", None), "attention/value/bias": ("model", None),
        "attention/out/kernel": ("model", None, None),
        "mlp_dense_1/kernel": (None, "model"), "mlp_dense_1/bias": ("model",), "mlp_dense_2/kernel": ("model", None),
    }
    assert layouts["head/kernel"] is None and layouts["patch_encoder/projection/kernel"] is None


def test_a_config_a_variant_name_and_another_axis_name():
    custom = keras.distribution.DeviceMesh((4,), ["tp"], devices=[f"cpu:{i}" for i in range(4)])
    layouts = keras_vit.layout_map("B16", custom, model_axis="tp")
    assert layouts["encoder_block_11/mlp_dense_2/kernel"].axes == ("tp", None)
    assert keras_vit.layout_map(dict(hidden_size=768, mlp_dim=3072), mesh(4)) is not None  # heads from the width


@pytest.mark.parametrize("config, shards, dimension", [
    ("B16", 5, "num_heads=12"),
    (dict(num_heads=4, mlp_dim=66), 4, "mlp_dim=66"),
])
def test_a_mesh_that_does_not_divide_a_dimension_is_refused(config, shards, dimension):
    with pytest.raises(ValueError) as error:
        keras_vit.layout_map(config, mesh(shards))
    message = str(error.value)
    assert dimension in message and f"'model' has {shards} devices" in message


def test_a_mesh_without_the_model_axis_or_a_config_without_sizes_is_refused():
    with pytest.raises(ValueError, match=r"no axis 'model'.*\['data'\]"):
        keras_vit.layout_map(TINY, keras.distribution.DeviceMesh((2,), ["data"], devices=["cpu:0", "cpu:1"]))
    with pytest.raises(ValueError, match="mlp_dim"):
        keras_vit.layout_map(dict(num_heads=4), mesh())


def _closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_coordinator_fails_in_bounded_time_naming_it():
    address = f"127.0.0.1:{_closed_port()}"
    start = time.monotonic()
    with pytest.raises(ConnectionError) as error:
        distribution.initialize(address, num_processes=2, process_id=1, timeout=1.0)
    assert time.monotonic() - start < 10
    assert address in str(error.value) and "\n" not in str(error.value)
    with pytest.raises(ConnectionError, match="192.0.2.1:1234 is not an address of this host"):  # TEST-NET-1
        distribution.initialize("192.0.2.1:1234", num_processes=2, process_id=0)
    with pytest.raises(ValueError, match="process_id must be in"):
        distribution.initialize(address, num_processes=2, process_id=2)
    with pytest.raises(ValueError, match=r"name 3 processes but num_processes is 2.*Received: job_addresses="):
        distribution.initialize(f"{address},127.0.0.1:2,127.0.0.1:3", num_processes=2, process_id=1)


def _jax_env():
    return dict(os.environ, KERAS_BACKEND="jax", XLA_FLAGS="--xla_force_host_platform_device_count=2",
                PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), TF_CPP_MIN_LOG_LEVEL="2")


def _worker(*args):
    return subprocess.Popen([sys.executable, WORKER, *map(str, args)], cwd=ROOT, env=_jax_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(process, timeout=300):
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        pytest.fail(f"worker timed out after {timeout} s:\n{output[-3000:]}")
    assert process.returncode == 0, output[-3000:]


def _close(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


@pytest.mark.e2e
def test_model_parallel_equals_data_parallel_and_one_device(tmp_path):
    out = tmp_path / "local.json"
    _finish(_worker("local", out))
    runs = json.loads(out.read_text())
    single = runs["single"]
    assert single["loss"][-1] < single["loss"][0]  # it trains
    for name in ("data", "model"):
        assert _close(runs[name]["loss"], single["loss"]) < 1e-5, (name, runs[name]["loss"], single["loss"])
        assert _close(runs[name]["outputs"], single["outputs"]) < 1e-5, name
    assert runs["model"]["mlp_dense_1_shards"] == [[32, 32], [32, 32]]  # (D, mlp_dim / 2) on each device
    first, last = runs["refusals"]
    assert "multiple of 2. Received: batch_size=3." in first, first
    assert "Received: 9 samples in batches of 4, a last batch of 1." in last, last


@pytest.mark.e2e
def test_two_processes_as_two_hosts_equal_one_process(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    checkpoint = tmp_path / "pair.weights.h5"
    reference = _worker("local", tmp_path / "local.json")
    hosts = [_worker("host", tmp_path / f"host{i}.json", address, i, checkpoint) for i in (0, 1)]
    for process in hosts + [reference]:
        _finish(process)
    single = json.loads((tmp_path / "local.json").read_text())["single"]
    for i in (0, 1):
        run = json.loads((tmp_path / f"host{i}.json").read_text())
        assert run["process_count"] == 2 and run["devices"] == 4
        assert _close(run["loss"], single["loss"]) < 1e-5, (i, run["loss"], single["loss"])
    loaded = _worker("load", tmp_path / "load.json", checkpoint)  # one process reads the pair's checkpoint
    _finish(loaded)
    assert _close(json.loads((tmp_path / "load.json").read_text())["outputs"], single["outputs"]) < 1e-5
