"""A ViT-Ti-sized training run on a generated 10-class 28x28 image folder; prints accuracy and wall time.

Generates `ROOT/{train,test}/<shape>/*.png` (synthetic shapes: random size, position, colours and noise, so
every image is distinct), then runs the training app on it through the `folder:` loader:

    python benchmarks/train_shapes_folder.py --root /tmp/shapes --workdir /tmp/shapes_run [--train_per_class 400]

The training command it runs is printed first; extra arguments after `--` go to `python -m training.train`.
"""

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

SHAPES = ("circle", "ring", "square", "frame", "triangle", "plus", "cross", "hbar", "vbar", "diamond")
SIZE = 28


def draw(shape, rng):
    """One 28x28 RGB uint8 image of `shape`, with random geometry, colours and noise."""
    y, x = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32)
    r = rng.uniform(5, 10)
    cy, cx = rng.uniform(r + 1, SIZE - r - 1, size=2)
    dy, dx = np.abs(y - cy), np.abs(x - cx)
    t = max(1.5, r / 3)  # stroke width
    masks = {
        "circle": np.hypot(dy, dx) <= r,
        "ring": np.abs(np.hypot(dy, dx) - r * 0.8) <= t / 1.5,
        "square": np.maximum(dy, dx) <= r * 0.8,
        "frame": np.abs(np.maximum(dy, dx) - r * 0.8) <= t / 1.5,
        "triangle": (y - cy <= r * 0.8) & (y - cy >= -r * 0.8) & (dx <= (y - cy + r * 0.8) * 0.6),
        "plus": ((dy <= t / 2) & (dx <= r)) | ((dx <= t / 2) & (dy <= r)),
        "cross": (np.abs((y - cy) - (x - cx)) <= t / 1.2) & (dy <= r * 0.8) | (np.abs((y - cy) + (x - cx)) <= t / 1.2)
        & (dy <= r * 0.8),
        "hbar": (dy <= t / 1.2) & (dx <= r),
        "vbar": (dx <= t / 1.2) & (dy <= r),
        "diamond": dy + dx <= r,
    }
    background = rng.uniform(0, 110, size=3)
    foreground = rng.uniform(140, 255, size=3)
    image = np.where(masks[shape][..., None], foreground, background)
    image = image + rng.normal(0, 18, size=image.shape)
    return np.clip(image, 0, 255).astype(np.uint8)


def generate(root, train_per_class, test_per_class, seed=0):
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    for split, count in (("train", train_per_class), ("test", test_per_class)):
        for shape in SHAPES:
            folder = os.path.join(root, split, shape)
            os.makedirs(folder, exist_ok=True)
            for i in range(count):
                tf.io.write_file(os.path.join(folder, f"{i:05d}.png"), tf.io.encode_png(draw(shape, rng)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="/tmp/keras_vit_shapes")
    parser.add_argument("--workdir", default="/tmp/keras_vit_shapes_run")
    parser.add_argument("--train_per_class", type=int, default=400)
    parser.add_argument("--test_per_class", type=int, default=100)
    args, extra = parser.parse_known_args()
    if not os.path.isdir(os.path.join(args.root, "train")):
        generate(args.root, args.train_per_class, args.test_per_class)
    command = [
        sys.executable, "-m", "training.train", f"--dataset=folder:{args.root}", f"--workdir={args.workdir}",
        "--model=vit_ti16", "--patch_size=7", "--image_size=28", "--epochs=8", "--global_batch_size=64",
        "--optimizer=adam", "--learning_rate=5e-4", "--warmup_steps=100", "--schedule=cosine",
        "--crop_min_area=0.6", "--flip=false", "--log_every=50", "--show_predictions=5",
        *[a for a in extra if a != "--"],
    ]
    print(" ".join(command), flush=True)
    start = time.perf_counter()
    subprocess.run(command, check=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    wall = time.perf_counter() - start
    metrics = json.load(open(os.path.join(args.workdir, "metrics.json")))
    print(f"shapes folder ({args.train_per_class * 10} train / {args.test_per_class * 10} test, 28x28, 10 classes): "
          f"eval_accuracy={metrics['eval_accuracy']:.4f} after {metrics['steps']} steps, wall {wall:.0f} s")


if __name__ == "__main__":
    main()
