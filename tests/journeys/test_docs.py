"""Every Python code block of README.md and docs/*.md runs as written, read from the pages at test time (not
copied here): each page's blocks in order in one fresh process, as a reader pastes them into one session.

What a page assumes and does not make (a dataset, a folder of images, a model file of the reader's own) is made
here before its blocks run, in a scratch folder that is the blocks' working directory; the published names they
load (`"imagenet"`, `"imagenet21k"`) are files of the official layout, of random values, placed in the Keras cache
where `keras_vit` looks before downloading (no network). Blocks that cannot run on 2 CPU cores are listed in
`NOT_RUN` with the reason, and a test checks that each still exists.
"""

import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from numpy_reference import random_official_params

pytestmark = pytest.mark.journeys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PAGES = ["README.md"] + sorted(os.path.join("docs", name) for name in os.listdir(os.path.join(ROOT, "docs"))
                               if name.endswith(".md"))

NOT_RUN = {
    ("docs/EXPERIMENTS.md", "app.run_studies(setup"): "trains every study of the default setup (tens of minutes); "
    "the e2e tier runs the studies on a small setup (tests/test_experiments.py)",
    ("docs/TRAINING.md", 'os.environ["KERAS_BACKEND"] = "jax"'): "model-parallel ViT-B/16 on a device mesh of "
    "accelerators; tests/test_distribution_layout.py checks its layouts on emulated devices",
}
"""(page, a line of the block) -> why that block does not run here."""

SETUP = {
    "README.md": "train_ds = val_ds = _dataset(384, 10)",
    "docs/LOADING.md": "_own_models()",
    "docs/TRAINING.md": "_image_folder('flowers', 64)",
}
"""What a page assumes exists before its blocks run (the helpers are `PRELUDE`'s)."""

PRELUDE = textwrap.dedent('''
    import os, numpy as np

    def _dataset(size, classes, count=2):
        import tensorflow as tf
        images = np.random.default_rng(0).uniform(-1, 1, (count, size, size, 3)).astype("float32")
        return tf.data.Dataset.from_tensor_slices((images, np.arange(count) % classes)).batch(count)

    def _image_folder(folder, size, classes=2, per_class=5):
        from PIL import Image
        rng = np.random.default_rng(0)
        for label in range(classes):
            os.makedirs(os.path.join(folder, f"class_{label}"), exist_ok=True)
            for index in range(per_class):
                pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(os.path.join(folder, f"class_{label}", f"{index}.png"))

    def _own_models():
        """The reader's own files the page loads: a training run at 28x28 with 10 classes, its weights and model,
        a BiT run, and a saved `vit.keras`."""
        import json, keras_vit
        tiny = dict(image_size=28, patch_size=4, hidden_size=32, num_layers=2, num_heads=2, mlp_dim=64, classes=10)
        model = keras_vit.ViT(**tiny)
        os.makedirs("runs/digits", exist_ok=True)
        model.save("runs/digits/model.keras")
        with open("runs/digits/config.json", "w") as file:
            json.dump({}, file)
        model.save_weights("own.weights.h5")
        model.save("own.keras")
        model.save("vit.keras")
        os.makedirs("bit_run", exist_ok=True)
        keras_vit.BiT(block_units=(1,), width=8, groups=4, image_size=32, classes=4).save("bit_run/model.keras")
''')


def code_blocks(page: str) -> list[str]:
    """The ```python blocks of `page`, in order."""
    text = open(os.path.join(ROOT, page), encoding="utf-8").read()
    return [textwrap.dedent(block) for block in re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)]


def _skipped(page, block):
    return next((why for (where, line), why in NOT_RUN.items() if where == page and line in block), None)


@pytest.fixture(scope="module")
def keras_home(tmp_path_factory):
    """A Keras cache holding the published files the pages name, of the official layout and random values."""
    from keras_vit.checkpoints import download
    from keras_vit.weights import get_entry

    home = tmp_path_factory.mktemp("keras_home")
    for name in ("imagenet", "imagenet21k"):
        entry = get_entry("B16", name)
        path = download.cache_path(entry, str(home))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        np.savez(path, **random_official_params(
            np.random.default_rng(0), image_size=entry.image_size, patch_size=16, hidden=768, layers=12, heads=12,
            mlp=3072, classes=entry.classes, representation_size=entry.representation_size))
    return str(home)


def test_the_blocks_not_run_are_still_in_the_docs():
    for (page, line), _ in NOT_RUN.items():
        assert any(line in block for block in code_blocks(page)), (page, line)


@pytest.mark.parametrize("page", [page for page in PAGES
                                  if any(not _skipped(page, block) for block in code_blocks(page))])
def test_the_python_blocks_of_a_page_run(page, keras_home, tmp_path):
    blocks = [block for block in code_blocks(page) if not _skipped(page, block)]
    script = PRELUDE + SETUP.get(page, "") + "\n" + "\n".join(
        f"print('--- block {index}', flush=True)\n{block}" for index, block in enumerate(blocks))
    (tmp_path / "page.py").write_text(script)
    env = {**os.environ, "KERAS_HOME": keras_home, "PYTHONPATH": os.pathsep.join([ROOT, os.path.dirname(HERE)]),
           "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run([sys.executable, "page.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, f"{page}: {done.stdout[-3000:]}\n{done.stderr[-5000:]}"
