"""keras_vit on the TensorFlow backend: inference, a training step, the SavedModel export and its serving.

Tasks (spec["task"]):
    infer: `model(x, training=False)` in a `tf.function` (XLA when spec["jit"]), one timing per batch.
    train: `model.train_on_batch` with AdamW and sparse cross-entropy (XLA when spec["jit"]); float32 or
        mixed_bfloat16; records where the resident memory comes from (`memory_mb`).
    export: writes the SavedModel that `serve` times (not timed; run once before the loop) with
        `keras_vit.export.export_saved_model(precision=dtype)` (a plain `tf.saved_model.save` while that
        is missing).
    serve: loads that SavedModel and times `serving_default` (JPEG bytes of the model's size in, top-k
        scores out: decoding included); the float-pixel signature `predict_images` is timed too (`extra`).
"""

import os

import numpy as np

import measure


def _set_policy(dtype, policy=""):
    import keras

    keras.config.set_dtype_policy(policy or ("mixed_bfloat16" if dtype == "bfloat16" else "float32"))


def _build(arch, seed=0, **options):
    import keras

    import keras_vit
    from keras_vit import model_parts

    keras.utils.set_random_seed(seed)
    model = keras_vit.ViT(classifier_activation=None, **arch, **options)
    # The head is zero-initialised (as the official code); random values make its logits informative.
    head = model_parts.head(model)
    rng = np.random.default_rng(seed)
    head.kernel.assign(rng.normal(0.0, 0.02, head.kernel.shape).astype("float32"))
    return model


def _images(batch, arch, seed=1):
    size = arch["image_size"]
    return np.random.default_rng(seed).uniform(-1, 1, (batch, size, size, 3)).astype("float32")


def _infer(spec):
    import tensorflow as tf

    arch = spec["arch"]
    _set_policy(spec["dtype"], spec.get("policy"))
    model = _build(arch)
    forward = tf.function(lambda x: model(x, training=False), jit_compile=spec["jit"])
    batches = []
    for batch in spec["batches"]:
        x = tf.constant(_images(batch, arch))
        seconds = measure.time_calls(lambda: forward(x).numpy(), spec["warmup"], spec["iters"][str(batch)])
        batches.append(measure.batch_result(seconds, batch))
    result = {"batches": batches}
    if spec["dtype"] != "float32":
        # The top-1 agreement (a float32 model over many images: minutes here) only for the bf16-weights
        # model, the one the bfloat16 SavedModel export serves; the logits deviation for every bf16 case.
        quick = arch["image_size"] < 64  # the --quick architecture
        images = AGREEMENT_IMAGES["quick" if quick else "full"] if spec.get("policy") == "bfloat16" else 0
        result["extra"] = _compare_to_float32(model, arch, forward, images)
    return result


AGREEMENT_IMAGES = {"full": 128, "quick": 16}


def _varied_images(count, arch, seed=3):
    """Images in [-1, 1] of several kinds (noise, smooth gradients, flat colours, low contrast), so that the
    top-1 agreement is not measured on one kind of input."""
    rng = np.random.default_rng(seed)
    size = arch["image_size"]
    ramp = np.linspace(-1, 1, size, dtype="float32")
    images = []
    for i in range(count):
        kind = i % 4
        if kind == 0:
            image = rng.uniform(-1, 1, (size, size, 3))
        elif kind == 1:
            a, b = rng.uniform(-1, 1, (2, 3))
            image = a * ramp[:, None, None] + b * ramp[None, :, None]
        elif kind == 2:
            image = rng.uniform(-1, 1, 3) + rng.normal(0, 0.05, (size, size, 3))
        else:
            image = rng.uniform(0.05, 0.3) * rng.uniform(-1, 1, (size, size, 3)) + rng.uniform(-0.5, 0.5)
        images.append(np.clip(image, -1, 1))
    return np.stack(images).astype("float32")


def _compare_to_float32(model, arch, forward, images=AGREEMENT_IMAGES["full"]):
    """Relative deviation of the reduced-precision logits from float32 logits of the same weights, and the
    share of `images` varied images whose top-1 class is the float32 one."""
    import keras
    import tensorflow as tf

    x = _images(4, arch, seed=2)
    low = np.asarray(forward(tf.constant(x)), "float64")
    keras.config.set_dtype_policy("float32")
    reference = _build(arch)
    reference.set_weights([np.asarray(w, "float32") for w in model.get_weights()])
    high = np.asarray(reference(x, training=False), "float64")
    deviation = {
        "logits_rel_l2_vs_float32": float(np.linalg.norm(low - high) / np.linalg.norm(high)),
        "logits_max_abs_rel_vs_float32": float(np.abs(low - high).max() / np.abs(high).max()),
    }
    if not images:
        return deviation
    varied = _varied_images(images, arch)
    forward32 = tf.function(lambda x: reference(x, training=False))
    low_top, high_logits = [], []
    for start in range(0, images, 16):
        chunk = tf.constant(varied[start:start + 16])
        low_top.append(np.argmax(forward(chunk), 1))
        high_logits.append(np.asarray(forward32(chunk), "float64"))
    low_top, high_logits = np.concatenate(low_top), np.concatenate(high_logits)
    agree = low_top == np.argmax(high_logits, 1)
    # How close the float32 top-2 were where the classes differ: a random-weight model has small margins.
    top2 = np.sort(high_logits, 1)[:, -2:]
    margins = (top2[:, 1] - top2[:, 0]) / high_logits.std(1)
    return {
        **deviation,
        "top1_agreement_vs_float32": float(agree.mean()),
        "agreement_images": images,
        "float32_top2_margin_median": float(np.median(margins)),
        "float32_top2_margin_max_where_differs": float(margins[~agree].max()) if (~agree).any() else None,
    }


