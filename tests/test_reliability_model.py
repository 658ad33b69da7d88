"""Reliability of the model library and its checkpoint loading: sizes and numerics refused up front, damaged
(NaN/Inf), oversized or truncated files refused with an error naming the file, and unwritable `convert`
destinations reported in one line."""

import functools
import io
import os
import re
import struct
import tracemalloc
import zipfile
import zlib

import numpy as np
import pytest
from numpy_reference import random_official_params

import keras_vit
from keras_vit import applications, convert, model_parts
from keras_vit.checkpoints import loading
from keras_vit.layers import TransformerBlock

MIB = 1 << 20


def _write_npz(tmp_path, params, name="ckpt.npz"):
    path = tmp_path / name
    np.savez(path, **params)
    return str(path)


def _weights(model):
    return [np.array(w) for w in model.weights]


def _assert_unchanged(model, before):
    for weight, value in zip(model.weights, before):
        np.testing.assert_array_equal(np.array(weight), value)


# ----------------------------------------------------------------------------------------------------------
# 1. Image sizes


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


# ----------------------------------------------------------------------------------------------------------
# 3. Numerics arguments


@pytest.mark.parametrize("value", [-1, 0, -1e-6, 0.0, "a", True, float("nan"), float("inf")])
def test_bad_layer_norm_epsilon_is_refused(tiny, value):
    with pytest.raises(ValueError, match=r"`layer_norm_epsilon` must be a positive number.*"
                                         rf"Received: layer_norm_epsilon={re.escape(repr(value))}$"):
        keras_vit.ViT(**tiny, layer_norm_epsilon=value)


@pytest.mark.parametrize("value", [1, 0, "yes", 1.0])
def test_gelu_approximate_must_be_a_bool(tiny, value):
    with pytest.raises(ValueError, match=rf"`gelu_approximate` must be a bool.*Received: gelu_approximate={value!r}"):
        keras_vit.ViT(**tiny, gelu_approximate=value)


def test_the_layer_refuses_bad_numerics_too():
    with pytest.raises(ValueError, match=r"Received: gelu_approximate=None"):
        TransformerBlock(num_heads=4, mlp_dim=64, gelu_approximate=None)
    with pytest.raises(ValueError, match=r"Received: layer_norm_epsilon=-1"):
        TransformerBlock(num_heads=4, mlp_dim=64, layer_norm_epsilon=-1)


def test_unknown_interpolation_is_refused_without_weights(tiny):
    with pytest.raises(ValueError, match=r"one of \('bilinear', 'bicubic'\).*Received: pos_embed_interpolation='area'"):
        keras_vit.ViT(**tiny, pos_embed_interpolation="area")


def test_numerics_are_checked_before_a_checkpoint_is_read():
    with pytest.raises(ValueError, match=r"Received: layer_norm_epsilon=-1"):
        keras_vit.ViT(weights="/nonexistent/ckpt.npz", layer_norm_epsilon=-1)
    with pytest.raises(ValueError, match=r"Received: gelu_approximate='yes'"):
        keras_vit.ViT(weights="/nonexistent/ckpt.npz", gelu_approximate="yes")


def test_valid_numerics_still_build(tiny):
    model = keras_vit.ViT(**tiny, layer_norm_epsilon=1e-12, gelu_approximate=False, pos_embed_interpolation="bicubic")
    assert model_parts.encoder_norm(model).epsilon == 1e-12
    assert model_parts.encoder_blocks(model)[0].gelu_approximate is False


# ----------------------------------------------------------------------------------------------------------
# 2. Non-finite weights

KERNEL = "Transformer/encoderblock_1/MlpBlock_3/Dense_0/kernel"  # (32, 64): 2048 values in the tiny model


def _damaged(kind):
    params = random_official_params(np.random.default_rng(0))
    if kind == "overflow":  # finite in float64, Inf once cast to the model's float32
        params[KERNEL] = params[KERNEL].astype(np.float64)
        params[KERNEL][3, 5] = 1e39
    else:
        params[KERNEL][3, 5] = np.nan if kind == "nan" else -np.inf
    return params


@pytest.mark.parametrize("kind", ["nan", "inf", "overflow"])
def test_a_npz_with_non_finite_values_is_refused(tmp_path, tiny, kind):
    path = _write_npz(tmp_path, _damaged(kind), "damaged.npz")
    pattern = rf"{path}.*damaged.*non-finite values \(1\): {KERNEL} \(1 of 2,048 values\).*download or export it again"
    with pytest.raises(ValueError, match=pattern):
        keras_vit.ViT(weights=path)
    model = keras_vit.ViT(**tiny)
    before = _weights(model)
    with pytest.raises(ValueError, match=pattern):
        loading.load_weights(model, path)
    _assert_unchanged(model, before)


