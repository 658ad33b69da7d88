"""The work limits of the serving signature (keras_vit/export/limits.py, decode.py): each bounds what a small
request can make the decoder do, and is checked from the bytes before decoding.

Each rule is tested with a small generated bomb against a limit set low, on a tiny model exported once; the
time and memory the full-size bombs cost are measured by benchmarks/serving_bombs.py, not asserted here.
"""

import os
import subprocess
import sys
import zlib

import numpy as np
import pytest
import tensorflow as tf

from bomb_fixtures import (
    gif_of_extension_bytes,
    gif_of_frames,
    gif_with_hidden_frame,
    interlaced_png,
    png,
    png_chunk,
    png_inflate_bomb,
    progressive_jpeg,
    raw_png_size,
    zlib_of_zeros,
)
from export_fixtures import SIZE, animated_gif, encode, gif_with_comment_blocks, random_image, tiny_vit
from keras_vit.export import decode, export_saved_model
from keras_vit.export import limits as python_walks
from keras_vit.export.limits import CEILINGS, GIF_BLOCK_PIXELS, PNG_IDAT_SLACK, Limits

HERE = os.path.dirname(os.path.abspath(__file__))
LIMITS = dict(max_pixels=512 * 512, max_batch_size=8, max_request_pixels=50 * GIF_BLOCK_PIXELS, max_jpeg_scans=12,
              max_gif_blocks=40, max_png_idat_ratio=1.5)
"""Low limits: 3 images at the pixel limit fit in a request, 4 do not; a GIF at the block limit fits."""


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    path = export_saved_model(tiny_vit(num_layers=1), tmp_path_factory.mktemp("limits") / "m", **LIMITS)
    return path, tf.saved_model.load(path)


def _serve(loaded, *images):
    return loaded.signatures["serving_default"](images=tf.constant(list(images)))


def _png(side, seed=0):
    return encode(random_image((side, side, 3), seed), "PNG")


def test_the_limits_are_recorded_in_the_saved_model(served):
    _, loaded = served
    recorded = {name: value.numpy().item() for name, value in loaded.serving_limits().items()}
    assert recorded == {**LIMITS, "max_png_idat_ratio": 1.5}


def test_jpeg_scans_over_the_limit_are_refused(served):
    _, loaded = served
    assert _serve(loaded, progressive_jpeg(16))["scores"].shape[0] == 1  # libjpeg's 10 scans
    assert _serve(loaded, progressive_jpeg(16, repeats=2))["scores"].shape[0] == 1  # 12: at the limit
    for repeats in (3, 300):  # 13 and 310 scans: the count stops one past the limit
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"Too many scans.*limit of 12.*\] \[1\] \[13\]"):
            _serve(loaded, _png(8), progressive_jpeg(16, repeats=repeats))


def test_jpeg_scans_counts_every_sos_marker():
    assert int(decode.jpeg_scans(tf.io.encode_jpeg(tf.zeros([8, 8, 3], tf.uint8)))) == 1
    assert int(decode.jpeg_scans(progressive_jpeg(16, repeats=7))) == 17
    assert int(decode.jpeg_scans(b"\xff\xda" * 3 + b"\xff")) == 3 and int(decode.jpeg_scans(b"")) == 0
    assert int(decode.jpeg_scans(progressive_jpeg(16, repeats=7), limit=12)) == 13


def test_gif_walk_stops_at_its_limit():
    """The 0x21 bomb is one extension whose sub-blocks never end: the walk counts them and stops past the
    limit after a few steps, however long the file (the old walk cost O(n log n) over every byte)."""
    for count in (100_000, 1_000_000):
        blocks = int(decode.gif_blocks(tf.constant(gif_of_extension_bytes(count)), 40)[3])
        assert 40 < blocks <= 40 + 64 * 2  # the last window of the run overshoots by at most its size
    assert [int(x) for x in decode.gif_blocks(tf.constant(gif_of_frames(10)), 40)] == [10, 1, 1, 40]
    assert int(decode.gif_blocks(tf.constant(gif_of_frames(11)), 40)[3]) > 40


