"""Patches, PatchEncoder, TransformerBlock and helpers against independent numpy computations."""

import keras
import numpy as np
import pytest
from harness import run_layer_test
from numpy_reference import attention, encoder_block

from keras_vit import layers
from keras_vit.layers import DropPath, LayerNormalization, MultiHeadSelfAttention, PatchEncoder, Patches, TokenPooling, TransformerBlock
from keras_vit.layers.attention import heads_first_attention
from keras_vit.layers.resnet import PreActResNetUnit, ResNetStem, ResNetUnit, StdConv2D
from keras_vit.layers.tokenizers import ConvStem, ShiftedPatches


def np_(x):
    return keras.ops.convert_to_numpy(x)


def test_patches_are_row_major_and_row_col_channel_flattened(images):
    out = np_(Patches(8)(images))
    assert out.shape == (2, 16, 8 * 8 * 3)
    for i in range(4):
        for j in range(4):
            expected = images[:, 8 * i:8 * i + 8, 8 * j:8 * j + 8, :].reshape(2, -1)
            np.testing.assert_array_equal(out[:, 4 * i + j], expected)


def test_patches_then_dense_equals_the_official_strided_convolution(images):
    kernel = np.random.default_rng(1).standard_normal((8, 8, 3, 6)).astype("float32")
    conv = np_(keras.ops.conv(images, kernel, strides=8, padding="valid"))  # (2, 4, 4, 6)
    flat = np_(Patches(8)(images)) @ kernel.reshape(-1, 6)
    np.testing.assert_allclose(flat, conv.reshape(2, 16, 6), rtol=1e-4, atol=1e-4)


def test_patches_non_square_and_error_names_size():
    x = np.zeros((1, 16, 40, 3), "float32")
    assert Patches(8)(x).shape == (1, 10, 192)
    with pytest.raises(ValueError, match=r"divisible by the patch size 8.*\(16, 36\)"):
        Patches(8)(np.zeros((1, 16, 36, 3), "float32"))


def test_patch_encoder_prepends_class_token_and_adds_positions():
    layer = PatchEncoder(6, use_class_token=True)
    patches = np.random.default_rng(2).standard_normal((2, 4, 12)).astype("float32")
    out = np_(layer(patches))
    assert out.shape == (2, 5, 6)
    assert layer.position_embedding.shape == (1, 5, 6)
    kernel, bias = np_(layer.projection.kernel), np_(layer.projection.bias)
    pos, cls = np_(layer.position_embedding), np_(layer.class_token)
    np.testing.assert_allclose(out[:, 0], np.broadcast_to(cls[0, 0] + pos[0, 0], (2, 6)), atol=1e-6)
    np.testing.assert_allclose(out[:, 1:], patches @ kernel + bias + pos[:, 1:], atol=1e-5)
    np.testing.assert_array_equal(layer.patch_position_table(), pos[:, 1:])  # the [class] token's row left out


def test_patch_encoder_without_class_token():
    layer = PatchEncoder(6, use_class_token=False)
    assert layer(np.zeros((2, 4, 12), "float32")).shape == (2, 4, 6)
    assert layer.position_embedding.shape == (1, 4, 6)
    assert not hasattr(layer, "class_token")


def _block_params(block):
    """The block's weights in the official checkpoint layout, read by attribute (not by the loader)."""
    a = block.attention
    p = {
        "LayerNorm_0/scale": block.attention_norm.gamma, "LayerNorm_0/bias": block.attention_norm.beta,
        "LayerNorm_2/scale": block.mlp_norm.gamma, "LayerNorm_2/bias": block.mlp_norm.beta,
        "MlpBlock_3/Dense_0/kernel": block.mlp_dense_1.kernel, "MlpBlock_3/Dense_0/bias": block.mlp_dense_1.bias,
        "MlpBlock_3/Dense_1/kernel": block.mlp_dense_2.kernel, "MlpBlock_3/Dense_1/bias": block.mlp_dense_2.bias,
    }
    for name in ("query", "key", "value", "out"):
        sub = getattr(a, name)
        p[f"MultiHeadDotProductAttention_1/{name}/kernel"] = sub.kernel
        p[f"MultiHeadDotProductAttention_1/{name}/bias"] = sub.bias
    return {k: np_(v).astype("float64") for k, v in p.items()}


