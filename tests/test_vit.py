"""The ViT builder and the named constructors: shapes, golden parameter counts, numerics, gradients,
serialization, mixed precision and bad input."""

import re

import keras
import numpy as np
import pytest
from harness import assert_model_round_trip
from numpy_reference import vit_forward

import keras_vit
from keras_vit import model_parts
from keras_vit.variants import VARIANTS

# Golden counts from docs/REFERENCE.md (1000 classes, 224, token classifier).
GOLDEN = {
    "Ti16": 5_717_416, "S16": 22_050_664, "B16": 86_567_656, "B32": 88_224_232,
    "L16": 304_326_632, "L32": 306_535_400, "H14": 632_045_800,
}


def paper_count(v, image=224, classes=1000):
    """Parameter count written out from the paper's architecture (independent of keras_vit)."""
    d, p = v.hidden_size, v.patch_size
    tokens = (image // p) ** 2 + 1
    block = 2 * 2 * d + 4 * (d * d + d) + (d * v.mlp_dim + v.mlp_dim) + (v.mlp_dim * d + d)
    return p * p * 3 * d + d + d + tokens * d + v.num_layers * block + 2 * d + d * classes + classes


def test_paper_count_formula_reproduces_the_golden_counts():
    for name, count in GOLDEN.items():
        assert paper_count(VARIANTS[name]) == count


FULL_SIZE = ("H14", "L16", "L32")  # seconds each to build: the end-to-end tier
TWIN_SIZES = ("B8", "B32", "S32", "Ti16")  # the same code as B16 / S16: e2e, for the default tier's time budget


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.e2e) if n in FULL_SIZE + TWIN_SIZES else n
                                  for n, v in VARIANTS.items() if not v.hybrid])  # hybrids: test_resnet.py
def test_every_variant_has_its_golden_parameter_count(name):
    model = getattr(keras_vit, VARIANTS[name].constructor_name)(weights=None)
    assert model.count_params() == GOLDEN.get(name, paper_count(VARIANTS[name]))
    assert model.name == VARIANTS[name].model_name
    keras.backend.clear_session()


def test_raw_imagenet21k_b16_count_with_pre_logits():
    model = keras_vit.ViT_B16(weights=None, classes=21843, representation_size=768)
    assert model.count_params() == 103_186_515


def test_layer_names_follow_the_data_path(tiny):
    model = keras_vit.ViT(**tiny, representation_size=16)
    names = [layer.name for layer in model.layers]
    assert names == ["images", "patches", "patch_encoder", "encoder_block_0", "encoder_block_1",
                     "encoder_norm", "pooling", "pre_logits", "head"]


@pytest.mark.parametrize("classifier", ["token", "gap"])
@pytest.mark.parametrize("approximate", [True, False])
def test_model_matches_independent_numpy_forward(tiny, images, classifier, approximate):
    model = keras_vit.ViT(**tiny, classifier=classifier, representation_size=16, classifier_activation=None,
                          gelu_approximate=approximate)
    rng = np.random.default_rng(1)
    model.set_weights([rng.standard_normal(w.shape).astype("float32") * 0.2 for w in model.get_weights()])
    enc = model_parts.patch_encoder(model)
    params = {
        "embedding/kernel": enc.projection.kernel.numpy().reshape(8, 8, 3, 32),
        "embedding/bias": enc.projection.bias.numpy(),
        "Transformer/posembed_input/pos_embedding": enc.position_embedding.numpy(),
        "Transformer/encoder_norm/scale": model_parts.encoder_norm(model).gamma.numpy(),
        "Transformer/encoder_norm/bias": model_parts.encoder_norm(model).beta.numpy(),
        "pre_logits/kernel": model_parts.pre_logits(model).kernel.numpy(),
        "pre_logits/bias": model_parts.pre_logits(model).bias.numpy(),
        "head/kernel": model_parts.head(model).kernel.numpy(),
        "head/bias": model_parts.head(model).bias.numpy(),
    }
    if classifier == "token":
        params["cls"] = enc.class_token.numpy()
    from test_layers import _block_params

    for i in range(2):
        for k, v in _block_params(model_parts.encoder_blocks(model)[i]).items():
            params[f"Transformer/encoderblock_{i}/{k}"] = v
    params = {k: np.asarray(v, "float64") for k, v in params.items()}
    expected = vit_forward(params, images.astype("float64"), classifier=classifier, approximate_gelu=approximate)
    np.testing.assert_allclose(model.predict(images, verbose=0), expected, rtol=1e-4, atol=1e-4)


