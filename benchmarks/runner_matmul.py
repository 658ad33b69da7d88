"""The matmul ceiling: an (n, n) x (n, n) product in TensorFlow, float32 or bfloat16, with or without XLA.

This is the rate the machine reaches on the best-shaped dense work TensorFlow can give it; the model
benchmarks report their achieved GFLOP/s as a share of it.
"""

import measure


def run(spec):
    import tensorflow as tf

    n = spec["n"]
    rng = tf.random.Generator.from_seed(0)
    a = tf.cast(rng.normal((n, n)), spec["dtype"])
    b = tf.cast(rng.normal((n, n)), spec["dtype"])
    product = tf.function(lambda a, b: tf.matmul(a, b), jit_compile=spec["jit"])
    seconds = measure.time_calls(lambda: product(a, b).numpy(), spec["warmup"], spec["iters"]["1"])
    return {"batches": [measure.batch_result(seconds, 1)]}
