"""Official .npz checkpoints, written by the tests in every spelling the official code has used, load into
keras_vit exactly: logits equal an independent numpy forward pass over the file's arrays."""

import logging

import numpy as np
import pytest
import scipy.ndimage
from numpy_reference import random_official_params, vit_forward

import keras_vit
from keras_vit import model_parts
from keras_vit.checkpoints import loading, npz

ARCH = dict(patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64)
LINEN = {"MultiHeadDotProductAttention_1": "MultiHeadDotProductAttention_0", "LayerNorm_2": "LayerNorm_1",
         "MlpBlock_3": "MlpBlock_0"}


def _linen(key):
    for old, new in LINEN.items():
        key = key.replace(f"/{old}/", f"/{new}/")
    return key


def _scanned(params, rename=lambda k: k):
    """Blocks stacked once under Transformer/encoderblock/ with a leading depth axis."""
    out, blocks = {}, {}
    for key, value in params.items():
        if key.startswith("Transformer/encoderblock_"):
            index, rest = key[len("Transformer/encoderblock_"):].split("/", 1)
            blocks.setdefault(rest, {})[int(index)] = value
        else:
            out[key] = value
    for rest, per_block in blocks.items():
        out[rename(f"Transformer/encoderblock/{rest}")] = np.stack(
            [per_block[i] for i in sorted(per_block)])
    return out


def _big_vision(params):
    """Linen names, scanned blocks, top-level pos_embedding, params/ prefix: a big_vision-era file."""
    scanned = _scanned(params, rename=_linen)
    out = {}
    for key, value in scanned.items():
        key = "pos_embedding" if key == "Transformer/posembed_input/pos_embedding" else key
        out[f"params/{key}"] = value
    return out


SPELLINGS = {
    "pre_linen": lambda p: p,
    "linen": lambda p: {_linen(k): v for k, v in p.items()},
    "params_prefix": lambda p: {f"params/{k}": v for k, v in p.items()},
    "opt_target_prefix": lambda p: {f"opt/target/{k}": v for k, v in p.items()},
    "scanned": _scanned,
    "big_vision": _big_vision,
}


def _write(tmp_path, params, name="ckpt.npz"):
    path = tmp_path / name
    np.savez(path, **params)
    return str(path)


def _reference(params, images, **kwargs):
    return vit_forward({k: np.asarray(v, "float64") for k, v in params.items()}, images.astype("float64"), **kwargs)


def _rel_err(out, ref):
    return np.abs(np.asarray(out) - ref).max() / np.abs(ref).max()


def test_linen_rename_changes_keys():
    params = random_official_params(np.random.default_rng(0))
    linen = SPELLINGS["linen"](params)
    assert "Transformer/encoderblock_0/MlpBlock_0/Dense_0/kernel" in linen
    assert "Transformer/encoderblock_0/LayerNorm_1/scale" in linen
    bv = _big_vision(params)
    assert "params/pos_embedding" in bv and bv["params/Transformer/encoderblock/MlpBlock_0/Dense_1/bias"].shape[0] == 2


@pytest.mark.parametrize("spelling", list(SPELLINGS))
def test_every_spelling_loads_exactly(tmp_path, images, spelling):
    params = random_official_params(np.random.default_rng(1))
    path = _write(tmp_path, SPELLINGS[spelling](params))
    assert npz.read(path).params.keys() == params.keys()
    model = keras_vit.ViT(weights=path, classifier_activation=None)
    assert model.input_shape == (None, 32, 32, 3)
    assert _rel_err(model.predict(images, verbose=0), _reference(params, images)) < 1e-4


def test_gap_classifier_with_pre_logits(tmp_path, images):
    params = random_official_params(np.random.default_rng(2), classifier="gap", representation_size=16)
    model = keras_vit.ViT(weights=_write(tmp_path, params), classifier_activation=None)
    assert model_parts.pre_logits(model).units == 16
    assert "cls" not in loading.read_checkpoint(_write(tmp_path, params)).params
    ref = _reference(params, images, classifier="gap")
    assert _rel_err(model.predict(images, verbose=0), ref) < 1e-4


