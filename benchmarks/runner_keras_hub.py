"""Peer: keras-hub's ViT (`ViTBackbone` + `ViTImageClassifier`) on the TensorFlow backend.

Same architecture dict as keras_vit, random weights, the same call (`tf.function`, XLA when
spec["jit"]) and the same training step (`train_on_batch`, AdamW), so only the model code differs.
"""

import numpy as np

import measure


def _build(arch, dtype):
    import keras
    import keras_hub

    keras.config.set_dtype_policy("mixed_bfloat16" if dtype == "bfloat16" else "float32")
    keras.utils.set_random_seed(0)
    size = arch["image_size"]
    backbone = keras_hub.models.ViTBackbone(
        image_shape=(size, size, 3),
        patch_size=arch["patch_size"],
        num_layers=arch["num_layers"],
        num_heads=arch["num_heads"],
        hidden_dim=arch["hidden_size"],
        mlp_dim=arch["mlp_dim"],
    )
    return keras_hub.models.ViTImageClassifier(
        backbone=backbone, num_classes=arch["classes"], preprocessor=None, head_dtype="float32"
    )


def _images(batch, arch, seed=1):
    size = arch["image_size"]
    return np.random.default_rng(seed).uniform(-1, 1, (batch, size, size, 3)).astype("float32")


def run(spec):
    import keras
    import tensorflow as tf

    arch = spec["arch"]
    model = _build(arch, spec["dtype"])
    if spec["task"] == "infer":
        forward = tf.function(lambda x: model(x, training=False), jit_compile=spec["jit"])
    elif spec["task"] == "train":
        model.compile(
            optimizer=keras.optimizers.AdamW(learning_rate=1e-4, weight_decay=0.05),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            jit_compile=spec["jit"],
        )
    else:
        raise ValueError(f"keras_hub runs the tasks 'infer' and 'train'. Received: task={spec['task']!r}")
    batches = []
    for batch in spec["batches"]:
        x = tf.constant(_images(batch, arch))
        if spec["task"] == "infer":
            step = lambda: forward(x).numpy()  # noqa: E731
        else:
            y = tf.constant(np.arange(batch) % arch["classes"], "int32")
            step = lambda: model.train_on_batch(x, y)  # noqa: E731
        seconds = measure.time_calls(step, spec["warmup"], spec["iters"][str(batch)])
        batches.append(measure.batch_result(seconds, batch))
    return {"batches": batches}
