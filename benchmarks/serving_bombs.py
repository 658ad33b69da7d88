"""Decompression and work bombs against an exported SavedModel: CPU time and resident memory of each request.

Each case runs in a fresh process under `/usr/bin/time -v` (its "Maximum resident set size"), next to a
baseline process that loads the same SavedModel and serves one small valid PNG; every process serves that
PNG once first, so the timed call excludes the runtime's first-call set-up. The call's CPU time is the
process's (`time.process_time`, all threads), which the hypervisor's steal does not inflate. A bomb is
handled well when the signature refuses it (InvalidArgument) well within a second of CPU, with a peak
resident memory within a few tens of MB of the baseline; an image accepted at a limit costs what the limit
allows, measured by the "at the limit" cases (the largest, "PNG 8192^2 at the pixel limit", is the memory
the pixel limit itself allows, the reference of the 2x goal in docs/SERVING.md).

    python benchmarks/serving_bombs.py                         # every case, float32 and bfloat16 exports
    python benchmarks/serving_bombs.py --precision float32 --json out.json
    python benchmarks/serving_bombs.py --cases "JPEG scans x1000" --cases "GIF 0x21 x 8 MB"

Cases (default limits; the first five are those of the "Reliability round 3" report): a progressive 8192^2
JPEG whose last scan is repeated 100 / 1000 times; a GIF with a 1x1 screen followed by 8 / 32 MB of 0x21
bytes (one extension whose sub-blocks never end); a 1x1 PNG whose IDAT inflates to 1 GiB; then a GIF whose
1x1 screen holds one 20000^2 / 30000^2 frame (also behind an extension without sub-blocks, which giflib
follows with one more chain of sub-blocks), PNG and JPEG headers claiming 100000^2 / 65000^2 pixels,
200000 comment blocks in a GIF, 1100 one-pixel GIF frames, GIFs at the block limit (2046 comments; 2040 runs
of 65 one-byte sub-blocks, the most steps of the walk per block), requests of 64 JPEGs whose headers claim
8192^2 and of 64 GIFs at the block limit, a float batch of 1e30; and, accepted at the limits, a 8192^2 PNG,
8192^2 progressive JPEGs of 16 scans (flat and detailed), and a 8192^2 PNG whose 1 MB IDAT inflates to 1 GiB
(its excess is inflated too, see docs/SERVING.md).
"""

import argparse
import io
import json
import os
import pickle
import re
import struct
import subprocess
import sys
import tempfile
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from run import cpu_jiffies, machine, steal_share  # noqa: E402

BASELINE = "baseline: 40x30 PNG"
SIDE = 8192  # the default pixel limit is SIDE x SIDE


