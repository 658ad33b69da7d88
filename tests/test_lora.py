"""LoRA on keras_vit's models (`enable_lora`, `merge_lora`, `save_lora_weights` / `load_lora_weights`): what
trains, the numbers against a hand computation, the round trips and the refusals."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import lora

TINY = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=2, mlp_dim=64, classes=3,
            classifier_activation=None)


def tiny(**kwargs):
    return keras_vit.ViT(**{**TINY, **kwargs})


def trained_adapters(model, seed=0):
    """Adapters as after training (`enable_lora` starts B at zero, so the model is unchanged until then)."""
    rng = np.random.default_rng(seed)
    for layer in lora.enabled_layers(model):
        layer.lora_kernel_b.assign(rng.normal(0, 0.3, layer.lora_kernel_b.shape).astype("float32"))


def outputs(model, x):
    return keras.ops.convert_to_numpy(model(x, training=False))


@pytest.fixture(scope="module")
def x():
    return np.random.default_rng(1).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")


def test_only_the_adapters_and_the_head_train(x):
    model = tiny()
    before = outputs(model, x)
    model.enable_lora(4, targets=("query", "value"), alpha=8)
    np.testing.assert_array_equal(outputs(model, x), before)  # B starts at zero
    names = sorted(w.path for w in model.trainable_weights)
    assert names == sorted(["head/kernel", "head/bias"] + [
        f"encoder_block_{b}/attention/{t}/lora_kernel_{k}" for b in (0, 1) for t in ("query", "value") for k in "ab"])
    # per target: A (32, 2 heads, 4) and B (4, 16 per head); the head 32 x 3 + 3
    assert sum(int(np.prod(w.shape)) for w in model.trainable_weights) == 4 * (32 * 2 * 4 + 4 * 16) + 32 * 3 + 3


def test_the_adapted_projection_is_w_plus_scaled_ab():
    model = tiny()
    model.enable_lora(2, targets=("mlp_dense_1",), alpha=6)
    trained_adapters(model)
    layer = model.get_layer("encoder_block_0").mlp_dense_1
    tokens = np.random.default_rng(2).normal(0, 1, (1, 5, 32)).astype("float32")
    a, b = (keras.ops.convert_to_numpy(v) for v in (layer.lora_kernel_a, layer.lora_kernel_b))
    w, bias = keras.ops.convert_to_numpy(layer._kernel), keras.ops.convert_to_numpy(layer.bias)
    expected = tokens @ w + bias + (6 / 2) * (tokens @ a @ b)  # LoRA's h = W x + (alpha / r) B A x (the block
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer(tokens)), expected, rtol=1e-5, atol=1e-5)  # adds GELU)


@pytest.mark.e2e  # the default tier's time budget (10 minutes on 2 cores)
def test_merge_keras_file_and_adapter_file_round_trips(x, tmp_path):
    model = tiny()
    base_weights = model.get_weights()
    model.enable_lora(4)
    trained_adapters(model)
    adapted = outputs(model, x)
    assert np.abs(adapted - outputs(tiny(), x)).max() > 0  # (another random model differs anyway)
    merged = model.merge_lora()
    assert not lora.enabled_layers(merged) and len(merged.trainable_weights) == len(merged.weights)
    np.testing.assert_allclose(outputs(merged, x), adapted, rtol=1e-5, atol=1e-5)

    model.save(tmp_path / "lora.keras")
    reloaded = keras.saving.load_model(tmp_path / "lora.keras")
    assert len(lora.enabled_layers(reloaded)) == 4 and reloaded.get_config()["lora"]["rank"] == 4
    np.testing.assert_allclose(outputs(reloaded, x), adapted, rtol=1e-5, atol=1e-5)

    model.save_lora_weights(tmp_path / "a.lora.h5")
    fresh = tiny()
    fresh.set_weights(base_weights)
    fresh.get_layer("head").set_weights(model.get_layer("head").get_weights())
    fresh.load_lora_weights(tmp_path / "a.lora.h5")  # enables LoRA as the file says
    np.testing.assert_allclose(outputs(fresh, x), adapted, rtol=1e-5, atol=1e-5)
    fresh.load_lora_weights(tmp_path / "a.lora.h5")  # again: replaces the adapters, same numbers
    np.testing.assert_allclose(outputs(fresh, x), adapted, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rank, targets, message", [
    (0, ("query",), r"The LoRA rank must be a positive integer. Received: rank=0"),
    (33, ("query",), r"rank must be an integer from 1 to the projections' width \(32\). Received: rank=33"),
    (4, ("qkv",), r"LoRA targets are among query, key, value, out, mlp_dense_1, mlp_dense_2. Received"),
    (4, (), r"Received: targets=\(\)"),
])
def test_bad_arguments_change_nothing(rank, targets, message):
    model = tiny()
    with pytest.raises(ValueError, match=message):
        model.enable_lora(rank, targets)
    assert not lora.enabled_layers(model) and len(model.trainable_weights) == len(model.weights)


@pytest.mark.e2e  # the default tier's time budget (10 minutes on 2 cores)
def test_refusals(tmp_path):
    model = tiny()
    model.enable_lora(2)
    with pytest.raises(ValueError, match="already enabled"):
        model.enable_lora(2)
    model.save_lora_weights(tmp_path / "a.lora.h5")
    with pytest.raises(ValueError, match="trained on another architecture: num_layers 2 in the file, 3 here"):
        tiny(num_layers=3).load_lora_weights(tmp_path / "a.lora.h5")
    other_rank = tiny()
    other_rank.enable_lora(4)
    with pytest.raises(ValueError, match="holds rank 2 on .*has rank 4"):
        other_rank.load_lora_weights(tmp_path / "a.lora.h5")
    with pytest.raises(ValueError, match="'.lora.h5' file"):
        model.save_lora_weights(tmp_path / "a.h5")
    with pytest.raises(ValueError, match="no LoRA adapters"):
        tiny().save_lora_weights(tmp_path / "b.lora.h5")
    (tmp_path / "bad.lora.h5").write_bytes(b"not hdf5")
    with pytest.raises(ValueError, match="cannot be read"):
        tiny().load_lora_weights(tmp_path / "bad.lora.h5")
    quantized = tiny()
    quantized.quantize("int8")
    with pytest.raises(ValueError, match="LoRA on a quantized model"):
        quantized.enable_lora(2)


@pytest.mark.e2e  # the default tier's time budget (10 minutes on 2 cores)
def test_exports_write_the_merged_model(x):
    from keras_vit.export import serving_form

    model = tiny()
    model.enable_lora(2)
    trained_adapters(model)
    served = serving_form(model)
    assert not lora.enabled_layers(served)
    np.testing.assert_allclose(outputs(served, x), outputs(model, x), rtol=1e-5, atol=1e-5)
    plain = tiny()
    assert serving_form(plain) is plain


def _labels(n):
    return np.arange(n) % TINY["classes"]


@pytest.mark.parametrize("first", ["fit", "predict"])
def test_lora_enabled_after_a_first_fit_or_predict_trains_the_adapters(first, x):
    """Keras' traced functions and built optimizer held the old trainable set: a `fit` after `enable_lora`
    trained the frozen kernels, a `predict` returned the model without its adapters (main 9a09833)."""
    model = tiny()
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    batch = np.concatenate([x] * 4)
    getattr(model, first)(*((batch, _labels(8)) if first == "fit" else (batch,)), verbose=0)
    model.enable_lora(4)
    trained_adapters(model)
    np.testing.assert_allclose(model.predict(batch, verbose=0), outputs(model, batch), rtol=1e-5, atol=1e-5)
    frozen = {w.path: keras.ops.convert_to_numpy(w) for w in model.weights if not w.trainable}
    lora_b = {w.path: keras.ops.convert_to_numpy(w) for w in model.trainable_weights if "lora_kernel_b" in w.path}
    model.fit(batch, _labels(8), epochs=2, verbose=0)
    changed = [w.path for w in model.weights if w.path in frozen
               and not np.array_equal(frozen[w.path], keras.ops.convert_to_numpy(w))]
    assert changed == []
    now = {w.path: keras.ops.convert_to_numpy(w) for w in model.trainable_weights}
    assert lora_b and all(not np.array_equal(value, now[path]) for path, value in lora_b.items())


def test_an_adapters_file_reproduces_the_task_on_a_fresh_base(x, tmp_path, caplog):
    """The head trains beside the adapters: the file holds it (PEFT's `modules_to_save`), unless left out."""
    base = tiny()
    base.save_weights(tmp_path / "base.weights.h5")
    model = tiny()
    model.load_weights(tmp_path / "base.weights.h5")
    model.enable_lora(2)
    trained_adapters(model)
    model.get_layer("head").kernel.assign(np.ones((32, 3), "float32"))  # as after training a new head
    model.save_lora_weights(tmp_path / "task.lora.h5")
    model.save_lora_weights(tmp_path / "alone.lora.h5", include_head=False)

    def fresh():
        plain = tiny()
        plain.load_weights(tmp_path / "base.weights.h5")
        return plain

    restored = fresh()
    restored.load_lora_weights(tmp_path / "task.lora.h5")
    np.testing.assert_allclose(outputs(restored, x), outputs(model, x), rtol=1e-5, atol=1e-5)
    assert "differ" not in caplog.text
    tiny().load_lora_weights(tmp_path / "task.lora.h5")  # another base: loads, and says so
    assert "trained on a base whose query/value kernels differ from this model's" in caplog.text
    for path, include_head in (("alone.lora.h5", True), ("task.lora.h5", False)):
        adapters_only = fresh()
        adapters_only.load_lora_weights(tmp_path / path, include_head=include_head)
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(adapters_only.get_layer("head").kernel),
                                      keras.ops.convert_to_numpy(base.get_layer("head").kernel))
    with pytest.raises(ValueError, match=r"head of shapes \[\(32, 3\), \(3,\)\]; this model's head is "
                                         r"\[\(32, 7\), \(7,\)\].*classes=3.*include_head=False"):
        tiny(classes=7).load_lora_weights(tmp_path / "task.lora.h5")
    assert not lora.enabled_layers(tiny(classes=7))