def _randomise(layer, seed=3):
    rng = np.random.default_rng(seed)
    layer.set_weights([rng.standard_normal(w.shape).astype("float32") * 0.3 for w in layer.get_weights()])


@pytest.mark.parametrize("approximate", [True, False])
def test_transformer_block_matches_numpy(approximate):
    x = np.random.default_rng(4).standard_normal((2, 5, 32)).astype("float32")
    block = TransformerBlock(num_heads=4, mlp_dim=64, gelu_approximate=approximate)
    block(x)
    _randomise(block)
    expected = encoder_block(x.astype("float64"), _block_params(block), approximate_gelu=approximate)
    np.testing.assert_allclose(np_(block(x)), expected, rtol=1e-4, atol=1e-4)


def test_gelu_forms_differ():
    x = np.random.default_rng(4).standard_normal((2, 5, 32)).astype("float32")
    block = TransformerBlock(num_heads=4, mlp_dim=64, gelu_approximate=True)
    block(x)
    _randomise(block)
    exact = TransformerBlock.from_config({**block.get_config(), "gelu_approximate": False})
    exact(x)
    exact.set_weights(block.get_weights())
    assert np.abs(np_(exact(x)) - np_(block(x))).max() > 1e-5


def test_fused_and_explicit_attention_paths_agree():
    x = np.random.default_rng(5).standard_normal((2, 7, 32)).astype("float32")
    layer = MultiHeadSelfAttention(num_heads=4)
    fused = np_(layer(x))
    explicit, probs = layer(x, return_attention_scores=True)
    np.testing.assert_allclose(np_(explicit), fused, rtol=1e-5, atol=1e-5)
    probs = np_(probs)
    assert probs.shape == (2, 4, 7, 7)
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-5)
    params = {f"{n}/{w}": np_(getattr(getattr(layer, n), w)) for n in ("query", "key", "value", "out")
              for w in ("kernel", "bias")}
    expected, expected_probs = attention(x.astype("float64"), params)
    np.testing.assert_allclose(np_(explicit), expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(probs, expected_probs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("head_dim", [8, 80])  # 80 (ViT-H/14): a scale that is not a power of two
def test_heads_first_attention_is_keras_dot_product_attention(head_dim):
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((2, 9, 3, head_dim)).astype("float32") for _ in range(3))
    scale = head_dim**-0.5
    ours = np_(heads_first_attention(q, k, v, scale))
    np.testing.assert_allclose(ours, np_(keras.ops.dot_product_attention(q, k, v, scale=scale)), rtol=1e-5, atol=1e-6)
    logits = np.einsum("btnh,bsnh->bnts", q.astype("float64"), k) * scale
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    np.testing.assert_allclose(ours, np.einsum("bnts,bsnh->btnh", probs, v), rtol=1e-5, atol=1e-6)


def test_the_normal_path_runs_heads_first_attention_on_tensorflow(monkeypatch):
    import keras_vit.layers.attention as attention_module

    calls = []
    original = attention_module.heads_first_attention
    monkeypatch.setattr(attention_module, "heads_first_attention",
                        lambda *a, **k: calls.append(k["float32_softmax"]) or original(*a, **k))
    layer = MultiHeadSelfAttention(num_heads=4)
    layer(np.zeros((2, 5, 32), "float32"))
    layer(np.zeros((2, 5, 32), "float32"), training=True)  # no attention dropout: still the fast path
    # While training the softmax (and so its gradient) stays float32.
    assert calls == ([False, True] if keras.config.backend() == "tensorflow" else [])


@pytest.mark.parametrize("float32_softmax", [False, True])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_heads_first_attention_in_half_precision_keeps_its_dtype_and_accuracy(dtype, float32_softmax):
    rng = np.random.default_rng(8)
    # 197 tokens: the ViT-B/16 sequence at 224, the length the benchmarks run.
    q, k, v = (rng.standard_normal((2, 197, 2, 64)).astype("float32") for _ in range(3))
    half = [keras.ops.cast(t, dtype) for t in (q, k, v)]
    out = heads_first_attention(*half, 0.125, float32_softmax=float32_softmax)
    assert keras.backend.standardize_dtype(out.dtype) == dtype
    exact = np_(keras.ops.dot_product_attention(*[keras.ops.cast(t, "float32") for t in half], scale=0.125))
    error = np.linalg.norm(np_(keras.ops.cast(out, "float32")) - exact) / np.linalg.norm(exact)
    assert error < 1e-2, error


def test_attention_kernels_use_the_official_layout():
    layer = MultiHeadSelfAttention(num_heads=4)
    layer(np.zeros((1, 3, 32), "float32"))
    assert layer.query.kernel.shape == (32, 4, 8) and layer.query.bias.shape == (4, 8)
    assert layer.out.kernel.shape == (4, 8, 32) and layer.out.bias.shape == (32,)


def test_attention_dropout_only_while_training():
    x = np.random.default_rng(6).standard_normal((2, 7, 32)).astype("float32")
    layer = MultiHeadSelfAttention(num_heads=4, attention_dropout_rate=0.5)
    inference = np_(layer(x, training=False))
    np.testing.assert_allclose(np_(layer(x, training=False)), inference)
    assert np.abs(np_(layer(x, training=True)) - inference).max() > 1e-4


def test_drop_path_drops_whole_examples():
    x = np.ones((64, 3, 4), "float32")
    layer = DropPath(0.5, seed=1)
    np.testing.assert_array_equal(np_(layer(x, training=False)), x)
    out = np_(layer(x, training=True))
    per_example = out.reshape(64, -1)
    assert set(np.unique(per_example)) <= {0.0, 2.0}
    assert np.all(per_example.min(1) == per_example.max(1))  # whole example kept or dropped
    assert 0 < (per_example[:, 0] == 0).sum() < 64


def test_token_pooling_modes():
    x = np.arange(2 * 4 * 3, dtype="float32").reshape(2, 4, 3)
    np.testing.assert_array_equal(np_(TokenPooling("token")(x)), x[:, 0])
    np.testing.assert_allclose(np_(TokenPooling("avg", 1)(x)), x[:, 1:].mean(1))
    np.testing.assert_allclose(np_(TokenPooling("avg", 0)(x)), x.mean(1))
    np.testing.assert_array_equal(np_(TokenPooling("max", 1)(x)), x[:, 1:].max(1))
    with pytest.raises(ValueError, match="mode='token'"):
        TokenPooling("token", num_prefix_tokens=0)


# (layer class, constructor arguments, input shape, output shape, trainable weights, non-trainable weights):
# the shared harness runs on each (tests/harness.py: `run_layer_test`).
LAYER_CASES = [
    (Patches, dict(patch_size=8), (2, 16, 16, 3), (2, 4, 192), 0, 0),
    # projection kernel and bias, class token, position embedding
    (PatchEncoder, dict(hidden_size=8, use_class_token=True, dropout_rate=0.1), (2, 4, 12), (2, 5, 8), 4, 0),
    (PatchEncoder, dict(hidden_size=8, use_class_token=False), (2, 4, 12), (2, 4, 8), 3, 0),
    # 2 LayerNorms (2 each), query/key/value/out (kernel, bias), 2 MLP Dense (kernel, bias)
    (TransformerBlock, dict(num_heads=4, mlp_dim=64, dropout_rate=0.1, attention_dropout_rate=0.1,
                            drop_path_rate=0.1, layer_norm_epsilon=1e-5, gelu_approximate=False),
     (2, 5, 32), (2, 5, 32), 16, 0),
    (MultiHeadSelfAttention, dict(num_heads=4, attention_dropout_rate=0.2), (2, 5, 32), (2, 5, 32), 8, 0),
    (DropPath, dict(rate=0.2, seed=3), (2, 5, 32), (2, 5, 32), 0, 0),
    (LayerNormalization, dict(epsilon=1e-6), (2, 5, 32), (2, 5, 32), 2, 0),  # gamma, beta
    (TokenPooling, dict(mode="max", num_prefix_tokens=1), (2, 5, 32), (2, 32), 0, 0),
    (TokenPooling, dict(mode="token"), (2, 5, 32), (2, 32), 0, 0),
    (StdConv2D, dict(filters=4, kernel_size=3, strides=2), (2, 8, 8, 3), (2, 4, 4, 4), 1, 0),
    # conv1..3, gn1..3 (gamma, beta); with the projection also conv_proj, gn_proj
    (ResNetUnit, dict(filters=4, groups=2), (2, 8, 8, 16), (2, 8, 8, 16), 9, 0),
    (ResNetUnit, dict(filters=8, strides=2, groups=4), (2, 8, 8, 16), (2, 4, 4, 32), 12, 0),
    # conv_root, gn_root, then two projecting units
    (ResNetStem, dict(block_units=(1, 1), width=8, groups=4), (2, 32, 32, 3), (2, 4, 4, 64), 27, 0),
    # gn1..3, conv1..3, conv_proj (no GroupNorm on BiT's shortcut)
    (PreActResNetUnit, dict(filters=8, strides=2, groups=4), (2, 8, 8, 8), (2, 4, 4, 32), 10, 0),
    # the small-data options: query/key/value/out and the temperature; conv_i kernels and BatchNorm gamma/beta
    # (moving mean/variance non-trainable); the LayerNorm of shifted patches
    (MultiHeadSelfAttention, dict(num_heads=4, locality=True), (2, 5, 32), (2, 5, 32), 9, 0),
    (ConvStem, dict(widths=(4, 8)), (2, 8, 8, 3), (2, 2, 2, 8), 6, 4),
    (ShiftedPatches, dict(patch_size=4), (2, 8, 8, 3), (2, 4, 240), 2, 0),
]


@pytest.mark.parametrize(
    "layer_cls, kwargs, input_shape, output_shape, trainable, non_trainable", LAYER_CASES,
    ids=[f"{case[0].__name__}-{i}" for i, case in enumerate(LAYER_CASES)],
)
def test_layer_harness(layer_cls, kwargs, input_shape, output_shape, trainable, non_trainable, tmp_path):
    inputs = np.random.default_rng(7).standard_normal(input_shape).astype("float32")
    run_layer_test(layer_cls, kwargs, inputs, output_shape, trainable, non_trainable, tmp_path=tmp_path, atol=1e-5)


def test_every_public_layer_runs_the_harness():
    tested = {case[0] for case in LAYER_CASES}
    assert {getattr(layers, name) for name in layers.__all__} <= tested


def test_every_public_layer_is_registered_with_keras():
    from keras_vit import layers
    from keras_vit.layers.transformer_block import gelu_tanh

    for name in layers.__all__:
        cls = getattr(layers, name)
        assert keras.saving.get_registered_name(cls) == f"keras_vit>{name}"
        assert keras.saving.get_registered_object(f"keras_vit>{name}") is cls
    assert keras.saving.get_registered_object("keras_vit>gelu_tanh") is gelu_tanh



class _Buggy(keras.layers.Layer):
    """A layer with the bugs the harness is there to find, one switched on at a time."""

    def __init__(self, bug, **kwargs):
        super().__init__(**kwargs)
        self.bug = bug
        self.dense = keras.layers.Dense(4, dtype=None if bug == "sublayer_policy" else self.dtype_policy)

    def build(self, input_shape):
        self.dense.build(input_shape)
        self.unused = self.add_weight(shape=(2,), name="unused") if self.bug == "unused_weight" else None

    def call(self, x):
        return self.dense(x)

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], 5 if self.bug == "output_shape" else 4)

    def get_config(self):
        return {**super().get_config(), "bug": self.bug}


