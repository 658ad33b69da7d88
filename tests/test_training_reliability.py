"""training.loop when things go wrong: divergence, resuming with changes, damaged checkpoints, an unwritable
workdir, a workdir another run holds, undecodable images and empty classes of a folder dataset. Tiny configs;
most runs in this process (tests/test_training_images.py: the image checks)."""

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from training import config, image_checks, loop, run_state, sources
from training.workdir import WorkdirError

TINY = dict(image_size=8, patch_size=4, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32, global_batch_size=16,
            log_every=1, show_predictions=0, export=False, jit_compile=False)
# SGD without gradient clipping at a learning rate that makes the weights overflow within 10 steps, after 4
# warm-up steps: the first update is small (ckpt-1 is good: the loss after it is the first loss), then the weights
# explode and stay finite for a step or two with losses of 1e10 and more before they overflow. Those finite but
# exploded checkpoints are what a lower learning rate cannot resume from. Which rate does it depends on the
# model's initial numerics, so the fixture climbs down a ladder of rates and keeps the first run that diverges
# with a good checkpoint and a finite exploded one after it.
DIVERGING = dict(steps=10, warmup_steps=4, checkpoint_every=1, optimizer="sgd", grad_clip_norm=None)
DIVERGING_RATES = (1e5, 1e4, 1e3, 1e2)


def make_config(workdir, **overrides):
    return config.make_config("demo", workdir=str(workdir), **{**TINY, **overrides})


def run(workdir, **overrides):
    """`loop.run` here; returns what it printed (it raises what it raises)."""
    options = {k: overrides.pop(k) for k in ("resume_with_changes", "overwrite_checkpoints", "skip_bad_images")
               if k in overrides}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        loop.run(make_config(workdir, **overrides), **options)
    return out.getvalue()


