"""In-graph decoding of untrusted encoded images (JPEG, PNG, GIF, BMP) for the serving signature.

Each image of a request is decoded on its own, so images of different sizes may share a request. Before any
pixel is decoded, what its decoder will allocate is read from the bytes and images over the pixel limit are
refused (a small file can decode to gigabytes): `tf.image.extract_jpeg_shape` for JPEG, the IHDR chunk for
PNG, the info header for BMP, and for GIF the screen and *every frame's own descriptor*, found by walking
the block structure (`gif_frames`). Every refusal is a `tf.errors.InvalidArgumentError` naming the image's
index in the request, which TF Serving returns to the client as INVALID_ARGUMENT (HTTP 400).

Decoded images become RGB (grayscale replicated, alpha dropped) and are resized to the model's size
without cropping, with `tf.image.resize` bilinear (half-pixel centres, no antialiasing): the evaluation
preprocessing of the official checkpoints (vit_jax `input_pipeline.py`; paper appendix B.1.1).
"""

import tensorflow as tf

JPEG, PNG, GIF, BMP, UNKNOWN = range(5)
FORMAT_NAMES = ("JPEG", "PNG", "GIF", "BMP", "unknown")
_SIGNATURES = ((JPEG, b"\xff\xd8\xff"), (PNG, b"\x89PNG\r\n\x1a\n"), (GIF, b"GIF8"), (BMP, b"BM"))
_HEADER_BYTES = {PNG: 24, GIF: 10, BMP: 26}
"""Bytes needed to read the dimensions: PNG IHDR height ends at 24, GIF screen height at 10, BMP at 26."""


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
    return tf.where(packed >= 128, 3 * tf.bitwise.left_shift(2, tf.bitwise.bitwise_and(packed, 7)), 0)


def _subblock_chain_ends(data, n, starts):
    """For each position in `starts`, where its chain of GIF data sub-blocks ends: the position of the zero
    size byte that terminates it, or `n` when the file ends first.

    A sub-block is a size byte followed by that many bytes. Pointer doubling over every position of the file
    (hop[i] -> hop[hop[i]]) until the chains from `starts` have all reached their terminator: O(n log n)
    work whatever the file's structure, so a crafted file of tiny blocks cannot make the walk slow.
    """
    sizes = tf.concat([data[:n], [0]], 0)
    positions = tf.range(n + 1)
    hop = tf.where(sizes == 0, positions, tf.minimum(positions + 1 + sizes, n))
    targets = tf.gather(hop, tf.minimum(starts, n))
    _, ends = tf.while_loop(
        lambda hop, targets: tf.reduce_any(tf.gather(hop, targets) != targets),
        lambda hop, targets: (tf.gather(hop, hop), tf.gather(hop, targets)),
        [hop, targets],
    )
    return ends


def gif_frames(encoded: tf.Tensor) -> tf.Tensor:
    """(frames, largest frame height, largest frame width) of one GIF, from its block structure (int64 [3]).

    The logical screen size in the header does not bound what a decoder allocates: giflib allocates each
    frame at its own image descriptor's size (a 1x1 screen may hold a 20000x20000 frame). This walks the
    blocks as giflib reads them (extensions `0x21`, image descriptors `0x2C`, each followed by sub-blocks;
    anything else ends the walk) without decoding, and reads every frame's descriptor.

    Example:
        >>> import io, numpy as np, PIL.Image
        >>> frames = [PIL.Image.fromarray(np.full((6, 9, 3), v, np.uint8)) for v in (0, 90)]
        >>> buffer = io.BytesIO()
        >>> frames[0].save(buffer, format="GIF", save_all=True, append_images=frames[1:])
        >>> [int(x) for x in gif_frames(tf.constant(buffer.getvalue()))]
        [2, 6, 9]
    """
    data = tf.cast(tf.io.decode_raw(encoded, tf.uint8), tf.int32)
    n = tf.size(data)
    data = tf.concat([data, tf.zeros([16], tf.int32)], 0)  # reads past the end see zeros

    def at(i):
        return tf.gather(data, tf.minimum(i, n + 15))

    start = tf.minimum(13 + _color_table_bytes(at(10)), n)  # after the screen descriptor and global table
    positions = tf.range(n)
    is_block = tf.logical_and(positions >= start, tf.logical_or(data[:n] == 0x21, data[:n] == 0x2C))
    blocks = tf.boolean_mask(positions, is_block)  # every position where a block could start
    count = tf.size(blocks)
    is_image = tf.gather(data, blocks) == 0x2C
    first_subblock = tf.where(is_image, blocks + 11 + _color_table_bytes(at(blocks + 9)), blocks + 2)
    following = _subblock_chain_ends(data, n, first_subblock) + 1

    def block_index(position):  # index into `blocks`, or `count` (a sink) when no block starts there
        index = tf.searchsorted(blocks, position)
        known = tf.gather(tf.concat([blocks, [-1]], 0), index) == position
        return tf.where(tf.logical_and(index < count, known), index, count)

    zero = tf.zeros([1], tf.int64)
    chain = (
        tf.concat([block_index(following), [count]], 0),
        tf.concat([tf.cast(is_image, tf.int64), zero], 0),
        tf.concat([tf.where(is_image, tf.cast(at(blocks + 7) + 256 * at(blocks + 8), tf.int64), 0), zero], 0),
        tf.concat([tf.where(is_image, tf.cast(at(blocks + 5) + 256 * at(blocks + 6), tf.int64), 0), zero], 0),
    )
    first = block_index(start[tf.newaxis])[0]
    # Pointer doubling along the chain of blocks from the first: frame counts add, sizes take the maximum.
    _, frames, heights, widths = tf.while_loop(
        lambda nxt, *_: tf.gather(nxt, first) != count,
        lambda nxt, frames, heights, widths: (
            tf.gather(nxt, nxt), frames + tf.gather(frames, nxt),
            tf.maximum(heights, tf.gather(heights, nxt)), tf.maximum(widths, tf.gather(widths, nxt)),
        ),
        chain,
    )
    return tf.stack([frames[first], heights[first], widths[first]])