def test_gif_walk_counts_runs_of_changing_sub_block_sizes():
    header = b"GIF89a\x01\x00\x01\x00\x00\x00\x00" + b"\x2c" + bytes(4) + b"\x01\x00\x01\x00\x00\x02"
    alternating = header + b"\x01a\x02ab" * 30 + b"\x00\x3b"  # every sub-block a run of its own: 60 runs
    assert [int(x) for x in decode.gif_blocks(tf.constant(alternating), 1000)] == [1, 1, 1, 61]
    regular = header + (b"\xff" + bytes(255)) * 300 + b"\x05" + bytes(5) + b"\x00\x3b"  # one run, then another
    assert [int(x) for x in decode.gif_blocks(tf.constant(regular), 1000)] == [1, 1, 1, 3]


def test_gif_walk_finds_every_frame_giflib_decodes():
    """What giflib (tf.io.decode_gif) allocates is what the walk reads, also where giflib departs from the
    format: after an extension with no sub-block it reads one more chain of sub-blocks."""
    empty_then_chain = gif_with_hidden_frame(animated_gif(1, 30))
    gifs = [animated_gif(3, 12), gif_of_frames(5), gif_with_comment_blocks(animated_gif(2, 7), 50), empty_then_chain,
            empty_then_chain.replace(b"\x21\xfe\x00\x01A\x00", b"\x21\xfe\x00\x00"),  # the extra chain empty
            empty_then_chain.replace(b"\x21\xfe\x00\x01A\x00", b"\x21\xfe\x00\x00" + b"\x21\xfe\x00\x02AB\x00")]
    for gif in gifs:
        decoded = tf.io.decode_gif(gif).shape
        frames, height, width, _ = (int(x) for x in decode.gif_blocks(tf.constant(gif), 1000))
        assert (frames, height, width) == tuple(decoded[:3]), gif[:40]


def test_gifs_over_the_block_limit_are_refused(served):
    _, loaded = served
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"Too many blocks in a GIF.*limit of 40.*\] \[0\]"):
        _serve(loaded, gif_of_extension_bytes(100_000))
    with pytest.raises(tf.errors.InvalidArgumentError, match="Too many blocks in a GIF"):
        _serve(loaded, gif_of_frames(11))


def test_png_idat_over_the_ratio_is_refused(served):
    _, loaded = served
    bomb = png_inflate_bomb(80 << 20)  # 1x1: 4 raw bytes, ~78 KB of IDAT inflating to 80 MB
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"PNG image data too large.*\] \[1\] \[\d{5}\] \[4\]"):
        _serve(loaded, _png(8), bomb)
    # the rule is on the bytes: a stored (level 0) IDAT of a random image is about its raw size, and passes
    image = np.random.default_rng(1).integers(0, 256, (40, 50, 3), dtype=np.uint8)
    rows = b"".join(b"\x00" + row.tobytes() for row in image)
    assert _serve(loaded, png(50, 40, zlib.compress(rows, 0)))["scores"].shape[0] == 1
    slack = PNG_IDAT_SLACK + int(1.5 * len(rows))
    padded = png(50, 40, [zlib.compress(rows, 0), bytes(slack - len(zlib.compress(rows, 0)) + 1)])
    with pytest.raises(tf.errors.InvalidArgumentError, match="PNG image data too large"):
        _serve(loaded, padded)


def test_png_idat_bytes_counts_every_chunk_and_cannot_be_hidden():
    data = zlib_of_zeros(30_000)
    parts = [data[:100], data[100:101], data[101:]]
    assert int(decode.png_idat_bytes(png(100, 100, parts))) == len(data)
    # an "IDAT" inside another chunk's data can only add to the count; a length past the end counts the rest
    hidden = png(100, 100, data, before_idat=png_chunk(b"tEXt", b"k\x00" + (5).to_bytes(4, "big") + b"IDAT12345"))
    assert int(decode.png_idat_bytes(hidden)) == len(data) + 5
    cut = png(100, 100, data)[:60]
    assert int(decode.png_idat_bytes(cut)) == len(cut) - cut.index(b"IDAT") - 4
    # past the 256th IDAT chunk, every byte counts: still an upper bound, at most the file
    payload = np.random.default_rng(3).bytes(30_000)
    many = png(100, 100, [payload[i:i + 100] for i in range(0, 30_000, 100)])  # 300 chunks of 100 bytes
    assert 30_000 <= int(decode.png_idat_bytes(many)) <= len(many)


