"""Helpers of the export tests: a tiny classifier, encoded test images, and independent references for
decoding (PIL) and resizing (numpy) that the served graph must agree with."""

import io
import struct

import keras
import numpy as np
from PIL import Image

import keras_vit
from keras_vit import model_parts

SIZE = 32
TINY = dict(image_size=SIZE, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64)


def tiny_vit(seed=0, **kwargs):
    """A tiny ViT whose head is random (the default zero head would make every output equal)."""
    model = keras_vit.ViT(**{**TINY, "classes": 5, **kwargs})
    if (head := model_parts.head(model)) is not None:
        head.kernel.assign(np.random.default_rng(seed).normal(0, 2, head.kernel.shape).astype("float32"))
    return model


def encode(array: np.ndarray, fmt: str) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format=fmt)
    return buffer.getvalue()


def random_image(shape, seed):
    """A smooth random image (noise would make every resize a lottery of rounding)."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (4, 4) + tuple(shape[2:]), dtype=np.uint8)
    return np.asarray(Image.fromarray(small).resize(shape[1::-1], Image.BILINEAR))


def lossless_images() -> dict:
    """Encoded images PIL decodes exactly as TensorFlow does: different sizes, grayscale, RGBA, BMP, GIF."""
    return {
        "png_rgb_20x30": encode(random_image((20, 30, 3), 1), "PNG"),
        "png_rgb_45x40": encode(random_image((45, 40, 3), 2), "PNG"),
        "png_gray": encode(random_image((24, 24), 3), "PNG"),
        "png_rgba": encode(random_image((30, 20, 4), 4), "PNG"),
        "bmp_rgb": encode(random_image((16, 33, 3), 5), "BMP"),
        "gif": encode(random_image((32, 32, 3), 6), "GIF"),
        "png_exact_size": encode(random_image((SIZE, SIZE, 3), 7), "PNG"),
    }


def animated_gif(frames: int, size: int) -> bytes:
    images = [Image.fromarray(np.full((size, size, 3), 30 * i, np.uint8)) for i in range(frames)]
    buffer = io.BytesIO()
    images[0].save(buffer, format="GIF", save_all=True, append_images=images[1:], duration=50, loop=0)
    return buffer.getvalue()


def gif_with_screen(gif: bytes, width: int, height: int) -> bytes:
    """The GIF with its logical screen descriptor (bytes 6..9) claiming another size; its frames unchanged."""
    return gif[:6] + struct.pack("<HH", width, height) + gif[10:]


def gif_with_comment_blocks(gif: bytes, count: int) -> bytes:
    """The GIF with `count` comment extensions (0x21 0xFE, one 1-byte sub-block each) before its first frame."""
    packed = gif[10]
    start = 13 + (3 * (2 << (packed & 7)) if packed & 0x80 else 0)
    return gif[:start] + b"\x21\xfe\x01x\x00" * count + gif[start:]


def pil_rgb(encoded: bytes) -> np.ndarray:
    """Decodes with PIL to uint8 RGB (grayscale replicated, alpha dropped: PIL's convert('RGB'))."""
    return np.asarray(Image.open(io.BytesIO(encoded)).convert("RGB"))


def resize_bilinear(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """Bilinear resize with half-pixel centres and no antialiasing, written from the definition
    (the official evaluation's `tf.image.resize`), in float32."""
    image = image.astype(np.float32)

    def weights(out_size, in_size):
        scale = in_size / out_size
        src = (np.arange(out_size, dtype=np.float32) + 0.5) * np.float32(scale) - 0.5
        floor = np.floor(src)
        lower = np.maximum(floor, 0).astype(int)
        upper = np.minimum(np.ceil(src), in_size - 1).astype(int)
        return lower, upper, (src - floor).astype(np.float32)

    y0, y1, fy = weights(height, image.shape[0])
    x0, x1, fx = weights(width, image.shape[1])
    fx = fx[None, :, None]
    top = image[y0][:, x0] + (image[y0][:, x1] - image[y0][:, x0]) * fx
    bottom = image[y1][:, x0] + (image[y1][:, x1] - image[y1][:, x0]) * fx
    return top + (bottom - top) * fy[:, None, None]


def keras_reference(model, pixels: np.ndarray) -> np.ndarray:
    """The Keras model on float pixels in 0..255 with the official [-1, 1] scaling, computed here."""
    return keras.ops.convert_to_numpy(model(pixels.astype(np.float32) / np.float32(127.5) - 1.0, training=False))


def with_huge_png_header(png: bytes, width: int, height: int) -> bytes:
    """The PNG with its IHDR claiming another size (the pixel limit must refuse it before decoding)."""
    return png[:16] + width.to_bytes(4, "big") + height.to_bytes(4, "big") + png[24:]
