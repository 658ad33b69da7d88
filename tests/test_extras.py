"""keras_vit.extras: every optional package a tool imports lazily names the extra that installs it, one
`error: ...` line from the tools; each case makes the import fail (`sys.modules[name] = None`)."""

import configparser
import importlib
import os
import re
import sys

import pytest

import keras_vit
from keras_vit import extras

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MESSAGE = re.compile(r'^(.+) needs the (\S+) package, which is not installed: '
                     r'pip install "keras-vit-applications\[(\S+)\]"$')


def _extras():
    """setup.cfg's extras: name -> the lower-cased package names it installs."""
    config = configparser.ConfigParser()
    config.read(os.path.join(ROOT, "setup.cfg"))
    return {name: {re.split(r"[<>=!~ ;\[]", line.strip())[0].lower() for line in text.splitlines()
                   if line.strip() and not line.strip().startswith("#")}
            for name, text in config["options.extras_require"].items()}


def _check_message(text, purpose, package, extra):
    """`text` is the one-line message naming `extra`, which setup.cfg declares with `package` (and `test` too)."""
    match = MESSAGE.match(text)
    assert match, text
    assert match.groups() == (purpose, package, extra), text
    declared = _extras()
    assert package.lower() in declared[extra] and package.lower() in declared["test"], (extra, declared)


def _block(monkeypatch, *modules):
    """Makes `import name` fail for each of `modules` (restored after the test)."""
    for name in modules:
        monkeypatch.setitem(sys.modules, name, None)


def _forget(monkeypatch, *modules):
    """Removes already imported modules, so that the next import runs their top level again; restored after.
    Also from their parent package: `from package import name` takes the attribute without importing again."""
    for name in modules:
        monkeypatch.delitem(sys.modules, name, raising=False)
        parent, _, child = name.rpartition(".")
        if parent in sys.modules:
            monkeypatch.delattr(sys.modules[parent], child, raising=False)


def test_require_returns_the_module_and_names_the_extra_when_it_is_missing(monkeypatch):
    assert extras.require("json", "none", "a test") is importlib.import_module("json")
    _block(monkeypatch, "PIL", "PIL.Image")
    with pytest.raises(extras.MissingExtra) as info:
        extras.require("PIL.Image", "image", "reading --image")
    assert isinstance(info.value, ModuleNotFoundError) and info.value.name == "PIL"  # callers catching ImportError
    _check_message(str(info.value), "reading --image", "Pillow", "image")