def header_dimensions(encoded: tf.Tensor, fmt: tf.Tensor, index: tf.Tensor | int = 0) -> tf.Tensor:
    """(height, width, frames) that decoding one encoded image allocates, read without decoding (int64 [3]).

    For a GIF: the largest of the screen and of every frame's own size, and the number of frames (the
    decoder keeps every frame). `index` (the image's place in its request) goes into error messages.
    """
    one = tf.constant(1, tf.int64)

    def jpeg():
        shape = tf.cast(tf.image.extract_jpeg_shape(encoded), tf.int64)
        return tf.stack([shape[0], shape[1], one])

    def png():  # IHDR: width, height as big-endian uint32 at bytes 16..23
        width_height = _header_ints(encoded, PNG, 16, tf.int32, little_endian=False, index=index)
        return tf.stack([width_height[1], width_height[0], one])

    def gif():  # logical screen descriptor: width, height as little-endian uint16 at bytes 6..9; then frames
        width_height = _header_ints(encoded, GIF, 6, tf.uint16, little_endian=True, index=index)
        frames = gif_frames(encoded)
        return tf.stack([tf.maximum(width_height[1], frames[1]), tf.maximum(width_height[0], frames[2]),
                         tf.maximum(frames[0], one)])

    def bmp():  # BITMAPINFOHEADER: width, height as little-endian int32 at bytes 18..25 (height < 0: top-down)
        width_height = _header_ints(encoded, BMP, 18, tf.int32, little_endian=True, index=index)
        return tf.stack([tf.abs(width_height[1]), width_height[0], one])

    def unknown():
        check = tf.debugging.Assert(
            False, ["Not a JPEG, PNG, GIF or BMP image (or an empty string); image index:", index]
        )
        with tf.control_dependencies([check]):
            return tf.zeros([3], tf.int64)

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


def checked_format(encoded: tf.Tensor, index: tf.Tensor, max_pixels: int) -> tf.Tensor:
    """The format of one encoded image (int32), once its header has passed every check before decoding."""
    fmt = image_format(encoded)
    with tf.control_dependencies([check_pixel_limit(header_dimensions(encoded, fmt, index), max_pixels, index)]):
        return tf.identity(fmt)


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


def decode_images(images: tf.Tensor, height: int, width: int, max_pixels: int, max_batch_size: int) -> tf.Tensor:
    """A batch of encoded images (tf.string [B]) -> float32 [B, height, width, 3] in 0..255.

    Args:
        images: encoded JPEG, PNG, GIF or BMP images, each of any size.
        height: the model's input height.
        width: the model's input width.
        max_pixels: refuse (InvalidArgument) images whose header claims more pixels than this.
        max_batch_size: refuse requests of more images than this.

    Returns:
        The decoded RGB images resized to (height, width), as float32 in 0..255.

    Example:
        >>> import tensorflow as tf
        >>> png = tf.io.encode_png(tf.zeros([5, 7, 1], tf.uint8))
        >>> decode_images(tf.stack([png]), 4, 4, max_pixels=100, max_batch_size=8).shape
        TensorShape([1, 4, 4, 3])
    """
    with tf.control_dependencies([check_batch_size(tf.size(images), max_batch_size)]):
        images = tf.identity(images)
    indices = tf.range(tf.size(images))
    formats = tf.map_fn(
        lambda args: checked_format(args[1], args[0], max_pixels), (indices, images),
        fn_output_signature=tf.TensorSpec([], tf.int32),
    )
    return _decode_naming_failures(indices, images, formats, height, width, max_batch_size)


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
         tf.gather(tf.constant(FORMAT_NAMES), tf.gather(formats, tf.minimum(first_failed, tf.size(formats) - 1)))],
    )
    with tf.control_dependencies([check]):
        return tf.identity(pixels)