def gif_bomb(side: int) -> bytes:
    """A one-frame `side` x `side` GIF of zeros (LZW-compressed to ~side^2/1350 bytes) with a 1x1 screen."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("P", (side, side)).save(buffer, format="GIF")
    data = bytearray(buffer.getvalue())
    data[6:10] = struct.pack("<HH", 1, 1)
    return bytes(data)


def small_png() -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (40, 30), (10, 200, 30)).save(buffer, format="PNG")
    return buffer.getvalue()


def png_claiming(side: int) -> bytes:
    png = small_png()
    return png[:16] + side.to_bytes(4, "big") + side.to_bytes(4, "big") + png[24:]


def jpeg_claiming(side: int) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (16, 16), (90, 10, 30)).save(buffer, format="JPEG")
    jpeg = buffer.getvalue()
    sof = jpeg.index(b"\xff\xc0") + 5
    return jpeg[:sof] + struct.pack(">HH", side, side) + jpeg[sof + 4:]


def gif_many_blocks(count: int) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("P", (8, 8)).save(buffer, format="GIF")
    gif = buffer.getvalue()
    start = 13 + (3 * (2 << (gif[10] & 7)) if gif[10] & 0x80 else 0)
    return gif[:start] + b"\x21\xfe\x01x\x00" * count + gif[start:]


def jpeg_scan_bomb(side: int, scans: int, detailed: bool = False, chroma_444: bool = False) -> bytes:
    """A progressive `side`^2 JPEG (tf.io.encode_jpeg, 10 scans) whose last scan is repeated up to `scans`:
    of a flat image (a repeat is a few hundred bytes: the bomb), or of a detailed one (each scan has
    coefficients to decode: an honest image's cost per pass); `chroma_444`: full-resolution colour (no 4:2:0
    downsampling), twice the coefficients libjpeg keeps."""
    import numpy as np
    import tensorflow as tf

    if detailed:
        rows, columns = np.indices((side, side), np.uint16)
        image = np.stack([rows % 256, columns % 256, (rows // 32 + columns // 32) % 256], -1).astype(np.uint8)
    else:
        image = np.zeros((side, side, 3), np.uint8)
    jpeg = tf.io.encode_jpeg(image, progressive=True, chroma_downsampling=not chroma_444).numpy()
    last, end = jpeg.rindex(b"\xff\xda"), jpeg.rindex(b"\xff\xd9")
    return jpeg[:end] + jpeg[last:end] * (scans - jpeg.count(b"\xff\xda")) + jpeg[end:]


def gif_extension_bytes(count: int) -> bytes:
    """A GIF with a 1x1 screen followed by `count` bytes 0x21."""
    return b"GIF89a" + struct.pack("<HHBBB", 1, 1, 0, 0, 0) + b"\x21" * count


def gif_frames(count: int) -> bytes:
    frame = b"\x21\xf9\x04\x00\x00\x00\x00\x00\x2c" + struct.pack("<HHHHB", 0, 0, 1, 1, 0) + b"\x02\x02\x44\x01\x00"
    return b"GIF89a" + struct.pack("<HHBBB", 1, 1, 0x80, 0, 0) + bytes(6) + frame * count + b"\x3b"


def gif_comments(count: int) -> bytes:
    """A GIF of `count` comment extensions of one 1-byte sub-block (2 blocks each), then a 1x1 frame."""
    return gif_frames(1)[:-1].replace(b"\x21\xf9\x04\x00\x00\x00\x00\x00", b"\x21\xfe\x01x\x00" * count) + b"\x3b"


def gif_short_runs(runs: int) -> bytes:
    """A 1x1 frame whose image data is `runs` runs of 65 one-byte sub-blocks, each closed by a 2-byte one:
    two steps of the walk per run (a window of 64 that fills, then one that ends)."""
    head = b"GIF89a" + struct.pack("<HHBBB", 1, 1, 0, 0, 0) + b"\x2c" + struct.pack("<HHHHB", 0, 0, 1, 1, 0)
    return head + b"\x02" + (b"\x01a" * 65 + b"\x02ab") * runs + b"\x00\x3b"


def gif_hidden_frame(side: int) -> bytes:
    """`gif_bomb(side)` with an extension without sub-blocks then one sub-block before its frame: giflib reads
    that sub-block as the extension's and then the frame, which the walk before round 3 never saw."""
    gif = gif_bomb(side)
    start = 13 + (3 * (2 << (gif[10] & 7)) if gif[10] & 0x80 else 0)
    frame = gif[gif.index(b"\x2c", start):]
    return gif[:start] + b"\x21\xfe\x00\x01A\x00" + frame


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_inflate_bomb(inflated: int, side: int) -> bytes:
    """An RGB `side` x `side` PNG whose one IDAT inflates to `inflated` zero bytes (about 1 MB per GiB)."""
    compressor = zlib.compressobj(9)
    block = bytes(1 << 20)
    idat = b"".join(compressor.compress(block) for _ in range(inflated >> 20)) + compressor.flush()
    header = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", header) + png_chunk(b"IDAT", idat)
            + png_chunk(b"IEND", b""))


def png_at_limit(side: int) -> bytes:
    """A `side`^2 RGB PNG of a gradient, zlib level 1 (a large, honest image at the pixel limit)."""
    import numpy as np
    import tensorflow as tf

    rows, columns = np.indices((side, side), np.uint16)
    image = np.stack([rows % 256, columns % 256, (rows + columns) % 256], -1).astype(np.uint8)
    return tf.io.encode_png(image, compression=1).numpy()


