"""The cases of `benchmarks/accelerator.py`: keras_vit (JAX or TensorFlow backend, bf16 mixed precision, XLA) and
timm (PyTorch, bf16 autocast, eager or `torch.compile`) training steps and inference on one accelerator.

Tasks (spec["task"]):
    probe: the device this framework sees (name, platform, compute capability, bf16 support); nothing timed.
    flops: `keras_vit.forward_flops` of the architecture (TensorFlow backend), one image.
    train: a training step (AdamW, sparse cross-entropy on logits), at the first of spec["batches"] that fits:
        a batch that runs out of device memory is recorded in `extra.oom` and the next (smaller) one is tried.
        keras_vit: `model.train_on_batch` of a model compiled with `jit_compile=True` under `mixed_bfloat16`;
        timm: forward under `torch.autocast(bfloat16)`, backward, fused AdamW step (eager or compiled model).
    infer: every batch of spec["batches"]; keras_vit: `stateless_call` under `jax.jit` (JAX) or a
        `tf.function(jit_compile=True)` (TensorFlow); timm: `torch.inference_mode()` + autocast.

Inputs live on the device before timing; each timed call waits for its result (the loss as a Python float, or
`block_until_ready` / `torch.cuda.synchronize`). Without `spec["dry_run"]` a device that is not a GPU with bf16
(compute capability 8.0 or newer) is refused with one line (`AcceleratorError`).
"""

import gc
import os

import numpy as np

import measure

ERROR_PREFIX = "ACCELERATOR_ERROR "
"""Starts the one line a child prints (and exits 2) when the device cannot run the benchmark."""

OOM_MARKERS = ("RESOURCE_EXHAUSTED", "out of memory", "OutOfMemory", "OOM when allocating")


class AcceleratorError(RuntimeError):
    """The device cannot run the benchmark (no GPU, or no bfloat16)."""


def is_oom(error) -> bool:
    text = f"{type(error).__name__}: {error}"
    return any(marker.lower() in text.lower() for marker in OOM_MARKERS)


def check_device(device, dry_run):
    """Raises AcceleratorError unless `device` (a `probe` dict) is a GPU with bfloat16, or this is a dry run."""
    if dry_run:
        return
    if device["platform"] != "gpu":
        raise AcceleratorError(
            f"{device['framework']} sees no GPU (device {device['name']!r}, platform {device['platform']!r}): "
            f"this benchmark measures an accelerator; run it with --dry-run on a CPU.")
    capability = device.get("compute_capability")
    if not device.get("bf16") or (capability is not None and float(capability) < 8.0):
        raise AcceleratorError(
            f"The device {device['name']!r} (compute capability {capability}) has no bfloat16 support: the "
            f"benchmark runs in bf16 mixed precision, which needs compute capability 8.0 or newer (A100, H100, H200).")


def _jax_device():
    import jax

    device = jax.devices()[0]
    capability = getattr(device, "compute_capability", None)
    gpu = device.platform in ("gpu", "cuda", "rocm")
    return {"framework": "jax", "name": device.device_kind, "platform": "gpu" if gpu else device.platform,
            "compute_capability": capability, "count": jax.device_count(), "version": jax.__version__,
            "bf16": (not gpu) or capability is None or float(capability) >= 8.0}


def _tf_device():
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return {"framework": "tensorflow", "name": "cpu", "platform": "cpu", "compute_capability": None,
                "count": 1, "version": tf.__version__, "bf16": True}
    details = tf.config.experimental.get_device_details(gpus[0])
    capability = details.get("compute_capability")
    capability = f"{capability[0]}.{capability[1]}" if capability else None
    return {"framework": "tensorflow", "name": details.get("device_name", "GPU"), "platform": "gpu",
            "compute_capability": capability, "count": len(gpus), "version": tf.__version__,
            "bf16": capability is None or float(capability) >= 8.0}


def _torch_device():
    import torch

    if not torch.cuda.is_available():
        return {"framework": "torch", "name": "cpu", "platform": "cpu", "compute_capability": None, "count": 1,
                "version": torch.__version__, "bf16": True}
    major, minor = torch.cuda.get_device_capability(0)
    return {"framework": "torch", "name": torch.cuda.get_device_name(0), "platform": "gpu",
            "compute_capability": f"{major}.{minor}", "count": torch.cuda.device_count(),
            "version": torch.__version__, "bf16": torch.cuda.is_bf16_supported()}


def device_info(spec):
    if spec["framework"] == "timm":
        return _torch_device()
    return _jax_device() if spec["backend"] == "jax" else _tf_device()


def _images(batch, arch, seed=1):
    size = arch["image_size"]
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (batch, size, size, 3)).astype("float32"), np.arange(batch) % arch["classes"]


# keras_vit ----------------------------------------------------------------------------------------------------


def _keras_model(spec):
    import keras

    import keras_vit

    keras.config.set_dtype_policy("mixed_bfloat16")
    keras.utils.set_random_seed(0)
    return keras_vit.ViT(classifier_activation=None, rematerialize=spec.get("rematerialize", False), **spec["arch"])