def test_include_top_false_outputs(tiny):
    assert keras_vit.ViT(**tiny, include_top=False).output_shape == (None, 17, 32)
    for pooling in ("token", "avg", "max"):
        assert keras_vit.ViT(**tiny, include_top=False, pooling=pooling).output_shape == (None, 32)
    assert keras_vit.ViT(**tiny, include_top=False, classifier="gap").output_shape == (None, 16, 32)


def test_non_square_input_gives_the_right_grid():
    model = keras_vit.ViT_Ti16(weights=None, include_top=False, input_shape=(224, 320, 3))
    assert model.output_shape == (None, 14 * 20 + 1, 192)
    tiny = keras_vit.ViT(image_size=(16, 40), patch_size=8, hidden_size=16, num_layers=1, num_heads=2,
                         mlp_dim=32, classes=3)
    assert tiny.predict(np.zeros((1, 16, 40, 3), "float32"), verbose=0).shape == (1, 3)


def test_input_tensor_and_preprocessing(tiny):
    inputs = keras.Input((32, 32, 3))
    model = keras_vit.ViT(**tiny, input_tensor=inputs, include_preprocessing=True)
    assert model.inputs[0] is inputs
    assert model_parts.preprocessing(model) is not None
    plain = keras_vit.ViT(**tiny)
    plain.set_weights(model.get_weights())
    raw = np.random.default_rng(0).uniform(0, 255, (2, 32, 32, 3)).astype("float32")
    np.testing.assert_allclose(model.predict(raw, verbose=0), plain.predict(raw / 127.5 - 1, verbose=0), atol=1e-5)


@pytest.mark.parametrize("kind", ["own", "official"])
def test_weights_load_into_a_vit_on_a_tensor_computed_by_other_layers(tiny, tmp_path, kind):
    source = keras_vit.ViT(**tiny)
    source.set_weights([np.random.default_rng(3).normal(0, 0.1, w.shape) for w in source.get_weights()])
    path = str(tmp_path / "source.weights.h5")
    source.save_weights(path)
    if kind == "official":  # a published layout of the same weights, through the converter's key map
        from keras_vit.checkpoints import keras_names

        path = str(tmp_path / "source.npz")
        np.savez(path, **keras_names.to_checkpoint(source, path).params)
    inputs = keras.Input((32, 32, 3))
    scaled = keras.layers.Rescaling(2.0, name="upstream")(inputs)  # the ViT sees a computed tensor
    model = keras_vit.ViT(**tiny, input_tensor=scaled, weights=path)
    x = np.random.default_rng(4).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    np.testing.assert_allclose(model.predict(x, verbose=0), source.predict(2 * x, verbose=0), atol=1e-5)


def test_every_trainable_weight_gets_a_gradient(tiny, images):
    import tensorflow as tf

    model = keras_vit.ViT(**tiny, representation_size=16, dropout_rate=0.1, attention_dropout_rate=0.1,
                          drop_path_rate=0.1)
    model.set_weights([np.random.default_rng(2).standard_normal(w.shape).astype("float32") * 0.1
                       for w in model.get_weights()])
    with tf.GradientTape() as tape:
        loss = keras.ops.sum(model(images, training=True) * np.arange(5, dtype="float32"))
    grads = tape.gradient(loss, model.trainable_weights)
    missing = [w.path for w, g in zip(model.trainable_weights, grads) if g is None or not np.any(g.numpy())]
    assert not missing


def test_dropout_is_active_only_in_training(tiny, images):
    model = keras_vit.ViT(**tiny, dropout_rate=0.3, classifier_activation=None)
    model.set_weights([np.random.default_rng(2).standard_normal(w.shape).astype("float32") * 0.1
                       for w in model.get_weights()])
    a, b = model(images, training=False), model(images, training=False)
    np.testing.assert_array_equal(a, b)
    assert np.abs(model(images, training=True) - a).max() > 1e-4


def test_model_fit_just_works(tiny):
    x = np.random.default_rng(0).uniform(-1, 1, (8, 32, 32, 3)).astype("float32")
    y = np.arange(8) % 5
    model = keras_vit.ViT(**tiny)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    history = model.fit(x, y, epochs=2, batch_size=4, verbose=0)
    assert np.isfinite(history.history["loss"]).all()


@pytest.mark.parametrize("options", [dict(), dict(classifier="gap", representation_size=8, include_preprocessing=True),
                                     dict(include_top=False, pooling="avg")])
