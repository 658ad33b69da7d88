"""TensorFlow matmuls: the ceiling (one (n, n) x (n, n) product) and the model's floor (its products alone).

task "matmul": the rate the machine reaches on the best-shaped dense work TensorFlow can give it; the
model benchmarks report their achieved GFLOP/s as a share of it. float32 or bfloat16, with or without XLA.

task "floor": every matrix product of one ViT forward as keras_vit decomposes it
(`model_matmuls.vit_matmuls`; task "train-floor": of a training step, `model_matmuls.training_matmuls`),
the model's shapes and dtype, in one `tf.function` without XLA (XLA could shrink a product to the corner
that is returned), one op at a time (inter-op parallelism 1, as a sequential model runs), each per-layer
weight distinct so that weights stream from memory as in the model. Nothing but the products runs: what
TensorFlow's oneDNN kernels take for this work, issued one by one (benchmarks/README.md says what that does
and does not bound).

spec["threads"] (optional, `serving_paths.py`): intra-op threads, inter-op 1; TensorFlow's defaults without it.
"""

import measure
import model_matmuls


def run(spec):
    if spec.get("threads"):
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(spec["threads"])
        tf.config.threading.set_inter_op_parallelism_threads(1)
    if spec["task"] in model_matmuls.FLOOR_TASKS:
        return _floor(spec)
    import tensorflow as tf

    n = spec["n"]
    rng = tf.random.Generator.from_seed(0)
    a = tf.cast(rng.normal((n, n)), spec["dtype"])
    b = tf.cast(rng.normal((n, n)), spec["dtype"])
    product = tf.function(lambda a, b: tf.matmul(a, b), jit_compile=spec["jit"])
    seconds = measure.time_calls(lambda: product(a, b).numpy(), spec["warmup"], spec["iters"]["1"])
    return {"batches": [measure.batch_result(seconds, 1)]}


def _floor(spec):
    import tensorflow as tf

    if spec["jit"]:
        raise ValueError("The matmul floor runs without XLA, which could compute only the returned corner of "
                         f"each product. Received: jit={spec['jit']!r}")
    tf.config.threading.set_inter_op_parallelism_threads(1)
    rng = tf.random.Generator.from_seed(0)
    batches = []
    for batch in spec["batches"]:
        products_of = model_matmuls.FLOOR_TASKS[spec["task"]]
        operands = model_matmuls.operand_pairs(
            products_of(spec["arch"], batch), lambda shape: tf.cast(rng.normal(shape), spec["dtype"]))

        @tf.function
        def products(operands):
            # The sum of a corner of every product is returned, so none is pruned.
            return tf.add_n([tf.reduce_sum(tf.cast(tf.matmul(a, b)[..., :1, :1], tf.float32)) for a, b in operands])

        seconds = measure.time_calls(lambda: products(operands).numpy(), spec["warmup"], spec["iters"][str(batch)])
        batches.append(measure.batch_result(seconds, batch))
        del operands
    return {"batches": batches}
