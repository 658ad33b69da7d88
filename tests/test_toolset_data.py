"""New-user review: the `--download` dependencies, folder-dataset layout errors, and the weights table.

Nothing here touches the network: the download test runs in a subprocess whose socket functions raise.
"""

import configparser
import os
import re
import subprocess
import sys
import textwrap

import pytest

from keras_vit import weights
from tools import weights_table
from training import sources

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# --- 1. `--download`: tensorflow-datasets' download path imports everything it needs ---------------------

_OFFLINE_DOWNLOAD = textwrap.dedent("""
    import socket, sys

    def unreachable(*args, **kwargs):
        raise OSError(101, "Network is unreachable (blocked by the test)")

    socket.getaddrinfo = unreachable
    socket.create_connection = unreachable
    socket.socket.connect = lambda self, *args, **kwargs: unreachable()
    socket.socket.connect_ex = lambda self, *args, **kwargs: unreachable()
    import time
    time.sleep = lambda seconds: None  # the HTTP retries' back-off (minutes in all) against a blocked network

    from training import sources

    try:
        sources.dataset_source("cifar10", "train", data_dir=sys.argv[1], download=True)
    except BaseException as error:
        chain, e = [], error
        while e is not None:
            chain.append(e)
            e = e.__cause__ or e.__context__
        for e in chain:
            print("CHAIN", type(e).__module__ + "." + type(e).__name__,
                  "import" if isinstance(e, ImportError) else ("os" if isinstance(e, OSError) else "other"))
        print("TOP", type(error).__name__)
        print("MESSAGE", str(error).replace("\\n", " "))
    else:
        print("TOP none")
""")


@pytest.mark.e2e
def test_download_path_fails_on_the_network_not_on_a_missing_module(tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", _OFFLINE_DOWNLOAD, str(tmp_path / "tfds")],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "NO_PROXY": "*"},
    )
    out = result.stdout
    chain = re.findall(r"^CHAIN (\S+) (\S+)$", out, re.M)
    assert chain, result.stdout + result.stderr[-3000:]
    assert not [name for name, kind in chain if kind == "import"], out  # e.g. importlib_resources
    assert any(kind == "os" for _, kind in chain), out  # the blocked socket: a network error
    assert "TOP DatasetNotFoundError" in out, out  # wrapped: `python -m training.train` prints one line
    message = re.search(r"^MESSAGE (.*)$", out, re.M).group(1)
    assert "Could not download dataset 'cifar10'" in message and "network error" in message
    assert "Network is unreachable" in message and "--data_dir" in message


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


# --- 2. folder datasets: what was expected and what was found --------------------------------------------


def _touch_images(folder, count=1):
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        (folder / f"{i}.png").write_bytes(b"\x89PNG\r\n\x1a\n")


def test_missing_folder_says_the_path_does_not_exist(tmp_path):
    name = f"folder:{tmp_path / 'nowhere'}"
    for call in (lambda: sources.default_splits(name), lambda: sources.dataset_source(name, "train")):
        with pytest.raises(sources.DatasetNotFoundError, match="does not exist") as info:
            call()
        assert "No evaluation split" not in str(info.value)


def test_flat_layout_says_what_was_expected_and_what_was_found(tmp_path):
    for label in ("a", "b", "c"):
        _touch_images(tmp_path / label, 2)
    name = f"folder:{tmp_path}"
    for call in (lambda: sources.default_splits(name), lambda: sources.dataset_source(name, "test")):
        with pytest.raises(sources.InvalidDatasetError) as info:
            call()
        message = str(info.value)
        assert f"{tmp_path}/train/<label>/<image>" in message
        assert f"{tmp_path}/test|val|validation/<label>/<image>" in message
        assert "3 folder(s) holding images directly: a, b, c" in message
        assert f"Move them under {tmp_path / 'train'}/" in message and "test split" in message
        assert "No evaluation split" not in message


