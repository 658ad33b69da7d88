"""Where a keras_vit training step's memory goes: resident memory over the first step, per option.

Trains ViT-S/16 (batch 16, AdamW, sparse cross-entropy, `train_on_batch` on one constant batch, as the
training rows of `run.py`) in this process and prints the resident memory after import, after the model is
built, and the peak over the first and the timed steps, with the process's CPU milliseconds per step (which
hypervisor steal does not inflate). `--trace` samples the resident memory every 50 ms through the first step
(tracing, XLA compilation, then the step itself); `--xla-dump DIR` has XLA write its buffer assignment there
and prints the step's preallocated temporary buffer (activations, gradients and scratch of the compiled step).
One configuration per process: the peak is the process's high-water mark.

    python benchmarks/train_memory.py                          # the defaults (rematerialize, XLA)
    python benchmarks/train_memory.py --no-rematerialize       # every activation stored
    python benchmarks/train_memory.py --no-jit --trace
    python benchmarks/train_memory.py --arch tiny --steps 1    # a quick check of the script itself
"""

import argparse
import glob
import os
import re
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import cases  # noqa: E402
from measure import current_rss_mb, peak_rss_mb  # noqa: E402

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


class Sampler:
    """Resident MiB every `every` seconds in a thread, as (seconds, MiB) pairs."""

    def __init__(self, every=0.05):
        self.every, self.samples, self._stop = every, [], threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        start = time.perf_counter()
        while not self._stop.is_set():
            self.samples.append((time.perf_counter() - start, current_rss_mb()))
            time.sleep(self.every)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def xla_temp_mib(dump_dir):
    """The largest preallocated temporary buffer of the XLA modules dumped in dump_dir, in MiB."""
    sizes = []
    for path in glob.glob(os.path.join(dump_dir, "*buffer-assignment.txt")):
        with open(path, encoding="utf-8") as file:
            sizes += [int(m) for m in re.findall(r"allocation \d+: size (\d+), preallocated-temp", file.read())]
    return max(sizes) / 2**20 if sizes else None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arch", default="S16", choices=sorted(k for k in cases.ARCHS if k))
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=4, help="timed steps after the first")
    parser.add_argument("--no-rematerialize", action="store_true", help="build with rematerialize=False")
    parser.add_argument("--no-jit", action="store_true", help="a plain graph step instead of XLA")
    parser.add_argument("--trace", action="store_true", help="print resident memory over the first step")
    parser.add_argument("--xla-dump", help="a new directory for XLA's buffer assignment (with XLA)")
    args = parser.parse_args(argv)
    if args.xla_dump:
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_dump_to={args.xla_dump}".strip()

    import keras
    import numpy as np
    import tensorflow as tf

    import keras_vit

    imported = current_rss_mb()
    arch = cases.ARCHS[args.arch]
    keras.utils.set_random_seed(0)
    model = keras_vit.ViT(classifier_activation=None, rematerialize=not args.no_rematerialize, **arch)
    built = current_rss_mb()
    model.compile(optimizer=keras.optimizers.AdamW(1e-4, weight_decay=0.05),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=not args.no_jit)
    size = arch["image_size"]
    x = tf.constant(np.random.default_rng(1).uniform(-1, 1, (args.batch, size, size, 3)).astype("float32"))
    y = tf.constant(np.arange(args.batch) % arch["classes"], "int32")
    with Sampler() as sampler:
        model.train_on_batch(x, y)
    first = peak_rss_mb()
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(args.steps):
        loss = model.train_on_batch(x, y)
    steps = max(args.steps, 1)
    print(f"{args.arch} batch {args.batch}, rematerialize={not args.no_rematerialize}, "
          f"{'graph' if args.no_jit else 'XLA'}: imported {imported:.0f} MiB, built {built:.0f}, peak after the "
          f"first step {first:.0f}, peak {peak_rss_mb():.0f}; {(time.process_time() - cpu) / steps * 1000:.0f} CPU ms "
          f"and {(time.perf_counter() - wall) / steps * 1000:.0f} wall ms per step; loss {float(loss):.4f}")
    if args.trace:
        stride = max(1, len(sampler.samples) // 40)
        print("resident MiB over the first step (s:MiB):",
              " ".join(f"{t:.1f}:{m:.0f}" for t, m in sampler.samples[::stride]))
    if args.xla_dump:
        temp = xla_temp_mib(args.xla_dump)
        print(f"XLA preallocated temporary buffer of the step: {temp:.0f} MiB" if temp is not None
              else f"no XLA buffer assignment in {args.xla_dump} (with --no-jit there is none)")


if __name__ == "__main__":
    main()
