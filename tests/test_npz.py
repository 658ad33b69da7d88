"""Official .npz checkpoints, written by the tests in every spelling the official code has used, load into
keras_vit exactly: logits equal an independent numpy forward pass over the file's arrays."""

import functools
import io
import logging
import os
import struct
import tracemalloc
import zipfile
import zlib

import numpy as np
import pytest
import scipy.ndimage
from numpy_reference import random_official_params, vit_forward
from test_loading import _assert_unchanged, _weights

import keras_vit
from keras_vit import model_parts
from keras_vit.checkpoints import loading, npz, readers

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
    assert "cls" not in readers.read_checkpoint(_write(tmp_path, params)).params
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
        model = keras_vit.ViT(weights=_write(tmp_path, params), image_size=48,
                              position_embedding_interpolation="bicubic")
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
        (dict(position_embedding_interpolation="area"), r"position_embedding_interpolation='area'"),
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
    monkeypatch.setattr(readers, "read_checkpoint", lambda path, num_heads=None, file_format=None: fake)
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


MIB = 1 << 20


def _npy_header(shape, descr="<f4") -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": descr, "fortran_order": False, "shape": shape})
    return buffer.getvalue()


def _write_zip(path, members):
    """A zip archive of (name, stored bytes, crc32, uncompressed size, method) members, written by hand so a
    member can be a ready-made deflate stream (zipfile would need the uncompressed data)."""
    central, offset = [], 0
    with open(path, "wb") as handle:
        for name, data, crc, size, method in members:
            encoded = name.encode()
            handle.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0x21, crc, len(data), size,
                                     len(encoded), 0) + encoded + data)
            central.append(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, method, 0, 0x21, crc, len(data),
                                       size, len(encoded), 0, 0, 0, 0, 0, offset) + encoded)
            offset += 30 + len(encoded) + len(data)
        directory = b"".join(central)
        handle.write(directory)
        handle.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(members), len(members), len(directory), offset, 0))


def _stored(name, data: bytes):
    return name, data, zlib.crc32(data), len(data), 0


def _array_members(params):
    members = []
    for key, value in params.items():
        buffer = io.BytesIO()
        np.lib.format.write_array(buffer, np.asarray(value), allow_pickle=False)
        members.append(_stored(f"{key}.npy", buffer.getvalue()))
    return members


HUGE_SHAPE = (1 << 29,)  # 2 GiB of float32 zeros
HUGE_BYTES = (1 << 29) * 4


@functools.cache
def _zeros_member_data(shape):
    """(deflate stream, crc32, size) of a .npy of float32 zeros, built one 1 MiB block at a time: after a full
    flush the compressor emits the same bytes for every block of zeros, so one block is compressed and repeated."""
    header = _npy_header(shape)
    blocks = (int(np.prod(shape)) * 4) // MIB
    zeros = bytes(MIB)
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    parts = [compressor.compress(header) + compressor.flush(zlib.Z_FULL_FLUSH)]
    block = compressor.compress(zeros) + compressor.flush(zlib.Z_FULL_FLUSH)
    assert compressor.compress(zeros) + compressor.flush(zlib.Z_FULL_FLUSH) == block
    parts += [block] * blocks + [compressor.flush()]
    crc = zlib.crc32(header)
    for _ in range(blocks):
        crc = zlib.crc32(zeros, crc)
    return b"".join(parts), crc, len(header) + blocks * MIB


def _npz_with_zeros(tmp_path, params, name, shape=HUGE_SHAPE):
    data, crc, size = _zeros_member_data(shape)
    path = str(tmp_path / "bomb.npz")
    _write_zip(path, _array_members(params) + [(f"{name}.npy", data, crc, size, zipfile.ZIP_DEFLATED)])
    return path


def _peak_bytes(function):
    tracemalloc.start()
    try:
        function()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_the_crafted_member_really_holds_two_gib_of_zeros(tmp_path):
    """The test file is what it claims: a small archive whose member inflates to 2 GiB."""
    path = _npz_with_zeros(tmp_path, {}, "zeros")
    assert os.path.getsize(path) < 4 * MIB
    with zipfile.ZipFile(path) as archive:
        assert archive.getinfo("zeros.npy").file_size == HUGE_BYTES + len(_npy_header(HUGE_SHAPE))
        with archive.open("zeros.npy") as stream:
            assert np.lib.format.read_magic(stream) == (1, 0)
            assert np.lib.format.read_array_header_1_0(stream)[0] == HUGE_SHAPE
            assert stream.read(MIB) == bytes(MIB)


@pytest.mark.parametrize("name, match", [
    ("extra/zeros", r"unexpected in the file \(1\): extra/zeros"),
    ("Transformer/encoder_norm/bias",
     r"mis-shaped \(1\): Transformer/encoder_norm/bias file \(536870912,\) vs model \(32,\)"),
])
def test_a_huge_unused_or_misshaped_member_is_refused_without_decompressing_it(tmp_path, tiny, name, match):
    params = random_official_params(np.random.default_rng(2))
    params.pop(name, None)
    path = _npz_with_zeros(tmp_path, params, name)
    model = keras_vit.ViT(**tiny)
    before = _weights(model)

    def load():
        with pytest.raises(ValueError, match=match):
            loading.load_weights(model, path)

    assert _peak_bytes(load) < 200 * MIB
    _assert_unchanged(model, before)


def test_a_huge_skipped_member_is_never_decompressed(tmp_path, tiny):
    """Optimizer state beside `opt/target/` is skipped: the load succeeds without reading its 2 GiB."""
    params = random_official_params(np.random.default_rng(3))
    path = _npz_with_zeros(tmp_path, {f"opt/target/{k}": v for k, v in params.items()}, "opt/state/momentum")
    model = keras_vit.ViT(**tiny)
    assert _peak_bytes(lambda: loading.load_weights(model, path)) < 200 * MIB
    np.testing.assert_array_equal(np.array(model_parts.encoder_norm(model).beta),
                                  params["Transformer/encoder_norm/bias"])


def test_a_member_whose_header_disagrees_with_its_size_is_refused(tmp_path):
    params = random_official_params(np.random.default_rng(4))
    members = _array_members({k: v for k, v in params.items() if k != "cls"})
    members.append(_stored("cls.npy", _npy_header((1, 1, 32)) + bytes(64)))  # 128 bytes claimed, 64 stored
    path = str(tmp_path / "lying.npz")
    _write_zip(path, members)
    with pytest.raises(ValueError, match=r"lying.npz.*corrupt.*'cls.npy' claims shape \(1, 1, 32\) of float32 "
                                         r"\(128 bytes\) but the zip says it holds 64 bytes"):
        keras_vit.ViT(weights=path)


def test_a_member_with_an_unreasonable_shape_is_refused(tmp_path):
    params = random_official_params(np.random.default_rng(5))
    members = _array_members(params) + [_stored("extra.npy", _npy_header((1 << 20, 1 << 20)) + bytes(16))]
    path = str(tmp_path / "absurd.npz")
    _write_zip(path, members)
    with pytest.raises(ValueError, match=r"absurd.npz.*'extra.npy' claims an unreasonable shape \(1048576, 1048576\)"):
        keras_vit.ViT(weights=path)


def test_pickled_object_arrays_are_still_refused(tmp_path):
    path = str(tmp_path / "objects.npz")
    np.savez(path, cls=np.array([{"a": 1}], dtype=object))
    with pytest.raises(ValueError, match=r"objects.npz.*'cls.npy' holds pickled Python objects"):
        keras_vit.ViT(weights=path)
