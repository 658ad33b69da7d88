"""`MultiHeadSelfAttention`: the ViT attention with the official (D, heads, head_dim) kernel layout."""

import keras
from keras import ops

from keras_vit.layers.initializers import glorot_uniform


@keras.saving.register_keras_serializable(package="keras_vit")
class MultiHeadSelfAttention(keras.layers.Layer):
    """Multi-head self-attention, softmax(q k^T / sqrt(head_dim)) v (Vaswani et al.; paper eq. 2-3 / App. A).

    Kernels are stored exactly as the official checkpoints (and Keras `MultiHeadAttention`) store them:
    `query`, `key`, `value` kernels (D, heads, head_dim) with biases (heads, head_dim); `out` kernel
    (heads, head_dim, D) with bias (D,).

    Two paths share these weights: the normal path calls the fused `keras.ops.dot_product_attention`;
    the explicit path (softmax in float32, then attention dropout) runs only while training with
    `attention_dropout_rate > 0` or when the caller asks for the attention probabilities.

    Args:
        num_heads: number of attention heads; must divide the input width D.
        attention_dropout_rate: dropout on the attention probabilities while training.
        **kwargs: base `keras.layers.Layer` arguments.

    Example:
        >>> import numpy as np
        >>> layer = MultiHeadSelfAttention(num_heads=4)
        >>> y, probs = layer(np.zeros((2, 5, 32), "float32"), return_attention_scores=True)
        >>> tuple(y.shape), tuple(probs.shape)
        ((2, 5, 32), (2, 4, 5, 5))
    """

    def __init__(self, num_heads: int, attention_dropout_rate: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
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

        def projection(name):
            return keras.layers.EinsumDense(
                "btd,dnh->btnh",
                output_shape=(None, self.num_heads, self.head_dim),
                bias_axes="nh",
                kernel_initializer=glorot_uniform(width, width),
                name=name,
                dtype=self.dtype_policy,
            )

        self.query, self.key, self.value = projection("query"), projection("key"), projection("value")
        self.out = keras.layers.EinsumDense(
            "btnh,nhd->btd",
            output_shape=(None, width),
            bias_axes="d",
            kernel_initializer=glorot_uniform(width, width),
            name="out",
            dtype=self.dtype_policy,
        )
        for layer in (self.query, self.key, self.value):
            layer.build(input_shape)
        self.out.build((input_shape[0], input_shape[1], self.num_heads, self.head_dim))

    def call(self, x, training=None, return_attention_scores=False):
        q, k, v = self.query(x), self.key(x), self.value(x)
        scale = self.head_dim**-0.5
        if return_attention_scores or (training and self.attention_dropout_rate > 0):
            logits = ops.einsum("btnh,bsnh->bnts", q, k)
            probs = ops.softmax(ops.cast(logits, "float32") * scale, axis=-1)
            dropped = self.dropout(probs, training=training)
            context = ops.einsum("bnts,bsnh->btnh", ops.cast(dropped, v.dtype), v)
        else:
            probs = None
            context = ops.dot_product_attention(q, k, v, scale=scale)
        y = self.out(context)
        return (y, probs) if return_attention_scores else y

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "attention_dropout_rate": self.attention_dropout_rate,
        }
