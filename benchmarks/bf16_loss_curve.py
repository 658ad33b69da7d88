"""Short training run in float32 and in mixed_bfloat16 from the same start: are the loss curves the same?

A small ViT (patch 4, D=64, 4 blocks) on scikit-learn's 8x8 digits upsampled to 32x32 (no download), AdamW,
`model.fit`'s own step (`train_on_batch`, graph mode; XLA for float32, as the benchmarks), the same initial
weights and batches for both precisions. Prints the loss every `--every` steps for both and the largest
difference between the two curves, against the float32 curve's own step-to-step noise.

Usage:
    python benchmarks/bf16_loss_curve.py                 # 300 steps, batch 64
    python benchmarks/bf16_loss_curve.py --steps 20 --every 5 --json /tmp/curves.json
"""

import argparse
import json
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

ARCH = dict(image_size=32, patch_size=4, hidden_size=64, num_layers=4, num_heads=4, mlp_dim=128, classes=10)


def digits(size):
    from sklearn.datasets import load_digits

    data = load_digits()
    images = data.images.astype("float32") / 16.0 * 2.0 - 1.0  # [-1, 1]
    images = np.repeat(np.repeat(images, size // 8, axis=1), size // 8, axis=2)
    return np.repeat(images[..., None], 3, axis=-1), data.target.astype("int32")


def curve(policy, steps, batch, initial, x, y, jit):
    import keras

    import keras_vit

    keras.config.set_dtype_policy(policy)
    model = keras_vit.ViT(classifier_activation=None, **ARCH)
    model.set_weights(initial)
    model.compile(optimizer=keras.optimizers.AdamW(learning_rate=1e-3, weight_decay=0.05),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=jit)
    order = np.random.default_rng(0).permutation(np.arange(steps * batch) % len(x))
    losses = []
    for step in range(steps):
        index = order[step * batch:(step + 1) * batch]
        losses.append(float(model.train_on_batch(x[index], y[index])))
    keras.config.set_dtype_policy("float32")
    return losses


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--every", type=int, default=25)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    import keras

    import keras_vit

    keras.utils.set_random_seed(0)
    initial = keras_vit.ViT(classifier_activation=None, **ARCH).get_weights()
    head = np.random.default_rng(0).normal(0.0, 0.02, initial[-2].shape).astype("float32")
    initial = initial[:-2] + [head, initial[-1]]
    x, y = digits(ARCH["image_size"])
    curves = {"float32": curve("float32", args.steps, args.batch, initial, x, y, jit=True),
              "mixed_bfloat16": curve("mixed_bfloat16", args.steps, args.batch, initial, x, y, jit=False)}

    def smooth(values):  # mean over each window of `every` steps
        values = np.asarray(values)
        return [float(values[i:i + args.every].mean()) for i in range(0, len(values), args.every)]

    high, low = smooth(curves["float32"]), smooth(curves["mixed_bfloat16"])
    # The float32 curve's own noise: spread of its per-step losses around its window means, late in the run.
    late = np.asarray(curves["float32"][len(curves["float32"]) // 2:])
    width = min(5, len(late))
    noise = float(np.std(late - np.convolve(late, np.ones(width) / width, mode="same")))
    print(f"{'steps':>11} {'float32':>9} {'mixed_bf16':>10} {'diff':>7}")
    for i, (a, b) in enumerate(zip(high, low)):
        print(f"{i * args.every:4d}-{min((i + 1) * args.every, args.steps) - 1:<6d} {a:9.4f} {b:10.4f} {b - a:+7.4f}")
    worst = max(abs(a - b) for a, b in zip(high, low))
    print(f"largest windowed difference {worst:.4f}; float32 per-step noise (second half) {noise:.4f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"arch": ARCH, "steps": args.steps, "batch": args.batch, "curves": curves,
                       "largest_window_difference": worst, "float32_step_noise": noise}, f, indent=1)
    return worst, noise


if __name__ == "__main__":
    main()
