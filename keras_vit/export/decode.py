"""In-graph decoding of untrusted encoded images (JPEG, PNG, GIF, BMP) for the serving signature.

Each image of a request is decoded on its own, so images of different sizes may share a request. Before any
pixel is decoded, what its decoder will allocate and how much work it will do are read from the bytes, and
images over a limit set at export (`keras_vit.export.limits.Limits`) are refused: a small file can decode to
gigabytes, or take minutes. Memory: `tf.image.extract_jpeg_shape` for JPEG, the IHDR chunk for PNG, the info
header for BMP, and for GIF the screen and *every frame's own descriptor*, found by walking the block
structure (`gif_blocks`), against `max_pixels`, and the request's sum against `max_request_pixels`. Work:
the scans of a JPEG (`jpeg_scans`, each a pass over the image), the blocks of a GIF (the walk itself stops
at the limit), the compressed data of a PNG against the raw size its header declares (`png_idat_bytes`,
`png_raw_bytes`: deflate inflates up to 1032x, and libpng inflates the whole stream). Every check costs time
linear in the image's bytes with a small constant (one split of the bytes at a marker, with a bounded number
of pieces; the GIF walk reads a few bytes per step and its steps are bounded by its limit), never a loop over
the bytes in the graph. Every refusal is a `tf.errors.InvalidArgumentError` naming the image's index in the
request, which TF Serving returns to the client as INVALID_ARGUMENT (HTTP 400).

Decoded images become RGB (grayscale replicated, alpha dropped) and are resized to the model's size
without cropping, with `tf.image.resize` bilinear (half-pixel centres, no antialiasing): the evaluation
preprocessing of the official checkpoints (vit_jax `input_pipeline.py`; paper appendix B.1.1).
"""

import tensorflow as tf

from keras_vit.export.limits import GIF_BLOCK_PIXELS, PNG_IDAT_SLACK, Limits

JPEG, PNG, GIF, BMP, UNKNOWN = range(5)
FORMAT_NAMES = ("JPEG", "PNG", "GIF", "BMP", "unknown")
_SIGNATURES = ((JPEG, b"\xff\xd8\xff"), (PNG, b"\x89PNG\r\n\x1a\n"), (GIF, b"GIF8"), (BMP, b"BM"))
_HEADER_BYTES = {PNG: 29, GIF: 10, BMP: 26}
"""Bytes needed to read the header: PNG's IHDR ends at 29 (its interlace byte), the GIF screen height at 10,
the BMP height at 26."""


def image_format(encoded: tf.Tensor) -> tf.Tensor:
    """The format of one encoded image from its magic bytes: JPEG, PNG, GIF, BMP or UNKNOWN (int32)."""
    index = tf.constant(UNKNOWN)
    for fmt, magic in reversed(_SIGNATURES):
        index = tf.where(tf.equal(tf.strings.substr(encoded, 0, len(magic)), magic), fmt, index)
    return index


def _require_length(encoded, fmt, index):
    needed = _HEADER_BYTES[fmt]
    name = FORMAT_NAMES[fmt]
    return tf.debugging.Assert(
        tf.strings.length(encoded) >= needed,
        [f"Truncated image: the {name} header needs {needed} bytes; image index, bytes received:", index,
         tf.strings.length(encoded)],
    )


def _header_ints(encoded, fmt, offset, dtype, little_endian, index):
    with tf.control_dependencies([_require_length(encoded, fmt, index)]):
        raw = tf.strings.substr(encoded, offset, 2 * tf.dtypes.as_dtype(dtype).size)
    return tf.cast(tf.io.decode_raw(raw, dtype, little_endian=little_endian), tf.int64)


def _color_table_bytes(packed):
    """Size of the colour table that a GIF descriptor's packed byte announces (0 without one)."""
    entries = tf.bitwise.left_shift(tf.constant(2, packed.dtype), tf.bitwise.bitwise_and(packed, 7))
    return tf.where(packed >= 128, 3 * entries, 0)