def test_model_round_trips_in_safe_mode(tiny, images, tmp_path, options):
    model = keras_vit.ViT(**tiny, dropout_rate=0.1, drop_path_rate=0.1, **options)
    model.set_weights([np.random.default_rng(2).standard_normal(w.shape).astype("float32") * 0.1
                       for w in model.get_weights()])
    assert_model_round_trip(model, images, tmp_path)


def test_weights_h5_round_trip(tiny, images, tmp_path):
    model = keras_vit.ViT(**tiny)
    model.set_weights([np.random.default_rng(2).standard_normal(w.shape).astype("float32") * 0.1
                       for w in model.get_weights()])
    path = str(tmp_path / "tiny.weights.h5")
    model.save_weights(path)
    loaded = keras_vit.ViT(**tiny, weights=path)
    np.testing.assert_allclose(loaded.predict(images, verbose=0), model.predict(images, verbose=0), atol=1e-6)
    with pytest.raises(ValueError, match="does not match"):
        keras_vit.ViT(**{**tiny, "hidden_size": 16}, weights=path)


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
@pytest.mark.e2e  # moved from the default tier (its time budget)
def test_mixed_precision(tiny, images, policy):
    reference = keras_vit.ViT(**tiny, classifier_activation=None)
    keras.config.set_dtype_policy(policy)
    model = keras_vit.ViT(**tiny, classifier_activation=None)
    model.set_weights(reference.get_weights())
    block = model_parts.encoder_blocks(model)[0]
    assert block.compute_dtype == policy.split("_")[1]
    assert block.attention.query.kernel.dtype == "float32"  # variables stay float32
    assert model_parts.head(model).compute_dtype == "float32"
    out = model(images)
    assert keras.backend.standardize_dtype(out.dtype) == "float32"
    tokens = model_parts.encoder_norm(model)
    assert tokens.compute_dtype == policy.split("_")[1]
    np.testing.assert_allclose(out, reference(images), rtol=0.1, atol=0.05)
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    loss = model.train_on_batch(images, np.array([0, 1]))
    assert np.isfinite(loss)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(image_size=30), r"divisible by the patch size 8 \(height 30 -> 24 or 32; width 30 -> 24 or 32"),
        (dict(input_shape=(32, 36, 3)), r"width 36 -> 32 or 40.*input_shape=\(32, 36"),
        (dict(input_shape=(None, None, 3), image_size=30), r"image_size=30.*input_shape=\(None, None, 3\)"),
        (dict(input_shape=(None, None, 0)), r"channel count.*input_shape=\(None, None, 0\)"),
        (dict(input_shape=(32, 32)), r"input_shape=\(32, 32\)"),
        (dict(classifier="cls"), r"classifier='cls'"),
        (dict(include_top=False, pooling="mean"), r"pooling='mean'"),
        (dict(include_top=False, pooling="token", classifier="gap"), r"pooling='token'"),
        (dict(dropout_rate=-0.1), r"dropout_rate=-0.1"),
        (dict(attention_dropout_rate=1.5), r"attention_dropout_rate=1.5"),
        (dict(drop_path_rate=1.0), r"drop_path_rate=1.0"),
        (dict(classes=0), r"classes=0"),
        (dict(num_heads=5), r"hidden_size=32, num_heads=5"),
        (dict(weights="imagenet-foo"), r"weights='imagenet-foo'"),
        (dict(weights="/nonexistent/x.weights.h5"), r"does not exist.*x.weights.h5"),
    ],
)
def test_bad_input_gets_a_clear_error(tiny, kwargs, match):
    with pytest.raises(ValueError, match=match):
        keras_vit.ViT(**{**tiny, **kwargs})


@pytest.mark.parametrize("shape", [(0, 32, 3), (32, 0, 3), (-8, 32, 3), (32, -32, 3), (32, 32, 0), (32, 32, -1)])
def test_zero_or_negative_sizes_are_refused(tiny, shape):
    args = {k: v for k, v in tiny.items() if k != "image_size"}
    with pytest.raises(ValueError, match=rf"positive integer.*Received: input_shape=\({shape[0]}, {shape[1]}, "):
        keras_vit.ViT(**args, input_shape=shape)


def test_named_constructors_and_checkpoint_builds_refuse_a_zero_size():
    with pytest.raises(ValueError, match=r"Received: input_shape=\(0, 224, 3\)"):
        keras_vit.ViT_B16(weights=None, input_shape=(0, 224, 3))
    # Refused before the checkpoint is even looked for (the path does not exist).
    with pytest.raises(ValueError, match=r"Received: input_shape=\(0, 32, 3\)"):
        keras_vit.ViT(weights="/nonexistent/ckpt.npz", input_shape=(0, 32, 3))