@pytest.mark.parametrize("header", [(13, 11, 8, 2, 1), (1, 1, 8, 2, 0), (5, 3, 1, 0, 1), (9, 17, 16, 6, 1),
                                    (2, 2, 4, 3, 1), (1, 9, 8, 4, 1), (3000, 1, 2, 0, 0)])
def test_png_raw_bytes_follows_the_specification(header):
    assert float(decode.png_raw_bytes(*header)) == raw_png_size(*header)


def _walk_inputs():
    """Bombs and normal files of each format for the agreement of the graph walks and the Python ones."""
    header = b"GIF89a\x01\x00\x01\x00\x00\x00\x00" + b"\x2c" + bytes(4) + b"\x01\x00\x01\x00\x00\x02"
    hidden = gif_with_hidden_frame(animated_gif(1, 30))
    gifs = [gif_of_extension_bytes(100_000), gif_of_frames(10), gif_of_frames(11), animated_gif(3, 12), hidden,
            gif_with_comment_blocks(animated_gif(2, 7), 50), header + b"\x01a\x02ab" * 30 + b"\x00\x3b",
            header + (b"\xff" + bytes(255)) * 300 + b"\x05" + bytes(5) + b"\x00\x3b", b"GIF89a", b"GIF89a" + bytes(20),
            hidden.replace(b"\x21\xfe\x00\x01A\x00", b"\x21\xfe\x00\x00" + b"\x21\xfe\x00\x02AB\x00"),
            animated_gif(2, 9)[:-40]]
    data = zlib_of_zeros(30_000)
    pngs = [png_inflate_bomb(1 << 20), png(100, 100, [data[:100], data[100:101], data[101:]]),
            png(100, 100, data, before_idat=png_chunk(b"tEXt", b"k\x00" + (5).to_bytes(4, "big") + b"IDAT12345")),
            png(100, 100, data)[:60], png(100, 100, [bytes(100)] * 300), encode(random_image((9, 7, 3), 0), "PNG"),
            interlaced_png(random_image((13, 11, 3), 1))]
    jpegs = [progressive_jpeg(16, repeats=7), encode(random_image((9, 7, 3), 0), "JPEG"), b"\xff\xda" * 3 + b"\xff"]
    return gifs, pngs, jpegs


def test_the_python_walks_give_the_graph_walks_numbers():
    """Files read outside serving (training, few-shot, inspect) are bounded by the Python walks of limits.py:
    they count what the graph walks of decode.py count, on bombs, normal files and cut ones."""
    gifs, pngs, jpegs = _walk_inputs()
    walk = tf.function(decode.gif_blocks)  # a graph, as served (eager, the loop's steps are slow)
    for gif in gifs:
        for limit in (40, 1000):
            graph = [int(x) for x in walk(tf.constant(gif), limit)]
            assert list(python_walks.gif_blocks(gif, limit)) == graph, (gif[:40], limit)
    for encoded in pngs:
        assert python_walks.png_idat_bytes(encoded) == int(decode.png_idat_bytes(encoded))
    for encoded in jpegs:
        for limit in (None, 4, 12):
            assert python_walks.jpeg_scans(encoded, limit) == int(decode.jpeg_scans(encoded, limit))
    for header in [(13, 11, 8, 2, 1), (1, 1, 8, 2, 0), (5, 3, 1, 0, 1), (9, 17, 16, 6, 1), (2, 2, 4, 3, 1),
                   (3000, 1, 2, 0, 0), (7, 7, 8, 9, 0), (0, 5, 8, 2, 1)]:
        assert python_walks.png_raw_bytes(*header) == float(decode.png_raw_bytes(*header)), header


