"""training.weights_source's record of a fine-tune's source (`weights_source` in its config.json): rerunning the same command
resumes from the fine-tune's own checkpoints whatever happened to its `--weights` since (deleted, its model.keras
deleted, replaced by another run), saying so in one line. Tiny runs in this process (e2e: seconds each)."""

import json
import os
import shutil

import pytest

from test_training_reliability import checkpoint_numbers, cli, run
from training import weights_source

pytestmark = pytest.mark.e2e


def fine_tune(capsys, source, workdir):
    return cli(capsys, workdir, f"--weights={source}", dataset="digits", steps=4, checkpoint_every=2,
               keep_checkpoints=3)


def interrupt(workdir):
    """The state of a fine-tune killed after its checkpoint of step 2: no ckpt-4, no model or metrics."""
    for name in os.listdir(workdir / "checkpoints"):
        if name.startswith("ckpt-4."):
            os.remove(workdir / "checkpoints" / name)
    for name in ("metrics.json", "model.keras", "model.weights.h5", "model.labels.txt"):
        if (workdir / name).exists():
            os.remove(workdir / name)


@pytest.mark.parametrize("how", ["deleted", "model_keras_deleted", "replaced_by_bit", "changed"])
def test_a_fine_tune_resumes_from_its_own_checkpoints_whatever_happened_to_its_source(tmp_path, capsys, how):
    source, workdir = tmp_path / "source", tmp_path / "ft"
    run(source, steps=2)
    status, out, err = fine_tune(capsys, source, workdir)
    assert status == 0, err[-3000:]
    recorded = json.loads((workdir / "config.json").read_text())[weights_source.SOURCE_KEY]
    assert recorded["weights"] == str(source) and recorded["file"] == str(source / "model.keras")
    assert recorded["size"] == os.path.getsize(source / "model.keras") and len(recorded["sha256"]) == 64
    assert recorded["model"]["config"]["num_layers"] == 1
    interrupt(workdir)
    if how == "deleted":
        shutil.rmtree(source)
    elif how == "model_keras_deleted":
        os.remove(source / "model.keras")  # a run folder with checkpoints still, not finished
    elif how == "replaced_by_bit":
        shutil.rmtree(source)
        run(source, steps=1, model="bit_tiny", patch_size=None, hidden_size=None, num_layers=None, num_heads=None,
            mlp_dim=None)
    else:
        (source / "model.keras").write_bytes((source / "model.keras").read_bytes() + b"\0")
    status, out, err = fine_tune(capsys, source, workdir)
    assert status == 0, err[-3000:]
    notes = [line for line in out.splitlines() if line.startswith(f"note: --weights={source} ")]
    assert len(notes) == 1, out
    assert ("is gone" if how in ("deleted", "model_keras_deleted") else "changed since this run started") in notes[0]
    assert "not used; this run resumes from its own checkpoints" in notes[0]
    assert "recipe: scratch, chosen for fine-tuning your own model" in out  # the recipe it started with
    assert f"resumed from {workdir / 'checkpoints' / 'ckpt-2'} at step 2" in out
    assert "after 4 steps" in out.strip().splitlines()[-1] and checkpoint_numbers(workdir)[-1] == 4
    # The record stays that of the source the checkpoints came from.
    assert json.loads((workdir / "config.json").read_text())[weights_source.SOURCE_KEY] == recorded
