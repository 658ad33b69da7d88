"""The training loop under MirroredStrategy (2 logical CPUs) and MultiWorkerMirroredStrategy (2 processes on
127.0.0.1), and a user-level `model.fit` under MirroredStrategy. Each runs in a fresh process."""

import json
import os
import socket
import subprocess
import sys
import textwrap

import h5py
import numpy as np
import pytest

pytestmark = pytest.mark.e2e  # the end-to-end tier: `python -m pytest -m e2e` (.ci/run runs it)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="", PYTHONPATH=ROOT)
TINY = dict(image_size=8, patch_size=4, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32, global_batch_size=16,
            log_every=1, show_predictions=0, export=False, jit_compile=False)
TWO_CPUS = """
import tensorflow as tf

_cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(_cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
"""


def run_python(code, tmp_path, timeout=240):
    script = tmp_path / "script.py"
    script.write_text(TWO_CPUS + textwrap.dedent(code))
    result = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=ENV, capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


def weights(path):
    arrays = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: arrays.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
    return arrays


def assert_same_weights(a, b, atol):
    a, b = weights(a), weights(b)
    assert a.keys() == b.keys() and len(a) > 10
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=0, atol=atol, err_msg=name)


def test_mirrored_over_two_replicas_equals_one_device_with_the_same_global_batch(tmp_path):
    # Replica r gets the r-th per-replica half of each global batch (same element seeds), so the summed
    # gradient, the global-norm clipping and the update must equal the single-device run's.
    out = run_python(
        f"""
        from training import config, loop
        for name, strategy in [("mirrored", tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])),
                               ("one_device", tf.distribute.OneDeviceStrategy("/cpu:0"))]:
            cfg = config.make_config("demo", steps=3, grad_clip_norm=0.05, optimizer="sgd", learning_rate=0.5, workdir=r"{tmp_path}/" + name, **{TINY!r})
            metrics = loop.run(cfg, strategy=strategy)
            print(name, strategy.num_replicas_in_sync, metrics["eval_examples"], metrics["steps"])
        """,
        tmp_path,
    )
    assert "mirrored 2 359 3" in out and "one_device 1 359 3" in out
    assert_same_weights(tmp_path / "mirrored" / "model.weights.h5", tmp_path / "one_device" / "model.weights.h5",
                        atol=2e-6)


def _free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def test_multi_worker_two_processes_end_with_identical_weights(tmp_path):
    ports = _free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    args = [f"--{k}={v}" for k, v in TINY.items()] + ["--steps=3", "--strategy=multi_worker", f"--workdir={tmp_path}"]
    workers = []
    for index in range(2):
        env = dict(ENV, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}))
        workers.append(subprocess.Popen([sys.executable, "-m", "training.train", *args], cwd=ROOT, env=env,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        outputs = [w.communicate(timeout=300) for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
    for w, (_, err) in zip(workers, outputs):
        assert w.returncode == 0, err[-4000:]
    chief_out = outputs[0][0]
    assert "2 replica(s), CollectiveAllReduceStrategy" in chief_out and "after 3 steps" in chief_out
    assert outputs[1][0] == ""  # only the chief prints and writes
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["steps"] == 3 and metrics["eval_examples"] == 359  # the two shards cover the test split once
    assert_same_weights(tmp_path / "model.weights.h5", tmp_path / "workers" / "1" / "model.weights.h5", atol=0)
    assert not (tmp_path / "workers" / "1" / "checkpoints").exists()


def test_user_model_fit_under_mirrored_strategy(tmp_path):
    out = run_python(
        """
        import json
        import keras
        import numpy as np
        import keras_vit

        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        with strategy.scope():
            model = keras_vit.ViT(image_size=8, patch_size=4, hidden_size=16, num_layers=1, num_heads=2,
                                  mlp_dim=32, classes=2, classifier_activation=None)
            model.compile(optimizer=keras.optimizers.Adam(3e-3),
                          loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
        rng = np.random.default_rng(0)
        labels = rng.integers(0, 2, 256)
        images = rng.uniform(-1, 0, (256, 8, 8, 3)).astype("float32") + labels[:, None, None, None]
        history = model.fit(images, labels, batch_size=32, epochs=4, verbose=0)
        print(json.dumps(dict(replicas=strategy.num_replicas_in_sync, **history.history)))
        """,
        tmp_path,
    )
    history = json.loads(out.strip().splitlines()[-1])
    assert history["replicas"] == 2
    assert history["loss"][-1] < history["loss"][0] and history["accuracy"][-1] > 0.9
