"""`MultiHeadSelfAttention`: the ViT attention with the official (D, heads, head_dim) kernel layout."""

import math

import keras
from keras import ops

from keras_vit.layers.initializers import glorot_uniform


def heads_first_attention(q, k, v, scale, float32_softmax=False):
    """softmax(q k^T * scale) v for (B, T, heads, head_dim) inputs, as two batched matmuls over heads.

    The same product as `keras.ops.dot_product_attention(q, k, v, scale=scale)`, arranged for
    TensorFlow's oneDNN kernels: the scale multiplies q (T x head_dim values per head, not the T x T
    logits; exact for head_dim 64, where scale is 1/8), the heads move in front so both products are
    `BatchMatMulV2` (Keras' TensorFlow `dot_product_attention` is an einsum pair), and the softmax runs in
    the compute dtype (oneDNN's bfloat16 softmax accumulates in float32: outputs are bitwise equal to
    Keras' op, which casts the T x T logits to float32 and back), or in float32 for float16 inputs and
    when `float32_softmax` (the layer asks for it while training, so that the softmax gradient is
    float32 too). Faster than Keras' op for ViT-B/16 attention on a Sapphire Rapids CPU (measured by
    `benchmarks/attention_core.py`; figures in benchmarks/README.md).

    Example:
        >>> import numpy as np
        >>> q = k = v = np.ones((2, 5, 4, 8), "float32")
        >>> tuple(heads_first_attention(q, k, v, 8 ** -0.5).shape)
        (2, 5, 4, 8)
    """
    q = ops.transpose(q * ops.cast(scale, q.dtype), (0, 2, 1, 3))  # (B, heads, T, head_dim)
    k = ops.transpose(k, (0, 2, 3, 1))  # (B, heads, head_dim, S)
    v = ops.transpose(v, (0, 2, 1, 3))  # (B, heads, S, head_dim)
    logits = ops.matmul(q, k)
    dtype = keras.backend.standardize_dtype(logits.dtype)
    if dtype != "float32" and (float32_softmax or dtype == "float16"):
        probs = ops.cast(ops.softmax(ops.cast(logits, "float32"), axis=-1), dtype)
    else:
        probs = ops.softmax(logits, axis=-1)
    return ops.transpose(ops.matmul(probs, v), (0, 2, 1, 3))


