"""`model.fit` beyond one device: a `keras.distribution.LayoutMap` for a ViT (`layout_map`), and a multi-host
`initialize` that fails within a bounded time when the coordinator cannot be reached.

`layout_map` shards the encoder's kernels over the mesh's model axis, Megatron-style: the query, key and
value kernels (D, heads, head_dim) and biases (heads, head_dim) on their heads axis, the attention's `out`
kernel (heads, head_dim, D) on its input (heads) axis, `mlp_dense_1` (D, mlp_dim) and its bias on the output
axis, `mlp_dense_2` (mlp_dim, D) on its input axis. Every other weight (patch projection, tokens, norms, the
head, biases summed after a sharded product) is replicated. Use it with `keras.distribution.ModelParallel`
(JAX; a prototype on TensorFlow); docs/TRAINING.md ("model.fit beyond one host") has the recipes.

Example:
    >>> import keras
    >>> mesh = keras.distribution.DeviceMesh((1, 2), ["batch", "model"], devices=["cpu:0", "cpu:1"])
    >>> layouts = layout_map(dict(num_heads=4, mlp_dim=64), mesh)
    >>> layouts["encoder_block_0/attention/query/kernel"].axes
    (None, 'model', None)
    >>> layouts["encoder_block_0/mlp_dense_2/kernel"].axes
    ('model', None)
    >>> layouts["encoder_block_0/mlp_norm/gamma"] is None  # replicated
    True
"""

from __future__ import annotations

import os
import socket
import time

from keras_vit import model_parts, variants

_SHARDED = {
    # regex matching the whole variable path -> (its axes, the sharded dimension's name)
    r".*attention/(query|key|value)/kernel": ((None, "model", None), "num_heads"),
    r".*attention/(query|key|value)/bias": (("model", None), "num_heads"),
    r".*attention/out/kernel": (("model", None, None), "num_heads"),
    r".*mlp_dense_1/kernel": ((None, "model"), "mlp_dim"),
    r".*mlp_dense_1/bias": (("model",), "mlp_dim"),
    r".*mlp_dense_2/kernel": (("model", None), "mlp_dim"),
}
"""The sharded weights. Keras matches each key with `re.fullmatch` on `variable.path`
(`encoder_block_3/attention/query/kernel`); no path matches two keys."""


def _dimensions(model_or_config) -> dict:
    """{"num_heads": int, "mlp_dim": int} of a keras_vit ViT, a dict of `keras_vit.ViT` arguments or a variant
    name ("B16", "ViT-B/16")."""
    if isinstance(model_or_config, str):
        model_or_config = variants.get_variant(model_or_config).architecture()
    if isinstance(model_or_config, dict):
        config = dict(model_or_config)
        if config.get("num_heads") is None and config.get("hidden_size") is not None:
            config["num_heads"] = variants.resolve_num_heads(None, config["hidden_size"], "the config")
        missing = [key for key in ("num_heads", "mlp_dim") if not isinstance(config.get(key), int)]
        if missing:
            raise ValueError(
                f"layout_map needs the config's {' and '.join(missing)} (keras_vit.ViT arguments) to check the "
                f"mesh against them. Received: {model_or_config!r}")
        return {"num_heads": config["num_heads"], "mlp_dim": config["mlp_dim"]}
    if not model_parts.is_vit(model_or_config):
        raise ValueError(
            "layout_map takes a keras_vit ViT, a dict of its arguments or a variant name. Received: "
            f"{type(model_or_config).__name__}")
    blocks = model_parts.encoder_blocks(model_or_config)
    return {"num_heads": blocks[0].attention.num_heads, "mlp_dim": blocks[0].mlp_dim}


