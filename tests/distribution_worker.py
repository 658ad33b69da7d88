"""One JAX process of tests/test_distribution_layout.py: a tiny ViT's `model.fit` on one device, data parallel,
model parallel (`keras_vit.layout_map`), or as one of two "hosts" (`keras_vit.distribution.initialize`).

    python tests/distribution_worker.py local OUT.json                 # one device, data and model parallel
    python tests/distribution_worker.py host OUT.json ADDRESS ID [CKPT] # one of 2 processes, data parallel

The environment must set KERAS_BACKEND=jax and XLA_FLAGS=--xla_force_host_platform_device_count=2 (two CPU
devices per process). Every run starts from the same weights (drawn with numpy, not Keras' initializers) and
feeds the same global batch of 8 images for `STEPS` steps of SGD; OUT.json gets the losses (and outputs).
"""

import json
import sys

import numpy as np

STEPS = 3
GLOBAL_BATCH = 8
ARCH = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, classes=5)


def data():
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (GLOBAL_BATCH, 32, 32, 3)).astype("float32")
    return x, np.arange(GLOBAL_BATCH) % ARCH["classes"]


def build():
    import keras

    import keras_vit

    model = keras_vit.ViT(classifier_activation=None, **ARCH)
    rng = np.random.default_rng(0)
    model.set_weights([rng.normal(0, 0.05, w.shape).astype("float32") for w in model.get_weights()])
    model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def fit(model, x, y, batch):
    history = model.fit(x, y, batch_size=batch, epochs=STEPS, shuffle=False, verbose=0)
    return [float(v) for v in history.history["loss"]]


def local():
    import keras

    import keras_vit

    x, y = data()
    out = {}
    model = build()
    out["single"] = {"loss": fit(model, x, y, GLOBAL_BATCH), "outputs": np.asarray(model(x)).tolist()}
    devices = keras.distribution.list_devices("cpu")
    assert len(devices) == 2, devices
    mesh = keras.distribution.DeviceMesh((1, 2), ["batch", "model"], devices=devices)
    strategies = {
        "data": keras.distribution.DataParallel(devices=devices),
        "model": keras.distribution.ModelParallel(layout_map=keras_vit.layout_map(ARCH, mesh),
                                                  batch_dim_name="batch"),
    }
    for name, strategy in strategies.items():
        with strategy.scope():
            model = build()
            out[name] = {"loss": fit(model, x, y, GLOBAL_BATCH), "outputs": np.asarray(model.predict(x, verbose=0)).tolist()}
            if name == "model":
                kernel = next(w for w in model.weights if w.path.endswith("encoder_block_0/mlp_dense_1/kernel"))
                out[name]["mlp_dense_1_shards"] = [list(s.data.shape) for s in kernel.value.addressable_shards]
    nine = np.concatenate([x, x[:1]]), np.concatenate([y, y[:1]])
    out["refusals"] = []
    with strategies["data"].scope():  # a batch (8 by 3), or a last batch (9 by 4), that two devices cannot share
        model = build()
        for (images, labels), batch in (((x, y), 3), (nine, 4)):
            try:
                model.fit(images, labels, batch_size=batch, epochs=1, verbose=0)
                out["refusals"].append(None)
            except ValueError as error:
                out["refusals"].append(str(error))
    return out


def host(address, process_id, checkpoint=None):
    import jax
    import keras

    import keras_vit

    keras_vit.distribution.initialize(address, num_processes=2, process_id=process_id, timeout=60)
    devices = keras.distribution.list_devices("cpu")
    out = {"process_count": jax.process_count(), "devices": len(devices)}
    x, y = data()
    half = GLOBAL_BATCH // 2  # each process feeds its own half of the global batch
    x, y = x[process_id * half:(process_id + 1) * half], y[process_id * half:(process_id + 1) * half]
    strategy = keras.distribution.DataParallel(devices=devices)
    strategy.auto_shard_dataset = False  # numpy arrays, already this process's share
    with strategy.scope():
        model = build()
        out["loss"] = fit(model, x, y, half)
    if checkpoint and process_id == 0:
        model.save_weights(checkpoint)
    return out


def main(argv):
    mode, path = argv[1], argv[2]
    if mode == "local":
        out = local()
    elif mode == "host":
        out = host(argv[3], int(argv[4]), argv[5] if len(argv) > 5 else None)
    elif mode == "load":  # one process reads the pair's checkpoint
        model = build()
        model.load_weights(argv[3])
        out = {"outputs": np.asarray(model(data()[0])).tolist()}
    else:
        raise SystemExit(f"mode must be local, host or load. Received: {mode!r}")
    with open(path, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main(sys.argv)