def test_bfloat16_arrays_are_widened(tmp_path):
    values = np.array([1.5, -2.0, 0.15625], "float32")
    bf16 = (values.view(np.uint32) >> 16).astype(np.uint16).view("V2")
    path = _write(tmp_path, {"cls": bf16})
    np.testing.assert_array_equal(npz.read_arrays(path)["cls"], values)


def test_include_top_false_skips_and_reports_the_head(tmp_path, images, caplog):
    params = random_official_params(np.random.default_rng(3), representation_size=16)
    with caplog.at_level(logging.INFO, logger="keras_vit"):
        model = keras_vit.ViT(weights=_write(tmp_path, params), include_top=False)
    assert "Skipped" in caplog.text and "head/kernel" in caplog.text and "pre_logits/kernel" in caplog.text
    assert _rel_err(model.predict(images, verbose=0), _reference(params, images, include_top=False)) < 1e-4


def test_new_classes_get_a_zero_head_and_a_message(tmp_path, images, caplog):
    params = random_official_params(np.random.default_rng(4))
    with caplog.at_level(logging.INFO, logger="keras_vit"):
        model = keras_vit.ViT(weights=_write(tmp_path, params), classes=3)
    assert "The checkpoint has 5 classes and the model 3 classes: the head is new and zero-initialised" in caplog.text
    head = model_parts.head(model)
    assert head.units == 3 and not np.any(head.kernel.numpy()) and not np.any(head.bias.numpy())
    np.testing.assert_allclose(model.predict(images, verbose=0), np.full((2, 3), 1 / 3), atol=1e-6)


def test_a_checkpoint_without_head_gets_a_new_one(tmp_path, caplog):
    params = random_official_params(np.random.default_rng(17))
    path = _write(tmp_path, {k: v for k, v in params.items() if not k.startswith("head/")})
    with caplog.at_level(logging.INFO, logger="keras_vit"):
        model = keras_vit.ViT(weights=path)
    assert "has no head and the model 1000 classes" in caplog.text and model.output_shape == (None, 1000)
    assert keras_vit.ViT(weights=path, include_top=False).output_shape == (None, 17, 32)


def test_pre_logits_are_dropped_for_a_new_head_unless_asked_for(tmp_path, caplog):
    params = random_official_params(np.random.default_rng(14), representation_size=16)
    path = _write(tmp_path, params)
    with caplog.at_level(logging.INFO, logger="keras_vit"):
        model = keras_vit.ViT(weights=path, classes=3)
    assert model_parts.pre_logits(model) is None
    assert "Skipped pre_logits/bias, pre_logits/kernel: fine-tuning with a new head drops pre_logits" in caplog.text
    kept = keras_vit.ViT(weights=path, classes=3, representation_size=16)
    np.testing.assert_array_equal(model_parts.pre_logits(kept).kernel.numpy(), params["pre_logits/kernel"])
    same = keras_vit.ViT(weights=path)
    np.testing.assert_array_equal(model_parts.pre_logits(same).bias.numpy(), params["pre_logits/bias"])


def test_raw_imagenet21k_zero_head_warns(tmp_path):
    params = random_official_params(np.random.default_rng(5), representation_size=32)
    params["head/kernel"] = np.zeros_like(params["head/kernel"])
    params["head/bias"] = np.zeros_like(params["head/bias"])
    path = _write(tmp_path, params)
    with pytest.warns(UserWarning, match="all zeros.*fine-tune"):
        model = keras_vit.ViT(weights=path)
    assert model_parts.pre_logits(model).units == 32
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        keras_vit.ViT(weights=path, classes=3)  # a new head: no warning
        keras_vit.ViT(weights=path, include_top=False)