def layout_map(model_or_config, device_mesh, model_axis: str = "model"):
    """A `keras.distribution.LayoutMap` sharding a ViT's attention and MLP kernels over `device_mesh`'s
    `model_axis`, for `keras.distribution.ModelParallel(layout_map=..., batch_dim_name=...)`.

    Args:
        model_or_config: a keras_vit ViT (built or reloaded), a dict of `keras_vit.ViT` arguments with
            `num_heads` (or a standard `hidden_size`) and `mlp_dim`, or a variant name such as `"B16"`.
        device_mesh: a `keras.distribution.DeviceMesh` with an axis named `model_axis`.
        model_axis: the mesh axis the kernels are split over.

    Returns:
        The `LayoutMap`. Build the model (or load it) after setting the distribution, so that its weights are
        created sharded.

    Raises:
        ValueError: a mesh without `model_axis`, or whose `model_axis` size does not divide the number of heads
            or the MLP width (naming the dimension, its size and the mesh axis).
    """
    import keras

    dims = _dimensions(model_or_config)
    names = list(device_mesh.axis_names)
    if model_axis not in names:
        raise ValueError(
            f"The device mesh has no axis {model_axis!r} to shard the ViT's kernels over. Received: mesh axes "
            f"{names} of shape {tuple(device_mesh.shape)}")
    shards = int(device_mesh.shape[names.index(model_axis)])
    for dimension, size in dims.items():
        if size % shards:
            raise ValueError(
                f"The mesh axis {model_axis!r} has {shards} devices, which does not divide the ViT's {dimension}="
                f"{size}: each device must hold a whole share of it. Use a {model_axis!r} axis size dividing "
                f"{size}.")
    layouts = keras.distribution.LayoutMap(device_mesh)
    for key, (axes, _) in _SHARDED.items():
        layouts[key] = tuple(axis if axis is None else model_axis for axis in axes)
    return layouts


ENVIRONMENT = ("KERAS_DISTRIBUTION_JOB_ADDRESSES", "KERAS_DISTRIBUTION_NUM_PROCESSES",
               "KERAS_DISTRIBUTION_PROCESS_ID")
"""The environment variables `keras.distribution.initialize` reads when its arguments are None."""


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.strip().rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"A coordinator address is host:port. Received: {address!r}")
    return host.strip("[]"), int(port)


def wait_for_coordinator(address: str, timeout: float = 60.0) -> None:
    """Returns once a TCP connection to `address` ("host:port") opens; raises after `timeout` seconds.

    Raises:
        ConnectionError: one line naming the address and the time waited.
    """
    host, port = _host_port(address)
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=max(0.1, min(2.0, deadline - time.monotonic()))):
                return
        except OSError as error:
            if time.monotonic() >= deadline:
                raise ConnectionError(
                    f"The coordinator {address} could not be reached within {timeout:g} s ({error}); check the "
                    f"address and that process 0 is running.") from None
            time.sleep(0.5)


def initialize(job_addresses: str | None = None, num_processes: int | None = None, process_id: int | None = None,
               timeout: float = 60.0) -> None:
    """`keras.distribution.initialize` (arguments, or the `ENVIRONMENT` variables when None), failing within
    `timeout` seconds when the coordinator (the first job address) cannot be reached: process 0 checks that the
    address is one of this host's, the others that a TCP connection to it opens. (Without this, JAX waits 300 s
    for a coordinator that never answers.)

    Raises:
        ValueError: missing settings, a process id outside [0, num_processes), or a list of job addresses
            whose length is not the process count.
        ConnectionError: one line naming the unreachable coordinator.
    """
    import keras

    job_addresses = job_addresses or os.environ.get(ENVIRONMENT[0]) or None
    if num_processes is None and os.environ.get(ENVIRONMENT[1]):
        num_processes = int(os.environ[ENVIRONMENT[1]])
    if process_id is None and os.environ.get(ENVIRONMENT[2]):
        process_id = int(os.environ[ENVIRONMENT[2]])
    if job_addresses is None or num_processes is None or process_id is None:
        raise ValueError(
            f"initialize needs the coordinator address, the process count and this process's id (arguments, or "
            f"{', '.join(ENVIRONMENT)}). Received: job_addresses={job_addresses!r}, num_processes={num_processes!r},"
            f" process_id={process_id!r}")
    if not 0 <= process_id < num_processes:
        raise ValueError(f"process_id must be in [0, num_processes). Received: process_id={process_id}, "
                         f"num_processes={num_processes}")
    addresses = [address.strip() for address in job_addresses.split(",")]
    if len(addresses) > 1 and len(addresses) != num_processes:
        raise ValueError(
            f"The job addresses name {len(addresses)} processes but num_processes is {num_processes}: give every "
            f"process the same list of all {num_processes} addresses, or the coordinator's alone. Received: "
            f"job_addresses={job_addresses!r}, num_processes={num_processes}")
    coordinator = addresses[0]
    host, _ = _host_port(coordinator)
    if process_id == 0:  # the coordinator runs here: its address must be this host's
        try:
            with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
                probe.bind((host, 0))
        except OSError as error:
            raise ConnectionError(
                f"The coordinator {coordinator} is not an address of this host ({error}); process 0 runs the "
                f"coordinator, so give it one of its own addresses.") from None
    else:
        wait_for_coordinator(coordinator, timeout)
    keras.distribution.initialize(job_addresses, num_processes=num_processes, process_id=process_id)
