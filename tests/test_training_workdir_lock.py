"""training.workdir_lock.check_not_training: `--weights=RUN` while another process trains RUN is refused (the
lock held here, in this process, on its own open file: `flock` locks of two opens conflict as two processes')."""

import os

import pytest

from training import workdir_lock


def make_run(folder):
    """A finished-looking run folder: config.json and a model.keras (never read here)."""
    os.makedirs(folder)
    (folder / "config.json").write_text("{}")
    (folder / "model.keras").write_bytes(b"not read")
    return folder


def test_a_run_being_trained_is_refused_as_weights_naming_its_holder(tmp_path, capsys):
    from absl import flags

    from keras_vit import cli
    from training import train  # noqa: F401  defines the flags and the check

    run = make_run(tmp_path / "run")
    lock = workdir_lock.WorkdirLock(str(run / workdir_lock.LOCK_NAME))
    lock.acquire()
    try:
        assert workdir_lock.training_holder(run).startswith(f"pid {os.getpid()} on host ")
        with pytest.raises(cli._Exit) as exited:
            cli.parse(flags.FLAGS, [f"--weights={run}"])
        flags.FLAGS.unparse_flags()
        err = capsys.readouterr().err
        assert exited.value.code == 2 and err.count("\n") == 1, err
        assert err.startswith(f"error: --weights={run} is a run that is being trained now: "), err
        assert f"pid {os.getpid()} on host " in err and f"--weights={run / 'model.keras'}" in err
        assert "Wait for that run to end" in err
    finally:
        lock.release()
    assert workdir_lock.training_holder(run) is None  # released: used as weights again
    cli.parse(flags.FLAGS, [f"--weights={run}"])
    flags.FLAGS.unparse_flags()
    # The probe takes nothing and writes nothing: the next run takes the lock and finds no stale holder.
    assert (run / workdir_lock.LOCK_NAME).read_text() == ""
    with workdir_lock.WorkdirLock(str(run / workdir_lock.LOCK_NAME)) as again:
        assert again.held


def test_model_from_config_refuses_a_run_being_trained_too(tmp_path):
    """Python callers of training.loop.run (no flags) are refused by the same check, before the file is read."""
    from training import config, model

    run = make_run(tmp_path / "run")
    cfg = config.make_config(None, dataset="digits", weights=str(run), steps=1, workdir=str(tmp_path / "ft"))
    with workdir_lock.WorkdirLock(str(run / workdir_lock.LOCK_NAME)):
        with pytest.raises(model.ModelBuildError, match=f"pid {os.getpid()} on host .* holds {run}/.lock"):
            model.model_from_config(cfg, num_classes=3)


def test_no_lock_file_a_file_or_a_remote_path_is_not_checked(tmp_path):
    make_run(tmp_path / "run")
    assert workdir_lock.training_holder(tmp_path / "run") is None
    workdir_lock.check_not_training(str(tmp_path / "run" / "model.keras"))  # a file: the caller chose it
    workdir_lock.check_not_training("gs://bucket/run")
    workdir_lock.check_not_training(None)
