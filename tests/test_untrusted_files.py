"""One's own files are untrusted input: what a `.keras` or `.weights.h5` declares is checked before anything is
read whole, allocated or built (each case generated here at a small size; the full-size ones, with their time and
memory, are benchmarks/file_bombs.py's)."""

import json
import os
import shutil
import zipfile

import h5py
import numpy as np
import pytest

import keras_vit
from keras_vit import applications, model_config
from keras_vit.checkpoints import keras_names, untrusted

TINY = dict(image_size=16, patch_size=8, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32, classes=3)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("untrusted")
    model = keras_vit.ViT(**TINY)
    model.save_weights(str(folder / "good.weights.h5"))
    model.save(str(folder / "good.keras"))
    return folder


def weights_copy(files, tmp_path, edit) -> str:
    path = str(tmp_path / "crafted.weights.h5")
    shutil.copy(files / "good.weights.h5", path)
    with h5py.File(path, "a") as file:
        edit(file)
    return path


def set_config(file, **changes):
    config = json.loads(file.attrs[model_config.MODEL_ATTRIBUTE])
    config["config"].update(changes)
    file.attrs[model_config.MODEL_ATTRIBUTE] = json.dumps(config)


def replace(file, name, data=None, shape=None, dtype="float32"):
    del file[name]
    if data is None:
        file.create_dataset(name, shape=shape, dtype=dtype)  # declared, nothing written
    else:
        file[name] = data


def refused_fast(weights, match):
    """Refused with `match` (what the refusal costs, full size: benchmarks/file_bombs.py)."""
    with pytest.raises(ValueError, match=match):
        keras_vit.ViT(weights=weights)


def test_a_declared_shape_without_data_is_refused_before_it_is_read(files, tmp_path):
    path = weights_copy(files, tmp_path, lambda f: replace(f, "layers/patch_encoder/vars/1", shape=(1, 2**24, 48)))
    refused_fast(path, r"declares layers/patch_encoder/vars/1 with shape \(1, 16777216, 48\) but holds no data")


def test_a_shape_other_than_the_models_is_refused_before_it_is_read(files, tmp_path):
    path = weights_copy(files, tmp_path, lambda f: replace(f, "layers/patch_encoder/vars/1", np.zeros((1, 9, 16))))
    refused_fast(path, r"shapes in the file only: \[\(1, 9, 16\)\]")


@pytest.mark.parametrize("changes, match", [
    (dict(num_layers=10**6), "num_layers=1000000, beyond keras_vit's limit of 256"),
    (dict(hybrid=dict(block_units=[100000], width=64)), r"block_units=\(100000,\)"),
    (dict(hidden_size=16384, mlp_dim=131072, num_layers=256), "KERAS_VIT_MAX_PARAMETERS="),
    (dict(input_shape=[2**20, 16, 3]), "declares height=1048576"),
    (dict(num_heads="12"), "num_heads='12'"),
])
def test_a_crafted_config_is_refused_before_it_is_built(files, tmp_path, changes, match):
    refused_fast(weights_copy(files, tmp_path, lambda f: set_config(f, **changes)), match)


def test_the_parameter_bound_is_the_users_to_raise(files, monkeypatch):
    monkeypatch.setenv(untrusted.MAX_PARAMETERS_VARIABLE, "1000")
    with pytest.raises(ValueError, match=r"more than keras_vit's bound of 1,000; .*KERAS_VIT_MAX_PARAMETERS=\d+"):
        keras_vit.ViT(weights=str(files / "good.keras"))
    monkeypatch.setenv(untrusted.MAX_PARAMETERS_VARIABLE, "100000")
    assert keras_vit.ViT(weights=str(files / "good.keras")).output_shape == (None, 3)
    monkeypatch.setenv(untrusted.MAX_PARAMETERS_VARIABLE, "lots")
    with pytest.raises(ValueError, match="KERAS_VIT_MAX_PARAMETERS must be a positive integer. Received: 'lots'"):
        keras_vit.ViT(weights=str(files / "good.keras"))


@pytest.mark.parametrize("data", [np.full((1, 1, 16), 2**62, "int64"), np.ones((1, 1, 16), bool)])
def test_integer_and_bool_tensors_are_refused_not_cast(files, tmp_path, data):
    path = weights_copy(files, tmp_path, lambda f: replace(f, "layers/patch_encoder/vars/0", data))
    refused_fast(path, f"holds layers/patch_encoder/vars/0 as {data.dtype}")


def test_an_integer_tensor_in_an_npz_is_refused(tmp_path):
    model = keras_vit.ViT(**TINY)
    path = str(tmp_path / "m.npz")
    arrays = {key: v.numpy() for key, v in keras_names.targets(model).items()}  # the official layout
    arrays["embedding/kernel"] = arrays["embedding/kernel"].reshape(8, 8, 3, 16)
    np.savez(path, **arrays)
    data = dict(np.load(path))
    data["cls"] = np.full(data["cls"].shape, 2**62, "int64")
    np.savez(path, **data)
    with pytest.raises(ValueError, match="cls holds int64 values, not floats"):
        keras_vit.ViT(weights=path)