def jpeg_scans(encoded: tf.Tensor, limit: int | None = None) -> tf.Tensor:
    """The number of scans of one JPEG (int64): the SOS markers (`FF DA`) anywhere in its bytes, counted up to
    `limit + 1` (a split of the bytes at the markers, at most `limit + 2` pieces; None: all of them).

    Entropy-coded data never holds `FF DA` (an `FF` there is followed by `00` or a restart marker), so every
    scan is counted; an `FF DA` inside a metadata segment (an embedded thumbnail's scan) counts too, which can
    only refuse more, never less.

    Example:
        >>> image = tf.zeros([16, 16, 3], tf.uint8)
        >>> int(jpeg_scans(tf.io.encode_jpeg(image))), int(jpeg_scans(tf.io.encode_jpeg(image, progressive=True)))
        (1, 10)
        >>> int(jpeg_scans(tf.io.encode_jpeg(image, progressive=True), limit=4))
        5
    """
    pieces = tf.strings.split(encoded, b"\xff\xda", maxsplit=-1 if limit is None else limit + 1)
    return tf.size(pieces, out_type=tf.int64) - 1


_ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))
"""The 7 passes of an interlaced PNG: (first column, first row, column step, row step)."""
_PNG_CHANNELS = (1, 4, 3, 1, 2, 4, 4)
"""Channels of PNG colour types 0 (gray), 2 (RGB), 3 (palette), 4 (gray+alpha), 6 (RGBA); the invalid types 1
and 5 (and any above 6, which libpng refuses) count the most, 4."""


def png_raw_bytes(width, height, bit_depth, color_type, interlaced) -> tf.Tensor:
    """The size of the filtered, uncompressed image data a PNG header declares (float64): for each row a
    filter byte and the row's pixels, for each of the 7 passes of an interlaced image."""
    width, height = tf.cast(width, tf.float64), tf.cast(height, tf.float64)
    channels = tf.gather(tf.constant(_PNG_CHANNELS, tf.float64), tf.clip_by_value(color_type, 0, 6))
    bits = tf.cast(tf.clip_by_value(bit_depth, 1, 16), tf.float64) * channels

    def rows_bytes(rows, columns):
        return tf.where(columns > 0, rows * (1 + tf.math.ceil(columns * bits / 8)), tf.zeros_like(rows))

    x0, y0, dx, dy = (tf.constant(v, tf.float64) for v in zip(*_ADAM7))
    passes = rows_bytes(tf.maximum(tf.math.ceil((height - y0) / dy), 0), tf.maximum(tf.math.ceil((width - x0) / dx), 0))
    return tf.where(interlaced != 0, tf.reduce_sum(passes), rows_bytes(height, width))


_PNG_IDAT_CHUNKS = 256
"""IDAT chunks read one by one; the bytes after the 256th `IDAT` all count as image data."""


def png_idat_bytes(encoded: tf.Tensor) -> tf.Tensor:
    """An upper bound of the compressed image data (IDAT chunk data) of one PNG, in bytes (int64).

    The bytes are split at the chunk type `IDAT` (at most `_PNG_IDAT_CHUNKS` times, then everything after
    counts): each chunk counts the length before its type, capped at the bytes left in the file (or all of
    them when no 4-byte length precedes it). No chunk can hide from the split, and an `IDAT` inside another
    chunk's data only makes the bound larger. Time and memory linear in the bytes, nothing per byte.

    Example:
        >>> png = tf.io.encode_png(tf.zeros([5, 7, 3], tf.uint8))
        >>> int(png_idat_bytes(png)) == int.from_bytes(png.numpy()[33:37], "big")  # its one IDAT's length
        True
    """
    pieces = tf.strings.split(encoded, b"IDAT", maxsplit=_PNG_IDAT_CHUNKS)
    tags = tf.size(pieces, out_type=tf.int64) - 1
    sizes = tf.cast(tf.strings.length(pieces), tf.int64)
    before = sizes[:-1]  # the bytes before each tag, from the previous one
    ends = tf.cumsum(before) + 4 * tf.range(1, tags + 1, dtype=tf.int64)  # where each tag's data starts
    left = tf.cast(tf.strings.length(encoded), tf.int64) - ends
    field = tf.strings.substr(pieces[:-1], tf.cast(tf.maximum(before - 4, 0), tf.int32), tf.fill([tags], 4))
    digits = tf.cast(tf.raw_ops.DecodePaddedRaw(input_bytes=field, fixed_length=4, out_type=tf.uint8), tf.int64)
    length = tf.reduce_sum(tf.bitwise.left_shift(digits, tf.constant([24, 16, 8, 0], tf.int64)), axis=1)
    counted = tf.reduce_sum(tf.where(before >= 4, tf.minimum(length, left), left))
    rest = tf.where(tags >= _PNG_IDAT_CHUNKS, sizes[-1], 0)  # past the chunks read: all of it
    return counted + rest


