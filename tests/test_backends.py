"""The same model code builds, runs and saves on the JAX and PyTorch Keras backends.

Each backend runs in a fresh process (the backend is fixed at import). Skipped, with the reason, when
the backend's package is not installed; CI installs JAX.
"""

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest


SCRIPT = textwrap.dedent(
    """
    import numpy as np, keras, keras_vit, tempfile, os
    from keras_vit import model_parts
    assert keras.backend.backend() == os.environ["KERAS_BACKEND"]
    model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64,
                          classes=5, drop_path_rate=0.1, dropout_rate=0.1)
    x = np.random.default_rng(0).uniform(-1, 1, (4, 32, 32, 3)).astype("float32")
    out = keras.ops.convert_to_numpy(model(x))
    _, probs = model_parts.encoder_blocks(model)[0].attention(np.zeros((1, 3, 32), "float32"), return_attention_scores=True)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.fit(x, np.arange(4) % 5, epochs=1, verbose=0)
    path = os.path.join(tempfile.mkdtemp(), "m.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(restored(x)), keras.ops.convert_to_numpy(model(x)), atol=1e-5)
    print("OK", out.shape)
    """
)

pytestmark = pytest.mark.e2e  # the end-to-end tier: `python -m pytest -m e2e` (.ci/run runs it)


@pytest.mark.backends
@pytest.mark.parametrize("backend, module", [("jax", "jax"), ("torch", "torch")])
def test_model_runs_on_backend(backend, module):
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"the {backend} backend needs `{module}`, which is not installed")
    env = {**os.environ, "KERAS_BACKEND": backend}
    result = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "OK (4, 5)" in result.stdout


def test_model_code_does_not_import_tensorflow():
    """Model code stays backend-agnostic: no TensorFlow import in layers, builder, variants, applications."""
    import pathlib

    root = pathlib.Path(__file__).parents[1] / "keras_vit"
    model_files = [*root.glob("layers/*.py"), root / "vit.py", root / "variants.py", root / "applications.py",
                   root / "validation.py"]
    offenders = [str(p) for p in model_files if "import tensorflow" in p.read_text() or "from tensorflow" in p.read_text()]
    assert not offenders