@pytest.mark.parametrize("bug, match", [
    ("output_shape", "compute_output_shape|symbolic output shape"),
    ("unused_weight", "no gradient reaches"),
    ("sublayer_policy", "output dtype float32 under mixed_bfloat16|sublayers not under mixed_bfloat16"),
])
@pytest.mark.filterwarnings("ignore:Gradients do not exist")
def test_the_harness_finds_layer_bugs(bug, match):
    trainable = 3 if bug == "unused_weight" else 2
    with pytest.raises(AssertionError, match=match):
        run_layer_test(_Buggy, dict(bug=bug), np.ones((2, 3), "float32"), (2, 4), trainable)

def test_get_config_holds_exactly_the_constructor_arguments():
    import inspect

    for layer in (Patches(4), PatchEncoder(8), TransformerBlock(2, 8), MultiHeadSelfAttention(2), DropPath(0.1),
                  TokenPooling("avg")):
        own = set(layer.get_config()) - set(keras.layers.Layer(name="x").get_config())
        params = set(inspect.signature(type(layer).__init__).parameters) - {"self", "kwargs"}
        assert own == params, type(layer).__name__


@pytest.mark.parametrize("bad", [-0.1, 1.0, "0.1"])
def test_drop_path_rejects_bad_rates(bad):
    with pytest.raises(ValueError, match="rate"):
        DropPath(bad)