_GIF_WINDOW = 64
_GIF_MAX_WINDOW = 65536
_EXTENSION, _IMAGE_DATA = 0, 1


def gif_blocks(encoded: tf.Tensor, max_blocks: int) -> tf.Tensor:
    """(frames, largest frame height, largest frame width, blocks) of one GIF, read from its block structure
    without decoding (int64 [4]); the walk stops once it has counted more than `max_blocks` blocks.

    The logical screen size in the header does not bound what a decoder allocates: giflib allocates each
    frame at its own image descriptor's size (a 1x1 screen may hold a 20000x20000 frame), and stores every
    sub-block of every extension. This walks the blocks as giflib reads them (extensions `0x21`, image
    descriptors `0x2C`, each followed by a chain of sub-blocks, a size byte and that many bytes, ending with a
    zero size; anything else ends the walk) and counts as blocks each extension, each frame, each sub-block of
    an extension and each run of equal-size image-data sub-blocks. It follows giflib where giflib departs
    from the format: after an extension with no sub-block (`21 xx 00`) giflib reads one more chain of
    sub-blocks, so a frame after it would be hidden from a walk that read a block there.

    The walk is sequential, so its cost is bounded by the limit, not by the file: each step of the loop
    crosses a block header or a run of equal-size sub-blocks, found with one vectorised comparison over a
    window of candidate size bytes (64, doubling while the run goes on, up to 65536). A frame's data,
    255-byte sub-blocks then a shorter one, is a few steps however large; a file of tiny or changing
    sub-blocks reaches the limit within `max_blocks` sub-blocks. At most 2 * max_blocks + 64 steps.

    Example:
        >>> import io, numpy as np, PIL.Image
        >>> frames = [PIL.Image.fromarray(np.full((6, 9, 3), v, np.uint8)) for v in (0, 90)]
        >>> buffer = io.BytesIO()
        >>> frames[0].save(buffer, format="GIF", save_all=True, append_images=frames[1:])
        >>> [int(x) for x in gif_blocks(tf.constant(buffer.getvalue()), 100)[:3]]
        [2, 6, 9]
    """
    n = tf.cast(tf.strings.length(encoded), tf.int64)

    def read(at, length=1):  # the bytes at positions `at` (int64), zero at or past the end; reads no other byte
        at = tf.cast(tf.clip_by_value(at, 0, n), tf.int32)
        raw = tf.raw_ops.DecodePaddedRaw(input_bytes=tf.strings.substr(encoded, at, tf.fill(tf.shape(at), length)),
                                         fixed_length=length, out_type=tf.uint8)
        return tf.cast(raw, tf.int64)

    zero = tf.constant(0, tf.int64)
    start = 13 + _color_table_bytes(read(tf.constant(10, tf.int64))[0])  # after the screen and global table

    def step(pos, in_block, kind, fresh, frames, height, width, blocks, window, steps, done):
        # In a chain of sub-blocks (pos at a size byte): skip the run of sub-blocks of that same size.
        size = read(pos)[0]
        in_run = tf.logical_and(tf.logical_not(in_block), tf.logical_and(pos < n, size > 0))
        offsets = tf.range(window, dtype=tf.int64)
        candidates = pos + (size + 1) * offsets
        same = tf.logical_and(candidates < n, read(candidates)[:, 0] == size)
        run = tf.where(in_run, tf.reduce_min(tf.where(same, window, offsets)), zero)
        ended = run < window
        blocks += tf.where(in_run, tf.where(kind == _EXTENSION, run, tf.cast(ended, tf.int64)), zero)
        # Where the run stops: a zero size byte ends the chain and a block starts after it (at `pos` itself
        # at the start): its introducer, then for an image its descriptor (left, top, width, height, packed).
        after = tf.where(in_block, pos - 1, pos + (size + 1) * run)
        bytes_ = read(after[tf.newaxis], 11)[0]
        terminator = tf.logical_and(tf.logical_and(tf.logical_not(in_block), ended),
                                    tf.logical_and(after < n, bytes_[0] == 0))
        # giflib reads one more chain after an extension whose first sub-block size is zero (DGifSlurp calls
        # DGifGetExtensionNext again): what follows such an extension is sub-blocks, not a block.
        again = tf.logical_and(tf.logical_and(terminator, kind == _EXTENSION),
                               tf.logical_and(fresh, tf.logical_not(in_run)))
        parse = tf.logical_or(in_block, tf.logical_and(terminator, tf.logical_not(again)))
        introducer = tf.where(after + 1 < n, bytes_[1], -1)
        extension = tf.logical_and(parse, introducer == 0x21)
        image = tf.logical_and(parse, introducer == 0x2C)
        stop = tf.logical_or(tf.logical_and(parse, tf.logical_not(tf.logical_or(extension, image))),
                             tf.logical_and(tf.logical_not(parse), after >= n))
        data_start = after + 12 + _color_table_bytes(bytes_[10])  # descriptor, local table, LZW code size
        return (
            tf.where(extension, after + 3, tf.where(image, data_start, tf.where(again, after + 1, after))),
            tf.constant(False),
            tf.where(image, tf.constant(_IMAGE_DATA, tf.int64),
                     tf.where(extension, tf.constant(_EXTENSION, tf.int64), kind)),
            extension,  # a fresh extension: no sub-block read yet
            frames + tf.cast(image, tf.int64),
            tf.maximum(height, tf.where(image, bytes_[8] + 256 * bytes_[9], zero)),
            tf.maximum(width, tf.where(image, bytes_[6] + 256 * bytes_[7], zero)),
            blocks + tf.cast(extension, tf.int64) + tf.cast(image, tf.int64) + tf.cast(again, tf.int64),
            tf.where(tf.logical_and(in_run, tf.logical_not(ended)), tf.minimum(2 * window, _GIF_MAX_WINDOW),
                     tf.constant(_GIF_WINDOW, tf.int64)),
            steps + 1,
            stop,
        )

    max_steps = 2 * max_blocks + 64
    state = (start, tf.constant(True), tf.constant(_EXTENSION, tf.int64), tf.constant(False), zero, zero, zero,
             zero, tf.constant(_GIF_WINDOW, tf.int64), zero, tf.constant(False))
    _, _, _, _, frames, height, width, blocks, _, _, done = tf.while_loop(
        lambda *s: tf.logical_and(tf.logical_not(s[-1]), tf.logical_and(s[7] <= max_blocks, s[9] < max_steps)),
        step, state,
    )
    blocks = tf.where(done, blocks, tf.maximum(blocks, max_blocks + 1))  # stopped by the limit: over it
    return tf.stack([frames, height, width, blocks])