def _train(spec):
    import keras

    memory = measure.memory_stages()
    memory("imported")
    arch = spec["arch"]
    _set_policy(spec["dtype"])
    model = _build(arch, rematerialize=spec.get("rematerialize", True))
    memory("built")
    optimizer = keras.optimizers.AdamW(learning_rate=1e-4, weight_decay=0.05)
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=spec["jit"],  # False for the torch backend's cases
    )
    batches = []
    for batch in spec["batches"]:
        x = keras.ops.convert_to_tensor(_images(batch, arch))
        y = keras.ops.convert_to_tensor(np.arange(batch) % arch["classes"], "int32")
        model.train_on_batch(x, y)
        memory(f"first_step_{batch}")
        seconds = measure.time_calls(lambda: model.train_on_batch(x, y), spec["warmup"], spec["iters"][str(batch)])
        memory(f"timed_{batch}")
        batches.append(measure.batch_result(seconds, batch))
    sizes = {"weights_mb": _variables_mb(model.weights), "optimizer_mb": _variables_mb(optimizer.variables)}
    return {"batches": batches, "extra": {"memory_mb": memory("end"), **sizes}}


def _variables_mb(variables):
    import keras

    def itemsize(dtype):
        return 2 if dtype in ("bfloat16", "float16") else np.dtype(dtype).itemsize

    sizes = (int(np.prod(v.shape)) * itemsize(keras.backend.standardize_dtype(v.dtype)) for v in variables)
    return round(sum(sizes) / 2**20, 1)


def _export(spec):
    """Writes the SavedModel: `keras_vit.export.export_saved_model` when it exists, else a plain one."""
    import inspect

    import tensorflow as tf

    arch = spec["arch"]
    _set_policy("float32")  # the export's `precision` decides what the SavedModel computes in
    model = _build(arch)
    path = spec["saved_model"]
    try:
        from keras_vit.export import export_saved_model
    except ImportError:
        export_saved_model = None
    if export_saved_model is not None:
        options = {"overwrite": True}
        parameters = inspect.signature(export_saved_model).parameters
        if "jit_compile" in parameters:
            options["jit_compile"] = spec["jit"]
        if "precision" in parameters:
            options["precision"] = spec["dtype"]
        elif spec["dtype"] != "float32":
            raise ValueError(f"This export_saved_model has no `precision`. Received: dtype={spec['dtype']!r}")
        path = export_saved_model(model, path, **options)
        how = f"keras_vit.export.export_saved_model({', '.join(f'{k}={v}' for k, v in options.items())})"
    else:
        from keras_vit.preprocessing import to_model_range

        size = arch["image_size"]
        serve = tf.function(
            lambda images: {"logits": model(to_model_range(images), training=False)},
            input_signature=[tf.TensorSpec((None, size, size, 3), tf.float32, name="images")],
            jit_compile=spec["jit"],
        )
        module = tf.Module()
        module.model_variables = list(model.variables)
        tf.saved_model.save(module, path, signatures={"predict_images": serve})
        how = f"tf.saved_model.save(tf.function(jit_compile={spec['jit']}) over the Keras model)"
    return {"batches": [], "extra": {"export": how, "path": os.path.abspath(path)}}


# What a serving request runs: encoded images in, top-k scores out (decoding and resizing in the graph).
SERVING_SIGNATURE = "serving_default"
# The float-pixel signature (0..255 in, model outputs out): the model's own cost, without image decoding.
PIXELS_SIGNATURE = "predict_images"


def _serve(spec):
    import tensorflow as tf

    arch = spec["arch"]
    loaded = tf.saved_model.load(spec["saved_model"])
    batches, pixels_ms = [], {}
    for batch in spec["batches"]:
        pixels = tf.constant(np.round((_images(batch, arch) + 1.0) * 127.5))
        encoded = tf.stack([tf.io.encode_jpeg(tf.cast(image, tf.uint8), quality=95) for image in pixels])
        for name, x in ((PIXELS_SIGNATURE, pixels), (SERVING_SIGNATURE, encoded)):
            signature = loaded.signatures[name]
            input_name = list(signature.structured_input_signature[1])[0]

            def call(signature=signature, input_name=input_name, x=x):
                outputs = signature(**{input_name: x})
                return [value.numpy() for value in outputs.values()]

            seconds = measure.time_calls(call, spec["warmup"], spec["iters"][str(batch)])
            result = measure.batch_result(seconds, batch)
            if name == PIXELS_SIGNATURE:
                pixels_ms[str(batch)] = round(result["median_s"] * 1e3, 1)
            else:
                batches.append(result)
    return {"batches": batches, "extra": {"signature": SERVING_SIGNATURE, f"{PIXELS_SIGNATURE}_ms": pixels_ms}}


TASKS = {"infer": _infer, "train": _train, "export": _export, "serve": _serve}


def run(spec):
    return TASKS[spec["task"]](spec)
