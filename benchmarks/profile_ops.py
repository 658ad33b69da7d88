"""Where keras_vit's forward (or training step) time goes: per-op-type time of one graph call, from a tf.profiler trace.

Builds the model as the benchmark does (random weights, `tf.function`), warms it up, traces one call and
sums the traced kernel times per TensorFlow op type (`_MklNativeFusedMatMul`, `_MklBatchMatMulV2`,
`AddV2`, ...). Ops run one at a time (`inter_op_parallelism_threads=1`; `--parallel` keeps TensorFlow's
default), so the shares add up to the call's wall time; each op still uses every core.

Usage:
    python benchmarks/profile_ops.py                          # ViT-B/16, float32, batch 16
    python benchmarks/profile_ops.py --dtype bfloat16 --batch 1 --top 30
    python benchmarks/profile_ops.py --dtype bfloat16 --bf16-weights   # the "bfloat16" policy (bf16 variables)
    python benchmarks/profile_ops.py --dtype bfloat16 --bf16-weights --frozen   # as the SavedModel export runs it
    python benchmarks/profile_ops.py --dtype bfloat16 --bf16-weights --frozen --keras-layer-norm   # A/B of LayerNorm
    python benchmarks/profile_ops.py --train --arch S16 --dtype bfloat16   # a `train_on_batch` step, as run.py's
    python benchmarks/profile_ops.py --train --arch S16 --dtype bfloat16 --keras-layer-norm --keras-gelu   # A/B

`--train` runs `model.train_on_batch` (AdamW, sparse cross-entropy on logits, `mixed_bfloat16` for bfloat16)
as a graph without XLA, as keras_vit trains in bf16 (a step compiled whole by XLA shows only its clusters).
"""

import argparse
import collections
import glob
import os
import sys
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import numpy as np  # noqa: E402

import cases  # noqa: E402


# Trace events with a colon that are not kernels: the function call, the executor's run and its bookkeeping, and
# the execution events nested inside an XLA-compiled function's `Start` (which is counted, once).
NOT_KERNELS = {"Run", "Process", "Record", "StartRegion", "ExecuteAsyncOnStream", "Execute"}


def op_times(trace_dir):
    """{op type: total milliseconds} over the kernel events of a tf.profiler trace directory."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    totals = collections.Counter()
    for path in glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True):
        space = xplane_pb2.XSpace()
        with open(path, "rb") as f:
            space.ParseFromString(f.read())
        for plane in space.planes:
            for line in plane.lines:
                for event in line.events:
                    name = plane.event_metadata[event.metadata_id].name
                    if ":" not in name:  # kernel events are "node_name:OpType"
                        continue
                    op = name.rsplit(":", 1)[1].strip()
                    if op not in NOT_KERNELS and not op.startswith("__inference"):
                        totals[op] += event.duration_ps / 1e9
    return totals


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="B16", choices=sorted(cases.ARCHS))
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--calls", type=int, default=1, help="untraced calls timed (their median is printed)")
    parser.add_argument("--bf16-weights", action="store_true",
                        help="with --dtype bfloat16: build under the 'bfloat16' policy (weights stored in bf16, as "
                             "the bfloat16 SavedModel export) instead of 'mixed_bfloat16'")
    parser.add_argument("--parallel", action="store_true", help="keep TensorFlow's default inter-op threads")
    parser.add_argument("--frozen", action="store_true",
                        help="the weights as graph constants, as the SavedModel export writes them "
                             "(keras_vit.export.frozen)")
    parser.add_argument("--keras-layer-norm", action="store_true",
                        help="run keras_vit's LayerNormalization layers with Keras' own op (the A/B of "
                             "keras_vit.layers.LayerNormalization)")
    parser.add_argument("--train", action="store_true", help="profile a training step instead of a forward")
    parser.add_argument("--keras-gelu", action="store_true",
                        help="with --train: the MLP's GELU as Keras' op instead of keras_vit.layers.gelu."
                             "training_gelu (the A/B of the XLA-compiled GELU)")
    args = parser.parse_args(argv)

    import keras
    import tensorflow as tf

    import keras_vit

    if not args.parallel:
        tf.config.threading.set_inter_op_parallelism_threads(1)
    if args.bf16_weights and args.dtype != "bfloat16":
        parser.error("--bf16-weights needs --dtype bfloat16")
    policy = ("bfloat16" if args.bf16_weights else "mixed_bfloat16") if args.dtype == "bfloat16" else "float32"
    keras.config.set_dtype_policy(policy)
    if args.keras_layer_norm:
        from keras_vit.layers import LayerNormalization

        LayerNormalization.call = keras.layers.LayerNormalization.call
    if args.keras_gelu:
        if not args.train:
            parser.error("--keras-gelu needs --train (inference never uses training_gelu)")
        from keras_vit.layers import transformer_block

        transformer_block.training_gelu = lambda x, approximate: keras.activations.gelu(x, approximate=approximate)
    if args.train and (args.frozen or args.bf16_weights):
        parser.error("--train profiles a step on float32 or mixed_bfloat16 variables; --frozen and "
                     "--bf16-weights are inference's")
    arch = cases.ARCHS[args.arch]
    model = keras_vit.ViT(classifier_activation=None, **arch)
    size = arch["image_size"]
    x = tf.constant(np.random.default_rng(0).uniform(-1, 1, (args.batch, size, size, 3)).astype("float32"))
    if args.train:
        model.compile(optimizer=keras.optimizers.AdamW(1e-4, weight_decay=0.05), jit_compile=False,
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        labels = tf.constant(np.arange(args.batch) % arch["classes"], "int32")
        model.train_on_batch(x, labels)
        forward = lambda x: tf.constant(model.train_on_batch(x, labels))  # noqa: E731  (`.numpy()` below)
    else:
        forward = tf.function(lambda x: model(x, training=False))
    if args.frozen:
        from keras_vit.export import frozen

        forward = tf.function(frozen.frozen_forward(forward, size, size))
    forward(x).numpy()
    seconds = []
    for _ in range(args.calls):
        start = time.perf_counter()
        forward(x).numpy()
        seconds.append(time.perf_counter() - start)
    print(f"{args.arch} {args.dtype} {'training step' if args.train else 'forward'} (policy {policy}"
          f"{', frozen' if args.frozen else ''}{', Keras LayerNorm' if args.keras_layer_norm else ''}"
          f"{', Keras GELU' if args.keras_gelu else ''}) batch {args.batch}: "
          f"{1000 * float(np.median(seconds)):.0f} ms per call (median of {args.calls}, untraced)")
    with tempfile.TemporaryDirectory() as trace_dir:
        tf.profiler.experimental.start(trace_dir)
        forward(x).numpy()
        tf.profiler.experimental.stop()
        totals = op_times(trace_dir)
    total = sum(totals.values())
    for op, ms in totals.most_common(args.top):
        print(f"  {op:32s} {ms:9.1f} ms {100 * ms / total:5.1f}%")
    print(f"  {'(all ops)':32s} {total:9.1f} ms")


if __name__ == "__main__":
    main()