def png16_rgba_at_limit(side: int) -> bytes:
    """A `side`^2 16-bit RGBA PNG of a gradient, zlib level 1: the most bytes per pixel PNG has."""
    import numpy as np
    import tensorflow as tf

    rows, columns = np.indices((side, side), np.uint16)
    image = np.stack([rows * 8, columns * 8, (rows + columns) * 4, rows ^ columns], -1).astype(np.uint16)
    return tf.io.encode_png(image, compression=1).numpy()


# name -> (signature, function making the request: a list of encoded images, or a float array's shape+value)
CASES = {
    BASELINE: ("serving_default", lambda: [small_png()]),
    "JPEG scans x100 (8192^2 progressive, last scan repeated)": ("serving_default",
                                                                 lambda: [jpeg_scan_bomb(SIDE, 110)]),
    "JPEG scans x1000 (8192^2 progressive, last scan repeated)": ("serving_default",
                                                                  lambda: [jpeg_scan_bomb(SIDE, 1010)]),
    "GIF 0x21 x 8 MB (1x1 screen)": ("serving_default", lambda: [gif_extension_bytes(8 << 20)]),
    "GIF 0x21 x 32 MB (1x1 screen)": ("serving_default", lambda: [gif_extension_bytes(32 << 20)]),
    "PNG 1x1, IDAT inflating to 1 GiB": ("serving_default", lambda: [png_inflate_bomb(1 << 30, 1)]),
    "GIF, 1x1 screen, 20000^2 frame": ("serving_default", lambda: [gif_bomb(20000)]),
    "GIF, 1x1 screen, 30000^2 frame": ("serving_default", lambda: [gif_bomb(30000)]),
    "GIF, 1x1 screen, 20000^2 frame behind an empty extension": ("serving_default",
                                                                 lambda: [gif_hidden_frame(20000)]),
    "PNG header claiming 100000^2": ("serving_default", lambda: [png_claiming(100_000)]),
    "JPEG header claiming 65000^2": ("serving_default", lambda: [jpeg_claiming(65000)]),
    "GIF with 200000 comment blocks": ("serving_default", lambda: [gif_many_blocks(200_000)]),
    "GIF of 1100 one-pixel frames": ("serving_default", lambda: [gif_frames(1100)]),
    "GIF at the block limit: 2046 comment extensions": ("serving_default", lambda: [gif_comments(2046)]),
    "GIF at the block limit: 2040 runs of 65 sub-blocks": ("serving_default", lambda: [gif_short_runs(2040)]),
    "request: 64 JPEG headers claiming 8192^2": ("serving_default", lambda: [jpeg_claiming(SIDE)] * 64),
    "request: 64 GIFs at the block limit": ("serving_default", lambda: [gif_short_runs(2040)] * 64),
    "predict_images: a batch of 1e30": ("predict_images", lambda: 1e30),
    "accepted: PNG 8192^2 at the pixel limit": ("serving_default", lambda: [png_at_limit(SIDE)]),
    "accepted: JPEG 8192^2 progressive, 16 scans, flat": ("serving_default", lambda: [jpeg_scan_bomb(SIDE, 16)]),
    "accepted: JPEG 8192^2 progressive, 16 scans, detailed": ("serving_default",
                                                              lambda: [jpeg_scan_bomb(SIDE, 16, detailed=True)]),
    "accepted: JPEG 8192^2 progressive 4:4:4, 16 scans, detailed": (
        "serving_default", lambda: [jpeg_scan_bomb(SIDE, 16, detailed=True, chroma_444=True)]),
    "accepted: request of 4 PNGs 8192^2, 16-bit RGBA": ("serving_default", lambda: [png16_rgba_at_limit(SIDE)] * 4),
    "accepted: PNG 8192^2, 1 MB IDAT inflating to 1 GiB": ("serving_default",
                                                           lambda: [png_inflate_bomb(1 << 30, SIDE)]),
}


