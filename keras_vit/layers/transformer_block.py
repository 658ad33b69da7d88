"""`TransformerBlock`: one pre-LN encoder block of the ViT (paper eq. 2-3)."""

import keras
from keras import ops

from keras_vit import validation
from keras_vit.layers.attention import MultiHeadSelfAttention
from keras_vit.layers.drop_path import DropPath
from keras_vit.layers.gelu import training_gelu
from keras_vit.layers.layer_norm import LayerNormalization
from keras_vit.layers.initializers import glorot_uniform


@keras.saving.register_keras_serializable(package="keras_vit")
def gelu_tanh(x):
    """The tanh form of GELU (`flax.linen.gelu`), as a named activation (the MLP's at inference)."""
    return keras.activations.gelu(x, approximate=True)


@keras.saving.register_keras_serializable(package="keras_vit")
class TransformerBlock(keras.layers.Layer):
    """x = x + MSA(LN(x)); x = x + MLP(LN(x)), with MLP = Dense(mlp_dim) -> GELU -> Dense(D).

    Dropout follows the official code (after the attention output and after each MLP Dense); drop path
    (stochastic depth) scales each residual branch. Sublayers: `attention_norm`, `attention`,
    `mlp_norm`, `mlp_dense_1`, `mlp_dense_2`.

    Args:
        num_heads: attention heads.
        mlp_dim: hidden width of the MLP (4 D in every published model).
        dropout_rate: dropout after attention and in the MLP while training.
        attention_dropout_rate: dropout on the attention probabilities while training.
        drop_path_rate: stochastic-depth rate of both residual branches.
        layer_norm_epsilon: LayerNorm epsilon; 1e-6 as the official code and timm (HF uses 1e-12).
        gelu_approximate: the tanh form of GELU (`flax.linen.gelu`, used to train the official
            checkpoints) when True, the exact erf form (timm, HF) when False.
        qkv_bias: whether the query, key and value projections have biases.
        rematerialize: while training, recompute the MLP's hidden layer (Dense + GELU) and the attention
            probabilities in the backward pass instead of storing them (`keras.remat`): the same gradients
            for less training memory and some extra compute (benchmarks/README.md); no effect on inference.
        locality_attention: locality self-attention for small data (`MultiHeadSelfAttention(locality=True)`).
        **kwargs: base `keras.layers.Layer` arguments.

    Example:
        >>> import numpy as np
        >>> tuple(TransformerBlock(num_heads=4, mlp_dim=128)(np.zeros((2, 5, 32), "float32")).shape)
        (2, 5, 32)
    """

    def __init__(
        self,
        num_heads: int,
        mlp_dim: int,
        dropout_rate: float = 0.0,
        attention_dropout_rate: float = 0.0,
        drop_path_rate: float = 0.0,
        layer_norm_epsilon: float = 1e-6,
        gelu_approximate: bool = True,
        qkv_bias: bool = True,
        rematerialize: bool = True,
        locality_attention: bool = False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        validation.check_positive_number("layer_norm_epsilon", layer_norm_epsilon)
        validation.check_bool("gelu_approximate", gelu_approximate)
        validation.check_bool("rematerialize", rematerialize)
        self.rematerialize = rematerialize
        self.num_heads = num_heads
        self.mlp_dim = mlp_dim
        self.dropout_rate = dropout_rate
        self.attention_dropout_rate = attention_dropout_rate
        self.drop_path_rate = drop_path_rate
        self.layer_norm_epsilon = layer_norm_epsilon
        self.gelu_approximate = gelu_approximate
        self.qkv_bias = qkv_bias
        self.locality_attention = bool(locality_attention)
        policy = self.dtype_policy
        self.attention_norm = LayerNormalization(
            epsilon=layer_norm_epsilon, name="attention_norm", dtype=policy
        )
        self.attention = MultiHeadSelfAttention(
            num_heads, attention_dropout_rate=attention_dropout_rate, qkv_bias=qkv_bias,
            rematerialize=rematerialize, locality=locality_attention, name="attention", dtype=policy,
        )
        self.mlp_norm = LayerNormalization(epsilon=layer_norm_epsilon, name="mlp_norm", dtype=policy)
        self.dropout = keras.layers.Dropout(dropout_rate, dtype=policy)
        self.drop_path = DropPath(drop_path_rate, dtype=policy)

    def build(self, input_shape):
        width = input_shape[-1]
        policy = self.dtype_policy
        bias_init = keras.initializers.RandomNormal(stddev=1e-6)
        self.mlp_dense_1 = keras.layers.Dense(  # its GELU is applied by `_hidden`
            self.mlp_dim,
            kernel_initializer=glorot_uniform(width, self.mlp_dim),
            bias_initializer=bias_init,
            name="mlp_dense_1",
            dtype=policy,
        )
        self.mlp_dense_2 = keras.layers.Dense(
            width,
            kernel_initializer=glorot_uniform(self.mlp_dim, width),
            bias_initializer=bias_init,
            name="mlp_dense_2",
            dtype=policy,
        )
        self.attention_norm.build(input_shape)
        self.attention.build(input_shape)
        self.mlp_norm.build(input_shape)
        self.mlp_dense_1.build(input_shape)
        self.mlp_dense_2.build((*input_shape[:-1], self.mlp_dim))

    def call(self, x, training=None, return_attention_scores=False):
        y = self.attention(self.attention_norm(x), training=training, return_attention_scores=return_attention_scores)
        if return_attention_scores:
            y, scores = y
        x = x + self.drop_path(self.dropout(y, training=training), training=training)
        y = self._mlp(self.mlp_norm(x), training)
        x = x + self.drop_path(self.dropout(y, training=training), training=training)
        return (x, scores) if return_attention_scores else x

    def _mlp(self, x, training):
        """Dense + GELU -> dropout -> Dense, applied to the tokens flattened to (B*T, D).

        Flattening is free and makes each Dense a 2-D matmul; with the GELU right after the first Dense's
        bias, TensorFlow's oneDNN graph fuses matmul, bias and GELU into one kernel at inference (a 3-D
        input becomes a BatchMatMul that it does not fuse), faster in bfloat16 and float32 (figures in
        benchmarks/README.md). While training the GELU is `training_gelu` (one compiled kernel each way
        on TensorFlow).
        """
        tokens_shape = ops.shape(x)
        hidden = self._training_hidden if training else self._hidden
        if training and self.rematerialize:
            hidden = keras.remat(hidden)
        y = hidden(ops.reshape(x, (-1, x.shape[-1])))
        y = self.mlp_dense_2(self.dropout(y, training=training))
        return ops.reshape(y, tokens_shape)

    def _hidden(self, tokens):
        y = self.mlp_dense_1(tokens)
        with keras.name_scope("mlp_gelu"):
            return gelu_tanh(y) if self.gelu_approximate else keras.activations.gelu(y, approximate=False)

    def _training_hidden(self, tokens):
        return training_gelu(self.mlp_dense_1(tokens), approximate=self.gelu_approximate)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "mlp_dim": self.mlp_dim,
            "dropout_rate": self.dropout_rate,
            "attention_dropout_rate": self.attention_dropout_rate,
            "drop_path_rate": self.drop_path_rate,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "gelu_approximate": self.gelu_approximate,
            "qkv_bias": self.qkv_bias,
            "rematerialize": self.rematerialize,
            "locality_attention": self.locality_attention,
        }