def test_the_layer_refuses_bad_numerics_too():
    with pytest.raises(ValueError, match=r"Received: gelu_approximate=None"):
        TransformerBlock(num_heads=4, mlp_dim=64, gelu_approximate=None)
    with pytest.raises(ValueError, match=r"Received: layer_norm_epsilon=-1"):
        TransformerBlock(num_heads=4, mlp_dim=64, layer_norm_epsilon=-1)


def _block_gradients(rematerialize, x):
    import tensorflow as tf

    keras.utils.set_random_seed(3)
    block = TransformerBlock(num_heads=4, mlp_dim=64, rematerialize=rematerialize)
    block.build(x.shape)
    with tf.GradientTape() as tape:
        loss = keras.ops.sum(keras.ops.square(block(x, training=True)))
    return [np_(g) for g in tape.gradient(loss, block.trainable_variables)]


@pytest.mark.skipif(keras.config.backend() != "tensorflow", reason="gradients taken with tf.GradientTape")
def test_rematerialized_block_has_the_same_gradients_and_recomputes_only_while_training(monkeypatch):
    x = np.random.default_rng(0).normal(size=(2, 7, 32)).astype("float32")
    stored, recomputed = _block_gradients(False, x), _block_gradients(True, x)
    assert len(stored) == len(recomputed) == 16
    for a, b in zip(stored, recomputed):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    wrapped = []
    original = keras.remat
    monkeypatch.setattr(keras, "remat", lambda f: wrapped.append(f) or original(f))
    block = TransformerBlock(num_heads=4, mlp_dim=64)  # rematerialize=True is the default
    block(x, training=False)
    assert wrapped == []
    block(x, training=True)
    assert len(wrapped) == 2 and block._training_hidden in wrapped  # the MLP hidden layer and the attention core
    wrapped.clear()
    TransformerBlock(num_heads=4, mlp_dim=64, rematerialize=False)(x, training=True)
    assert wrapped == []