def test_train_without_eval_split_lists_what_is_beside_train(tmp_path):
    _touch_images(tmp_path / "train" / "cat")
    _touch_images(tmp_path / "holdout" / "cat")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(sources.DatasetNotFoundError, match="No evaluation split") as info:
        sources.default_splits(f"folder:{tmp_path}")
    assert "test|val|validation" in str(info.value) and "holdout, notes.txt" in str(info.value)


# One process each, in the end-to-end tier (the unit tests above check the messages without a process).
@pytest.mark.e2e
@pytest.mark.parametrize("layout", ["missing", "flat", "no_eval"])
def test_training_app_prints_one_error_line_for_a_bad_folder(tmp_path, layout):
    root = tmp_path / "images"
    if layout == "flat":
        for label in ("a", "b"):
            _touch_images(root / label)
    elif layout == "no_eval":
        _touch_images(root / "train" / "a")
    result = subprocess.run(
        [sys.executable, "-m", "training.train", f"--dataset=folder:{root}", f"--workdir={tmp_path / 'run'}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    expected = {"missing": "does not exist", "flat": "holding images directly", "no_eval": "No evaluation split"}
    assert expected[layout] in lines[0]


# --- 3. the weights table ------------------------------------------------------------------------------

B8_MEDIUM2 = ("augreg/B_8-i21k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.0-sd_0.0"
              "--imagenet2012-steps_20k-lr_0.03-res_224.npz")
B8_MEDIUM1 = ("augreg/B_8-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0"
              "--imagenet2012-steps_20k-lr_0.01-res_224.npz")
# (variant, name) -> (path, image size, classes, top-1) of the entries this review changed or added.
REVIEWED = {
    ("R50_B16", "imagenet21k+imagenet2012"): ("imagenet21k+imagenet2012/R50+ViT-B_16.npz", 384, 1000, 85.08),
    ("B8", "augreg_in21k_ft_in1k"): (B8_MEDIUM2, 224, 1000, 85.58),
    ("B8", "augreg_in21k_ft_in1k_224"): (B8_MEDIUM1, 224, 1000, None),
}


def test_r50_fine_tune_top1_is_85_08():
    entry = weights.get_entry("R50_B16", "imagenet21k+imagenet2012")
    assert entry.imagenet_top1 == 85.08
    assert "issue 39" in entry.top1_source


def test_b8_fine_tune_is_the_colab_medium2_file():
    entry = weights.get_entry("B8", "augreg_in21k_ft_in1k")
    assert entry.path == B8_MEDIUM2 and entry.imagenet_top1 == 85.58
    assert weights.get_entry("B8", "imagenet").path == B8_MEDIUM2
    assert "no recommended fine-tune" not in weights.__doc__
    # the recommended pre-training run and its fine-tune are the same run
    assert entry.path.split("--")[0] + ".npz" == weights.get_entry("B8", "augreg_in21k").path


@pytest.mark.parametrize("key", sorted(REVIEWED))
def test_reviewed_entries_resolve_by_name(key):
    path, size, classes, top1 = REVIEWED[key]
    entry = weights.get_entry(*key)
    assert entry.url == weights.BASE_URL + path
    assert (entry.image_size, entry.classes, entry.imagenet_top1) == (size, classes, top1)
    assert key[1] in weights.names_for(key[0])


def test_docs_weights_table_is_the_one_generated_from_the_code():
    """docs/WEIGHTS.md's table is `keras_vit.weights_table.markdown_table()` (tests/test_weights.py checks its rows),
    and the README links to it."""
    with open(os.path.join(ROOT, weights_table.TABLE_FILE), encoding="utf-8") as f:
        text = f.read()
    start, end = weights_table.table_region(text)
    assert text[start:end] == weights_table.markdown_table(), "run `python tools/weights_table.py --write`"
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    assert "(docs/WEIGHTS.md)" in readme and weights_table.TABLE_BEGIN not in readme
    for key, (path, size, classes, top1) in REVIEWED.items():
        assert f"| {key[0]} | `{key[1]}`" in text and f"| `{path}` | {size} | {classes} |" in text
