"""The package's name of its own (PyPI's `keras-vit` is an unrelated project that installs a module `keras_vit`
too), the clash detected at import, the public surface and the registry (`list_models`, `list_weights`)."""

import configparser
import os
import subprocess
import sys

import pytest

import keras_vit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(keras_vit.__file__)))


def _import_in_fresh_process(extra_path=None):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (extra_path, ROOT) if p))
    return subprocess.run([sys.executable, "-c", "import keras_vit"], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=60)


def test_the_distribution_name_is_not_the_unrelated_pypi_package():
    config = configparser.ConfigParser()
    config.read(os.path.join(ROOT, "setup.cfg"))
    assert config["metadata"]["name"] == keras_vit.DISTRIBUTION == "keras-vit-applications"


def test_the_unrelated_keras_vit_distribution_is_named_in_one_line(tmp_path):
    info = tmp_path / "keras_vit-1.0.1.dist-info"  # what `pip install keras-vit` leaves in site-packages
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: keras-vit\nVersion: 1.0.1\n")
    result = _import_in_fresh_process(str(tmp_path))
    assert result.returncode == 0, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "keras-vit 1.0.1" in lines[0] and "pip uninstall keras-vit" in lines[0]
    assert "keras-vit-applications" in lines[0]


def test_import_alone_says_nothing_without_the_other_distribution():
    result = _import_in_fresh_process()
    assert result.returncode == 0 and result.stderr == "", result.stderr


def test_dir_lists_the_documented_names_only():
    names = dir(keras_vit)
    assert not {"importlib", "sys", "logging"} & set(names)
    assert set(keras_vit.__all__) <= set(names)
    assert {"ViT_B16", "list_models", "list_weights", "loading", "layers"} <= set(names)
    assert not [name for name in names if name.startswith("_") and name != "__version__"]


SURFACE = """
import importlib, sys
import keras_vit
assert "keras" not in sys.modules
for name in ("model_parts", "applications", "checkpoints", "vit", "registry", "cli", "no_such_module"):
    try:
        getattr(keras_vit, name)
    except AttributeError:
        continue
    raise AssertionError(f"keras_vit.{name} is reachable without an import: it is not a documented module")
assert not hasattr(keras_vit, "model_parts")
for name, where in keras_vit.PUBLIC_MODULES.items():
    assert getattr(keras_vit, name) is importlib.import_module(where), (name, where)
    assert name in dir(keras_vit)
from keras_vit import loading, position_embedding  # a public module by its documented name, from an import too
assert loading.load_weights and position_embedding.resample_position_embedding
print("ok")
"""


@pytest.mark.e2e  # the default tier's time budget (10 minutes on 2 cores)
def test_only_the_documented_modules_are_attributes_of_a_fresh_keras_vit():
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, "-c", SURFACE], capture_output=True, text=True, env=env, cwd=ROOT,
                            timeout=300)
    assert result.returncode == 0 and result.stdout.endswith("ok\n"), result.stdout[-2000:] + result.stderr[-3000:]


def test_list_models_names_every_constructor():
    models = keras_vit.list_models()
    assert models[:3] == ["vit_ti16", "vit_s16", "vit_s32"] and "bit_r50x1" in models
    assert {"vit_b16", "vit_l32", "vit_h14", "vit_r_ti16", "vit_r26_s32"} <= set(models)
    assert len(models) == len([n for n in keras_vit.__all__ if n.startswith(("ViT_", "BiT_"))])
    assert keras_vit.list_models("*r50*") == ["vit_r50_b16", "vit_r50_l32", "bit_r50x1"]
    assert "bit_r50x1" not in keras_vit.list_models(pretrained=True)


def test_list_weights_gives_names_and_top1():
    weights = {entry.name: entry for entry in keras_vit.list_weights("ViT-B/16")}
    assert weights["imagenet21k+imagenet2012"].imagenet_top1 == 83.97  # paper Table 5
    assert weights["imagenet21k"].classes == 21843 and weights["imagenet21k"].imagenet_top1 is None
    assert len(keras_vit.list_weights()) > len(weights)
    with pytest.raises(ValueError, match="vit_nope"):
        keras_vit.list_weights("vit_nope")