def test_decoding_problem_refuses_what_serving_refuses_naming_the_value_and_the_variable():
    low = Limits(max_jpeg_scans=12, max_gif_blocks=40, max_png_idat_ratio=1.5)
    assert "more than 12 scans" in python_walks.decoding_problem(progressive_jpeg(16, repeats=7), low)
    assert "KERAS_VIT_MAX_JPEG_SCANS=N" in python_walks.decoding_problem(progressive_jpeg(16, repeats=7), low)
    assert python_walks.decoding_problem(progressive_jpeg(16), low) is None
    assert "KERAS_VIT_MAX_GIF_BLOCKS" in python_walks.decoding_problem(gif_of_frames(11), low)
    assert python_walks.decoding_problem(gif_of_frames(10), low) is None
    problem = python_walks.decoding_problem(png_inflate_bomb(80 << 20), low)
    assert "compressed image data (IDAT) for 4 raw bytes" in problem and "KERAS_VIT_MAX_PNG_IDAT_RATIO" in problem
    assert python_walks.decoding_problem(encode(random_image((9, 7, 3), 0), "PNG"), low) is None
    assert python_walks.decoding_problem(b"BM" + bytes(60), low) is None


def test_the_environment_sets_the_decoding_limits_of_files_read_outside_serving():
    limits = python_walks.environment_limits({"KERAS_VIT_MAX_JPEG_SCANS": "40", "KERAS_VIT_MAX_PNG_IDAT_RATIO": "3"})
    assert (limits.max_jpeg_scans, limits.max_gif_blocks, limits.max_png_idat_ratio) == (40, 4096, 3.0)
    with pytest.raises(ValueError, match=r"KERAS_VIT_MAX_GIF_BLOCKS must be an integer from 1 to 1048576.*"
                                         r"Received: KERAS_VIT_MAX_GIF_BLOCKS='many'"):
        python_walks.environment_limits({"KERAS_VIT_MAX_GIF_BLOCKS": "many"})


def test_interlaced_png_is_served(served):
    _, loaded = served
    image = np.random.default_rng(2).integers(0, 256, (33, 20, 3), dtype=np.uint8)
    encoded = interlaced_png(image)  # stored blocks: IDAT just over the raw size
    np.testing.assert_array_equal(tf.io.decode_png(encoded).numpy(), image)
    assert _serve(loaded, encoded)["scores"].shape[0] == 1


def test_request_over_its_pixel_budget_is_refused_at_the_first_image_past_it(served):
    _, loaded = served
    at_limit = encode(np.full((512, 512, 3), 90, np.uint8), "PNG")
    assert _serve(loaded, at_limit, at_limit, at_limit)["scores"].shape[0] == 3
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"Too many pixels in one request.*limit of 819200.*\] \[3\] \[1048576\]"):
        _serve(loaded, at_limit, at_limit, at_limit, at_limit)


def test_gif_blocks_count_against_the_request_budget():
    """Each GIF block walked counts GIF_BLOCK_PIXELS, and the walk stops where the request's budget ends."""
    limits = Limits(max_pixels=64 * 64, max_request_pixels=30 * GIF_BLOCK_PIXELS, max_gif_blocks=1000)
    decode_batch = tf.function(lambda images: decode.decode_images(images, 8, 8, limits),
                               input_signature=[tf.TensorSpec([None], tf.string)])
    assert decode_batch(tf.constant([gif_of_frames(3), gif_of_frames(3)])).shape == (2, 8, 8, 3)  # 2 x 12 blocks
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"Too many pixels in one request.*\] \[2\]"):
        decode_batch(tf.constant([gif_of_frames(3), gif_of_frames(3), gif_of_frames(3)]))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"Too many pixels in one request.*\] \[0\]"):
        decode_batch(tf.constant([gif_of_extension_bytes(1_000_000)]))  # over the budget before the GIF limit


@pytest.mark.parametrize("shape", [(), (1, 1), (2, 1), (1, 0)])
def test_a_request_that_is_not_a_1d_batch_is_refused_saying_so(served, shape):
    """TF Serving feeds the signature whatever rank the client sends: a scalar or a 2-D batch of images is
    refused in one message, not a graph error of the decoding."""
    _, loaded = served
    images = tf.reshape(tf.constant([_png(8)] * int(np.prod(shape)), tf.string), shape)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"a 1-D batch of encoded images.*received shape"):
        loaded.signatures["serving_default"](images=images)


