"""`training_gelu` (the MLP's GELU while training) against float64 formulas, and the inference MLP's fusion."""

import math
import os

import keras
import numpy as np
import pytest

from keras_vit.layers import TransformerBlock
from keras_vit.layers.gelu import training_gelu

SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


def reference_gelu(x, approximate):
    """GELU and its derivative in float64, written from the definitions (not from the code under test)."""
    if approximate:
        u = SQRT_2_OVER_PI * (x + 0.044715 * x**3)
        t = np.tanh(u)
        return 0.5 * x * (1 + t), 0.5 * (1 + t) + 0.5 * x * (1 - t**2) * SQRT_2_OVER_PI * (1 + 3 * 0.044715 * x**2)
    erf = np.vectorize(math.erf)
    cdf = 0.5 * (1 + erf(x / math.sqrt(2)))
    return x * cdf, cdf + x * np.exp(-x**2 / 2) / math.sqrt(2 * math.pi)


@pytest.mark.skipif(keras.config.backend() != "tensorflow", reason="gradients taken with tf.GradientTape")
@pytest.mark.parametrize("approximate", [True, False])
@pytest.mark.parametrize("dtype, tolerance", [("float32", 2e-6), ("bfloat16", 1 / 128)])
def test_training_gelu_values_and_gradient_are_gelus(approximate, dtype, tolerance):
    import tensorflow as tf

    x64 = np.concatenate([np.linspace(-6, 6, 97), np.random.default_rng(0).normal(0, 2, 200)])
    x = tf.constant(x64.astype("float32"), dtype=dtype)
    upstream = tf.constant(np.linspace(-2, 2, x64.size).astype("float32"), dtype=dtype)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = training_gelu(x, approximate=approximate)
    grad = tape.gradient(y, x, output_gradients=upstream)
    assert y.dtype == grad.dtype == x.dtype
    x_in = np.float64(np.float32(x))  # the values after rounding to `dtype`
    value, slope = reference_gelu(x_in, approximate)
    np.testing.assert_allclose(np.float64(np.float32(y)), value, rtol=tolerance, atol=tolerance)
    expected = np.float64(np.float32(upstream)) * slope
    np.testing.assert_allclose(np.float64(np.float32(grad)), expected, rtol=tolerance, atol=tolerance)


def test_training_block_uses_training_gelu_and_inference_does_not(monkeypatch):
    from keras_vit.layers import transformer_block

    calls = []
    monkeypatch.setattr(transformer_block, "training_gelu", lambda x, approximate: calls.append(approximate) or x)
    block = TransformerBlock(num_heads=2, mlp_dim=16, gelu_approximate=False)
    x = np.random.default_rng(1).normal(size=(2, 3, 8)).astype("float32")
    block(x, training=False)
    assert calls == []
    block(x, training=True)
    assert calls == [False]


@pytest.mark.skipif(keras.config.backend() != "tensorflow", reason="TensorFlow's oneDNN graph rewrite")
def test_inference_mlp_is_one_fused_onednn_kernel_with_its_gelu():
    """TensorFlow's remapper fuses MatMul + BiasAdd + GELU only when the GELU's nodes are named so that
    its commutative inputs sort as in Keras' Dense (`TransformerBlock._hidden`'s name scope): this fails
    if a change leaves the GELU as separate ops (1.8x slower bf16 inference, benchmarks/README.md)."""
    import platform

    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    if platform.machine() not in ("x86_64", "AMD64") or os.environ.get("TF_ENABLE_ONEDNN_OPTS") == "0":
        pytest.skip("oneDNN's graph rewrite runs on x86-64 CPUs, unless TF_ENABLE_ONEDNN_OPTS=0 turns it off")
    block = TransformerBlock(num_heads=2, mlp_dim=32)
    block.build((2, 5, 16))
    forward = tf.function(lambda x: block(x, training=False)).get_concrete_function(tf.TensorSpec((2, 5, 16)))
    frozen = convert_variables_to_constants_v2(forward)
    with tf.Graph().as_default() as graph, tf.device("/cpu:0"):  # the CPU's rewrite, also on a GPU host
        tf.import_graph_def(frozen.graph.as_graph_def(), name="")
        with tf.compat.v1.Session(graph=graph) as session:
            metadata = tf.compat.v1.RunMetadata()
            session.run(frozen.outputs[0].name, {frozen.inputs[0].name: np.zeros((2, 5, 16), "float32")},
                        options=tf.compat.v1.RunOptions(output_partition_graphs=True), run_metadata=metadata)
    nodes = [node for partition in metadata.partition_graphs for node in partition.node]
    fused = [list(node.attr["fused_ops"].list.s) for node in nodes if "FusedMatMul" in node.op]
    assert [b"BiasAdd", b"GeluApproximate"] in fused, fused
    assert not any(node.op == "Tanh" for node in nodes)
