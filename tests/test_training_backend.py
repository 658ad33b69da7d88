"""training.backend: the app's tools refuse a Keras backend other than TensorFlow at once, before importing it."""

import json
import os
import subprocess
import sys

import pytest

from training import backend

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Runs a tool as `python -m` does and, as it exits, prints which heavy modules it had imported.
_RUN_AND_REPORT = """
import runpy, sys
sys.argv = [sys.argv[1], *sys.argv[2:]]
try:
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
finally:
    print("imported:", sorted(m for m in ("keras", "tensorflow", "jax") if m in sys.modules))
"""


@pytest.mark.parametrize("tool, args, uses", [
    ("training.train", [], "tf.data, tf.distribute and TF checkpoints"),
    ("training.experiments", ["--out=unused"], "tf.data, tf.distribute and TensorFlow to count FLOPs"),
])
def test_a_jax_backend_stops_the_tool_with_one_line_before_importing_keras(tool, args, uses):
    env = dict(os.environ, KERAS_BACKEND="jax")
    result = subprocess.run([sys.executable, "-c", _RUN_AND_REPORT, tool, *args], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"error: {tool} needs the TensorFlow Keras backend (it uses {uses}); KERAS_BACKEND=jax is set. Unset it or "
        f"set KERAS_BACKEND=tensorflow, or train on jax in your own code with model.fit (docs/TRAINING.md, "
        f"\"model.fit in your own code\")."
    ]
    assert result.stdout.strip() == "imported: []"  # nothing heavy: the check runs as the flags are parsed


def test_the_backend_of_keras_json_counts_when_keras_backend_is_unset(tmp_path, monkeypatch):
    monkeypatch.delitem(sys.modules, "keras")  # as in a fresh process (this one imported Keras)
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    assert backend.keras_backend() == ("tensorflow", "the default")  # no keras.json
    (tmp_path / "keras.json").write_text(json.dumps({"backend": "torch", "floatx": "float32"}))
    from keras_vit import cli

    with pytest.raises(cli.UsageError) as info:
        backend.check_tensorflow_backend("training.train", "tf.data")
    assert str(info.value) == (
        f"training.train needs the TensorFlow Keras backend (it uses tf.data); {tmp_path / 'keras.json'} says "
        f"\"backend\": \"torch\". Set KERAS_BACKEND=tensorflow, or train on torch in your own code with model.fit "
        f"(docs/TRAINING.md, \"model.fit in your own code\")."
    )
    monkeypatch.setenv("KERAS_BACKEND", "tensorflow")  # the variable wins over keras.json, as in Keras
    backend.check_tensorflow_backend("training.train", "tf.data")
