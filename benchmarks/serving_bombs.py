"""Decompression bombs against an exported SavedModel: time and resident memory of each refusal.

Each case runs in a fresh process under `/usr/bin/time -v` (its "Maximum resident set size"), next to a
baseline process that loads the same SavedModel and serves one small valid PNG; every process serves that
PNG once first, so the timed call excludes the runtime's first-call set-up. A bomb is handled well
when `serving_default` refuses it (InvalidArgument) in well under a second, with a peak resident memory
within a few tens of MB of the baseline.

    python benchmarks/serving_bombs.py              # all cases, a table on stdout
    python benchmarks/serving_bombs.py --json out.json

Cases: a GIF whose logical screen is 1x1 and whose one frame is 20000x20000 or 30000x30000 (the screen
size alone does not bound what giflib allocates), a PNG and a JPEG whose headers claim 100000^2 / 65000^2
pixels, and 2000 tiny comment blocks in a GIF (the frame walk must stay fast on a crafted structure).
"""

import argparse
import io
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


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


CASES = {
    "baseline: 40x30 PNG": small_png,
    "GIF, 1x1 screen, 20000^2 frame": lambda: gif_bomb(20000),
    "GIF, 1x1 screen, 30000^2 frame": lambda: gif_bomb(30000),
    "PNG header claiming 100000^2": lambda: png_claiming(100_000),
    "JPEG header claiming 65000^2": lambda: jpeg_claiming(65000),
    "GIF with 200000 comment blocks": lambda: gif_many_blocks(200_000),
}


def serve_one(saved_model: str, image_file: str) -> None:
    """The child: load the SavedModel, serve a small PNG (warm-up: the first call initialises the runtime),
    then time one call on the image; prints the outcome and the call's time as JSON."""
    import tensorflow as tf

    serving = tf.saved_model.load(saved_model).signatures["serving_default"]
    serving(images=tf.constant([small_png()]))
    with open(image_file, "rb") as file:
        image = file.read()
    start = time.perf_counter()
    try:
        serving(images=tf.constant([image]))
        outcome = "served"
    except tf.errors.InvalidArgumentError as error:
        outcome = "refused: " + re.sub(r"\s+", " ", error.message.split("assertion failed:")[-1])[:120]
    print(json.dumps({"outcome": outcome, "seconds": time.perf_counter() - start}))


def run_case(saved_model: str, image: bytes, scratch: str) -> dict:
    image_file = os.path.join(scratch, "image.bin")
    with open(image_file, "wb") as file:
        file.write(image)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    command = ["/usr/bin/time", "-v", sys.executable, __file__, "--child", saved_model, image_file]
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    result = json.loads(lines[-1]) if lines else {"outcome": f"child failed ({done.returncode})", "seconds": None}
    result["peak_rss_mb"] = int(rss.group(1)) / 1024 if rss else None
    result["bytes"] = len(image)
    return result


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        serve_one(*args.child)
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.path.insert(0, os.path.dirname(HERE))
    import keras_vit
    from keras_vit.export import export_saved_model

    model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64,
                          classes=3)
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        saved_model = export_saved_model(model, os.path.join(scratch, "tiny"), version=1)
        for name, make in CASES.items():
            results[name] = run_case(saved_model, make(), scratch)
    baseline = results["baseline: 40x30 PNG"]["peak_rss_mb"]
    print(f"{'case':34} {'bytes':>9} {'call s':>7} {'peak MB':>8} {'vs base':>8}  outcome")
    for name, r in results.items():
        seconds = "-" if r["seconds"] is None else f"{r['seconds']:.3f}"
        delta = r["peak_rss_mb"] - baseline if r["peak_rss_mb"] and baseline else float("nan")
        print(f"{name:34} {r['bytes']:>9} {seconds:>7} {r['peak_rss_mb']:>8.0f} {delta:>+8.0f}  {r['outcome']}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as file:
            json.dump(results, file, indent=2)


if __name__ == "__main__":
    main()