def test_fine_tune_at_a_new_resolution(tmp_path, caplog):
    params = random_official_params(np.random.default_rng(6))
    with caplog.at_level(logging.INFO, logger="keras_vit"):
        model = keras_vit.ViT(weights=_write(tmp_path, params), input_shape=(48, 40, 3), classes=3,
                              classifier_activation=None)
    assert "4x4 to a 6x5 patch grid (bilinear" in caplog.text
    file_posemb = params["Transformer/posembed_input/pos_embedding"]
    grid = file_posemb[0, 1:].reshape(4, 4, -1).astype("float64")
    expected = scipy.ndimage.zoom(grid, (6 / 4, 5 / 4, 1), order=1).reshape(1, 30, -1)
    posemb = model_parts.patch_encoder(model).position_embedding.numpy()
    np.testing.assert_array_equal(posemb[:, :1], file_posemb[:, :1])
    np.testing.assert_allclose(posemb[:, 1:], expected, atol=1e-6)
    # The network at 48x40 is the numpy forward with the scipy-resampled embedding and the new zero head.
    images = np.random.default_rng(7).uniform(-1, 1, (2, 48, 40, 3)).astype("float32")
    features = keras_vit.ViT(weights=_write(tmp_path, params, "b.npz"), input_shape=(48, 40, 3),
                             include_top=False).predict(images, verbose=0)
    resampled = {**params, "Transformer/posembed_input/pos_embedding": np.concatenate(
        [file_posemb[:, :1], expected], axis=1)}
    assert _rel_err(features, _reference(resampled, images, include_top=False)) < 1e-4
    model.compile(optimizer="sgd", loss=__import__("keras").losses.SparseCategoricalCrossentropy(from_logits=True))
    before = model_parts.head(model).kernel.numpy().copy()
    loss = model.train_on_batch(images, np.array([0, 2]))
    assert np.isfinite(loss) and np.any(model_parts.head(model).kernel.numpy() != before)


def test_bicubic_option(tmp_path, caplog):
    params = random_official_params(np.random.default_rng(8))
    with caplog.at_level(logging.INFO, logger="keras_vit"):
        model = keras_vit.ViT(weights=_write(tmp_path, params), image_size=48, pos_embed_interpolation="bicubic")
    assert "(bicubic" in caplog.text
    assert model_parts.patch_encoder(model).position_embedding.shape == (1, 37, 32)


def _drop(params, key):
    return {k: v for k, v in params.items() if k != key}


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda p: _drop(p, "Transformer/encoderblock_1/LayerNorm_2/scale"),
         r"missing in the file \(1\): Transformer/encoderblock_1/LayerNorm_2/scale"),
        (lambda p: {**p, "extra/kernel": np.zeros(3, "float32")}, r"unexpected in the file \(1\): extra/kernel"),
        (lambda p: {**p, "Transformer/encoderblock_0/MlpBlock_3/Dense_0/bias": np.zeros(65, "float32")},
         r"mis-shaped \(1\): Transformer/encoderblock_0/MlpBlock_3/Dense_0/bias file \(65,\) vs model \(64,\)"),
        (lambda p: {**p, "Transformer/posembed_input/pos_embedding": np.zeros((1, 16, 32), "float32")},
         r"mis-shaped.*pos_embedding"),
    ],
)
def test_strictness_errors_list_the_keys(tmp_path, edit, match):
    path = _write(tmp_path, edit(random_official_params(np.random.default_rng(9))))
    with pytest.raises(ValueError, match=match) as info:
        keras_vit.ViT(weights=path)
    assert "looks like an unpublished ViT (patch 8, D=32, 2 layers, 4 heads" in str(info.value)


def test_a_failed_load_leaves_an_existing_model_untouched(tmp_path, tiny):
    model = keras_vit.ViT(**tiny)
    before = [w.numpy().copy() for w in model.weights]
    params = random_official_params(np.random.default_rng(10))
    params["head/bias"] = np.zeros(4, "float32")  # the last array checked: everything else would fit
    with pytest.raises(ValueError, match="head/bias"):
        loading.load_weights(model, _write(tmp_path, params))
    for w, b in zip(model.weights, before):
        np.testing.assert_array_equal(w.numpy(), b)


