"""docs/TRAINING.md, "`model.fit` in your own code": the example runs as written, outside the checkout, and its
epochs end.

The block the docs mark (`MARKER`) is run as it is, but for its line `folder, epochs = "flowers", 10`, replaced by
this test's folder and 2 epochs, with `sys.executable` in a temporary folder where only the package `keras_vit`
is importable (a link to this checkout's, as an installed wheel holds it; `training` is not), on the TensorFlow
and the JAX backend.
"""

import os
import re
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "TRAINING.md")
MARKER = "<!-- tests/test_training_fit_example.py runs the next block"
SETTINGS = 'folder, epochs = "flowers", 10'


def documented_example() -> str:
    """The Python block right after `MARKER` in docs/TRAINING.md."""
    text = open(DOC, encoding="utf-8").read()
    assert text.count(MARKER) == 1, f"{DOC} must mark the model.fit example once with {MARKER!r}"
    after = text[text.index(MARKER):]
    match = re.match(r"<!--.*?-->\n```python\n(.*?)\n```", after, re.S)
    assert match, f"the marker in {DOC} must come right before a ```python block"
    return match.group(1) + "\n"


def write_image_folder(root, per_class=6, size=32):
    """Two classes of noisy flat-coloured PNGs (generated: nothing is read from the checkout)."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for name, colour in (("red", (220, 30, 30)), ("blue", (30, 30, 220))):
        os.makedirs(root / name)
        for i in range(per_class):
            noise = rng.integers(-30, 31, (size, size, 3))
            Image.fromarray(np.clip(np.array(colour) + noise, 0, 255).astype(np.uint8)).save(root / name / f"{i}.png")


@pytest.mark.e2e
@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_the_documented_model_fit_example_runs_outside_the_checkout_and_its_epochs_end(tmp_path, backend):
    code = documented_example()
    assert code.count(SETTINGS) == 1, f"the example must set {SETTINGS!r} on one line (this test replaces it)"
    work = tmp_path / "work"
    write_image_folder(work / "images")
    (work / "example.py").write_text(code.replace(SETTINGS, 'folder, epochs = "images", 2'))
    site = tmp_path / "site"  # the installed package only: keras_vit, not training
    site.mkdir()
    os.symlink(os.path.join(ROOT, "keras_vit"), site / "keras_vit")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KERAS_BACKEND")}
    env.update(PYTHONPATH=str(site), KERAS_BACKEND=backend, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3")
    where = subprocess.run([sys.executable, "-c", "import keras_vit; print(keras_vit.__file__)\n"
                            "import importlib.util; print(importlib.util.find_spec('training'))"],
                           cwd=work, env=env, capture_output=True, text=True, timeout=60)
    assert where.stdout.splitlines() == [str(site / "keras_vit" / "__init__.py"), "None"], where.stderr

    result = subprocess.run([sys.executable, "example.py"], cwd=work, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"^val_accuracy after 2 epochs: [01]\.\d{3}$", result.stdout, re.M), result.stdout[-2000:]
    assert "Found 12 files belonging to 2 classes" in result.stdout  # 6 of each
    assert (work / "vit.keras").is_file()