def cli(capsys, workdir, *args, **overrides):
    """`python -m training.train` (its flags and `main`, in this process) with the tiny config and `overrides`.

    Returns (exit status, stdout, stderr).
    """
    from absl import flags

    from training import train

    values = [f"--{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in {**TINY, **overrides}.items()]
    capsys.readouterr()
    flags.FLAGS.unparse_flags()
    flags.FLAGS(["train", f"--workdir={workdir}", *values, *args])
    status = 0
    try:
        train.main(["train"])
    except SystemExit as stop:
        status = stop.code
    finally:
        flags.FLAGS.unparse_flags()
    out, err = capsys.readouterr()
    return status, out, err


def checkpoint_numbers(workdir):
    names = os.listdir(os.path.join(workdir, "checkpoints"))
    return sorted(int(n[5:-6]) for n in names if re.fullmatch(r"ckpt-\d+\.index", n))


def non_finite_tensors(prefix):
    """Names of the numeric tensors of a checkpoint that hold a NaN or an infinity (read with numpy)."""
    reader = tf.train.load_checkpoint(str(prefix))
    tensors = {k: np.asarray(reader.get_tensor(k)) for k in reader.get_variable_to_shape_map()}
    floats = {k: v for k, v in tensors.items() if v.dtype.kind == "f"}
    assert len(floats) >= 48  # the model's 24 weights and Adam's 48 moments or SGD's 24 momenta (under optimizer/)
    return sorted(k for k, v in floats.items() if not np.isfinite(v).all())


# --- 1, 2: divergence -------------------------------------------------------------------------------------


def recorded_losses(workdir):
    """{checkpoint number: loss of the step after it} from the run's record (checkpoints/losses.json)."""
    record = json.loads((workdir / "checkpoints" / run_state.LOSSES_FILE).read_text())
    return record["first_loss"], {int(k): v for k, v in record["after"].items()}


@pytest.fixture(scope="module")
def diverged(tmp_path_factory):
    """A workdir whose run diverged after a good checkpoint and a finite, exploded one after it, the error
    message and the learning rate."""
    messages = []
    for rate in DIVERGING_RATES:
        workdir = tmp_path_factory.mktemp("diverged")
        try:
            run(workdir, **DIVERGING, learning_rate=rate)
        except run_state.TrainingDiverged as stop:
            messages.append(f"{rate:g}: {stop}")
            _, after = recorded_losses(workdir)
            exploded = [n for n, loss in after.items() if np.isfinite(loss) and loss > 1e6]
            if "last good checkpoint is" in str(stop) and exploded:
                return workdir, str(stop), rate
        else:
            messages.append(f"{rate:g}: finished without diverging")
    pytest.fail("no learning rate diverged after a good and a finite exploded checkpoint:\n" + "\n".join(messages))


@pytest.mark.e2e  # the default tier's time budget (10 minutes on 2 cores)
def test_a_divergence_before_any_good_checkpoint_says_there_is_none(tmp_path):
    # Adam without warm-up at 1e15: the first update already overflows.
    with pytest.raises(run_state.TrainingDiverged, match="no last good checkpoint") as info:
        run(tmp_path, steps=10, warmup_steps=0, checkpoint_every=1, learning_rate=1e15)
    assert "--resume_with_changes to train again from step 0" in str(info.value)


def named_checkpoint(message):
    match = re.search(r"last good checkpoint is (\S*ckpt-(\d+))", message)
    assert match, message
    return match.group(1), int(match.group(2))


def test_divergence_names_a_checkpoint_followed_by_a_sane_loss_not_a_finite_exploded_one(diverged):
    workdir, message, _ = diverged
    prefix, step = named_checkpoint(message)
    assert os.path.exists(prefix + ".index")
    assert non_finite_tensors(prefix) == []
    for name in os.listdir(workdir / "checkpoints"):  # nothing non-finite was ever written
        if name.endswith(".index"):
            assert non_finite_tensors(workdir / "checkpoints" / name[:-6]) == [], name
    first, after = recorded_losses(workdir)
    limit = run_state.SANE_LOSS_FACTOR * max(np.log(10), first)
    assert after[step] <= limit  # the step after it had a sane loss
    stopped = int(re.search(r"at step (\d+)", message).group(1))
    # Every later checkpoint, finite but exploded (its next loss over the limit) or the one whose step overflowed,
    # was moved aside, so that a rerun resumes from the good one; the old rule (finite, step - 2) named one of them.
    moved = sorted(int(n[len("diverged-ckpt-"):-len(".index")]) for n in os.listdir(workdir / "checkpoints")
                   if re.fullmatch(r"diverged-ckpt-\d+\.index", n))
    # The rotation (keep_checkpoints 2; the good one is protected) had already removed older exploded ones.
    keep = make_config(workdir).keep_checkpoints
    assert moved == list(range(max(step + 1, stopped - keep), stopped))
    assert any(np.isfinite(after[n]) and after[n] > limit for n in moved if n in after)
    assert max(checkpoint_numbers(workdir)) == step
    assert all(f"ckpt-{n} (next loss" in message for n in moved)
    assert f"--resume_with_changes to continue from {prefix}" in message and "--learning_rate=<lower than" in message
    # keep_checkpoints is 2 and two or more checkpoints were saved after the good one: the rotation kept it.
    assert make_config(workdir).keep_checkpoints == 2 and len(moved) >= 2


def test_advised_rerun_with_a_lower_learning_rate_resumes_and_finishes(diverged, tmp_path, capsys):
    source, message, rate = diverged
    prefix, step = named_checkpoint(message)
    workdir = tmp_path / "run"
    shutil.copytree(source, workdir)
    # The advice without --resume_with_changes is refused, and the refusal names the flag.
    with pytest.raises(WorkdirError, match="learning_rate.*--resume_with_changes"):
        run(workdir, **{**DIVERGING, "learning_rate": 1e-3})
    # A model change stays refused, with or without the flag.
    with pytest.raises(WorkdirError, match="hidden_size cannot change"):
        run(workdir, **{**DIVERGING, "learning_rate": 1e-3, "hidden_size": 32}, resume_with_changes=True)
    status, out, err = cli(capsys, workdir, "--resume_with_changes",
                           **{**DIVERGING, "grad_clip_norm": 0, "learning_rate": 1e-3})  # 0: no clipping
    assert status == 0, err[-3000:]
    resumed_from = prefix.replace(str(source), str(workdir))
    assert f"resumed from {resumed_from} at step {step}" in out
    assert "after 10 steps" in out.strip().splitlines()[-1]
    saved = json.loads((workdir / "config.json").read_text())
    assert saved["learning_rate"] == 1e-3
    assert saved["resumed_with_changes"] == [{"step": step, "changed": {"learning_rate": [rate, 1e-3]}}]
    assert config.Config.from_json((workdir / "config.json").read_text()).learning_rate == 1e-3
    assert non_finite_tensors(workdir / "checkpoints" / "ckpt-10") == []
    first, after = recorded_losses(workdir)  # every step after a checkpoint of the rerun had a sane loss
    assert all(after[n] <= run_state.SANE_LOSS_FACTOR * max(np.log(10), first) for n in range(step, 10))


# --- 3, 7: damaged checkpoints ----------------------------------------------------------------------------

FINISHED = dict(steps=6, checkpoint_every=2, keep_checkpoints=2)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished run's workdir: ckpt-4 and ckpt-6 (keep_checkpoints=2)."""
    workdir = tmp_path_factory.mktemp("finished")
    run(workdir, **FINISHED)
    assert checkpoint_numbers(workdir) == [4, 6]
    return workdir


def damage(workdir, how):
    directory = workdir / "checkpoints"
    data_file = directory / "ckpt-6.data-00000-of-00001"
    if how == "state file deleted":
        os.remove(directory / "checkpoint")
    elif how == "state file garbled":
        (directory / "checkpoint").write_bytes(b"\x00\xffnot a checkpoint state {{{")
    elif how == "latest truncated":
        data_file.write_bytes(data_file.read_bytes()[:100])
    elif how == "latest overwritten with garbage":
        data_file.write_bytes(b"\x13" * data_file.stat().st_size)
    elif how == "latest deleted":
        for name in ("ckpt-6.index", data_file.name):
            os.remove(directory / name)


@pytest.mark.parametrize("how, resumed_at", [
    ("state file deleted", 6), ("state file garbled", 6),
    ("latest truncated", 4), ("latest overwritten with garbage", 4), ("latest deleted", 4),
])
@pytest.mark.e2e  # moved from the default tier (its time budget)
def test_resume_finds_the_newest_readable_checkpoint_on_disk(finished, tmp_path, how, resumed_at):
    workdir = tmp_path / "run"
    shutil.copytree(finished, workdir)
    damage(workdir, how)
    out = run(workdir, **FINISHED)
    directory = workdir / "checkpoints"
    assert f"resumed from {directory / f'ckpt-{resumed_at}'} at step {resumed_at}" in out
    if how.startswith("latest") and how != "latest deleted":
        assert f"cannot restore {directory / 'ckpt-6'}: " in out and "falling back" in out
    # Resumed at its last step, the run is finished (its model and metrics are there): it says so, trains nothing.
    last = "trained for all its 6 steps" if resumed_at == 6 else "after 6 steps"
    assert last in out.strip().splitlines()[-1]
    # Both checkpoints are intact (ckpt-6 written again where it was lost); the manager's state says so.
    assert checkpoint_numbers(workdir) == [4, 6]
    assert non_finite_tensors(directory / "ckpt-4") == [] == non_finite_tensors(directory / "ckpt-6")
    state = tf.train.get_checkpoint_state(str(directory))
    assert [os.path.basename(p) for p in state.all_model_checkpoint_paths] == ["ckpt-4", "ckpt-6"]


@pytest.mark.e2e  # moved from the default tier (its time budget)
def test_rotation_after_a_fallback_deletes_no_good_checkpoint_for_a_damaged_one(finished, tmp_path):
    workdir = tmp_path / "run"
    shutil.copytree(finished, workdir)
    damage(workdir, "latest truncated")  # the state file lists ckpt-4 and the damaged ckpt-6; two are kept
    out = run(workdir, **{**FINISHED, "steps": 5}, resume_with_changes=True)  # from 4, saves ckpt-5 only
    assert "at step 4" in out and "after 5 steps" in out
    # The manager counts only the intact ckpt-4 and the new ckpt-5: neither is rotated away for ckpt-6.
    assert checkpoint_numbers(workdir) == [4, 5, 6]
    assert non_finite_tensors(workdir / "checkpoints" / "ckpt-4") == []


@pytest.mark.e2e  # moved from the default tier (its time budget)
def test_unreadable_checkpoints_are_refused_unless_overwritten(finished, tmp_path):
    workdir = tmp_path / "run"
    shutil.copytree(finished, workdir)
    for number in (4, 6):
        (workdir / "checkpoints" / f"ckpt-{number}.data-00000-of-00001").write_bytes(b"garbage")
    with pytest.raises(WorkdirError, match=r"none can be restored.*ckpt-6.*ckpt-4.*--overwrite_checkpoints"):
        run(workdir, **FINISHED)
    assert checkpoint_numbers(workdir) == [4, 6]  # nothing deleted
    out = run(workdir, **FINISHED, overwrite_checkpoints=True)
    assert "training from step 0" in out and "resumed" not in out and "after 6 steps" in out
    assert checkpoint_numbers(workdir) == [4, 6] and non_finite_tensors(workdir / "checkpoints" / "ckpt-6") == []


def test_a_changed_model_field_is_refused_and_the_same_command_resumes(finished, tmp_path):
    workdir = tmp_path / "run"
    shutil.copytree(finished, workdir)
    assert json.loads((workdir / "config.json").read_text())["classifier"] is None  # the [class] token
    with pytest.raises(WorkdirError, match=r"classifier.*cannot change within a run.*give its old value"):
        run(workdir, **FINISHED, classifier="gap")
    out = run(workdir, **FINISHED)
    assert "resumed from" in out and "already finished" in out.strip().splitlines()[-1]


def test_leftover_temp_folders_of_interrupted_saves_are_removed(finished, tmp_path):
    workdir = tmp_path / "run"
    shutil.copytree(finished, workdir)
    temp = workdir / "checkpoints" / "ckpt-8_temp"
    temp.mkdir()
    (temp / "part-00000-of-00001.index").write_bytes(b"half written")
    out = run(workdir, **FINISHED)
    assert not temp.exists()
    assert re.search(r"removed 1 unfinished checkpoint folder.*ckpt-8_temp", out)
    assert "at step 6" in out


# --- 4: the workdir -------------------------------------------------------------------------------------


def test_a_workdir_under_a_file_is_one_error_line(tmp_path, capsys):
    (tmp_path / "a_file").write_text("not a directory")
    workdir = tmp_path / "a_file" / "run"
    status, _, err = cli(capsys, workdir, steps=1)
    assert status == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert str(workdir) in lines[0] and f"{str(tmp_path / 'a_file')!r} is a file" in lines[0]


@pytest.mark.parametrize("how", ["permissions", "kernel folder"])
def test_a_read_only_workdir_is_refused(tmp_path, how):
    if how == "permissions":  # a folder without write permission: root writes there anyway
        if not hasattr(os, "geteuid") or os.geteuid() == 0:
            pytest.skip("root writes to folders without write permission (the kernel-folder case runs as root)")
        workdir = tmp_path / "read_only"
        workdir.mkdir()
        workdir.chmod(0o500)
    else:  # a folder of the kernel's that takes no new file from anyone, root included (CI runs as root)
        workdir = next((d for d in ("/proc/self/fdinfo", "/sys/kernel") if os.path.isdir(d)), None)
        if workdir is None:
            pytest.skip("no /proc or /sys (not Linux)")
    try:
        with pytest.raises(WorkdirError, match=f"Cannot write to --workdir={str(workdir)!r}"):
            run(workdir, steps=1)
    finally:
        if how == "permissions":
            workdir.chmod(0o700)


# --- the workdir lock -----------------------------------------------------------------------------------

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@contextlib.contextmanager
def lock_held_by_another_process(workdir):
    """A child Python process holding WORKDIR/.lock (as a run does) until the block ends; yields its pid."""
    os.makedirs(workdir, exist_ok=True)
    child = subprocess.Popen([sys.executable, "-m", "training.workdir_lock", str(workdir / ".lock")], cwd=ROOT,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "locked"
        yield child.pid
    finally:
        child.kill()
        child.wait()
        child.stdout.close()


@pytest.mark.e2e  # moved from the default tier (its time budget)
def test_a_second_run_on_a_workdir_in_use_is_refused_naming_the_holder(tmp_path, capsys):
    workdir = tmp_path / "run"
    with lock_held_by_another_process(workdir) as pid:
        status, out, err = cli(capsys, workdir, steps=2, seed=1)
        lines = err.strip().splitlines()
        assert status == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
        assert f"--workdir={str(workdir)!r} is in use by another run: pid {pid} on host " in lines[0]
        assert "workdir_lock" in lines[0] and "use another --workdir" in lines[0]  # its command
        assert sorted(os.listdir(workdir)) == [".lock"]  # refused before it wrote anything: no config, no checkpoint
        # The holder is named by the lock it holds: the same in-process run is refused too.
        with pytest.raises(WorkdirError, match=f"pid {pid} "):
            run(workdir, steps=2)
    # The holder was killed without releasing it (a crash): the kernel dropped its flock; the next run takes the
    # lock over, says whose it was, and trains.
    status, out, err = cli(capsys, workdir, steps=2)
    assert status == 0, err[-3000:]
    assert f"named a run that ended without releasing it (crashed or killed): pid {pid} " in out
    assert "after 2 steps" in out.strip().splitlines()[-1]
    assert (workdir / ".lock").read_text() == ""  # released at the end: the next run finds no stale lock
    status, out, _ = cli(capsys, workdir, steps=2)
    assert status == 0 and "without releasing" not in out


@pytest.mark.e2e  # moved from the default tier (its time budget)
def test_the_lock_is_released_when_a_run_fails(tmp_path):
    workdir = tmp_path / "run"
    run(workdir, steps=2)
    with pytest.raises(WorkdirError, match="different config"):
        run(workdir, steps=2, seed=5)
    assert (workdir / ".lock").read_text() == ""
    with pytest.raises(run_state.TrainingDiverged):  # a diverging run in a fresh workdir releases it too
        run(tmp_path / "diverging", steps=10, warmup_steps=0, checkpoint_every=1, learning_rate=1e15)
    assert (tmp_path / "diverging" / ".lock").read_text() == ""
    out = run(workdir, steps=2)  # not held: the same workdir resumes (finished: it says so)
    assert "trained for all its 2 steps" in out


# --- 5, 6: folder datasets ------------------------------------------------------------------------------


def write_folder(root, per_class=2):
    for split in ("train", "validation"):
        for i, name in enumerate(("blue", "green", "red")):
            os.makedirs(root / split / name)
            for j in range(per_class):
                image = np.full((12, 10, 3), 80 * i + j, np.uint8)
                (root / split / name / f"{j}.png").write_bytes(tf.io.encode_png(image).numpy())


def encoded_images():
    """Small images in every format `tf.io.decode_image` reads, as bytes."""
    from PIL import Image

    pixels = np.random.default_rng(0).integers(0, 255, (9, 13, 3), dtype=np.uint8)
    files = {"png": tf.io.encode_png(pixels).numpy(), "jpg": tf.io.encode_jpeg(pixels).numpy()}
    for mode, kind in (("RGB", "bmp"), ("L", "bmp"), ("RGBA", "bmp"), ("P", "gif"), ("RGB", "webp")):
        buffer = io.BytesIO()
        Image.fromarray(pixels).convert(mode).save(buffer, kind.upper())
        files[f"{mode}.{kind}"] = buffer.getvalue()
    return files


def test_the_header_check_agrees_with_tensorflows_decoder(tmp_path):
    cases = {"empty.png": b"", "text.jpg": b"hello, not an image"}
    for name, encoded in encoded_images().items():
        cases[f"good.{name}"] = encoded
        cases[f"half.{name}"] = encoded[:len(encoded) // 2]
        cases[f"short.{name}"] = encoded[:-2]
    for name, encoded in cases.items():
        path = tmp_path / name
        path.write_bytes(encoded)
        try:
            tf.io.decode_image(encoded, channels=3, expand_animations=False)
            decodes = True
        except (tf.errors.InvalidArgumentError, ValueError):
            decodes = False
        problem = image_checks.image_problem(str(path))
        assert (problem is None) == decodes, (name, problem)
        assert name.startswith("good.") == decodes, name


@pytest.mark.e2e  # the default tier's time budget (10 minutes on 2 cores)
def test_bad_images_in_either_split_stop_the_run_before_training_naming_them(tmp_path):
    root = tmp_path / "images"
    write_folder(root)
    (root / "train" / "red" / "bad.png").write_bytes(b"GIF89a, or so it says")
    good = (root / "validation" / "blue" / "0.png").read_bytes()
    (root / "validation" / "blue" / "cut.png").write_bytes(good[: len(good) // 2])
    dataset = f"folder:{root}"
    with pytest.raises(sources.InvalidDatasetError) as info:
        run(tmp_path / "run", dataset=dataset, steps=2)
    message = str(info.value)
    for bad in (root / "train" / "red" / "bad.png", root / "validation" / "blue" / "cut.png"):
        assert str(bad) in message
    assert message.startswith("2 of 14 files") and "--skip_bad_images" in message
    assert not (tmp_path / "run" / "checkpoints").exists()  # found before anything trained
    out = run(tmp_path / "run", dataset=dataset, steps=2, global_batch_size=4, skip_bad_images=True)
    first = out.splitlines()[0]
    assert first.startswith("skipping 2 image file(s)") and "--skip_bad_images" in first
    assert "on 6 validation images after 2 steps" in out.strip().splitlines()[-1]


def test_an_empty_class_folder_is_refused_naming_it(tmp_path):
    root = tmp_path / "images"
    write_folder(root)
    (root / "train" / "purple").mkdir()
    (root / "train" / "purple" / "notes.txt").write_text("no images here")
    with pytest.raises(sources.InvalidDatasetError, match=re.escape(str(root / "train" / "purple"))) as info:
        sources.dataset_source(f"folder:{root}", "validation")
    assert "delete the folder" in str(info.value)
    os.remove(root / "train" / "purple" / "notes.txt")
    os.rmdir(root / "train" / "purple")
    os.remove(root / "validation" / "red" / "0.png")  # a class may be rarer, or absent, in the eval split
    os.remove(root / "validation" / "red" / "1.png")
    assert sources.dataset_source(f"folder:{root}", "validation").num_classes == 3


# --- a full disk ----------------------------------------------------------------------------------------


@pytest.mark.e2e  # two short runs: seconds
def test_a_full_disk_has_its_own_exit_status_and_the_same_command_resumes(tmp_path, capsys, monkeypatch):
    import errno

    from training.workdir import DISK_FULL_EXIT

    workdir = tmp_path / "run"
    write = tf.train.Checkpoint.write

    def full_at_step_2(self, prefix, *args, **kwargs):
        if prefix.endswith("ckpt-2"):
            raise OSError(errno.ENOSPC, "No space left on device", prefix)
        return write(self, prefix, *args, **kwargs)

    monkeypatch.setattr(tf.train.Checkpoint, "write", full_at_step_2)
    status, out, err = cli(capsys, workdir, steps=3, checkpoint_every=1)
    lines = err.strip().splitlines()
    assert status == DISK_FULL_EXIT == 4 and len(lines) == 1, err[-3000:]
    assert lines[0].startswith("error: No space left on the device while writing the checkpoint of step 2 (")
    assert "ckpt-2" in lines[0] and "rerun the same command" in lines[0]
    assert checkpoint_numbers(workdir) == [1]  # the one written before is kept
    assert (workdir / ".lock").read_text() == ""  # released
    monkeypatch.setattr(tf.train.Checkpoint, "write", write)  # space freed: the same command resumes and finishes
    status, out, err = cli(capsys, workdir, steps=3, checkpoint_every=1)
    assert status == 0 and "after 3 steps" in out.strip().splitlines()[-1], err[-3000:]


def test_a_full_disk_anywhere_in_the_run_maps_to_its_status(tmp_path, capsys, monkeypatch):
    """ENOSPC from a write that is not wrapped (a TensorFlow file error saying it, deep in the run): status 4."""
    import errno

    def full(*args, **kwargs):
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as cause:
            raise tf.errors.ResourceExhaustedError(None, None, "metrics.json; No space left on device") from cause

    monkeypatch.setattr(loop, "run", full)
    status, out, err = cli(capsys, tmp_path / "run", steps=1)
    assert status == 4 and err.count("\n") == 1 and err.startswith("error: No space left on the device while writing")


def test_an_image_failing_mid_run_has_its_own_exit_status(tmp_path, capsys, monkeypatch):
    """`training.sources.ImageFailedMidRunError` (a file deleted or changed since the check): status 5, one line."""
    from training.sources import ImageFailedMidRunError

    def failed(*args, **kwargs):
        raise ImageFailedMidRunError("The training image /data/a.png was deleted during the run ...")

    monkeypatch.setattr(loop, "run", failed)
    status, out, err = cli(capsys, tmp_path / "run", steps=1)
    assert status == 5 and err == "error: The training image /data/a.png was deleted during the run ...\n"