@pytest.mark.skipif(keras.config.backend() != "tensorflow", reason="gradients taken with tf.GradientTape")
def test_layer_norm_trains_at_any_rank_in_one_process():
    """Every LayerNorm of one epsilon shares one compiled gradient (an any-size model with shifted patches has
    rank-4 and rank-3 ones): ranks 2, 4 and 3 in turn, each against Keras' op."""
    import tensorflow as tf

    rng = np.random.default_rng(5)
    for shape in [(6, 8), (2, 3, 4, 8), (2, 5, 8)]:
        x = tf.constant(rng.normal(1.0, 2.0, size=shape).astype("float32"))
        ours, theirs = LayerNormalization(epsilon=1e-6), keras.layers.LayerNormalization(epsilon=1e-6)
        ours.build(shape), theirs.build(shape)
        ours.set_weights([rng.normal(size=8).astype("float32") for _ in range(2)])
        theirs.set_weights(ours.get_weights())
        grads = []
        for layer in (ours, theirs):
            with tf.GradientTape() as tape:
                tape.watch(x)
                loss = tf.reduce_sum(layer(x, training=True) * tf.range(8, dtype="float32") * x)
            grads.append(tape.gradient(loss, [x, *layer.trainable_weights]))
        for a, b in zip(*grads):
            np.testing.assert_allclose(np.float32(a), np.float32(b), rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(keras.config.backend() != "tensorflow", reason="other backends run Keras' own op")
@pytest.mark.parametrize("policy, atol", [("float32", 2e-6), ("mixed_bfloat16", 0.0), ("bfloat16", 0.0)])
def test_layer_norm_computes_what_keras_layer_normalization_does(policy, atol, monkeypatch):
    import tensorflow as tf

    x = np.random.default_rng(3).normal(2.0, 3.0, size=(2, 7, 48)).astype("float32")
    ours, theirs = LayerNormalization(epsilon=1e-6, dtype=policy), keras.layers.LayerNormalization(epsilon=1e-6, dtype=policy)
    ours.build(x.shape), theirs.build(x.shape)
    rng = np.random.default_rng(4)
    ours.set_weights([rng.normal(size=48).astype("float32") for _ in range(2)])
    theirs.set_weights(ours.get_weights())
    x = tf.constant(x)
    keras_call = keras.layers.LayerNormalization.call
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y_theirs = theirs(x)
        monkeypatch.setattr(keras.layers.LayerNormalization, "call", lambda *args: 1 / 0)  # ours: its own graph
        y_ours = ours(x)
        y_training = ours(x, training=True)  # its XLA-compiled forward and gradient
        monkeypatch.setattr(keras.layers.LayerNormalization, "call", keras_call)
        weights = tf.range(48, dtype="float32") * tf.cast(x, "float32")  # a loss with a gradient in x too
        losses = [tf.reduce_sum(tf.cast(y, "float32") * weights) for y in (y_ours, y_training, y_theirs)]
    # float32: equal to rounding; 16-bit outputs: both the float32 result rounded once, at most one bf16 step apart
    tolerance = dict(atol=atol) if atol else dict(atol=0.02, rtol=1 / 128)
    for y in (y_ours, y_training):
        assert y.dtype == y_theirs.dtype
        np.testing.assert_allclose(np.float32(y), np.float32(y_theirs), **tolerance)
    gradients = [tape.gradient(loss, [x, ours.gamma, ours.beta] if i < 2 else [x, theirs.gamma, theirs.beta])
                 for i, loss in enumerate(losses)]
    for ours_grads in gradients[:2]:  # relative to the largest gradient: 1e-5 in float32, 1e-2 in 16 bits
        for a, b in zip(ours_grads, gradients[2]):
            atol_grad = float(np.max(np.abs(np.float32(b)))) * (1e-2 if atol == 0 else 1e-5)
            np.testing.assert_allclose(np.float32(a), np.float32(b), rtol=2e-2, atol=atol_grad)
