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


# --- The same header walks in plain Python, for files read before decoding (training, few-shot, inspect) ------
# The serving graph cannot call Python, so `keras_vit.export.decode` keeps its graph versions; these follow them
# step for step (tests/test_export_limits.py checks that both give the same numbers on the bombs and on normal
# images), and `decoding_problem` applies the same limits to a file's bytes.

LIMIT_VARIABLES = {
    "max_jpeg_scans": "KERAS_VIT_MAX_JPEG_SCANS",
    "max_gif_blocks": "KERAS_VIT_MAX_GIF_BLOCKS",
    "max_png_idat_ratio": "KERAS_VIT_MAX_PNG_IDAT_RATIO",
}
"""The environment variables that raise (or lower) the decoding-cost limits of files read outside serving."""


def environment_limits(environ=None) -> Limits:
    """`Limits` whose decoding-cost limits are the defaults or the `LIMIT_VARIABLES` set in `environ`
    (default `os.environ`); a ValueError names a variable whose value is not a valid limit."""
    import os

    environ = os.environ if environ is None else environ
    values = {}
    for name, variable in LIMIT_VARIABLES.items():
        text = environ.get(variable)
        if text is None or not text.strip():
            continue
        try:
            value = float(text) if name == "max_png_idat_ratio" else int(text)
            (check_ratio_limit if name == "max_png_idat_ratio" else check_int_limit)(name, value)
        except ValueError:
            kind = f"a number from {MIN_PNG_IDAT_RATIO} to {CEILINGS[name]}" if name == "max_png_idat_ratio" else \
                f"an integer from 1 to {CEILINGS[name]}"
            raise ValueError(f"The environment variable {variable} must be {kind} (it sets `{name}`). "
                             f"Received: {variable}={text!r}") from None
        values[name] = value
    return Limits(**values)


def jpeg_scans(data: bytes, limit: int | None = None) -> int:
    """The SOS markers (`FF DA`) of a JPEG's bytes, counted up to `limit + 1` (`decode.jpeg_scans`)."""
    count = data.count(b"\xff\xda")
    return count if limit is None else min(count, limit + 1)


_ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))
_PNG_CHANNELS = (1, 4, 3, 1, 2, 4, 4)
_PNG_IDAT_CHUNKS = 256


def png_raw_bytes(width: int, height: int, bit_depth: int, color_type: int, interlaced: int) -> float:
    """The filtered, uncompressed image data a PNG header declares, in bytes (`decode.png_raw_bytes`)."""
    bits = float(min(max(bit_depth, 1), 16) * _PNG_CHANNELS[min(max(color_type, 0), 6)])

    def rows_bytes(rows, columns):
        return rows * (1 + math.ceil(columns * bits / 8)) if columns > 0 else 0.0

    if not interlaced:
        return float(rows_bytes(float(height), float(width)))
    return float(sum(rows_bytes(max(math.ceil((height - y0) / dy), 0), max(math.ceil((width - x0) / dx), 0))
                     for x0, y0, dx, dy in _ADAM7))


def png_idat_bytes(data: bytes) -> int:
    """An upper bound of a PNG's compressed image data, in bytes (`decode.png_idat_bytes`)."""
    pieces = data.split(b"IDAT", _PNG_IDAT_CHUNKS)
    tags, counted, end = len(pieces) - 1, 0, 0
    for piece in pieces[:-1]:
        end += len(piece) + 4
        left = len(data) - end
        counted += min(int.from_bytes(piece[-4:], "big"), left) if len(piece) >= 4 else left
    return counted + (len(pieces[-1]) if tags >= _PNG_IDAT_CHUNKS else 0)


def _color_table_bytes(packed: int) -> int:
    return 3 * (2 << (packed & 7)) if packed >= 128 else 0


