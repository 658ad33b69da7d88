"""keras_vit's layers are registered with Keras whatever the order of `import keras_vit`, `tensorflow`, `keras`.

`import keras_vit` alone does not import Keras: it registers its layers when Keras is imported (a meta-path
hook). `import tensorflow` locates Keras with `importlib.util.find_spec("keras")` without importing it, which
once consumed the hook, so `import keras_vit, tensorflow as tf, keras` and then `keras.saving.load_model`
failed with `Could not locate class ...`. Each order loads a `.keras` file in a fresh process that never
touches a keras_vit name (only the imports), as a serving or evaluation script would. A registration that fails
raises, naming keras_vit; Keras imported by a keras_vit module's own import registers everything once it has run.
"""

import itertools
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import keras_vit

pytestmark = pytest.mark.e2e  # the end-to-end tier: `python -m pytest -m e2e` (.ci/run runs it)

ORDERS = list(itertools.permutations(("keras_vit", "tensorflow", "keras")))

LOAD = """
import sys
for name in sys.argv[2].split(","):
    __import__(name)
import keras
model = keras.saving.load_model(sys.argv[1])
assert "keras_vit" not in sys.argv[2] or sys.modules["keras_vit"].__name__ == "keras_vit"
print("loaded", type(model).__name__, model.count_params())
"""


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    model = keras_vit.ViT(image_size=16, patch_size=8, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32,
                          classes=3)
    path = str(tmp_path_factory.mktemp("order") / "m.keras")
    model.save(path)
    return path, model.count_params()


def test_layers_are_registered_whatever_the_import_order(saved):
    path, params = saved
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", KERAS_BACKEND="tensorflow")
    root = os.path.dirname(os.path.dirname(os.path.abspath(keras_vit.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([root, env.get("PYTHONPATH", "")])
    # the six fresh processes run side by side (each mostly waits on importing TensorFlow)
    running = {
        order: subprocess.Popen([sys.executable, "-c", LOAD, path, ",".join(order)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)
        for order in ORDERS
    }
    failed = {}
    for order, process in running.items():
        out, err = process.communicate(timeout=300)
        if process.returncode != 0 or "loaded" not in out:
            failed[",".join(order)] = err.strip().splitlines()[-1:] or out
        else:
            assert out.split()[-1] == str(params), (order, out)
    assert not failed, failed



def _run(script):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", KERAS_BACKEND="tensorflow")
    root = os.path.dirname(os.path.dirname(os.path.abspath(keras_vit.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([root, env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)


def test_a_failing_registration_is_not_silent():
    result = _run("""
import keras_vit
def broken():
    raise RuntimeError("no backend")
keras_vit._import_all = broken  # what the registration runs
try:
    import keras
except ImportError as error:
    assert "keras_vit could not register its layers" in str(error) and "no backend" in str(error), error
    assert isinstance(error.__cause__, RuntimeError)
    print("raised")
""")
    assert result.returncode == 0 and result.stdout.endswith("raised\n"), result.stdout + result.stderr[-3000:]


def test_keras_imported_by_a_keras_vit_module_registers_every_layer_once_that_module_has_run():
    """`import keras_vit.layers` in a fresh process imports Keras half-way through keras_vit.layers: the
    registration (which imports keras_vit.layers too) runs when that import ends, and registers the models."""
    result = _run("""
import keras_vit.layers
import keras
for name in ("PatchEncoder", "VisionTransformer", "BiTResNet"):
    assert keras.saving.get_registered_object("keras_vit>" + name) is not None, name
print("registered")
""")
    assert result.returncode == 0 and result.stdout.endswith("registered\n"), result.stdout + result.stderr[-3000:]


@pytest.mark.e2e
def test_a_keras_file_loads_in_a_fresh_process_that_imports_keras_vit(tmp_path, images):
    """Every keras_vit layer (hybrid stem, drop path, preprocessing) goes through `model.save`; a new process
    fails without `import keras_vit` (as README says) and loads the file with it, with equal outputs."""
    model = keras_vit.ViT(image_size=32, patch_size=16, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64,
                          classes=5, drop_path_rate=0.1, include_preprocessing=True,
                          hybrid=dict(block_units=(1, 1, 1), width=8, groups=4))
    rng = np.random.default_rng(1)
    model.set_weights([rng.standard_normal(w.shape).astype("float32") * 0.2 for w in model.get_weights()])
    path = tmp_path / "vit.keras"
    model.save(path)
    pixels = (images + 1) * 127.5
    np.save(tmp_path / "images.npy", pixels)
    script = textwrap.dedent(f"""
        import numpy as np, keras
        try:
            keras.saving.load_model({str(path)!r})
        except TypeError as error:
            assert "Could not locate class" in str(error), error
        else:
            raise SystemExit("loaded without keras_vit")
        import keras_vit
        model = keras.saving.load_model({str(path)!r})
        np.save({str(tmp_path / "out.npy")!r}, model.predict(np.load({str(tmp_path / "images.npy")!r}), verbose=0))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), model.predict(pixels, verbose=0), rtol=1e-5, atol=1e-5)
