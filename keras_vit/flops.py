"""Forward FLOPs of a built Keras model, counted from the operations it runs (TensorFlow backend).

The model is traced once for a fixed batch (`tf.function`), and every matrix product and convolution in the
graph is counted at 2 FLOPs per multiply-accumulate: `MatMul`, `BatchMatMul*` (Dense layers, attention
products), `Einsum` (EinsumDense, einsum attention), `Conv2D`/`Conv3D` and `DepthwiseConv2dNative`. Norms,
activations, softmax and pooling are not counted (well under 1% of a ViT or a ResNet), the convention of the
paper's compute axis and of `benchmarks/flops.py`'s analytic ViT count, which this count equals for a ViT.

Training compute is conventionally 3 forward passes per image (forward + backward): `TRAIN_FORWARD_MULTIPLE`.

Example:
    >>> import keras_vit
    >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=4,
    ...                       mlp_dim=64, classes=5)
    >>> forward_flops(model)
    512448
"""

from __future__ import annotations

import math

TRAIN_FORWARD_MULTIPLE = 3.0
"""Training FLOPs per image as a multiple of the forward FLOPs (backward pass = 2 forwards)."""

_MATMULS = ("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")
_CONVS = ("Conv2D", "Conv3D")


def _dims(tensor):
    shape = tensor.shape
    if shape.rank is None or any(d is None for d in shape.as_list()):
        raise ValueError(f"Cannot count the FLOPs of {tensor.op.type} with an unknown shape {shape}.")
    return shape.as_list()


def _einsum_flops(op) -> int:
    equation = op.get_attr("equation").decode().replace(" ", "")
    inputs, output = equation.split("->")
    operands = inputs.split(",")
    sizes = {}
    for letters, tensor in zip(operands, op.inputs):
        dims = _dims(tensor)
        if "..." in letters:
            head, tail = letters.split("...")
            broadcast = dims[len(head): len(dims) - len(tail)]
            letters = head + "".join(chr(0x100 + i) for i in range(len(broadcast))) + tail
            dims = dims[: len(head)] + broadcast + dims[len(dims) - len(tail):]
        for letter, size in zip(letters, dims):
            sizes[letter] = max(sizes.get(letter, 1), size)
    if len(operands) < 2:
        return 0
    return 2 * math.prod(sizes.values())


def op_flops(op) -> int:
    """FLOPs of one TensorFlow graph operation (0 for the operations not counted)."""
    kind = op.type
    if kind == "MatMul":
        a = _dims(op.inputs[0])
        k = a[0] if op.get_attr("transpose_a") else a[1]
        return 2 * math.prod(_dims(op.outputs[0])) * k
    if kind in _MATMULS:
        a = _dims(op.inputs[0])
        adjoint = op.get_attr("adj_x")
        k = a[-2] if adjoint else a[-1]
        return 2 * math.prod(_dims(op.outputs[0])) * k
    if kind in _CONVS:
        kernel = _dims(op.inputs[1])  # (..., C_in, C_out)
        return 2 * math.prod(_dims(op.outputs[0])) * math.prod(kernel[:-1])
    if kind == "DepthwiseConv2dNative":
        kernel = _dims(op.inputs[1])  # (kh, kw, C_in, multiplier)
        return 2 * math.prod(_dims(op.outputs[0])) * kernel[0] * kernel[1]
    if kind == "Einsum":
        return _einsum_flops(op)
    return 0


def _graphs(graph):
    yield graph
    for function in getattr(graph, "_functions", {}).values():
        inner = getattr(function, "graph", None)
        if inner is not None:
            yield from _graphs(inner)


def forward_flops(model, batch_size: int = 1, by_op: bool = False):
    """FLOPs of `batch_size` images through `model` in inference mode (2 per multiply-accumulate).

    Args:
        model: a built Keras model with a fixed input shape (besides the batch).
        batch_size: images per counted forward pass.
        by_op: also return {operation type: FLOPs}.

    Returns:
        int FLOPs, or (FLOPs, {op type: FLOPs}) with `by_op`.

    Raises:
        ValueError: on a backend other than TensorFlow, or an input shape that is not fixed.
    """
    import keras

    if keras.backend.backend() != "tensorflow":
        raise ValueError(f"forward_flops traces the model with TensorFlow. Received: backend {keras.backend.backend()!r}")
    import tensorflow as tf

    shape = tuple(model.input_shape[1:])
    if any(d is None for d in shape):
        raise ValueError(f"The model needs a fixed input shape to count FLOPs. Received: {model.input_shape}")
    dtype = getattr(model.inputs[0], "dtype", "float32") or "float32"
    concrete = tf.function(lambda x: model(x, training=False)).get_concrete_function(
        tf.TensorSpec((batch_size, *shape), dtype)
    )
    counts = {}
    for graph in _graphs(concrete.graph):
        for op in graph.get_operations():
            flops = op_flops(op)
            if flops:
                counts[op.type] = counts.get(op.type, 0) + flops
    total = int(sum(counts.values()))
    return (total, counts) if by_op else total


def format_flops(flops: float) -> str:
    """'1.2 GFLOP', '35 MFLOP', ...

    Example:
        >>> format_flops(35.1e9), format_flops(2.5e6)
        ('35.1 GFLOP', '2.5 MFLOP')
    """
    for unit, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if flops >= scale:
            return f"{flops / scale:.3g} {unit}"
    return f"{flops:.3g} FLOP"