def gif_blocks(data: bytes, max_blocks: int) -> tuple[int, int, int, int]:
    """(frames, largest frame height, largest frame width, blocks) of a GIF, the walk of `decode.gif_blocks`
    step for step (the same windows, the same stop past `max_blocks` blocks or 2 * max_blocks + 64 steps)."""
    import numpy as np

    n = len(data)
    array = np.frombuffer(data, np.uint8)

    def byte(at):
        return int(array[at]) if 0 <= at < n else 0

    def read(at, length):
        at = min(max(at, 0), n)
        return list(data[at:at + length]) + [0] * (length - len(data[at:at + length]))

    pos, in_block, kind, fresh = 13 + _color_table_bytes(byte(10)), True, "extension", False
    frames = height = width = blocks = steps = 0
    window, done, max_steps = 64, False, 2 * max_blocks + 64
    while not done and blocks <= max_blocks and steps < max_steps:
        size = byte(pos)
        in_run = not in_block and pos < n and size > 0
        run = 0
        if in_run:
            candidates = pos + (size + 1) * np.arange(window, dtype=np.int64)
            same = (candidates < n) & (array[np.minimum(candidates, max(n - 1, 0))] == size)
            different = np.flatnonzero(~same)
            run = int(different[0]) if different.size else window
        ended = run < window
        if in_run:
            blocks += run if kind == "extension" else int(ended)
        after = pos - 1 if in_block else pos + (size + 1) * run
        head = read(after, 11)
        terminator = not in_block and ended and after < n and head[0] == 0
        again = terminator and kind == "extension" and fresh and not in_run
        parse = in_block or (terminator and not again)
        introducer = head[1] if after + 1 < n else -1
        extension, image = parse and introducer == 0x21, parse and introducer == 0x2C
        done = (parse and not (extension or image)) or (not parse and after >= n)
        pos = after + 3 if extension else after + 12 + _color_table_bytes(head[10]) if image else \
            after + 1 if again else after
        in_block = False
        kind = "image" if image else "extension" if extension else kind
        fresh = extension
        if image:
            frames += 1
            height, width = max(height, head[8] + 256 * head[9]), max(width, head[6] + 256 * head[7])
        blocks += int(extension) + int(image) + int(again)
        window = min(2 * window, 65536) if in_run and not ended else 64
        steps += 1
    return frames, height, width, blocks if done else max(blocks, max_blocks + 1)


def decoding_problem(data: bytes, limits: Limits | None = None) -> str | None:
    """Why decoding `data` (a JPEG, PNG or GIF file's bytes) would do more work than `limits` allow (the scans of
    a JPEG, the blocks of a GIF, a PNG's compressed data against its raw size, as serving refuses them), naming
    the value found, the limit and the environment variable that raises it; None when within them (and for
    other formats, or headers too short to read: the header checks name those)."""
    limits = limits or Limits()
    if data.startswith(b"\xff\xd8\xff"):
        scans = jpeg_scans(data, limits.max_jpeg_scans)
        if scans > limits.max_jpeg_scans:
            return (f"progressive JPEG of more than {limits.max_jpeg_scans} scans (each a decoding pass over the "
                    f"whole image; counted {scans} before stopping), over the limit of {limits.max_jpeg_scans} "
                    f"({LIMIT_VARIABLES['max_jpeg_scans']}=N raises it)")
    elif data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) >= 29:
        width, height = int.from_bytes(data[16:20], "big", signed=True), int.from_bytes(data[20:24], "big", signed=True)
        raw = png_raw_bytes(max(width, 0), max(height, 0), data[24], data[25], data[28])
        idat = png_idat_bytes(data)
        if idat > limits.max_png_idat_ratio * raw + PNG_IDAT_SLACK:
            return (f"PNG of {idat:,} bytes of compressed image data (IDAT) for {raw:,.0f} raw bytes, over the limit "
                    f"of {limits.max_png_idat_ratio:g} times the raw size plus {PNG_IDAT_SLACK:,} (deflate inflates "
                    f"up to 1032x; {LIMIT_VARIABLES['max_png_idat_ratio']}=R raises it)")
    elif data.startswith(b"GIF8") and len(data) >= 10:
        blocks = gif_blocks(data, limits.max_gif_blocks)[3]
        if blocks > limits.max_gif_blocks:
            return (f"GIF of more than {limits.max_gif_blocks:,} blocks (extensions, frames, sub-blocks), over the "
                    f"limit of {limits.max_gif_blocks:,} ({LIMIT_VARIABLES['max_gif_blocks']}=N raises it)")
    return None