def _on_device(backend, *arrays):
    if backend == "jax":
        import jax

        return [jax.device_put(a) for a in arrays]
    import tensorflow as tf

    return [tf.constant(a) for a in arrays]


def _flash_attention(forward, *args):
    """Whether XLA's compiled forward calls cuDNN's fused attention (`__cudnn$fmha`), on JAX; None if unknown."""
    try:
        text = forward.lower(*args).compile().as_text()
    except Exception:  # noqa: BLE001 - a diagnostic only
        return None
    return "cudnn$fmha" in text or "__cudnn$fmha" in text


def _keras_train(spec, model, batch):
    import keras

    x, y = _on_device(spec["backend"], *_images(batch, spec["arch"]))
    if not model.compiled:
        model.compile(optimizer=keras.optimizers.AdamW(1e-4, weight_decay=0.05),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=True)

    def step():
        return float(np.asarray(model.train_on_batch(x, y)).reshape(-1)[0])

    return step


def _keras_infer(spec, model, batch, extra):
    x, = _on_device(spec["backend"], _images(batch, spec["arch"])[0])
    if spec["backend"] == "jax":
        import jax

        forward = jax.jit(lambda tv, ntv, x: model.stateless_call(tv, ntv, x, training=False)[0])
        tv = [v.value for v in model.trainable_variables]
        ntv = [v.value for v in model.non_trainable_variables]
        if batch == max(spec["batches"]):
            extra["flash_attention"] = _flash_attention(forward, tv, ntv, x)
        return lambda: forward(tv, ntv, x).block_until_ready()
    import tensorflow as tf

    forward = tf.function(lambda x: model(x, training=False), jit_compile=True)
    return lambda: forward(x).numpy()


# timm ---------------------------------------------------------------------------------------------------------


def _timm_model(spec):
    import torch
    from timm.models.vision_transformer import VisionTransformer

    arch = spec["arch"]
    torch.manual_seed(0)
    model = VisionTransformer(img_size=arch["image_size"], patch_size=arch["patch_size"], embed_dim=arch["hidden_size"],
                              depth=arch["num_layers"], num_heads=arch["num_heads"],
                              mlp_ratio=arch["mlp_dim"] / arch["hidden_size"], num_classes=arch["classes"])
    return model.to("cuda" if torch.cuda.is_available() else "cpu")


def _timm_callable(spec, model):
    import torch

    if spec["mode"] != "compile":
        return model
    return torch.compile(model, dynamic=False, backend=spec.get("compile_backend", "inductor"))


def _timm_step(spec, model, state, batch):
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    x, y = _images(batch, spec["arch"])
    x = torch.from_numpy(np.ascontiguousarray(np.transpose(x, (0, 3, 1, 2)))).to(device)
    y = torch.from_numpy(y).to(device)
    forward = state.setdefault("forward", _timm_callable(spec, model))

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    if spec["task"] == "infer":
        model.eval()

        def step():
            with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
                forward(x)
            sync()

        return step
    model.train()
    if "optimizer" not in state:
        state["optimizer"] = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05,
                                               fused=device == "cuda")
    optimizer, loss_fn = state["optimizer"], torch.nn.CrossEntropyLoss()

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = loss_fn(forward(x), y)
        loss.backward()
        optimizer.step()
        return loss.item()

    return step


def _free_memory(spec):
    gc.collect()
    if spec["framework"] == "timm":
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()


# the case -----------------------------------------------------------------------------------------------------


def run(spec):
    if spec["framework"] == "keras_vit":
        os.environ.setdefault("KERAS_BACKEND", spec["backend"])
    device = device_info(spec)
    if spec["task"] == "probe":
        return {"batches": [], "extra": {"device": device}}
    try:
        check_device(device, spec["dry_run"])
    except AcceleratorError as error:
        print(ERROR_PREFIX + str(error), flush=True)
        raise SystemExit(2)
    if spec["task"] == "flops":
        import keras_vit

        return {"batches": [], "extra": {"flops": keras_vit.forward_flops(_keras_model(spec))}}
    extra = {"device": device, "oom": []}
    keras_side = spec["framework"] == "keras_vit"
    model = _keras_model(spec) if keras_side else _timm_model(spec)
    state = {}
    batches = []
    for batch in spec["batches"]:
        try:
            if keras_side:
                step = _keras_train(spec, model, batch) if spec["task"] == "train" else _keras_infer(spec, model, batch, extra)
            else:
                step = _timm_step(spec, model, state, batch)
            seconds = measure.time_calls(step, spec["warmup"], spec["iters"][str(batch)])
        except Exception as error:  # noqa: BLE001 - only out-of-memory is caught, anything else re-raised
            if spec["task"] != "train" or not is_oom(error):
                raise
            extra["oom"].append(batch)
            print(f"[{spec['name']}] batch {batch} ran out of device memory; trying a smaller one", flush=True)
            step = None
            _free_memory(spec)
            continue
        batches.append(measure.batch_result(seconds, batch))
        if spec["task"] == "train":  # the largest batch that fits: done
            break
    if not batches:
        raise RuntimeError(f"No batch of {spec['batches']} fits in device memory.")
    return {"batches": batches, "extra": extra}
