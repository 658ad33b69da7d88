"""The limits a served SavedModel puts on untrusted requests, fixed at export (no TensorFlow imported here).

Every limit becomes a constant of the serving graph, so the SavedModel enforces it wherever it is loaded (TF
Serving, `tf.saved_model.load` without keras_vit); `serving_limits()` on the loaded object returns them.
The work a request can cause is bounded before any pixel is decoded, from the encoded bytes alone:

- `max_pixels`: decoded pixels of one image (a GIF counts every frame at its largest frame's size): memory.
- `max_request_pixels`: the same pixels summed over the images of one request, each GIF block walked counting
  as `GIF_BLOCK_PIXELS` (default: the larger of `DEFAULT_MAX_REQUEST_PIXELS` and `max_pixels`): a request of
  many large images or many GIFs at the block limit is refused at its first image past it, before decoding.
- `max_batch_size`: images in one request (both signatures).
- `max_jpeg_scans`: scans (SOS markers) in one JPEG. Each scan of a progressive JPEG is a pass over every
  block of the image, so scans multiply the decoding time at a fixed size. Every `FF DA` of the file counts,
  including those of an embedded thumbnail or an appended image.
- `max_gif_blocks`: blocks in one GIF, counting each extension, each frame, each data sub-block of an
  extension (the decoder stores every one) and each run of equal-size image-data sub-blocks (an encoder
  writes a frame's data as 255-byte sub-blocks and a shorter last one: about 5 per frame in all).
- `max_png_idat_ratio`: a PNG's compressed image data (the bytes of its IDAT chunks) may be at most this
  many times the raw size its header declares, plus `PNG_IDAT_SLACK` bytes. Deflate inflates at most 1032x,
  so this bounds what the decoder inflates (it inflates the whole stream, past the image's last row).

Out-of-range pixels of the float signature (outside 0..255, NaN, infinite) are refused whatever the limits.
"""

import dataclasses
import math
import numbers

DEFAULT_MAX_PIXELS = 8192 * 8192
DEFAULT_MAX_BATCH_SIZE = 64
DEFAULT_MAX_REQUEST_PIXELS = 64 * 2048 * 2048  # = 4 images at the default pixel limit
DEFAULT_MAX_JPEG_SCANS = 16  # libjpeg's progressive JPEGs have 10 scans (6 in grayscale), baseline ones 1 to 3
DEFAULT_MAX_GIF_BLOCKS = 4096
DEFAULT_MAX_PNG_IDAT_RATIO = 2.0  # honest encoders stay under 1.01 (stored blocks) or ~1.13 (fixed Huffman)
GIF_BLOCK_PIXELS = 16384
"""What each GIF block walked counts against `max_request_pixels`: a step of the walk costs about as much CPU as
decoding 16384 pixels, so a request of many GIFs at the block limit is bounded like one of large images."""
PNG_IDAT_SLACK = 65536
"""Bytes of IDAT a PNG may carry beyond `max_png_idat_ratio` times its raw size (zlib's and the encoder's
overhead on small images): at most 1032 x 64 KiB = 66 MB inflated, about 0.2 s."""

CEILINGS = {
    "max_pixels": 2**40,
    "max_request_pixels": 2**46,
    "max_batch_size": 2**20,
    "max_jpeg_scans": 2**20,
    "max_gif_blocks": 2**20,
    "max_png_idat_ratio": 1032.0,
}
"""The largest value each limit takes: far above any machine's memory, and low enough that the graph's int64
arithmetic (pixels x frames, sums over a request) cannot overflow."""

MIN_PNG_IDAT_RATIO = 1.0


def check_int_limit(name: str, value) -> None:
    """A ValueError unless `value` is an int from 1 to `CEILINGS[name]` (bools refused)."""
    ceiling = CEILINGS[name]
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 1 <= value <= ceiling:
        raise ValueError(f"`{name}` must be an integer from 1 to {ceiling} (2**{ceiling.bit_length() - 1}). "
                         f"Received: {name}={value!r}")


def check_ratio_limit(name: str, value) -> None:
    """A ValueError unless `value` is a finite number from `MIN_PNG_IDAT_RATIO` to `CEILINGS[name]`."""
    ceiling = CEILINGS[name]
    if (isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value)
            or not MIN_PNG_IDAT_RATIO <= value <= ceiling):
        raise ValueError(
            f"`{name}` must be a number from {MIN_PNG_IDAT_RATIO} to {ceiling}. Received: {name}={value!r}"
        )


@dataclasses.dataclass(frozen=True)
class Limits:
    """The request limits of one export; validated when built (ValueError), `max_request_pixels` resolved.

    Example:
        >>> Limits(max_pixels=1000).max_request_pixels == DEFAULT_MAX_REQUEST_PIXELS
        True
        >>> Limits(max_pixels=2**30).max_request_pixels
        1073741824
    """

    max_pixels: int = DEFAULT_MAX_PIXELS
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE
    max_request_pixels: int | None = None
    max_jpeg_scans: int = DEFAULT_MAX_JPEG_SCANS
    max_gif_blocks: int = DEFAULT_MAX_GIF_BLOCKS
    max_png_idat_ratio: float = DEFAULT_MAX_PNG_IDAT_RATIO

    def __post_init__(self):
        for name in ("max_pixels", "max_batch_size", "max_jpeg_scans", "max_gif_blocks"):
            check_int_limit(name, getattr(self, name))
        if self.max_request_pixels is None:
            object.__setattr__(self, "max_request_pixels", max(DEFAULT_MAX_REQUEST_PIXELS, self.max_pixels))
        check_int_limit("max_request_pixels", self.max_request_pixels)
        if self.max_request_pixels < self.max_pixels:
            raise ValueError(
                "`max_request_pixels` must be at least `max_pixels` (a request of one image at the pixel limit "
                f"must fit). Received: max_request_pixels={self.max_request_pixels}, max_pixels={self.max_pixels}"
            )
        check_ratio_limit("max_png_idat_ratio", self.max_png_idat_ratio)
        for name in ("max_pixels", "max_batch_size", "max_request_pixels", "max_jpeg_scans", "max_gif_blocks"):
            object.__setattr__(self, name, int(getattr(self, name)))
        object.__setattr__(self, "max_png_idat_ratio", float(self.max_png_idat_ratio))

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)
