"""Calibration images for a static int8 export: a folder of JPEG / PNG / BMP / GIF files at the model's size, read
in name order as float32 pixels 0..255 (what the float signature takes).

Example:
    >>> import os, numpy as np, tensorflow as tf
    >>> os.makedirs("/tmp/keras_vit_doc/calibration", exist_ok=True)
    >>> for i in range(8):
    ...     with open(f"/tmp/keras_vit_doc/calibration/{i}.png", "wb") as file:
    ...         _ = file.write(tf.io.encode_png(np.full((32, 32, 3), 30 * i, np.uint8)).numpy())
    >>> images = read_folder("/tmp/keras_vit_doc/calibration", 32, 32)
    >>> len(images), images[0].shape
    (8, (32, 32, 3))
"""

import os

import numpy as np

EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif")
MAX_FILE_BYTES = 32 * 2**20
"""A calibration image file larger than this is refused before it is read (a 224x224 image is ~0.1 MB)."""


def _image_paths(folder: str) -> list:
    """The image files of `folder` and of its sub-folders one level down (a training folder's class folders, as
    `keras.utils.image_dataset_from_directory` lays them out), relative to `folder`: the top level's first, then
    one of each class folder in turn (by name), so that the first images hold every class."""
    top, classes = [], []
    for entry in sorted(os.scandir(folder), key=lambda entry: entry.name):
        if entry.is_dir():
            classes.append([os.path.join(entry.name, name) for name in sorted(os.listdir(entry.path))
                            if name.lower().endswith(EXTENSIONS)])
        elif entry.name.lower().endswith(EXTENSIONS):
            top.append(entry.name)
    rounds = [group[index] for index in range(max(map(len, classes), default=0)) for group in classes
              if index < len(group)]
    return top + rounds


def read_folder(folder, height: int, width: int, minimum: int = 8, maximum: int = 300) -> list:
    """The first `maximum` images of `folder` and its class sub-folders (`_image_paths`' order) as (height, width, 3)
    float32 arrays in 0..255.

    Raises:
        ValueError: not a folder, fewer than `minimum` images, a file that is not a regular file, too large,
            undecodable, or of another
            size than the model's (named, with its size): nothing is resized silently.
    """
    import tensorflow as tf

    folder = os.fspath(folder)
    if not os.path.isdir(folder):
        raise ValueError(f"The calibration images must be a folder of images. Received: "
                         f"calibration_images={folder!r} (not a folder)")
    names = _image_paths(folder)
    if len(names) < minimum:
        raise ValueError(f"The calibration folder holds {len(names)} images ({', '.join(EXTENSIONS)}); int8 "
                         f"calibration needs at least {minimum}, like the images the model will serve. Received: "
                         f"calibration_images={folder!r}")
    images = []
    for name in names[:maximum]:
        path = os.path.join(folder, name)
        if not os.path.isfile(path):  # a FIFO would block the read, a device never end
            raise ValueError(f"The calibration image {path!r} is not a regular file. Remove it from the folder.")
        size = os.path.getsize(path)
        if size > MAX_FILE_BYTES:
            raise ValueError(f"The calibration image {path!r} is {size:,} bytes (limit {MAX_FILE_BYTES:,}). "
                             f"Remove it, or resize it to {height}x{width}.")
        try:
            image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False).numpy()
        except tf.errors.OpError as error:
            raise ValueError(f"The calibration image {path!r} cannot be decoded ({error.message}). Remove it "
                             f"from the folder.") from None
        if image.shape[:2] != (height, width):
            raise ValueError(f"The calibration image {path!r} is {image.shape[1]}x{image.shape[0]} (width x height); "
                             f"the model takes {width}x{height}. Resize the calibration images to the model's size "
                             f"as the serving client does.")
        images.append(image.astype(np.float32))
    return images
