"""Attention core alone: Keras' `ops.dot_product_attention` vs keras_vit's `heads_first_attention`.

The TensorFlow backend's `dot_product_attention` is an einsum pair with float32 logits; keras_vit's
TensorFlow path (`keras_vit.layers.attention.heads_first_attention`) is two batched matmuls over heads
with the scale on q. This times both on one ViT block's q, k, v (default ViT-B/16 at batch 16:
(16, 197, 12, 64)), interleaved in one process, and prints ms per attention, the ratio and the largest
difference of the outputs.

Usage:
    python benchmarks/attention_core.py                     # float32 and bfloat16, B/16 shapes
    python benchmarks/attention_core.py --batch 1 --repeats 5
"""

import argparse
import os
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from keras import ops  # noqa: E402

from keras_vit.layers.attention import heads_first_attention  # noqa: E402

CALLS_PER_GRAPH = 4  # independent attentions per timed graph call, so per-call overhead is amortised


def keras_attention(q, k, v, scale):
    return ops.dot_product_attention(q, k, v, scale=scale)


IMPLEMENTATIONS = {
    "keras ops.dot_product_attention": keras_attention,
    "keras_vit heads_first_attention": heads_first_attention,
}


def time_per_attention(fn, q, k, v, scale, iters):
    """Median wall ms of one attention, from graph calls that each run CALLS_PER_GRAPH of them."""
    graph = tf.function(lambda q, k, v: [fn(q + i, k, v, scale) for i in range(CALLS_PER_GRAPH)])
    [t.numpy() for t in graph(q, k, v)]
    seconds = []
    for _ in range(iters):
        start = time.perf_counter()
        [t.numpy() for t in graph(q, k, v)]
        seconds.append(time.perf_counter() - start)
    return 1000 * float(np.median(seconds)) / CALLS_PER_GRAPH


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=197)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds (A B A B ...)")
    parser.add_argument("--iters", type=int, default=5, help="timed graph calls per round")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    shape = (args.batch, args.tokens, args.heads, args.head_dim)
    scale = args.head_dim**-0.5
    print(f"q, k, v {shape}; {os.cpu_count()} CPUs; TensorFlow {tf.__version__}")
    for dtype in ("float32", "bfloat16"):
        q, k, v = (tf.constant(rng.standard_normal(shape).astype("float32"), dtype=dtype) for _ in range(3))
        rounds = {name: [] for name in IMPLEMENTATIONS}
        for _ in range(args.repeats):
            for name, fn in IMPLEMENTATIONS.items():
                rounds[name].append(time_per_attention(fn, q, k, v, scale, args.iters))
        outputs = {name: np.asarray(tf.cast(fn(q, k, v, scale), tf.float32)) for name, fn in IMPLEMENTATIONS.items()}
        (base_name, base), (ours_name, ours) = outputs.items()
        medians = {name: float(np.median(times)) for name, times in rounds.items()}
        for name, ms in medians.items():
            print(f"  {dtype:9s} {name:34s} {ms:8.2f} ms/attention")
        print(f"  {dtype:9s} speed-up {medians[base_name] / medians[ours_name]:.2f}x; "
              f"max |difference| {np.abs(base - ours).max():.2e} (outputs of magnitude {np.abs(base).max():.2f})")


if __name__ == "__main__":
    main()