def test_load_weights_into_an_existing_model(tmp_path, tiny, images):
    params = random_official_params(np.random.default_rng(11))
    model = keras_vit.ViT(**tiny, classifier_activation=None)
    report = loading.load_weights(model, _write(tmp_path, params))
    assert len(report.loaded) == len(params) and not report.skipped and not report.reinitialised
    assert _rel_err(model.predict(images, verbose=0), _reference(params, images)) < 1e-4


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(classifier="gap"), r"classifier='gap' \(checkpoint: 'token'\)"),
        (dict(hidden_size=64), r"hidden_size=64 \(checkpoint: 32\)"),
        (dict(patch_size=16, image_size=32), r"patch_size=16 \(checkpoint: 8\)"),
        (dict(representation_size=8), r"representation_size=8"),
        (dict(pos_embed_interpolation="area"), r"pos_embed_interpolation='area'"),
    ],
)
def test_architecture_conflicts_are_clear_errors(tmp_path, kwargs, match):
    params = random_official_params(np.random.default_rng(12), representation_size=16)
    with pytest.raises(ValueError, match=match):
        keras_vit.ViT(weights=_write(tmp_path, params), **kwargs)


def test_a_kernel_of_other_than_three_channels_adapts_only_to_one(tmp_path):
    params = random_official_params(np.random.default_rng(12), channels=2)
    with pytest.raises(ValueError, match=r"2 channels and its kernel cannot be adapted to 3.*input_shape=\(32, 32, 3\)"):
        keras_vit.ViT(weights=_write(tmp_path, params), input_shape=(32, 32, 3))


def test_another_variant_is_named(tmp_path, monkeypatch):
    # Shapes of a ViT-Ti/16 without allocating it: broadcast views of one zero.
    shapes = random_official_params(np.random.default_rng(0), image_size=224, patch_size=16, hidden=192, layers=12,
                                    heads=3, mlp=768, classes=1000)
    from keras_vit.checkpoints.canonical import Checkpoint

    fake = Checkpoint({k: np.broadcast_to(np.float32(0), v.shape) for k, v in shapes.items()}, "official",
                      "ti.npz", True, 1e-6)
    monkeypatch.setattr(loading, "read_checkpoint", lambda path, num_heads=None: fake)
    path = _write(tmp_path, {"cls": np.zeros(1)})
    with pytest.raises(ValueError, match=r"looks like vit_ti16 \(patch 16, D=192, 12 layers, 3 heads"):
        keras_vit.ViT_S16(weights=path)


@pytest.mark.parametrize("damage", ["truncate", "garbage", "pickle"])
def test_truncated_or_corrupt_files(tmp_path, damage):
    path = _write(tmp_path, random_official_params(np.random.default_rng(13)))
    data = open(path, "rb").read()
    if damage == "truncate":
        open(path, "wb").write(data[: len(data) // 2])
    elif damage == "garbage":
        open(path, "wb").write(b"PK\x03\x04" + bytes(range(256)) * 4)
    else:
        np.savez(path, cls=np.array([{"a": 1}], dtype=object))
    with pytest.raises(ValueError, match="truncated|corrupt"):
        keras_vit.ViT(weights=path)


def test_channels_come_from_the_checkpoint(tmp_path):
    params = random_official_params(np.random.default_rng(15), channels=1)
    model = keras_vit.ViT(weights=_write(tmp_path, params), classifier_activation=None)
    assert model.input_shape == (None, 32, 32, 1)
    gray = np.random.default_rng(16).uniform(-1, 1, (2, 32, 32, 1)).astype("float32")
    assert _rel_err(model.predict(gray, verbose=0), _reference(params, gray)) < 1e-4


def test_pickle_files_are_refused(tmp_path):
    path = tmp_path / "model.pth"
    path.write_bytes(b"\x80\x04K\x01.")
    with pytest.raises(ValueError, match="Pickle-based"):
        keras_vit.ViT(weights=str(path))


def test_optimizer_state_beside_opt_target_is_skipped_and_reported(tmp_path, images, caplog):
    params = random_official_params(np.random.default_rng(18))
    stored = {f"opt/target/{k}": v for k, v in params.items()}
    stored["opt/state/step"] = np.array(7)
    with caplog.at_level(logging.INFO, logger="keras_vit"):
        model = keras_vit.ViT(weights=_write(tmp_path, stored), classifier_activation=None)
    assert "Skipped 1 optimizer-state arrays" in caplog.text
    assert _rel_err(model.predict(images, verbose=0), _reference(params, images)) < 1e-4
