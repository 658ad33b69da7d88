"""Small decompression and work bombs for the serving tests, built here from their definition (the benchmark,
benchmarks/serving_bombs.py, builds the full-size ones): each has the structure of the real attack at a size
that tests a limit set low, so the tests stay fast."""

import math
import struct
import zlib

import numpy as np
import tensorflow as tf


def progressive_jpeg(side: int = 16, repeats: int = 0) -> bytes:
    """A progressive JPEG (tf.io.encode_jpeg: libjpeg's 10 scans) whose last scan is repeated `repeats` more
    times: each repeat is another pass of the decoder over the whole image, for a few bytes."""
    rows, columns = np.indices((side, side))
    image = np.stack([rows * 255 // side, columns * 255 // side, (rows + columns) % 256], -1).astype(np.uint8)
    jpeg = tf.io.encode_jpeg(image, progressive=True).numpy()
    last, end = jpeg.rindex(b"\xff\xda"), jpeg.rindex(b"\xff\xd9")
    return jpeg[:end] + jpeg[last:end] * repeats + jpeg[end:]


def gif_of_extension_bytes(count: int) -> bytes:
    """A GIF header with a 1x1 screen followed by `count` bytes 0x21: an extension whose sub-blocks (each a size
    byte 0x21 and 33 bytes) never end; the walk of the block structure must stop at its limit."""
    return b"GIF89a" + struct.pack("<HHBBB", 1, 1, 0, 0, 0) + b"\x21" * count


def gif_of_frames(count: int, side: int = 1) -> bytes:
    """A GIF of `count` frames of side x side pixels (each a graphic control extension and an image)."""
    frame = (b"\x21\xf9\x04\x00\x00\x00\x00\x00"  # graphic control extension: one 4-byte sub-block
             + b"\x2c" + struct.pack("<HHHHB", 0, 0, side, side, 0) + b"\x02\x02\x44\x01\x00")
    return b"GIF89a" + struct.pack("<HHBBB", side, side, 0x80, 0, 0) + bytes(6) + frame * count + b"\x3b"


def gif_with_hidden_frame(gif: bytes) -> bytes:
    """`gif` (one frame, from PIL) with a 1x1 screen, and before its frame an extension with no sub-block
    followed by one sub-block: giflib reads that sub-block as the extension's (a quirk of DGifSlurp), then
    the frame, which a walk reading a block after the empty extension would never see."""
    start = 13 + (3 * (2 << (gif[10] & 7)) if gif[10] & 0x80 else 0)
    frame = gif[gif.index(b"\x2c", start):]
    return gif[:6] + struct.pack("<HH", 1, 1) + gif[10:start] + b"\x21\xfe\x00" + b"\x01A\x00" + frame


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png(width: int, height: int, idat: bytes | list, color_type: int = 2, bit_depth: int = 8, interlace: int = 0,
        before_idat: bytes = b"") -> bytes:
    """A PNG of the given header whose image data is `idat` (one chunk, or a list of chunks' data)."""
    header = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, interlace)
    chunks = [idat] if isinstance(idat, bytes) else idat
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", header) + before_idat
            + b"".join(png_chunk(b"IDAT", data) for data in chunks) + png_chunk(b"IEND", b""))


def zlib_of_zeros(size: int) -> bytes:
    """zlib data inflating to `size` zero bytes (about size / 1000 bytes)."""
    compressor = zlib.compressobj(9)
    block = bytes(min(size, 1 << 20))
    parts = [compressor.compress(block[: min(len(block), size - done)]) for done in range(0, size, len(block))]
    return b"".join(parts) + compressor.flush()


def png_inflate_bomb(inflated: int, width: int = 1, height: int = 1) -> bytes:
    """An RGB PNG whose IDAT inflates to `inflated` bytes, far more than its width x height need."""
    return png(width, height, zlib_of_zeros(inflated))


ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))
CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}


def raw_png_size(width: int, height: int, bit_depth: int, color_type: int, interlace: int) -> int:
    """Bytes of filtered image data (filter byte + packed pixels per row, per pass when interlaced), from the
    PNG specification, sections 7.2 and 8.2."""
    bits = bit_depth * CHANNELS[color_type]
    if not interlace:
        return height * (1 + math.ceil(width * bits / 8))
    total = 0
    for x0, y0, dx, dy in ADAM7:
        columns, rows = max(0, math.ceil((width - x0) / dx)), max(0, math.ceil((height - y0) / dy))
        total += rows * (1 + math.ceil(columns * bits / 8)) if columns else 0
    return total


def interlaced_png(image: np.ndarray, level: int = 0) -> bytes:
    """An Adam7-interlaced 8-bit RGB PNG of `image` (PIL writes none), filter 0 on every row."""
    height, width, _ = image.shape
    rows = []
    for x0, y0, dx, dy in ADAM7:
        part = image[y0::dy, x0::dx]
        if part.size:
            rows += [b"\x00" + row.tobytes() for row in part]
    return png(width, height, zlib.compress(b"".join(rows), level), interlace=1)