def test_a_zip_bomb_member_is_refused_by_its_declared_size(files, tmp_path, monkeypatch):
    monkeypatch.setattr(untrusted, "MAX_JSON_BYTES", 4096)
    path = str(tmp_path / "bomb.keras")
    with zipfile.ZipFile(files / "good.keras") as source, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as bomb:
        for name in source.namelist():
            data = source.read(name)
            if name == "config.json":
                data = data[:-1] + b', "pad": "' + b" " * 2**20 + b'"}'  # 1 MB of spaces: 1 KB deflated
            bomb.writestr(name, data)
    refused_fast(path, r"declares its member config.json at 1,04\d,\d{3} bytes \(limit 4,096\)")
    with pytest.raises(ValueError, match="config.json"):
        applications.model_from_name(path)  # the CLIs' --model=FILE.keras


def test_a_config_that_is_not_json_names_the_file(files, tmp_path):
    path = weights_copy(files, tmp_path, lambda f: f.attrs.__setitem__(model_config.MODEL_ATTRIBUTE, "{oops"))
    refused_fast(path, r"crafted.weights.h5' has a config that is not JSON")


@pytest.mark.parametrize("kind", ["fifo", "folder", "dangling link"])
def test_a_run_whose_model_is_not_a_regular_file_is_named(tmp_path, kind):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")
    model = run / "model.keras"
    {"fifo": lambda: os.mkfifo(model), "folder": model.mkdir,
     "dangling link": lambda: os.symlink(tmp_path / "gone.keras", model)}[kind]()
    expected = {"fifo": "is a FIFO, not a regular file", "folder": "is a folder, not a regular file",
                "dangling link": "is a link to nothing"}[kind]
    with pytest.raises(ValueError, match=expected):
        keras_vit.ViT(weights=str(run))


@pytest.mark.parametrize("name", ["renamed.weights.h5", "folder.keras"])
def test_a_keras_named_path_is_opened_as_keras_whatever_it_holds(tmp_path, name):
    """A file is one's own by its name, as Keras saves it: a zip renamed `.weights.h5` is a corrupt weights file, not
    an `.npz` read in its place, and a folder named `.keras` is a folder, not a Hugging Face model."""
    path = tmp_path / name
    if name.endswith(".keras"):
        path.mkdir()
    else:
        np.savez(path, cls=np.zeros((1, 1, 8), "float32"))
        os.replace(str(path) + ".npz", path)
    expected = "is a folder, not a regular file" if name.endswith(".keras") else "truncated or corrupt"
    with pytest.raises(ValueError, match=expected):
        keras_vit.ViT(weights=str(path))


def test_a_fine_tune_source_replaced_by_a_fifo_is_gone_not_read(tmp_path):
    """A resume asks whether its source changed: a FIFO in its place is never opened (that would wait forever)."""
    from training import weights_source

    fifo = tmp_path / "source.keras"
    os.mkfifo(fifo)
    assert weights_source._source_file(str(fifo)) is None


def test_a_device_given_as_a_checkpoint_is_named():
    with pytest.raises(ValueError, match="'/dev/null' is a device, not a regular file"):
        keras_vit.ViT(weights="/dev/null")


def test_a_run_being_trained_is_refused_naming_its_holder(tmp_path):
    import fcntl

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")
    keras_vit.ViT(**TINY).save(str(run / "model.keras"))
    lock = run / ".lock"
    lock.write_text("pid 4242 on host-a: python -m training.train --workdir=run")
    with open(lock) as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # what a running training app holds (another open file: flock is per file)
        with pytest.raises(ValueError, match=r"is being trained now \(pid 4242 on host-a.*holds its .lock\)"):
            keras_vit.ViT(weights=str(run))
    assert keras_vit.ViT(weights=str(run)).output_shape == (None, 3)  # released: the finished model loads


def test_every_published_variant_is_within_the_bound_and_the_estimate_is_an_upper_bound():
    from keras_vit import variants

    for variant in variants.VARIANTS.values():
        arguments = dict(variants.with_defaults(variant.architecture()), input_shape=(384, 384, 3), classes=21843)
        assert untrusted.estimated_parameters(arguments) < untrusted.DEFAULT_MAX_PARAMETERS, variant.name
    # R50+ViT-L/32 at 224 with 1000 classes has 328,994,856 weights (docs/MODEL.md's table)
    r50_l32 = dict(variants.with_defaults(variants.VARIANTS["R50_L32"].architecture()), input_shape=(224, 224, 3))
    assert 328_994_856 <= untrusted.estimated_parameters(r50_l32) < 2 * 328_994_856


def test_a_foreign_model_config_is_checked_too(tmp_path):
    import keras

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    path = str(tmp_path / "foreign.keras")
    model.save(path)
    crafted = str(tmp_path / "crafted.keras")
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(crafted, "w") as target:
        for name in source.namelist():
            data = source.read(name)
            if name == "config.json":
                data = data.replace(b'"units": 3', b'"units": 1000000000000')
                assert b"1000000000000" in data
            target.writestr(name, data)
    with pytest.raises(ValueError, match="declares a layer with units=1000000000000"):
        applications.model_from_name(crafted)  # the CLIs' --model=FILE.keras
    assert applications.model_from_name(path).output_shape == (None, 3)