def gif_frames(encoded: tf.Tensor, max_blocks: int = 2**20) -> tf.Tensor:
    """(frames, largest frame height, largest frame width) of one GIF (int64 [3]); see `gif_blocks`."""
    return gif_blocks(encoded, max_blocks)[:3]


def header_dimensions(encoded: tf.Tensor, fmt: tf.Tensor, index: tf.Tensor | int = 0,
                      limits: Limits | None = None) -> tf.Tensor:
    """(height, width, frames) that decoding one encoded image allocates, read without decoding (int64 [3]),
    once the bytes have passed the checks of the image's format that bound the decoder's work (`limits`):
    the scans of a JPEG, the blocks of a GIF, the compressed data of a PNG against its raw size.

    For a GIF: the largest of the screen and of every frame's own size, and the number of frames (the
    decoder keeps every frame). `index` (the image's place in its request) goes into error messages.
    """
    return header_cost(encoded, fmt, index, limits)[:3]


def header_cost(encoded: tf.Tensor, fmt: tf.Tensor, index: tf.Tensor | int = 0, limits: Limits | None = None,
                gif_budget: tf.Tensor | int | None = None) -> tf.Tensor:
    """`header_dimensions` and the GIF blocks walked (0 for other formats): int64 [4]. The GIF walk stops
    past `gif_budget` blocks (default and at most `limits.max_gif_blocks`): what the request has left."""
    limits = limits or Limits()
    one = tf.constant(1, tf.int64)
    zero = tf.constant(0, tf.int64)
    gif_budget = limits.max_gif_blocks if gif_budget is None else tf.minimum(gif_budget, limits.max_gif_blocks)

    def jpeg():
        shape = tf.cast(tf.image.extract_jpeg_shape(encoded), tf.int64)
        scans = jpeg_scans(encoded, limits.max_jpeg_scans)
        check = tf.debugging.Assert(
            scans <= limits.max_jpeg_scans,
            [f"Too many scans in a JPEG: over the limit of {limits.max_jpeg_scans} set at export (each scan of a "
             "progressive JPEG is a pass over the whole image); image index, scans (SOS markers) counted, up to "
             "one past the limit:", index, scans],
        )
        with tf.control_dependencies([check]):
            return tf.stack([shape[0], shape[1], one, zero])

    def png():  # IHDR: width, height as big-endian uint32 at bytes 16..23, then depth, colour type, interlace
        width_height = _header_ints(encoded, PNG, 16, tf.int32, little_endian=False, index=index)
        with tf.control_dependencies([_require_length(encoded, PNG, index)]):  # depth, colour type, ..., interlace
            fields = tf.cast(tf.io.decode_raw(tf.strings.substr(encoded, 24, 5), tf.uint8), tf.int64)
        raw = png_raw_bytes(tf.maximum(width_height[0], 0), tf.maximum(width_height[1], 0), fields[0], fields[1],
                            fields[4])
        compressed = png_idat_bytes(encoded)
        check = tf.debugging.Assert(
            tf.cast(compressed, tf.float64) <= limits.max_png_idat_ratio * raw + PNG_IDAT_SLACK,
            [f"PNG image data too large for the image: more compressed bytes (IDAT) than {limits.max_png_idat_ratio:g} "
             f"times the raw size its header declares plus {PNG_IDAT_SLACK} (the limit set at export; deflate "
             "inflates up to 1032x); image index, IDAT bytes, raw bytes:", index, compressed, raw],
        )
        with tf.control_dependencies([check]):
            return tf.stack([width_height[1], width_height[0], one, zero])

    def gif():  # logical screen descriptor: width, height as little-endian uint16 at bytes 6..9; then frames
        width_height = _header_ints(encoded, GIF, 6, tf.uint16, little_endian=True, index=index)
        walk = gif_blocks(encoded, gif_budget)
        check = tf.debugging.Assert(
            walk[3] <= limits.max_gif_blocks,
            [f"Too many blocks in a GIF: over the limit of {limits.max_gif_blocks} set at export (extensions, "
             "frames, extension sub-blocks, runs of image-data sub-blocks); image index, blocks counted before "
             "the walk stopped:", index, walk[3]],
        )
        with tf.control_dependencies([check]):
            return tf.stack([tf.maximum(width_height[1], walk[1]), tf.maximum(width_height[0], walk[2]),
                             tf.maximum(walk[0], one), walk[3]])

    def bmp():  # BITMAPINFOHEADER: width, height as little-endian int32 at bytes 18..25 (height < 0: top-down)
        width_height = _header_ints(encoded, BMP, 18, tf.int32, little_endian=True, index=index)
        return tf.stack([tf.abs(width_height[1]), width_height[0], one, zero])

    def unknown():
        check = tf.debugging.Assert(
            False, ["Not a JPEG, PNG, GIF or BMP image (or an empty string); image index:", index]
        )
        with tf.control_dependencies([check]):
            return tf.zeros([4], tf.int64)

    return tf.switch_case(fmt, [jpeg, png, gif, bmp, unknown])