def test_non_finite_adapters_are_refused(tmp_path):
    import h5py

    model = tiny()
    model.enable_lora(2)
    model.save_lora_weights(tmp_path / "nan.lora.h5")
    with h5py.File(tmp_path / "nan.lora.h5", "a") as file:
        file["encoder_block_1/attention/value/b"][0, 0] = np.nan
    fresh = tiny()
    with pytest.raises(ValueError, match="non-finite values .* encoder_block_1/attention/value's adapter b"):
        fresh.load_lora_weights(tmp_path / "nan.lora.h5")
    assert not lora.enabled_layers(fresh)


@pytest.mark.parametrize("alpha", [0, -1e30, float("nan"), float("inf"), "8", True])
def test_a_bad_alpha_changes_nothing(alpha):
    model = tiny()
    with pytest.raises(ValueError, match=r"alpha must be a finite positive number .* Received: alpha="):
        model.enable_lora(4, alpha=alpha)
    assert not lora.enabled_layers(model) and len(model.trainable_weights) == len(model.weights)


def test_an_optimizer_that_cannot_be_rebuilt_changes_nothing(x):
    class Unregistered(keras.optimizers.SGD):
        def get_config(self):
            raise NotImplementedError("no config")

    model = tiny()
    model.compile(optimizer=Unregistered(0.01), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, _labels(2), verbose=0)
    with pytest.raises(ValueError, match="Unregistered cannot be rebuilt from its config .* compile the model again"):
        model.enable_lora(2)
    assert not lora.enabled_layers(model) and model.get_config().get("lora") is None
