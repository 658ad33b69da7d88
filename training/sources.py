"""Dataset sources: a dataset name and split resolved to its undecoded elements, a decode function and counts.

Names:
    * `"digits"`: scikit-learn's 8x8 handwritten digits (1,797 images, 10 classes; install the `demo`
      extra), a fixed 80/20 train/test split, grey levels 0..16 scaled to 0..255 and repeated to RGB.
    * `"folder:PATH"`: the tensorflow-datasets ImageFolder layout `PATH/<split>/<label>/<image>`; the
      evaluation split may be called `test`, `val` or `validation`. A class folder of `train` without images
      is refused, and so is a flat `PATH/<label>/<image>` layout (the message says where to move the
      folders). Images are the regular files with an extension of `IMAGE_EXTENSIONS` (WebP included: this
      TensorFlow decodes still WebP images); a FIFO or a folder named like one is left out, and so are other
      extensions (`training.image_checks.check_images` warns of both). Paths go to TensorFlow as the file
      system's bytes, so a file name that is not UTF-8 is read as it is (messages show it escaped,
      `shown_path`); a class folder name that is not UTF-8 is refused (it would be a label). The files the
      pipeline could not use are found by `training.image_checks` and left out with `skip_files`.
    * any other name: a prepared tensorflow-datasets dataset (never downloaded unless `download=True`;
      `training.tfds_source`).

Example:
    >>> source = dataset_source("digits", "test")
    >>> source.num_examples, source.num_classes, source.class_names[:3]
    (359, 10, ('0', '1', '2'))
"""

from __future__ import annotations

import dataclasses
import os
import re
import stat

import numpy as np
import tensorflow as tf

from training.dataset_types import (  # noqa: F401  (public here too: the errors the app maps to exit statuses)
    DatasetNotFoundError, ImageFailedMidRunError, InvalidDatasetError, Source, identity_decode,
)
from training.tfds_source import tfds_builder, tfds_source

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")
EVAL_SPLIT_NAMES = ("test", "val", "validation")
_DIGITS_SPLIT_SEED = 0


def dataset_source(name: str, split: str, data_dir: str | None = None, download: bool = False,
                   skip_files=()) -> Source:
    """Resolves a dataset name and split to a `Source` (see the module docstring for the names).

    `skip_files`: paths of a folder dataset left out (the bad files `training.image_checks.check_images` found).

    Raises:
        DatasetNotFoundError: when the data is not there (a missing folder, no train/ or evaluation split,
            a tfds dataset not prepared, or its download failing for a network error), with instructions.
        InvalidDatasetError: for a class folder without images, or a flat `PATH/<label>/<image>` layout.
        ValueError: for an unknown split.
    """
    if name == "digits":
        return _digits_source(split)
    if name.startswith("folder:"):
        return _folder_source(name[len("folder:"):], split, frozenset(skip_files))
    return tfds_source(name, split, data_dir, download)


def shown_path(path) -> str:
    """A path (str or bytes) as text for a message: bytes that are not UTF-8 shown escaped (`caf\\xe9.png`)."""
    raw = path if isinstance(path, bytes) else os.fsencode(path)
    return raw.decode("utf-8", "backslashreplace")


