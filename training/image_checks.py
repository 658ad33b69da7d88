"""Image-file checks of a folder dataset: headers, a pixel limit, decoding-cost limits, a full decode, and the bad
files named.

`check_images` finds, before training, the files the pipeline could not use (headers, the pixel limit, a full
decode with TensorFlow's decoder) so that they can be named, or skipped with `skip_files` of
`training.sources.dataset_source`; `find_bad_files` names the file when the pipeline fails on one later
(a file changed since the check, or one checked by its header only).

The header pass bounds decoding as the served model does (`keras_vit.export.limits`), before any file is decoded:
the pixels a GIF decodes are its frames at their own size (a frame may be larger than the screen), and the work
is bounded by the scans of a JPEG, the blocks of a GIF and a PNG's compressed data against its raw size, at
serving's default limits, which the environment variables `KERAS_VIT_MAX_JPEG_SCANS`, `KERAS_VIT_MAX_GIF_BLOCKS`
and `KERAS_VIT_MAX_PNG_IDAT_RATIO` raise (`keras_vit.export.limits.environment_limits`).
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import struct
import time

import numpy as np
import tensorflow as tf

from keras_vit.export.limits import Limits, decoding_problem, environment_limits, gif_blocks
from training.sources import IMAGE_EXTENSIONS, InvalidDatasetError, decode_file, folder_listing, shown_path

DEFAULT_MAX_IMAGE_PIXELS = 40_000_000  # 40 megapixels (7,300 x 5,500): a 36-megapixel camera's photos pass
SLOW_CHECK_SECONDS = 10.0  # an image check this long says how long it took


def check_images(name: str, splits, skip: bool = False, *, max_pixels: int | None = DEFAULT_MAX_IMAGE_PIXELS,
                 decode: bool = True, log=None, limits: Limits | None = None) -> frozenset:
    """Checks every file of a folder dataset's `splits` before anything trains; returns the bad paths (to skip).

    A file is bad when the pipeline could not use it: its header is not a JPEG, PNG, GIF, BMP or WebP one, says
    no size, or more pixels than `max_pixels` (the frames of a GIF count, each at its own size: TensorFlow decodes
    them all), or decoding it would do more work than `limits` allow (default: `environment_limits()`), or the
    file is truncated (`image_problem`); or, with `decode`, TensorFlow's own decoder (`tf.io.decode_image`, as
    the pipeline calls it) rejects its body, e.g. a PNG corrupt after a valid header (`undecodable`: one
    parallel pass; BMPs are skipped, their exact size proves them whole). Entries of a class folder that are not
    regular files (a FIFO, a folder, a broken link named `x.png`) and files with other extensions are not
    listed; `log` gets a `warning: ...` line for them (and a line when the check took long). Other datasets are
    not checked (an empty set).

    Raises:
        InvalidDatasetError: naming the first bad files, unless `skip`.
    """
    if not name.startswith("folder:"):
        return frozenset()
    root = name[len("folder:"):]
    limits = limits or environment_limits()
    started = time.perf_counter()
    listings = [folder_listing(root, split) for split in dict.fromkeys(splits)]
    paths = [path for listing in listings for path in listing.paths]
    if log is not None:
        for line in _ignored_warnings(name, [entry for listing in listings for entry in listing.ignored]):
            log(line)
    with concurrent.futures.ThreadPoolExecutor(16) as pool:  # I/O bound: many small reads
        headers = list(pool.map(lambda path: _inspect(path, max_pixels, limits), paths))
    problems = {path: problem for path, (problem, _) in zip(paths, headers) if problem}
    if decode:
        problems.update(undecodable([path for path, (problem, kind) in zip(paths, headers)
                                     if problem is None and kind != "BMP"]))
    elapsed = time.perf_counter() - started
    if log is not None and elapsed >= SLOW_CHECK_SECONDS:
        how = "headers and a full decode" if decode else "headers only"
        log(f"checked {len(paths)} image files of {name} in {elapsed:.0f}s ({how})")
    bad = [(path, problems[path]) for path in paths if path in problems]
    if bad and not skip:
        raise InvalidDatasetError(bad_files_message(name, bad, len(paths)))
    return frozenset(path for path, _ in bad)


def bad_files_message(name: str, bad, total: int | None = None) -> str:
    """One line naming the first bad files of `bad` ((path, problem) pairs) and the ways out."""
    shown = "; ".join(f"{shown_path(path)} ({problem})" for path, problem in bad[:5])
    more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
    of = f" of {total}" if total is not None else ""
    large = " (downscale an image over the pixel limit, or raise --max_image_pixels)" if any(
        PIXEL_LIMIT_NOTE in problem for _, problem in bad) else ""
    if any(DECODING_LIMIT_NOTE in problem for _, problem in bad):
        large += (" (re-encode an image over a decoding limit, e.g. as a baseline JPEG or a plain PNG, or raise the "
                  "limit with the environment variable its problem names)")
    return (f"{len(bad)}{of} files of dataset={name!r} cannot be used: {shown}{more}. Delete or replace them{large}, "
            f"or pass --skip_bad_images to train and evaluate without them.")


def find_bad_files(name: str, split: str, skip_files=(), max_pixels: int | None = DEFAULT_MAX_IMAGE_PIXELS,
                   listed=(), limits: Limits | None = None) -> list:
    """(path, problem) of every file of a folder dataset's `split` that the pipeline cannot use now (headers and a
    full decode), less `skip_files`: what made the pipeline fail mid-run (a file changed after the check, or one
    checked by its header only). `listed`: the files the pipeline was built with, also checked (one deleted since
    is not in the folder's listing now: it is `unreadable: No such file or directory`)."""
    if not name.startswith("folder:"):
        return []
    limits = limits or environment_limits()
    now = folder_listing(name[len("folder:"):], split).paths
    paths = [path for path in dict.fromkeys([*listed, *now]) if path not in skip_files]
    problems = {path: problem for path in paths for problem, _ in [_inspect(path, max_pixels, limits)] if problem}
    problems.update(undecodable([path for path in paths if path not in problems]))
    return [(path, problems[path]) for path in paths if path in problems]


def undecodable(paths) -> dict:
    """{path: TensorFlow's reason} for the files that the pipeline's decoder (`tf.io.decode_image`, 3 channels,
    first frame) rejects: one parallel tf.data pass over `paths`, then a second decode of the failures alone to
    get their messages."""
    if not paths:
        return {}
    encoded = np.array([os.fsencode(path) for path in paths], dtype=object)
    ds = tf.data.Dataset.from_tensor_slices((np.arange(len(paths), dtype=np.int64), encoded))
    ds = ds.map(lambda index, path: (index, tf.shape(decode_file(path))), deterministic=False,
                num_parallel_calls=max(1, min(8, os.cpu_count() or 1)))  # a bounded number of images in memory
    decoded = np.zeros(len(paths), bool)
    for indices, _ in ds.ignore_errors().batch(1024).as_numpy_iterator():
        decoded[indices] = True
    failures = {}
    for index in np.flatnonzero(~decoded):
        try:
            decode_file(tf.constant(encoded[index]))
        except tf.errors.OpError as error:
            failures[paths[index]] = f"cannot be decoded: {tf_reason(error)}"
    return failures


def tf_reason(error) -> str:
    """The first line of a TensorFlow error without its `{{function_node ...}}` prefix and `[Op:...]` suffix."""
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", str(getattr(error, "message", error))).strip()
    text = re.sub(r"\s*\[Op:\w+\]( name: ?\S*)?$", "", text.splitlines()[0] if text else "")
    return re.sub(r"\s*\[\[\{\{node [^]]*\]\]$", "", text)[:200] or type(error).__name__


def image_problem(path: str, max_pixels: int | None = None, limits: Limits | None = None) -> str | None:
    """Why the pipeline could not use the file at `path` (None: it looks usable), from its header and tail.

    Checks the magic bytes, a non-zero width and height, the number of pixels against `max_pixels` (None: no
    limit; a GIF's are its largest frame's size, or its screen's when larger, times its frames, all of which
    `tf.io.decode_image` decodes), the decoding work against `limits` (`keras_vit.export.limits.decoding_problem`:
    JPEG scans, GIF blocks, PNG compressed data; default `environment_limits()`), and
    truncation: the end marker near the end of a JPEG or PNG, a GIF's blocks up to its trailer, the exact size
    TensorFlow requires of a BMP, the RIFF size of a WebP (an animated WebP is refused: TensorFlow decodes it
    only as RGBA). Pixels are not decoded (`undecodable` does).
    """
    return _inspect(path, max_pixels, limits or environment_limits())[0]


PIXEL_LIMIT_NOTE = "over the pixel limit"
DECODING_LIMIT_NOTE = "over the limit of"


def _inspect(path, max_pixels, limits):
    """(problem or None, format) of the file at `path`; the header checks of `image_problem`."""
    data = None
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(64)
            f.seek(max(0, size - 4096))
            tail = f.read()
            if not head:
                return "empty file", None
            if head.startswith(b"\xff\xd8\xff"):
                kind, found = "JPEG", _jpeg_size(f, tail)
            elif head.startswith(b"\x89PNG\r\n\x1a\n"):
                kind, found = "PNG", _png_size(head, tail)
            elif head[:6] in (b"GIF87a", b"GIF89a"):
                f.seek(0)
                data = f.read()
                kind, found = "GIF", _gif_size(head, data, limits)
            elif head.startswith(b"BM"):
                kind, found = "BMP", _bmp_size(head, size)
            elif head.startswith(b"RIFF") and head[8:12] == b"WEBP":
                kind, found = "WebP", _webp_size(head, size)
            else:
                return f"not a JPEG, PNG, GIF, BMP or WebP image (starts with {head[:8]!r})", None
    except OSError as error:
        return f"unreadable: {error.strerror or error}", None
    if isinstance(found, str):
        return found, kind
    width, height, frames = found[:3]
    pixels = width * height * frames
    if max_pixels and pixels > max_pixels:
        of = f" x {frames} frames" if frames > 1 else ""
        screen = f" (frames larger than its {found[3]}x{found[4]} screen)" if kind == "GIF" and found[3:] != (
            width, height) else ""
        return (f"{kind} of {width}x{height}{of}{screen} = {pixels:,} pixels, {PIXEL_LIMIT_NOTE} of {max_pixels:,} "
                f"(--max_image_pixels)"), kind
    if kind in ("JPEG", "PNG", "GIF"):  # the work of decoding it, from its bytes (a GIF's are read already)
        try:
            if data is None:
                with open(path, "rb") as f:
                    data = f.read()
        except OSError as error:
            return f"unreadable: {error.strerror or error}", kind
        problem = decoding_problem(data, limits)
        if problem:
            return problem, kind
    return None, kind


def _png_size(head, tail):
    if len(head) < 24 or head[12:16] != b"IHDR" or 0 in struct.unpack(">II", head[16:24]):
        return "PNG without a valid IHDR size"
    end = tail.rfind(b"IEND")
    if end < 0 or len(tail) - end < 8:  # chunk type, then its 4-byte CRC
        return "truncated PNG (no IEND chunk at the end)"
    width, height = struct.unpack(">II", head[16:24])
    return width, height, 1


def _gif_size(head, blob, limits):
    """(width, height, frames, screen width, screen height) of a GIF, walking its blocks to the trailer; a problem
    string if it cannot. The size is the largest of the screen and every frame (giflib allocates each frame at
    its own size), and the frames those giflib reads: serving's walk (`keras_vit.export.limits.gif_blocks`)."""
    if len(head) < 13 or 0 in struct.unpack("<HH", head[6:10]):
        return "GIF without a valid screen size"
    width, height = struct.unpack("<HH", head[6:10])
    flags, position, frames = blob[10], 13, 0
    if flags & 0x80:  # global colour table
        position += 3 * (2 << (flags & 7))

    def skip_sub_blocks(position):
        while position < len(blob):
            length = blob[position]
            position += 1 + length
            if length == 0:
                return position
        return None

    while position is not None and position < len(blob):
        block = blob[position]
        if block == 0x3B:  # trailer
            if not frames:
                return "GIF without an image"
            walked, frame_height, frame_width, _ = gif_blocks(blob, limits.max_gif_blocks)
            return (max(width, frame_width), max(height, frame_height), max(frames, walked), width, height)
        if block == 0x21:  # extension: label, then sub-blocks
            position = skip_sub_blocks(position + 2)
        elif block == 0x2C:  # image descriptor (10 bytes), local colour table, LZW code size, sub-blocks
            if position + 10 > len(blob):
                break
            local = blob[position + 9]
            position += 10 + (3 * (2 << (local & 7)) if local & 0x80 else 0) + 1
            position = skip_sub_blocks(position)
            frames += 1
        else:
            return f"corrupt GIF (an unknown block 0x{block:02x} at byte {position})"
    return "truncated GIF (no trailer after its last block)"


def _bmp_size(head, size):
    if len(head) < 30:
        return "truncated BMP header"
    offset = struct.unpack("<I", head[10:14])[0]
    width, height, _, bits = struct.unpack("<iiHH", head[18:30])
    if width <= 0 or height == 0:
        return f"BMP with an invalid size {width}x{height}"
    if bits not in (8, 24, 32):
        return f"BMP of {bits} bits per pixel (TensorFlow decodes 8, 24 or 32)"
    expected = offset + (bits * width + 31) // 32 * 4 * abs(height)
    if size != expected:  # TensorFlow's own check: header + rows, no more, no less
        return f"BMP of {size} bytes where its header says {expected}"
    return width, abs(height), 1


def _webp_size(head, size):
    riff_size = struct.unpack("<I", head[4:8])[0] + 8
    if size < riff_size:
        return f"truncated WebP ({size} of {riff_size} bytes)"
    chunk, data = head[12:16], head[20:]
    if chunk == b"VP8 " and len(data) >= 10 and data[3:6] == b"\x9d\x01\x2a":
        width, height = (v & 0x3FFF for v in struct.unpack("<HH", data[6:10]))
    elif chunk == b"VP8L" and len(data) >= 5 and data[0] == 0x2F:
        bits = int.from_bytes(data[1:5], "little")
        width, height = (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    elif chunk == b"VP8X" and len(data) >= 10:
        if data[0] & 0x02:
            return "animated WebP (TensorFlow decodes animated WebP only as RGBA, not to RGB)"
        width, height = int.from_bytes(data[4:7], "little") + 1, int.from_bytes(data[7:10], "little") + 1
    else:
        return "WebP without a valid VP8, VP8L or VP8X header"
    if not width or not height:
        return "WebP without a valid size"
    return width, height, 1


def _jpeg_size(f, tail):
    position, size = 2, None
    for _ in range(10_000):  # segment by segment to the frame header (SOFn) that holds the size
        f.seek(position)
        segment = f.read(9)
        if len(segment) < 4 or segment[0] != 0xFF:
            return "JPEG without a frame header (truncated or corrupt)"
        marker = segment[1]
        if marker == 0xFF:  # fill byte
            position += 1
            continue
        if marker in (0x01, 0xD8) or 0xD0 <= marker <= 0xD7:  # markers without a length
            position += 2
            continue
        if marker in (0xD9, 0xDA):
            return "JPEG without a frame header (truncated or corrupt)"
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            if len(segment) < 9 or 0 in struct.unpack(">HH", segment[5:9]):
                return "JPEG without a valid size"
            height, width = struct.unpack(">HH", segment[5:9])
            size = width, height, 1
            break
        length = struct.unpack(">H", segment[2:4])[0]
        if length < 2:
            return "JPEG with a corrupt segment length"
        position += 2 + length
    else:
        return "JPEG without a frame header"
    if b"\xff\xd9" not in tail:
        return "truncated JPEG (no end-of-image marker at the end)"
    return size


def _ignored_warnings(name, ignored) -> list[str]:
    """`warning: ...` lines for the entries of a folder dataset left out (`FolderListing.ignored`)."""
    lines = []
    odd = [(path, kind) for path, kind in ignored if kind]
    if odd:
        shown = "; ".join(f"{shown_path(path)} ({kind})" for path, kind in odd[:5])
        more = f" and {len(odd) - 5} more" if len(odd) > 5 else ""
        lines.append(f"warning: left out {count(len(odd), 'entry', 'entries')} of {shown_path(name)} named like "
                     f"images that are not regular files (they could not be read as images, and a FIFO would "
                     f"block): {shown}{more}")
    other = [path for path, kind in ignored if not kind]
    if other:
        counts = {}
        for path in other:
            extension = os.path.splitext(path)[1].lower() or "(no extension)"
            counts[extension] = counts.get(extension, 0) + 1
        by_extension = ", ".join(f"{shown_path(e)}: {n}" for e, n in sorted(counts.items(), key=lambda x: -x[1]))
        lines.append(f"warning: left out {count(len(other), 'file')} of {shown_path(name)} that are not images by "
                     f"their extension ({by_extension}), e.g. {shown_path(other[0])}; the loader reads "
                     f"{', '.join(IMAGE_EXTENSIONS)} (convert other formats to one of them)")
    return lines


def count(n, one, many=None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"