def serve_one(saved_model: str, request_file: str) -> None:
    """The child: load the SavedModel, serve a small PNG (warm-up: the first call initialises the runtime),
    then time one call on the request; prints the outcome, the call's wall and CPU time as JSON."""
    import tensorflow as tf

    loaded = tf.saved_model.load(saved_model)
    loaded.signatures["serving_default"](images=tf.constant([small_png()]))
    with open(request_file, "rb") as file:
        signature, request = pickle.load(file)
    function = loaded.signatures[signature]
    if signature == "serving_default":
        images = tf.constant(request)
    else:
        size = function.structured_input_signature[1]["images"].shape[1]
        images = tf.fill([1, size, size, 3], tf.constant(request, tf.float32))
    start, cpu = time.perf_counter(), time.process_time()
    try:
        function(images=images)
        outcome = "served"
    except tf.errors.InvalidArgumentError as error:
        outcome = "refused: " + re.sub(r"\s+", " ", error.message.split("assertion failed:")[-1])[:110]
    print(json.dumps({"outcome": outcome, "seconds": time.perf_counter() - start,
                      "cpu_seconds": time.process_time() - cpu}))


def run_case(saved_model: str, signature: str, request, scratch: str) -> dict:
    request_file = os.path.join(scratch, "request.pickle")
    with open(request_file, "wb") as file:
        pickle.dump((signature, request), file)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    command = ["/usr/bin/time", "-v", sys.executable, __file__, "--child", saved_model, request_file]
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    result = json.loads(lines[-1]) if lines else {"outcome": f"child failed ({done.returncode})", "seconds": None,
                                                  "cpu_seconds": None}
    result["peak_rss_mb"] = int(rss.group(1)) / 1024 if rss else None
    result["bytes"] = sum(len(image) for image in request) if isinstance(request, list) else 0
    return result


def print_table(title: str, results: dict) -> None:
    baseline = results[BASELINE]["peak_rss_mb"]
    print(f"\n{title}")
    print(f"{'case':58} {'bytes':>10} {'call s':>7} {'CPU s':>7} {'peak MB':>8} {'vs base':>8}  outcome")
    for name, r in results.items():
        seconds = "-" if r["seconds"] is None else f"{r['seconds']:.3f}"
        cpu = "-" if r.get("cpu_seconds") is None else f"{r['cpu_seconds']:.3f}"
        peak = r["peak_rss_mb"] or float("nan")
        delta = peak - baseline if r["peak_rss_mb"] and baseline else float("nan")
        print(f"{name:58} {r['bytes']:>10} {seconds:>7} {cpu:>7} {peak:>8.0f} {delta:>+8.0f}  {r['outcome']}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--precision", action="append", choices=["float32", "bfloat16"],
                        help="the exports measured (repeatable; default: both)")
    parser.add_argument("--cases", action="append", help="run only the cases whose name contains this (repeatable)")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        serve_one(*args.child)
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.path.insert(0, os.path.dirname(HERE))
    import keras_vit
    from keras_vit.export import export_saved_model

    names = [name for name in CASES if name == BASELINE or not args.cases or any(c in name for c in args.cases)]
    jiffies, info = cpu_jiffies(), machine()
    model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64,
                          classes=3)
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        requests = {}
        for precision in args.precision or ["float32", "bfloat16"]:
            kwargs = {"precision": precision} if precision != "float32" else {}
            saved_model = export_saved_model(model, os.path.join(scratch, precision), version=1, **kwargs)
            results[precision] = {}
            for name in names:
                signature, make = CASES[name]
                if name not in requests:
                    requests[name] = make()
                results[precision][name] = run_case(saved_model, signature, requests[name], scratch)
                print(f"[{precision}] {name}: {results[precision][name]}", file=sys.stderr, flush=True)
    info.update(load_average_at_end=os.getloadavg(), steal_share=steal_share(jiffies, cpu_jiffies()))
    print(f"CPU: {info['cpu_model']}, {info['cores']} cores; load average {info['load_average_at_start'][0]:.2f} -> "
          f"{info['load_average_at_end'][0]:.2f}; steal {(info['steal_share'] or 0) * 100:.1f}% of busy + stolen")
    for precision, table in results.items():
        print_table(f"{precision} export", table)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as file:
            json.dump({"machine": info, "results": results}, file, indent=2)


if __name__ == "__main__":
    main()