def held_out_splits(fraction: float, seed: int) -> tuple[str, str]:
    """The (train, evaluation) split names of a folder dataset whose evaluation images are `fraction` of each
    class of its training images (`PATH/train/<label>/` or a flat `PATH/<label>/`), chosen at random by `seed`.

    Example:
        >>> held_out_splits(0.2, seed=0)
        ('fit[validation_split=0.2,seed=0]', 'held_out[validation_split=0.2,seed=0]')
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"`validation_split` must be a fraction in (0, 1). Received: validation_split={fraction!r}")
    spec = f"[validation_split={fraction:g},seed={int(seed)}]"
    return f"fit{spec}", f"held_out{spec}"


_HELD_OUT = re.compile(r"^(fit|held_out)\[validation_split=([0-9.e-]+),seed=(-?\d+)\]$")


def _held_out(split: str):
    """(part, fraction, seed) of a `held_out_splits` name, else None."""
    match = _HELD_OUT.match(split)
    return None if match is None else (match.group(1), float(match.group(2)), int(match.group(3)))


def default_splits(name: str, data_dir: str | None = None, validation_split: float | None = None,
                   seed: int = 0) -> tuple[str, str]:
    """(train split, eval split) for a dataset: `train` and the first of test/val/validation present; with
    `validation_split` (a folder dataset only), `held_out_splits(validation_split, seed)`."""
    if validation_split is not None:
        if not name.startswith("folder:"):
            raise ValueError(f"--validation_split holds out part of an image folder (--dataset=folder:PATH); "
                             f"for another dataset choose the splits with --train_split and --eval_split (e.g. "
                             f"'train[:90%]' and 'train[90%:]'). Received: --dataset={name}")
        _check_folder_layout(name[len("folder:"):], flat=True)
        return held_out_splits(validation_split, seed)
    if name == "digits":
        return "train", "test"
    if name.startswith("folder:"):
        root = name[len("folder:"):]
        _check_folder_layout(root)
        for split in EVAL_SPLIT_NAMES:
            if os.path.isdir(os.path.join(root, split)):
                return "train", split
        beside = sorted(set(os.listdir(root)) - {"train"})
        found = f"found only {_listing(shown_path(b) for b in beside)}" if beside else "it holds nothing else"
        raise DatasetNotFoundError(
            f"No evaluation split in image folder {root!r}: expected {_EVAL_LAYOUT.format(root=shown_path(root))} next "
            f"to {shown_path(os.path.join(root, 'train'))}/, but beside train/ {found}. Move some images of each class "
            f"there "
            f"(or name the evaluation folder test, val or validation), or pass --validation_split=0.2 to hold out a "
            f"fifth of each class of train/. Received: dataset={name!r}"
        )
    splits = tfds_builder(name, data_dir).info.splits
    for split in EVAL_SPLIT_NAMES:
        if split in splits:
            return "train", split
    return "train", "train"


def _digits_source(split: str) -> Source:
    try:
        from sklearn.datasets import load_digits
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise DatasetNotFoundError(
            "The embedded digits need scikit-learn: pip install -e '.[demo]' (or pip install scikit-learn)."
        ) from error
    digits = load_digits()
    images = np.round(digits.images * (255.0 / 16.0)).astype(np.uint8)
    images = np.repeat(images[..., None], 3, axis=-1)
    order = np.random.default_rng(_DIGITS_SPLIT_SEED).permutation(len(images))
    num_test = len(images) // 5
    indices = {"test": order[:num_test], "train": order[num_test:]}
    if split not in indices:
        raise ValueError(f"The digits have splits 'train' and 'test'. Received: split={split!r}")
    index = np.sort(indices[split])
    elements = tf.data.Dataset.from_tensor_slices((images[index], digits.target[index].astype(np.int32)))
    return Source(elements, identity_decode, len(index), 10, tuple(str(i) for i in range(10)))


def decode_file(path):
    image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
    image.set_shape((None, None, 3))
    return image


_TRAIN_LAYOUT = "{root}/train/<label>/<image>"
_EVAL_LAYOUT = "{root}/test|val|validation/<label>/<image>"


def _listing(names, limit=8) -> str:
    """`a, b, c` (the first `limit` names, then how many more)."""
    names = list(names)
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more if names else "nothing"


def _holds_images(folder: str) -> bool:
    with os.scandir(folder) as entries:
        return any(e.is_file() and e.name.lower().endswith(IMAGE_EXTENSIONS) for e in entries)


def _check_folder_layout(root: str, flat: bool = False) -> None:
    """Refuses a folder dataset that is not `PATH/train/<label>/<image>`, saying what was found instead.

    Raises:
        DatasetNotFoundError: `root` does not exist (or is not a folder), or holds no `train` folder and no
            class folders of images either.
        InvalidDatasetError: a flat `PATH/<label>/<image>` layout (class folders directly under `root`) or
            images directly in `root`: the message names them and says where to move them.
    """
    name = f"folder:{root}"
    shown = shown_path(root)
    expected = f"{_TRAIN_LAYOUT.format(root=shown)} and {_EVAL_LAYOUT.format(root=shown)}"
    if not os.path.exists(root):
        raise DatasetNotFoundError(
            f"Image folder {root!r} does not exist: check the path after 'folder:' (expected {expected}). "
            f"Received: dataset={name!r}"
        )
    if not os.path.isdir(root):
        raise DatasetNotFoundError(
            f"{root!r} is a file, not an image folder: expected {expected}. Received: dataset={name!r}"
        )
    if os.path.isdir(os.path.join(root, "train")):
        return
    entries = sorted(os.listdir(root))
    folders = [e for e in entries if os.path.isdir(os.path.join(root, e))]
    class_folders = [f for f in folders if _holds_images(os.path.join(root, f))]
    if class_folders and flat:  # --validation_split: the class folders are the training images
        return
    if class_folders:
        raise InvalidDatasetError(
            f"Image folder {root!r} has no train/ folder: expected {expected}, but found {len(class_folders)} "
            f"folder(s) holding images directly: {_listing(shown_path(f) for f in class_folders)}. Move them under "
            f"{shown_path(os.path.join(root, 'train'))}/ and put a test split beside it "
            f"({shown}/test/<label>/<image>, the "
            f"same labels), or pass --validation_split=0.2 to hold out a fifth of each class. "
            f"Received: dataset={name!r}"
        )
    if _holds_images(root):
        raise InvalidDatasetError(
            f"Image folder {root!r} holds images directly and no train/ folder: expected {expected} (one folder "
            f"per class). Received: dataset={name!r}"
        )
    found = f"found {_listing(shown_path(e) for e in entries)}" if entries else "it is empty"
    raise DatasetNotFoundError(
        f"Image folder {root!r} has no train/ folder: expected {expected}, but {found}. "
        f"Received: dataset={name!r}"
    )


@dataclasses.dataclass(frozen=True)
class FolderListing:
    """The files of one split of a folder dataset: image paths and labels, and the entries left out."""

    class_names: tuple
    paths: list
    labels: list
    ignored: list  # (path, why): not regular files, other extensions


def _folder_files(root: str, split: str) -> tuple[tuple[str, ...], list, list]:
    """(class names from `train`, image paths of `split`, their labels), in sorted order."""
    listing = folder_listing(root, split)
    return listing.class_names, listing.paths, listing.labels


def folder_listing(root: str, split: str) -> FolderListing:
    """The image files of `split` (regular files with an image extension, sorted), their labels (class folders
    of `train`, sorted) and the entries left out with why."""
    held_out = _held_out(split)
    train_dir = _train_dir(root)
    split_dir = train_dir if held_out else os.path.join(root, split)
    _check_folder_layout(root, flat=held_out is not None)
    if not os.path.isdir(split_dir):
        beside = sorted(e for e in os.listdir(root) if os.path.isdir(os.path.join(root, e)))
        raise DatasetNotFoundError(
            f"Image folder {root!r} has no split {split!r}: expected {shown_path(root)}/{split}/<label>/<image>; "
            f"the splits there are {_listing(shown_path(b) for b in beside)}. "
            f"Received: dataset='folder:{shown_path(root)}', "
            f"split={split!r}"
        )
    class_names = tuple(sorted(d for d in os.listdir(train_dir) if os.path.isdir(os.path.join(train_dir, d))))
    if not class_names:
        raise DatasetNotFoundError(f"No class folders in {train_dir!r}. Received: dataset='folder:{shown_path(root)}'")
    _check_class_names(root, class_names)
    paths, labels, ignored = [], [], []
    for label, class_name in enumerate(class_names):
        class_dir = os.path.join(split_dir, class_name)
        if not os.path.isdir(class_dir):
            continue
        with os.scandir(class_dir) as entries:
            entries = sorted(entries, key=lambda e: e.name)
        for entry in entries:
            if not entry.name.lower().endswith(IMAGE_EXTENSIONS):
                if not entry.name.startswith("."):  # hidden files (.DS_Store) are left out silently
                    ignored.append((entry.path, None))
                continue
            kind = _not_regular(entry)
            if kind:
                ignored.append((entry.path, kind))
                continue
            paths.append(entry.path)
            labels.append(label)
    unknown = sorted({d for d in os.listdir(split_dir) if os.path.isdir(os.path.join(split_dir, d))} - set(class_names))
    if unknown:
        raise ValueError(f"Split {split!r} has labels that 'train' lacks. Received: {unknown}")
    if held_out:
        keep = _held_out_part(labels, *held_out)
        paths, labels = [paths[i] for i in keep], [labels[i] for i in keep]
    return FolderListing(class_names, paths, labels, ignored)


def _train_dir(root: str) -> str:
    """`root/train`, or `root` itself for a flat layout (class folders directly in it: --validation_split)."""
    train_dir = os.path.join(root, "train")
    return train_dir if os.path.isdir(train_dir) or not os.path.isdir(root) else root


def _held_out_part(labels, part, fraction, seed) -> list:
    """The indices (sorted) of `part` ("fit" or "held_out"): of each class's n files, round(fraction * n) held
    out (at least one, but never all of them), chosen by a permutation seeded by `(seed, class)`."""
    by_class = {}
    for index, label in enumerate(labels):
        by_class.setdefault(label, []).append(index)
    chosen = []
    for label, indices in by_class.items():
        count = min(max(round(fraction * len(indices)), 1), len(indices) - 1)
        order = np.random.default_rng([int(seed) & 0xFFFFFFFF, label]).permutation(len(indices))
        held = set(order[:count].tolist())
        chosen += [index for i, index in enumerate(indices) if (i in held) == (part == "held_out")]
    return sorted(chosen)


def _not_regular(entry) -> str | None:
    """What a directory entry named like an image is when it is not a regular file (None: it is one)."""
    try:
        mode = os.stat(entry.path).st_mode  # follows a symbolic link to its target
    except OSError as error:
        return "a broken symbolic link" if entry.is_symlink() else f"unreadable: {error.strerror or error}"
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device file"
    return "not a regular file"


def _check_class_names(root, class_names) -> None:
    """Refuses class folder names that are not UTF-8 text: they become the model's labels."""
    for class_name in class_names:
        try:
            class_name.encode("utf-8")
        except UnicodeEncodeError:
            path = shown_path(os.path.join(root, "train", class_name))
            raise InvalidDatasetError(
                f"The class folder {path} has a name that is not UTF-8 text (shown with its bytes escaped): class "
                f"names become the model's labels (model.labels.txt, the exported model's labels), which are "
                f"text. Rename it in every split (e.g. to {shown_path(class_name)!r} without the escaped bytes). "
                f"Received: dataset='folder:{shown_path(root)}'"
            ) from None