def check_pixel_limit(dims: tf.Tensor, max_pixels: int, index: tf.Tensor | int = 0) -> tf.Operation:
    """An op that fails with InvalidArgument unless 0 < height, width and height*width*frames <= max_pixels."""
    height, width, frames = dims[0], dims[1], dims[2]
    positive = tf.debugging.Assert(
        tf.logical_and(height > 0, width > 0),
        ["Image header has no valid size; image index, height, width:", index, height, width],
    )
    with tf.control_dependencies([positive]):
        return tf.debugging.Assert(
            height * width * frames <= max_pixels,
            [f"Image too large: over the limit of {max_pixels} pixels set at export; image index, height, width, "
             "frames:", index, height, width, frames],
        )


def _to_rgb(image):
    """uint8 [h, w, c] with c in 1..4 -> [h, w, 3]: grayscale replicated, alpha dropped."""
    channels = tf.shape(image)[-1]
    gray = tf.logical_or(tf.equal(channels, 1), tf.equal(channels, 2))
    rgb = tf.cond(gray, lambda: tf.tile(image[..., :1], [1, 1, 3]), lambda: image[..., :3])
    return tf.ensure_shape(rgb, [None, None, 3])


def decode_rgb(encoded: tf.Tensor, fmt: tf.Tensor) -> tf.Tensor:
    """Decodes one image of a known format to uint8 RGB [h, w, 3]; the first frame of an animated GIF."""
    branches = [
        lambda: tf.io.decode_jpeg(encoded, channels=3),
        lambda: tf.io.decode_png(encoded, channels=3),
        lambda: tf.io.decode_gif(encoded)[0],
        lambda: _to_rgb(tf.io.decode_bmp(encoded, channels=0)),
        lambda: tf.zeros([0, 0, 3], tf.uint8),  # unreachable: refused by `header_dimensions`
    ]
    return tf.ensure_shape(tf.switch_case(fmt, branches), [None, None, 3])