def test_a_module_missing_inside_an_installed_package_is_raised_as_it_is(tmp_path, monkeypatch):
    (tmp_path / "half_installed").mkdir()
    (tmp_path / "half_installed" / "__init__.py").write_text("import no_such_dependency_of_it\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError) as info:
        extras.require("half_installed", "x", "a test")
    assert not isinstance(info.value, extras.MissingExtra) and info.value.name == "no_such_dependency_of_it"


def test_inspect_plots_need_matplotlib(monkeypatch):
    _block(monkeypatch, "matplotlib", "matplotlib.pyplot")
    _forget(monkeypatch, "keras_vit.inspect.plots", "keras_vit.inspect.report")
    with pytest.raises(extras.MissingExtra) as info:
        importlib.import_module("keras_vit.inspect.report")
    _check_message(str(info.value), "drawing the figures of keras_vit.inspect", "matplotlib", "inspect")


def test_inspect_images_need_pillow(monkeypatch, tmp_path):
    from keras_vit.inspect.__main__ import load_images

    _block(monkeypatch, "PIL", "PIL.Image")
    with pytest.raises(extras.MissingExtra) as info:
        load_images([str(tmp_path / "a.png")], (8, 8))
    _check_message(str(info.value), "reading the images of keras_vit.inspect", "Pillow", "inspect")


def test_experiment_figures_need_matplotlib_before_any_run(monkeypatch):
    _block(monkeypatch, "matplotlib", "matplotlib.pyplot")
    _forget(monkeypatch, "training.experiments.report")
    with pytest.raises(extras.MissingExtra) as info:
        importlib.import_module("training.experiments.report")  # run_studies imports it before training
    _check_message(str(info.value), "drawing the figures of training.experiments", "matplotlib", "inspect")


def test_keras_cv_augmentation_names_its_extra(monkeypatch):
    from training import augment

    _block(monkeypatch, "keras_cv")
    with pytest.raises(augment.MissingLibraryError) as info:
        augment.layers_of("keras_cv")
    _check_message(str(info.value), "--augment_library=keras_cv", "keras-cv", "keras-cv")
    assert augment.layers_of("keras") is importlib.import_module("keras").layers


# --- through the tools: one `error:` line, exit status 1 -------------------------------------------------


@pytest.fixture
def keras_file(tiny, tmp_path):
    path = str(tmp_path / "tiny.keras")
    keras_vit.ViT(**tiny).save(path)
    return path


def _one_error_line(capsys):
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    return captured.out, lines[0][len("error: "):]


def test_smoke_test_image_without_pillow_stops_before_building_the_model(tmp_path, monkeypatch, capsys):
    from keras_vit.cli import model as cli_model
    from keras_vit.__main__ import main

    image = tmp_path / "a.png"
    image.write_bytes(b"\x89PNG\r\n\x1a\n")
    _block(monkeypatch, "PIL", "PIL.Image")
    built = []
    monkeypatch.setattr(cli_model, "model_from_flag_values", lambda *args, **kwargs: built.append(args))
    assert main(["--model=vit_b16", f"--image={image}"]) == 1
    out, message = _one_error_line(capsys)
    _check_message(message, "reading --image", "Pillow", "image")
    assert out == "" and built == []  # no "building ...", no summary: nothing was built


def test_onnx_export_without_tf2onnx_stops_before_building_the_model(keras_file, tmp_path, monkeypatch, capsys):
    from keras_vit.export.__main__ import main

    _block(monkeypatch, "tf2onnx")
    assert main(["--model", keras_file, "--out", str(tmp_path / "m"), "--format=onnx"]) == 1
    out, message = _one_error_line(capsys)
    _check_message(message, "the ONNX export", "tf2onnx", "onnx")
    assert "loading" not in out and not (tmp_path / "m").exists()


def test_inspect_without_matplotlib(keras_file, tmp_path, monkeypatch, capsys):
    from keras_vit.inspect.__main__ import main

    image = tmp_path / "a.png"
    image.write_bytes(b"\x89PNG\r\n\x1a\n")
    _block(monkeypatch, "matplotlib", "matplotlib.pyplot")
    _forget(monkeypatch, "keras_vit.inspect.plots", "keras_vit.inspect.report")
    assert main(["--model", keras_file, "--out", str(tmp_path / "report"), f"--images={image}"]) == 1
    _, message = _one_error_line(capsys)
    _check_message(message, "drawing the figures of keras_vit.inspect", "matplotlib", "inspect")


def _requirements(text):
    return [re.split(r"[<>=!~ ;\[]", line.strip())[0].lower().replace("-", "_")
            for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def test_setup_cfg_declares_what_the_download_path_imports():
    config = configparser.ConfigParser()
    config.read(os.path.join(ROOT, "setup.cfg"))
    extras = config["options.extras_require"]
    for extra in ("train", "test"):  # the training app's extra, and the tests that run the app
        assert {"tensorflow_datasets", "importlib_resources"} <= set(_requirements(extras[extra])), extra
    # the model library itself needs neither (the app is not part of the package)
    assert _requirements(config["options"]["install_requires"]) == ["keras", "numpy", "absl_py"]
    # and installs the library only: the app runs from a checkout (docs/PACKAGING.md)
    assert _requirements(config["options.packages.find"]["include"]) == ["keras_vit", "keras_vit.*"]
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        assert re.search(r"^\| importlib_resources \(extra `train`, also in `test`\) \|", f.read(), re.M)