def _check_class_folders(root: str, class_names, skip_files) -> None:
    """Refuses a `train` class folder without (usable) images: the head would get a class never trained."""
    empty = []
    for class_name in class_names:
        class_dir = os.path.join(_train_dir(root), class_name)
        with os.scandir(class_dir) as entries:
            if not any(e.name.lower().endswith(IMAGE_EXTENSIONS) and e.path not in skip_files and not _not_regular(e)
                       for e in entries):
                empty.append(shown_path(class_dir))
    if empty:
        skipped = " (after skipping the bad images)" if skip_files else ""
        raise InvalidDatasetError(
            f"{len(empty)} class folder(s) of {_train_dir(root)!r} hold no images{skipped}: "
            f"{', '.join(empty[:5])}{' ...' if len(empty) > 5 else ''}. Each would be a class of the head that is "
            f"never trained: add images ({', '.join(IMAGE_EXTENSIONS)}) to it or delete the folder. "
            f"Received: dataset='folder:{shown_path(root)}'"
        )


def _folder_source(root: str, split: str, skip_files: frozenset = frozenset()) -> Source:
    class_names, paths, labels = _folder_files(root, split)
    _check_class_folders(root, class_names, skip_files)
    if skip_files:
        kept = [i for i, path in enumerate(paths) if path not in skip_files]
        paths, labels = [paths[i] for i in kept], [labels[i] for i in kept]
    if not paths:
        raise DatasetNotFoundError(f"No images ({', '.join(IMAGE_EXTENSIONS)}) under {os.path.join(root, split)!r}.")
    # The file system's bytes, not text: a file name that is not UTF-8 is read as it is.
    encoded = np.array([os.fsencode(path) for path in paths], dtype=object)
    elements = tf.data.Dataset.from_tensor_slices((encoded, np.asarray(labels, np.int32)))
    return Source(elements, decode_file, len(paths), len(class_names), class_names, shuffle_whole=True)