@pytest.mark.parametrize("value", [-1, 0, -1e-6, 0.0, "a", True, float("nan"), float("inf")])
def test_bad_layer_norm_epsilon_is_refused(tiny, value):
    with pytest.raises(ValueError, match=r"`layer_norm_epsilon` must be a positive number.*"
                                         rf"Received: layer_norm_epsilon={re.escape(repr(value))}$"):
        keras_vit.ViT(**tiny, layer_norm_epsilon=value)


@pytest.mark.parametrize("value", [1, 0, "yes", 1.0])
def test_gelu_approximate_must_be_a_bool(tiny, value):
    with pytest.raises(ValueError, match=rf"`gelu_approximate` must be a bool.*Received: gelu_approximate={value!r}"):
        keras_vit.ViT(**tiny, gelu_approximate=value)


def test_unknown_interpolation_is_refused_without_weights(tiny):
    match = r"one of \('bilinear', 'bicubic'\).*Received: position_embedding_interpolation='area'"
    with pytest.raises(ValueError, match=match):
        keras_vit.ViT(**tiny, position_embedding_interpolation="area")


def test_numerics_are_checked_before_a_checkpoint_is_read():
    with pytest.raises(ValueError, match=r"Received: layer_norm_epsilon=-1"):
        keras_vit.ViT(weights="/nonexistent/ckpt.npz", layer_norm_epsilon=-1)
    with pytest.raises(ValueError, match=r"Received: gelu_approximate='yes'"):
        keras_vit.ViT(weights="/nonexistent/ckpt.npz", gelu_approximate="yes")


def test_valid_numerics_still_build(tiny):
    model = keras_vit.ViT(**tiny, layer_norm_epsilon=1e-12, gelu_approximate=False,
                          position_embedding_interpolation="bicubic")
    assert model_parts.encoder_norm(model).epsilon == 1e-12
    assert model_parts.encoder_blocks(model)[0].gelu_approximate is False


def test_constructors_follow_the_keras_applications_contract():
    import inspect

    expected = ["include_top", "weights", "input_tensor", "input_shape", "pooling", "classes",
                "classifier_activation", "name"]
    for variant in VARIANTS.values():
        constructor = getattr(keras_vit, variant.constructor_name)
        assert list(inspect.signature(constructor).parameters)[:8] == expected
        assert variant.title in constructor.__doc__  # "ViT-B/16", or a hybrid's published "R+ViT-Ti/16"


def test_version():
    import configparser
    import pathlib

    assert keras_vit.__version__
    cfg = configparser.ConfigParser()
    cfg.read(pathlib.Path(__file__).parents[1] / "setup.cfg")
    assert cfg["metadata"]["version"] == "attr: keras_vit.__version__"


def test_weights_h5_with_other_tensor_count_is_refused(tiny, tmp_path):
    """`model.load_weights` alone would ignore the extra block / head tensors of the file: a `.weights.h5` that
    carries no keras_vit model (no `keras_vit_model` attribute) loads only into its very architecture."""
    import h5py

    path = str(tmp_path / "two_blocks.weights.h5")
    keras_vit.ViT(**tiny).save_weights(path)
    with pytest.raises(ValueError, match=r"num_layers=1 \(checkpoint: 2\)"):  # keras_vit's own file: both sides
        keras_vit.ViT(**{**tiny, "num_layers": 1}, weights=path)
    with h5py.File(path, "a") as file:
        del file.attrs["keras_vit_model"]
    with pytest.raises(ValueError, match=r"holds 40 tensors, the model has 24 weights"):
        keras_vit.ViT(**{**tiny, "num_layers": 1}, weights=path)
    with pytest.raises(ValueError, match="does not match"):
        keras_vit.ViT(**tiny, include_top=False, weights=path)


def test_input_tensor_must_be_a_keras_tensor(tiny):
    with pytest.raises(ValueError, match="input_tensor of type ndarray"):
        keras_vit.ViT(**tiny, input_tensor=np.zeros((1, 32, 32, 3), "float32"))


def test_a_local_folder_does_not_shadow_a_published_name(tmp_path, monkeypatch):
    from keras_vit.checkpoints import weights_files

    monkeypatch.chdir(tmp_path)
    (tmp_path / "imagenet21k").mkdir()
    assert not weights_files.is_path("imagenet21k")
    assert weights_files.is_path("./imagenet21k")
