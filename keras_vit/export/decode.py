"""In-graph decoding of untrusted encoded images (JPEG, PNG, GIF, BMP) for the serving signature.

Each image of a request is decoded on its own (`tf.map_fn`), so images of different sizes may share a
request. Before any pixel is decoded, the image's dimensions are read from its header
(`tf.image.extract_jpeg_shape` for JPEG; the PNG IHDR chunk, the GIF logical screen descriptor and the
BMP info header with `tf.strings.substr`) and images over the pixel limit are refused: a small PNG can
decode to gigabytes. Every refusal is a `tf.errors.InvalidArgumentError`, which TF Serving returns to the
client as INVALID_ARGUMENT (HTTP 400) instead of crashing.

Decoded images become RGB (grayscale replicated, alpha dropped) and are resized to the model's size
without cropping, with `tf.image.resize` bilinear (half-pixel centres, no antialiasing): the evaluation
preprocessing of the official checkpoints (vit_jax `input_pipeline.py`; paper appendix B.1.1).
"""

import tensorflow as tf

JPEG, PNG, GIF, BMP, UNKNOWN = range(5)
_SIGNATURES = ((JPEG, b"\xff\xd8\xff"), (PNG, b"\x89PNG\r\n\x1a\n"), (GIF, b"GIF8"), (BMP, b"BM"))
_HEADER_BYTES = {PNG: 24, GIF: 10, BMP: 26}
"""Bytes needed to read the dimensions: PNG IHDR height ends at 24, GIF screen height at 10, BMP at 26."""


def image_format(encoded: tf.Tensor) -> tf.Tensor:
    """The format of one encoded image from its magic bytes: JPEG, PNG, GIF, BMP or UNKNOWN (int32)."""
    index = tf.constant(UNKNOWN)
    for fmt, magic in reversed(_SIGNATURES):
        index = tf.where(tf.equal(tf.strings.substr(encoded, 0, len(magic)), magic), fmt, index)
    return index


def _require_length(encoded, fmt):
    length = tf.strings.length(encoded)
    return tf.debugging.assert_greater_equal(
        length, _HEADER_BYTES[fmt], message=f"Truncated image: the {('JPEG', 'PNG', 'GIF', 'BMP')[fmt]} header "
        f"needs {_HEADER_BYTES[fmt]} bytes",
    )


def _header_ints(encoded, fmt, offset, dtype, little_endian):
    with tf.control_dependencies([_require_length(encoded, fmt)]):
        raw = tf.strings.substr(encoded, offset, 2 * tf.dtypes.as_dtype(dtype).size)
    return tf.cast(tf.io.decode_raw(raw, dtype, little_endian=little_endian), tf.int64)


def _gif_frame_bound(encoded):
    """An upper bound on the frames of a GIF: each frame after the first starts with an image separator
    (',') right after a block terminator (0x00), so frames <= occurrences of b'\\x00,' + 1."""
    return tf.cast(tf.size(tf.strings.split(encoded, sep=b"\x00,")), tf.int64)


def header_dimensions(encoded: tf.Tensor, fmt: tf.Tensor) -> tf.Tensor:
    """(height, width, frames) of one encoded image, read from its header without decoding (int64 [3]).

    `frames` bounds the frames a GIF decoder materialises (1 for the other formats).
    """
    one = tf.constant(1, tf.int64)

    def jpeg():
        shape = tf.cast(tf.image.extract_jpeg_shape(encoded), tf.int64)
        return tf.stack([shape[0], shape[1], one])

    def png():  # IHDR: width, height as big-endian uint32 at bytes 16..23
        width_height = _header_ints(encoded, PNG, 16, tf.int32, little_endian=False)
        return tf.stack([width_height[1], width_height[0], one])

    def gif():  # logical screen descriptor: width, height as little-endian uint16 at bytes 6..9
        width_height = _header_ints(encoded, GIF, 6, tf.uint16, little_endian=True)
        return tf.stack([width_height[1], width_height[0], _gif_frame_bound(encoded)])

    def bmp():  # BITMAPINFOHEADER: width, height as little-endian int32 at bytes 18..25 (height < 0: top-down)
        width_height = _header_ints(encoded, BMP, 18, tf.int32, little_endian=True)
        return tf.stack([tf.abs(width_height[1]), width_height[0], one])

    def unknown():
        check = tf.debugging.Assert(False, ["Not a JPEG, PNG, GIF or BMP image (or an empty string)"])
        with tf.control_dependencies([check]):
            return tf.zeros([3], tf.int64)

    return tf.switch_case(fmt, [jpeg, png, gif, bmp, unknown])


def check_pixel_limit(dims: tf.Tensor, max_pixels: int) -> tf.Operation:
    """An op that fails with InvalidArgument unless 0 < height, width and height*width*frames <= max_pixels."""
    height, width, frames = dims[0], dims[1], dims[2]
    positive = tf.debugging.Assert(
        tf.logical_and(height > 0, width > 0), ["Image header has no valid size; height, width:", height, width]
    )
    with tf.control_dependencies([positive]):
        return tf.debugging.Assert(
            height * width * frames <= max_pixels,
            [f"Image too large: over the limit of {max_pixels} pixels set at export; height, width, frames:",
             height, width, frames],
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


def decode_and_resize(encoded: tf.Tensor, height: int, width: int, max_pixels: int) -> tf.Tensor:
    """One encoded image -> float32 [height, width, 3] in 0..255, bilinear-resized without cropping."""
    fmt = image_format(encoded)
    dims = header_dimensions(encoded, fmt)
    with tf.control_dependencies([check_pixel_limit(dims, max_pixels)]):
        image = decode_rgb(encoded, fmt)
    resized = tf.image.resize(image, [height, width], method="bilinear", antialias=False)
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
    return tf.map_fn(
        lambda encoded: decode_and_resize(encoded, height, width, max_pixels),
        images,
        fn_output_signature=tf.TensorSpec([height, width, 3], tf.float32),
    )