def test_empty_request_is_served_empty(served):
    _, loaded = served
    out = loaded.signatures["serving_default"](images=tf.constant([], tf.string))
    assert out["scores"].shape == (0, 5) and out["labels"].shape == (0, 5)


def test_limits_are_validated():
    for name in ("max_pixels", "max_request_pixels", "max_batch_size", "max_jpeg_scans", "max_gif_blocks"):
        for bad in (0, -1, CEILINGS[name] + 1, 99999999999999999999, 2.5, True, "7"):
            with pytest.raises(ValueError, match=f"`{name}` must be an integer from 1 to"):
                Limits(**{name: bad})
    for bad in (0.5, float("nan"), float("inf"), 2000.0, "2"):
        with pytest.raises(ValueError, match="`max_png_idat_ratio` must be a number from 1.0"):
            Limits(max_png_idat_ratio=bad)
    with pytest.raises(ValueError, match="`max_request_pixels` must be at least `max_pixels`"):
        Limits(max_pixels=1000, max_request_pixels=999)
    assert Limits(max_pixels=2**30).max_request_pixels == 2**30
    assert Limits(max_jpeg_scans=np.int64(5)).max_jpeg_scans == 5


def test_export_refuses_bad_limits_before_writing(tmp_path):
    with pytest.raises(ValueError, match="`max_pixels` must be an integer from 1 to 1099511627776"):
        export_saved_model(tiny_vit(num_layers=1), tmp_path / "m", max_pixels=99999999999999999999)
    assert not os.path.exists(tmp_path / "m")


def test_a_failed_first_export_leaves_no_empty_base_path(tmp_path, monkeypatch):
    from keras_vit.export import warmup

    def fail(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(warmup, "write", fail)
    with pytest.raises(RuntimeError, match="disk full"):
        export_saved_model(tiny_vit(num_layers=1), tmp_path / "m")
    assert os.listdir(tmp_path) == []


ENFORCED_WITHOUT_KERAS_VIT = r"""
import sys
sys.modules["keras"] = None  # neither Keras nor keras_vit can be imported: TF Serving's situation
sys.modules["keras_vit"] = None
import numpy as np
import tensorflow as tf
sys.path.insert(0, sys.argv[2])
from bomb_fixtures import gif_of_extension_bytes, png_inflate_bomb, progressive_jpeg

serving = tf.saved_model.load(sys.argv[1]).signatures
refused = {}
for name, request in [("jpeg scans", [progressive_jpeg(16, repeats=3)]),
                      ("gif blocks", [gif_of_extension_bytes(100_000)]),
                      ("png inflate", [png_inflate_bomb(80 << 20)]),
                      ("request pixels", [progressive_jpeg(512)] * 4)]:
    try:
        serving["serving_default"](images=tf.constant(request))
    except tf.errors.InvalidArgumentError as error:
        refused[name] = error.message.split("assertion failed: [")[1][:20]
try:
    serving["predict_images"](images=tf.fill([1, %d, %d, 3], 1e30))
except tf.errors.InvalidArgumentError as error:
    refused["float range"] = error.message.split("assertion failed: [")[1][:20]
assert serving["serving_default"](images=tf.constant([progressive_jpeg(16)]))["scores"].shape[0] == 1
print(refused)
""" % (SIZE, SIZE)


@pytest.mark.e2e  # moved from the default tier (its time budget)
def test_limits_are_enforced_without_keras_vit(served):
    path, _ = served
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, "-c", ENFORCED_WITHOUT_KERAS_VIT, path, HERE], capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    refused = eval(done.stdout.strip().splitlines()[-1])  # noqa: S307  a dict literal printed by the child
    assert refused == {
        "jpeg scans": "Too many scans in a ",
        "gif blocks": "Too many blocks in a",
        "png inflate": "PNG image data too l",
        "request pixels": "Too many pixels in o",
        "float range": "`images` holds NaN, ",
    }