def test_a_safetensors_file_with_nan_is_refused(tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    from foreign_checkpoints import random_timm_tensors

    tensors = random_timm_tensors(np.random.default_rng(1))
    tensors["norm.bias"][[2, 7]] = np.nan
    path = str(tmp_path / "model.safetensors")
    safetensors_numpy.save_file(tensors, path, metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"model.safetensors.*Transformer/encoder_norm/bias \(2 of 32 values\)"):
        keras_vit.ViT(weights=path, num_heads=4)


def test_a_weights_h5_with_nan_is_refused_and_the_model_kept(tmp_path, tiny):
    source = keras_vit.ViT(**tiny)
    gamma = model_parts.encoder_norm(source).gamma
    gamma.assign(np.where(np.arange(32) == 4, np.nan, np.array(gamma)).astype("float32"))
    path = str(tmp_path / "damaged.weights.h5")
    source.save_weights(path)
    model = keras_vit.ViT(**tiny)
    before = _weights(model)
    with pytest.raises(ValueError, match=r"damaged.weights.h5.*encoder_norm/gamma \(1 of 32 values\)"):
        loading.load_weights(model, path)
    _assert_unchanged(model, before)


def test_convert_refuses_a_damaged_checkpoint(tmp_path, capsys):
    source = _write_npz(tmp_path, _damaged("nan"), "damaged.npz")
    destination = tmp_path / "out.weights.h5"
    assert convert.main(["--weights", source, "--out", str(destination)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "damaged.npz" in err and KERNEL in err
    assert not destination.exists()


# ----------------------------------------------------------------------------------------------------------
# 4. Oversized .npz members: checked from the headers, decompressed only when loaded


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


# ----------------------------------------------------------------------------------------------------------
# 5. Truncated .keras files


@pytest.fixture
def keras_files(tmp_path, tiny):
    model = keras_vit.ViT(**tiny)
    whole = str(tmp_path / "model.keras")
    model.save(whole)
    data = open(whole, "rb").read()
    half = str(tmp_path / "half.keras")
    open(half, "wb").write(data[: len(data) // 2])
    return model, whole, half, len(data) // 2


def test_a_truncated_keras_file_is_reported_as_corrupt(keras_files, tiny):
    model, _, half, size = keras_files
    pattern = rf"{half}' \({size:,} bytes\) is corrupt: it is not a valid zip/.keras archive.*Save the model again"
    with pytest.raises(ValueError, match=pattern):
        applications.model_from_name(half)
    with pytest.raises(ValueError, match=pattern):
        keras_vit.ViT(**tiny, weights=half)
    with pytest.raises(ValueError, match=pattern):
        loading.load_weights(model, half)


def test_a_whole_keras_file_loads_as_weights(keras_files, tiny):
    model, whole, _, _ = keras_files
    loaded = keras_vit.ViT(**tiny, weights=whole)
    for got, expected in zip(_weights(loaded), _weights(model)):
        np.testing.assert_array_equal(got, expected)


# ----------------------------------------------------------------------------------------------------------
# 6. convert destinations


@pytest.fixture
def source(tmp_path):
    return _write_npz(tmp_path, random_official_params(np.random.default_rng(6)), "tiny.npz")


def _one_error_line(capsys, *needles):
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    for needle in needles:
        assert needle in err, err


def test_convert_into_a_missing_folder(tmp_path, source, capsys):
    destination = str(tmp_path / "missing" / "out.weights.h5")
    assert convert.main(["--weights", source, "--out", destination]) == 1
    _one_error_line(capsys, destination, "does not exist")


def test_convert_into_a_read_only_folder(tmp_path, source, capsys, monkeypatch):
    folder = tmp_path / "read_only"
    folder.mkdir()
    folder.chmod(0o555)
    if os.geteuid() == 0:  # root writes through permission bits: stand in for a read-only mount
        real_access = os.access
        monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) == str(folder) else real_access(p, mode))
    destination = str(folder / "out.weights.h5")
    try:
        assert convert.main(["--weights", source, "--out", destination]) == 1
    finally:
        folder.chmod(0o755)
    _one_error_line(capsys, destination, "not writable")


def test_convert_when_the_write_itself_fails(tmp_path, source, capsys):
    destination = tmp_path / "taken.weights.h5"
    destination.mkdir()  # a folder where the file should go: the folder checks pass, the write fails
    assert convert.main(["--weights", source, "--out", str(destination)]) == 1
    _one_error_line(capsys, str(destination), "Cannot write the destination")
