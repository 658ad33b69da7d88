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
