"""The `tf.distribute` strategy factory: the model, optimizer and metrics are built in its scope.

* `one_device`: the first GPU if any, else the CPU.
* `mirrored`: `MirroredStrategy` over all local GPUs (or the given logical devices).
* `multi_worker`: `MultiWorkerMirroredStrategy`, configured by the `TF_CONFIG` environment variable
  (`{"cluster": {"worker": ["host:port", ...]}, "task": {"type": "worker", "index": i}}`).
* `tpu`: `TPUStrategy` via `TPUClusterResolver(tpu=address)` (address "" or "local" on a TPU VM).
* `auto`: `tpu` when a TPU is found, `multi_worker` when TF_CONFIG names several workers, `mirrored` with
  more than one GPU, else `one_device`.

Example:
    >>> strategy = make_strategy("one_device")
    >>> strategy.num_replicas_in_sync
    1
"""

from __future__ import annotations

import glob
import json
import os

import tensorflow as tf

STRATEGIES = ("auto", "one_device", "mirrored", "multi_worker", "tpu")


def make_strategy(name: str = "auto", tpu: str | None = None, devices=None) -> tf.distribute.Strategy:
    """Returns the `tf.distribute.Strategy` called `name` (see the module docstring).

    Raises:
        ValueError: for an unknown name, or `multi_worker` without a usable TF_CONFIG.
    """
    if name not in STRATEGIES:
        raise ValueError(f"Unknown strategy. Received: strategy={name!r}. Known: {', '.join(STRATEGIES)}")
    if name == "auto":
        name = _auto(tpu)
    if name == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu or "")
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    if name == "multi_worker":
        if not _num_workers():
            raise ValueError(
                "strategy='multi_worker' needs TF_CONFIG with a 'cluster' of workers and this 'task'. "
                f"Received: TF_CONFIG={os.environ.get('TF_CONFIG')!r}"
            )
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy(devices=devices)
    gpus = tf.config.list_logical_devices("GPU")
    return tf.distribute.OneDeviceStrategy(gpus[0].name if gpus else "/cpu:0")


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """True on the worker that writes checkpoints, summaries, metrics and exports (task 0, or the only one)."""
    return bool(getattr(strategy.extended, "should_checkpoint", True))


def task_id(strategy: tf.distribute.Strategy) -> int:
    resolver = getattr(strategy, "cluster_resolver", None)
    return int(resolver.task_id or 0) if resolver is not None and resolver.task_id is not None else 0


def _num_workers() -> int:
    try:
        cluster = json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {})
    except json.JSONDecodeError as error:
        raise ValueError(f"TF_CONFIG is not valid JSON. Received: TF_CONFIG={os.environ.get('TF_CONFIG')!r}") from error
    return len(cluster.get("worker", [])) + len(cluster.get("chief", []))


def _auto(tpu: str | None) -> str:
    # Probing with TPUClusterResolver would query the GCE metadata server (a network call that can hang
    # off Google Cloud); a TPU is assumed only when one is named or a TPU VM's device files exist.
    if tpu is not None or os.environ.get("TPU_NAME") or glob.glob("/dev/accel*"):
        return "tpu"
    if _num_workers() > 1:
        return "multi_worker"
    if len(tf.config.list_logical_devices("GPU")) > 1:
        return "mirrored"
    return "one_device"
