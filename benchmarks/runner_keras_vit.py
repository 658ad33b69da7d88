"""keras_vit on the TensorFlow backend: inference, a training step, the SavedModel export and its serving.

Tasks (spec["task"]):
    infer: `model(x, training=False)` in a `tf.function` (XLA when spec["jit"]), one timing per batch.
    train: `model.train_on_batch` with AdamW and sparse cross-entropy (XLA when spec["jit"]).
    export: writes the SavedModel that `serve` times (not timed; run once before the loop) with
        `keras_vit.export.export_saved_model` (a plain `tf.saved_model.save` while that is missing).
    serve: loads that SavedModel and times its float-pixel signature `predict_images`.
"""

import os

import numpy as np

import measure


def _set_policy(dtype, policy=""):
    import keras

    keras.config.set_dtype_policy(policy or ("mixed_bfloat16" if dtype == "bfloat16" else "float32"))


def _build(arch, seed=0):
    import keras

    import keras_vit

    keras.utils.set_random_seed(seed)
    model = keras_vit.ViT(classifier_activation=None, **arch)
    # The head is zero-initialised (as the official code); random values make its logits informative.
    head = model.get_layer("head")
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
        result["extra"] = _compare_to_float32(model, arch, forward)
    return result


def _compare_to_float32(model, arch, forward):
    """Relative deviation of the reduced-precision logits from float32 logits of the same weights."""
    import keras
    import tensorflow as tf

    x = _images(4, arch, seed=2)
    low = np.asarray(forward(tf.constant(x)), "float64")
    keras.config.set_dtype_policy("float32")
    reference = _build(arch)
    reference.set_weights([np.asarray(w, "float32") for w in model.get_weights()])
    high = np.asarray(reference(x, training=False), "float64")
    return {
        "logits_rel_l2_vs_float32": float(np.linalg.norm(low - high) / np.linalg.norm(high)),
        "logits_max_abs_rel_vs_float32": float(np.abs(low - high).max() / np.abs(high).max()),
    }


def _train(spec):
    import keras
    import tensorflow as tf

    arch = spec["arch"]
    _set_policy(spec["dtype"])
    model = _build(arch)
    model.compile(
        optimizer=keras.optimizers.AdamW(learning_rate=1e-4, weight_decay=0.05),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=spec["jit"],
    )
    batches = []
    for batch in spec["batches"]:
        x = tf.constant(_images(batch, arch))
        y = tf.constant(np.arange(batch) % arch["classes"], "int32")
        seconds = measure.time_calls(lambda: model.train_on_batch(x, y), spec["warmup"], spec["iters"][str(batch)])
        batches.append(measure.batch_result(seconds, batch))
    return {"batches": batches}


def _export(spec):
    """Writes the SavedModel: `keras_vit.export.export_saved_model` when it exists, else a plain one."""
    import inspect

    import tensorflow as tf

    arch = spec["arch"]
    _set_policy(spec["dtype"])
    model = _build(arch)
    path = spec["saved_model"]
    try:
        from keras_vit.export import export_saved_model
    except ImportError:
        export_saved_model = None
    if export_saved_model is not None:
        options = {"overwrite": True}
        if "jit_compile" in inspect.signature(export_saved_model).parameters:
            options["jit_compile"] = spec["jit"]
        path = export_saved_model(model, path, **options)
        how = f"keras_vit.export.export_saved_model({', '.join(f'{k}={v}' for k, v in options.items())})"
    else:
        size = arch["image_size"]
        serve = tf.function(
            lambda images: {"logits": model(images / 127.5 - 1.0, training=False)},
            input_signature=[tf.TensorSpec((None, size, size, 3), tf.float32, name="images")],
            jit_compile=spec["jit"],
        )
        module = tf.Module()
        module.model_variables = list(model.variables)
        tf.saved_model.save(module, path, signatures={"predict_images": serve})
        how = f"tf.saved_model.save(tf.function(jit_compile={spec['jit']}) over the Keras model)"
    return {"batches": [], "extra": {"export": how, "path": os.path.abspath(path)}}


# The float-pixel signature (0..255 in, model outputs out): the model's own cost, without image decoding.
SERVING_SIGNATURE = "predict_images"


def _serve(spec):
    import tensorflow as tf

    arch = spec["arch"]
    loaded = tf.saved_model.load(spec["saved_model"])
    signature = loaded.signatures[SERVING_SIGNATURE]
    input_name = list(signature.structured_input_signature[1])[0]
    batches = []
    for batch in spec["batches"]:
        x = tf.constant((_images(batch, arch) + 1.0) * 127.5)

        def call():
            outputs = signature(**{input_name: x})
            return [value.numpy() for value in outputs.values()]

        seconds = measure.time_calls(call, spec["warmup"], spec["iters"][str(batch)])
        batches.append(measure.batch_result(seconds, batch))
    return {"batches": batches, "extra": {"signature": SERVING_SIGNATURE}}


TASKS = {"infer": _infer, "train": _train, "export": _export, "serve": _serve}


def run(spec):
    return TASKS[spec["task"]](spec)