def checked_format(encoded: tf.Tensor, index: tf.Tensor, limits: Limits,
                   used: tf.Tensor | int = 0) -> tuple[tf.Tensor, tf.Tensor]:
    """(format int32, the request's work so far int64) once one encoded image's header has passed every check
    before decoding. `used`: the work of the request's images before this one; this image adds its pixels
    (frames included) and `GIF_BLOCK_PIXELS` per GIF block walked, and the sum must stay within
    `max_request_pixels` (the GIF walk itself stops where the request's budget ends)."""
    fmt = image_format(encoded)
    used = tf.cast(used, tf.int64)
    cost = header_cost(encoded, fmt, index, limits, (limits.max_request_pixels - used) // GIF_BLOCK_PIXELS)
    with tf.control_dependencies([check_pixel_limit(cost[:3], limits.max_pixels, index)]):
        pixels = tf.minimum(cost[0] * cost[1] * cost[2], limits.max_pixels + 1)
        # One reduction, not a chain of adds: grappler rewrites a chain inside the scan's loop into a per-step
        # temporary variable that outlives the first call of a large SavedModel (every later request failed
        # with AlreadyExistsError on ViT-B/16).
        total = tf.reduce_sum(tf.stack([used, pixels, cost[3] * GIF_BLOCK_PIXELS]))
    with tf.control_dependencies([check_request_work(total, limits.max_request_pixels, index)]):
        return tf.identity(fmt), tf.identity(total)


def decode_and_resize(encoded: tf.Tensor, fmt: tf.Tensor, height: int, width: int) -> tf.Tensor:
    """One encoded image of a checked format -> float32 [height, width, 3] in 0..255, resized without cropping."""
    resized = tf.image.resize(decode_rgb(encoded, fmt), [height, width], method="bilinear", antialias=False)
    return tf.ensure_shape(resized, [height, width, 3])


def check_batch_size(batch_size: tf.Tensor, max_batch_size: int) -> tf.Operation:
    """An op that fails with InvalidArgument when a request holds more than `max_batch_size` images."""
    return tf.debugging.Assert(
        batch_size <= max_batch_size,
        [f"Too many images in one request: the limit set at export is {max_batch_size}; received:", batch_size],
    )


def check_request_work(total: tf.Tensor, max_request_pixels: int, index: tf.Tensor | int = 0) -> tf.Operation:
    """An op that fails with InvalidArgument when a request's images, up to the one at `index`, add up to more
    than `max_request_pixels` (`total`: their pixels, and `GIF_BLOCK_PIXELS` per GIF block walked)."""
    return tf.debugging.Assert(
        total <= max_request_pixels,
        [f"Too many pixels in one request: over the limit of {max_request_pixels} set at export, checked from the "
         f"headers before decoding (each GIF block walked counts as {GIF_BLOCK_PIXELS}; the request is refused "
         "whole: send fewer or smaller images); image index reaching it, pixels counted to there:", index, total],
    )


def decode_images(images: tf.Tensor, height: int, width: int, limits: Limits) -> tf.Tensor:
    """A batch of encoded images (tf.string [B]) -> float32 [B, height, width, 3] in 0..255.

    Every image's header is checked (format, pixels, the work its decoder would do) and the request's pixels
    added up, image after image, before any image is decoded: a request is refused at its first image over a
    limit, in time bounded by its bytes and by the limits.

    Args:
        images: encoded JPEG, PNG, GIF or BMP images, each of any size.
        height: the model's input height.
        width: the model's input width.
        limits: the `Limits` set at export: refused (InvalidArgument) are requests of more than
            `max_batch_size` images or `max_request_pixels` pixels, images over `max_pixels` and bytes whose
            decoding would do more work than the format's limit allows.

    Returns:
        The decoded RGB images resized to (height, width), as float32 in 0..255.

    Example:
        >>> import tensorflow as tf
        >>> png = tf.io.encode_png(tf.zeros([5, 7, 1], tf.uint8))
        >>> decode_images(tf.stack([png]), 4, 4, Limits(max_pixels=100, max_batch_size=8)).shape
        TensorShape([1, 4, 4, 3])
    """
    with tf.control_dependencies([check_batch_size(tf.size(images), limits.max_batch_size)]):
        images = tf.identity(images)
    indices = tf.range(tf.size(images))
    # One image after the other, each checked against what the request has left (a scan, not a map).
    formats, _ = tf.scan(
        lambda done, args: checked_format(args[1], args[0], limits, done[1]), (indices, images),
        initializer=(tf.constant(UNKNOWN), tf.constant(0, tf.int64)),
    )
    return _decode_naming_failures(indices, images, formats, height, width, limits.max_batch_size)


def _decode_naming_failures(indices, images, formats, height, width, max_batch_size):
    """Decodes every image; when a decoder refuses one (corrupt data after a valid header), fails naming its
    index. A `tf.data` pipeline skips the failures (its warning logs the decoder's own message), so the
    decoded indices show which one failed; the request is still refused whole, as TF Serving expects."""
    decoded = tf.data.Dataset.from_tensor_slices((indices, images, formats)).map(
        lambda index, encoded, fmt: (index, decode_and_resize(encoded, fmt, height, width))
    ).ignore_errors(log_warning=True)
    sentinel = tf.data.Dataset.from_tensors((tf.constant(-1), tf.zeros([height, width, 3])))
    done, pixels = decoded.concatenate(sentinel).batch(max_batch_size + 1).get_single_element()
    done, pixels = done[:-1], pixels[:-1]
    ok = tf.size(done)
    positions = tf.range(ok)
    first_failed = tf.reduce_min(tf.concat([tf.boolean_mask(positions, done != positions), [ok]], 0))
    check = tf.debugging.Assert(
        tf.equal(ok, tf.size(indices)),
        ["Image could not be decoded (corrupt or truncated data after a valid header); the request is refused "
         "whole. Image index, format:", first_failed,
         tf.gather(tf.constant(FORMAT_NAMES), tf.gather(tf.concat([formats, [UNKNOWN]], 0), first_failed))],
    )
    with tf.control_dependencies([check]):
        return tf.identity(pixels)