@keras.saving.register_keras_serializable(package="keras_vit")
class MultiHeadSelfAttention(keras.layers.Layer):
    """Multi-head self-attention, softmax(q k^T / sqrt(head_dim)) v (Vaswani et al.; paper eq. 2-3 / App. A).

    Kernels are stored exactly as the official checkpoints (and Keras `MultiHeadAttention`) store them:
    `query`, `key`, `value` kernels (D, heads, head_dim) with biases (heads, head_dim); `out` kernel
    (heads, head_dim, D) with bias (D,).

    Two paths share these weights. The normal path calls the fused `keras.ops.dot_product_attention`
    (cuDNN / flash / SDPA kernels on JAX and PyTorch); on the TensorFlow backend, whose
    `dot_product_attention` is itself a composite of einsums, it runs `heads_first_attention`, the same
    product laid out for oneDNN's batched matmuls (benchmarks/README.md). The explicit path (softmax in
    float32, then attention dropout) runs only while training with `attention_dropout_rate > 0` or when
    the caller asks for the attention probabilities.

    Args:
        num_heads: number of attention heads; must divide the input width D.
        attention_dropout_rate: dropout on the attention probabilities while training.
        qkv_bias: whether the query, key and value projections have biases.
        rematerialize: while training, recompute the (heads, T, T) probabilities of the normal path in the
            backward pass instead of storing them (`keras.remat`, as fused attention kernels do).
        locality: locality self-attention (Lee, Lee and Song 2021, arXiv 2112.13492), for small data: no token
            attends to itself (the diagonal of the logits is masked) and the softmax temperature is learned
            (weight `temperature`, the log of the scale, starting at log(head_dim ** -0.5)). Always the
            explicit path.
        **kwargs: base `keras.layers.Layer` arguments.

    Example:
        >>> import numpy as np
        >>> layer = MultiHeadSelfAttention(num_heads=4)
        >>> y, probs = layer(np.zeros((2, 5, 32), "float32"), return_attention_scores=True)
        >>> tuple(y.shape), tuple(probs.shape)
        ((2, 5, 32), (2, 4, 5, 5))
    """

    def __init__(self, num_heads: int, attention_dropout_rate: float = 0.0, qkv_bias: bool = True,
                 rematerialize: bool = True, locality: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.rematerialize = rematerialize
        self.locality = bool(locality)
        self.num_heads = num_heads
        self.qkv_bias = qkv_bias
        self.attention_dropout_rate = attention_dropout_rate
        self.dropout = keras.layers.Dropout(attention_dropout_rate, dtype=self.dtype_policy)

    def build(self, input_shape):
        width = input_shape[-1]
        if width % self.num_heads:
            raise ValueError(
                f"The token width must be divisible by the number of heads. "
                f"Received: width={width}, num_heads={self.num_heads}."
            )
        self.head_dim = width // self.num_heads

        # The projections see the tokens flattened to rows, (B*T, D): on TensorFlow a (B, T, D) einsum is a
        # broadcasting batched matmul whose kernel gradient is B per-example (D, D) products summed afterwards;
        # rows make it one matmul (and B times less memory in the training step). Same kernels, same outputs.
        def projection(name):
            return keras.layers.EinsumDense(
                "td,dnh->tnh",
                output_shape=(self.num_heads, self.head_dim),
                bias_axes="nh" if self.qkv_bias else None,
                kernel_initializer=glorot_uniform(width, width),
                name=name,
                dtype=self.dtype_policy,
            )

        self.query, self.key, self.value = projection("query"), projection("key"), projection("value")
        self.out = keras.layers.EinsumDense(
            "tnh,nhd->td",
            output_shape=(width,),
            bias_axes="d",
            kernel_initializer=glorot_uniform(width, width),
            name="out",
            dtype=self.dtype_policy,
        )
        for layer in (self.query, self.key, self.value):
            layer.build((None, width))
        self.out.build((None, self.num_heads, self.head_dim))
        if self.locality:
            self.temperature = self.add_weight(
                name="temperature", shape=(), initializer=keras.initializers.Constant(-0.5 * math.log(self.head_dim)),
                autocast=False)  # a float32 scale under mixed precision too

    def call(self, x, training=None, return_attention_scores=False):
        batch, tokens, width = ops.shape(x)[0], ops.shape(x)[1], x.shape[-1]
        rows = ops.reshape(x, (-1, width))

        def heads(projection):  # (B*T, D) -> (B, T, heads, head_dim)
            return ops.reshape(projection(rows), (batch, tokens, self.num_heads, self.head_dim))

        q, k, v = heads(self.query), heads(self.key), heads(self.value)
        scale = self.head_dim**-0.5
        probs = None
        if self.locality or return_attention_scores or (training and self.attention_dropout_rate > 0):
            logits = ops.cast(ops.einsum("btnh,bsnh->bnts", q, k), "float32")
            if self.locality:  # no attention to oneself, a learned temperature
                logits = ops.where(ops.eye(tokens, dtype="bool"), -1e9, logits * ops.exp(ops.cast(self.temperature, "float32")))
            else:
                logits = logits * scale
            probs = ops.softmax(logits, axis=-1)
            dropped = self.dropout(probs, training=training)
            context = ops.einsum("bnts,bsnh->btnh", ops.cast(dropped, v.dtype), v)
        else:
            def attend(q, k, v):
                if keras.config.backend() == "tensorflow":
                    return heads_first_attention(q, k, v, scale, float32_softmax=bool(training))
                return ops.dot_product_attention(q, k, v, scale=scale)

            context = (keras.remat(attend) if training and self.rematerialize else attend)(q, k, v)
        y = ops.reshape(self.out(ops.reshape(context, (-1, self.num_heads, self.head_dim))), (batch, tokens, width))
        return (y, probs) if return_attention_scores else y

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "attention_dropout_rate": self.attention_dropout_rate,
            "qkv_bias": self.qkv_bias,
            "rematerialize": self.rematerialize,
            "locality": self.locality,
        }
