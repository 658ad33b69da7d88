"""A small Keras CNN on the data of `train_quality.py`: the bar a ViT trained from scratch on small data is held to.

The body is keras.io's "Simple MNIST convnet" (two 3x3 convolution + 2x2 max-pool blocks of 32 and 64 channels,
dropout 0.5, a dense head), trained with `model.fit` with the recipe shape of the plain ViT script the benchmark
also runs: AdamW (weight decay 0.05) with warm-up and cosine decay, random translation, the same epochs and batch.
Scikit-learn's 8x8 digits (`--digits`) use 'same' padding (8x8 is too small for the valid convolutions).
Prints `test accuracy X` as the plain script does, which `train_quality.py` reads.

    python benchmarks/cnn_baseline.py --folder ROOT --image_size 28 --epochs 10 --batch 128
    python benchmarks/cnn_baseline.py --digits --epochs 60 --batch 64
"""

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402


def folder_split(root: str, split: str, classes: list, size: int):
    """(images in [0, 1] as (N, size, size, 3), labels) of ROOT/split/<class>/*."""
    from PIL import Image

    images, labels = [], []
    for label, name in enumerate(classes):
        folder = os.path.join(root, split, name)
        for file in sorted(os.listdir(folder)):
            with Image.open(os.path.join(folder, file)) as image:
                images.append(np.asarray(image.convert("RGB").resize((size, size)), "float32") / 255.0)
            labels.append(label)
    return np.stack(images), np.asarray(labels)


def digits_splits():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    images, labels = load_digits(return_X_y=True)
    images = (images.reshape(-1, 8, 8, 1) / 16.0).astype("float32")
    x_train, x_test, y_train, y_test = train_test_split(images, labels, test_size=0.2, random_state=0, stratify=labels)
    return (x_train, y_train), (x_test, y_test)


def cnn(input_shape, classes: int, padding: str, shift: float) -> keras.Model:
    """keras.io's simple MNIST convnet body behind a random translation, with logits out."""
    return keras.Sequential([
        keras.Input(input_shape),
        keras.layers.RandomTranslation(shift, shift),
        keras.layers.Conv2D(32, 3, activation="relu", padding=padding),
        keras.layers.MaxPooling2D(2),
        keras.layers.Conv2D(64, 3, activation="relu", padding=padding),
        keras.layers.MaxPooling2D(2),
        keras.layers.Flatten(),
        keras.layers.Dropout(0.5),
        keras.layers.Dense(classes),
    ])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--digits", action="store_true", help="scikit-learn's 8x8 digits (80/20 split)")
    parser.add_argument("--folder", help="a folder with train/<class>/ and test/<class>/ images")
    parser.add_argument("--image_size", type=int, default=28)
    parser.add_argument("--epochs", type=int, default=None, help="default: 60 for --digits, else 10")
    parser.add_argument("--batch", type=int, default=None, help="default: 64 for --digits, else 128")
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.digits == bool(args.folder):
        parser.error(f"give --digits or --folder ROOT. Received: --digits={args.digits}, --folder={args.folder!r}")
    keras.utils.set_random_seed(args.seed)
    if args.digits:
        (x_train, y_train), (x_test, y_test) = digits_splits()
        classes, padding, shift, epochs, batch = 10, "same", 0.1, args.epochs or 60, args.batch or 64
    else:
        names = sorted(os.listdir(os.path.join(args.folder, "train")))
        x_train, y_train = folder_split(args.folder, "train", names, args.image_size)
        x_test, y_test = folder_split(args.folder, "test", names, args.image_size)
        classes, padding, shift, epochs, batch = len(names), "valid", 0.08, args.epochs or 10, args.batch or 128
    model = cnn(x_train.shape[1:], classes, padding, shift)
    steps = epochs * (len(x_train) // batch)
    schedule = keras.optimizers.schedules.CosineDecay(0.0, steps, warmup_target=args.lr,
                                                      warmup_steps=min(200, steps // 10))
    model.compile(keras.optimizers.AdamW(schedule, weight_decay=0.05),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    start = time.time()
    model.fit(x_train, y_train, batch_size=batch, epochs=epochs, verbose=0)
    accuracy = model.evaluate(x_test, y_test, verbose=0)[1]
    print(f"small Keras CNN: test accuracy {accuracy:.4f} in {time.time() - start:.0f} s "
          f"({model.count_params():,} parameters, {steps} steps of {batch})")


if __name__ == "__main__":
    main()
