"""The workdir of a run: checked writable, held by one run at a time, and its config.json checked and written.

    * An unwritable workdir (or one under a file) is refused (`WorkdirError`) before anything is built.
    * One run per workdir: an exclusive `flock` on `WORKDIR/.lock` (`training.workdir_lock`) from before the
      config check to the end of the run; a second run is refused (`WorkdirError`, naming the holder).
    * A workdir whose `config.json` holds another run's config is refused, except for the fields that do not
      change what is computed (`RESUMABLE_CHANGES`) and, with `resume_with_changes`, the optimisation fields
      (`training.config.OPTIMISATION_FIELDS`): each such change is recorded in `config.json` under
      `"resumed_with_changes"`. Fields that change the model, the data or the numerics still refuse the workdir.
"""

from __future__ import annotations

import errno
import json
import os
import re

import tensorflow as tf

from training import distribute, workdir_lock
from training.config import OPTIMISATION_FIELDS, RESUMABLE_FIELDS
from training.weights_source import SOURCE_KEY, source_record
from training.sources import shown_path

RESUMABLE_CHANGES = set(RESUMABLE_FIELDS)  # they do not change what is computed
# Fields that may change on resume with `resume_with_changes` (the optimisation's, see training.config).
OPTIMISATION_CHANGES = set(OPTIMISATION_FIELDS)
HISTORY_KEY = "resumed_with_changes"  # in config.json: [{"step": N, "changed": {field: [old, new]}}, ...]


class WorkdirError(ValueError):
    """The workdir cannot be used as it is: unwritable, another run's config, or no readable checkpoint."""


class RunWorkdir:
    """The workdir of one run, owned by `training.loop`'s run: `prepare`, `lock` and `check_config` at its start,
    `write_config` once its state is restored; `worker_dir` is a worker's own folder in it.

    Args:
        cfg: the run's `training.config.Config` (`cfg.workdir`).
        strategy: the run's `tf.distribute` strategy (a worker's folder is named for its task).
        chief: whether this task is the chief (it alone writes config.json).
        log: prints a message (the run's: the chief only).
    """

    def __init__(self, cfg, strategy=None, chief: bool = True, log=print):
        self.cfg = cfg
        self.strategy = strategy
        self.chief = chief
        self._print = log
        self._config_history = []
        self._weights_source = None

    def worker_dir(self, *parts):
        return os.path.join(self.cfg.workdir, "workers", str(distribute.task_id(self.strategy)), *parts)

    def prepare(self):
        """Creates the workdir (a worker's own folder on the other workers) and checks that it takes a file."""
        workdir = self.cfg.workdir
        own = workdir if self.chief else self.worker_dir()
        probe = os.path.join(own, f".write_test.{os.getpid()}")
        try:
            tf.io.gfile.makedirs(own)
            with tf.io.gfile.GFile(probe, "w") as f:
                f.write("")
            tf.io.gfile.remove(probe)
        except (OSError, tf.errors.OpError) as error:
            blocker = _file_on_path(own)
            reason = f"{blocker!r} is a file, not a directory" if blocker else short_error(error)
            raise WorkdirError(
                f"Cannot write to --workdir={workdir!r}: {reason}. Pass a --workdir that is (or can be created "
                f"as) a writable directory."
            ) from error

    def lock(self, cleanup):
        """Takes `WORKDIR/.lock` (a worker: its own folder's) until the run ends; refuses a workdir another run holds.

        Two runs in one workdir would pass the config check together and write into the same checkpoints.
        """
        own = self.cfg.workdir if self.chief else self.worker_dir()
        if not workdir_lock.is_lockable(own):  # gs:// and other remote paths: flock cannot lock them
            return
        path = os.path.join(own, workdir_lock.LOCK_NAME)
        lock = workdir_lock.WorkdirLock(path)
        try:
            stale = lock.acquire()
        except workdir_lock.WorkdirLocked as holder:
            raise WorkdirError(
                f"--workdir={self.cfg.workdir!r} is in use by another run: {holder} holds {shown_path(path)}. "
                f"Two runs in one workdir would write into the same checkpoints: wait for that run to end (or stop "
                f"it), or use another --workdir."
            ) from None
        except OSError as error:
            raise WorkdirError(f"Cannot lock --workdir={self.cfg.workdir!r}: {shown_path(path)}: "
                               f"{error.strerror or error}. Pass a --workdir on a local or NFS file system.") from error
        if cleanup is not None:
            cleanup.callback(lock.release)
        if stale:
            self._print(f"note: {shown_path(path)} named a run that ended without releasing it (crashed or "
                        f"killed): {workdir_lock.describe(stale)}; no process holds it now, so this run took it over "
                        f"(a stale lock) and resumes from the checkpoints as usual")

    def check_config(self, resume_with_changes):
        """The `OPTIMISATION_CHANGES` allowed against the workdir's config.json; raises for any other change."""
        path = os.path.join(self.cfg.workdir, "config.json")
        self._config_history = []
        self._weights_source = None
        if not tf.io.gfile.exists(path):
            return {}
        with tf.io.gfile.GFile(path) as f:
            text = f.read()
        try:
            old = json.loads(text)
        except json.JSONDecodeError as error:
            raise WorkdirError(
                f"{path} is not valid JSON ({error}). Received: {text[:80]!r}. Restore it, delete it to adopt "
                f"this run's config, or use another --workdir."
            ) from error
        self._config_history = list(old.get(HISTORY_KEY, []))
        old.pop(HISTORY_KEY, None)
        self._weights_source = old.pop(SOURCE_KEY, None)  # kept: what the checkpoints were fine-tuned from
        new = json.loads(self.cfg.to_json())
        changed = {k: (old.get(k), new.get(k)) for k in sorted(set(old) | set(new))
                   if old.get(k) != new.get(k) and k not in RESUMABLE_CHANGES}
        fixed = sorted(set(changed) - OPTIMISATION_CHANGES)
        if not changed or (resume_with_changes and not fixed):
            return changed
        if fixed:
            advice = (f"{', '.join(fixed)} cannot change within a run (the model, the data or the numerics would "
                      f"differ from the checkpoints'): use the same flags (where a default changed since that run, "
                      f"give its old value, as in {path}) or another --workdir")
            if resume_with_changes:
                advice += f" (--resume_with_changes allows only {', '.join(sorted(OPTIMISATION_CHANGES))})"
        else:
            advice = ("these change only the optimisation: add --resume_with_changes to continue from the last "
                      "checkpoint with them (recorded in config.json), or use another --workdir")
        raise WorkdirError(
            f"{self.cfg.workdir!r} holds a run with a different config ({path}). Changed (old, new): {changed}; "
            f"{advice}."
        )

    def write_config(self, changed, step: int, model):
        """Writes config.json (the chief), adding the allowed changes at the restored `step` to its history; a
        first start (or other --weights) records the source `model` was fine-tuned from."""
        if changed:
            self._config_history.append({"step": step, "changed": {k: list(v) for k, v in changed.items()}})
            self._print(f"resumed with changes at step {step} (--resume_with_changes, recorded in config.json): "
                        + ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in changed.items()))
        if not self.chief:
            return
        values = json.loads(self.cfg.to_json())
        if self._config_history:
            values[HISTORY_KEY] = self._config_history
        source = self._weights_source
        if source is None or source.get("weights") != self.cfg.weights:  # a first start (or other --weights)
            source = source_record(self.cfg, model)
        if source is not None:
            values[SOURCE_KEY] = source
        write_atomically(os.path.join(self.cfg.workdir, "config.json"), json.dumps(values, indent=2, sort_keys=True))


DISK_FULL_EXIT = 4
"""`python -m training.train`'s exit status when the disk is full (`DiskFull`)."""


class DiskFull(RuntimeError):
    """No space left on the device while the run wrote (ENOSPC): exit status `DISK_FULL_EXIT` in training.train."""


def is_disk_full(error) -> bool:
    """Whether `error` (or an error it was raised from) is "no space left on the device": an `OSError` with errno
    ENOSPC, or a TensorFlow file error saying so (TensorFlow's file system raises `tf.errors.OpError`s)."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, DiskFull) or (isinstance(error, OSError) and error.errno == errno.ENOSPC):
            return True
        if isinstance(error, tf.errors.OpError) and "No space left on device" in str(error):
            return True
        error = error.__cause__ or error.__context__
    return False


def disk_full(error, what: str, path: str, saved: str) -> DiskFull:
    """The one-line `DiskFull` for `error` while writing `what` at `path`; `saved`: what is on disk to go on from."""
    return DiskFull(
        f"No space left on the device while writing {what} ({path}): {short_error(error)}. {saved} Free space on "
        f"that disk (a lower --keep_checkpoints keeps fewer checkpoints), then rerun the same command: it resumes "
        f"from the newest checkpoint written whole.")


def write_atomically(path, text):
    """Writes whole, then renames: other workers may be reading `path`. A full disk raises `DiskFull`."""
    try:
        with tf.io.gfile.GFile(path + ".tmp", "w") as f:
            f.write(text)
        tf.io.gfile.rename(path + ".tmp", path, overwrite=True)
    except (OSError, tf.errors.OpError) as error:
        if is_disk_full(error):
            raise disk_full(error, os.path.basename(path), path, f"{path} is as it was before.") from error
        raise


def short_error(error) -> str:
    """`Type: first line` of an exception, without TensorFlow's `{{function_node ...}}` prefix."""
    text = re.sub(r"^\{\{function_node [^}]*\}\}\s*", "", str(error).strip()).splitlines()
    return f"{type(error).__name__}: {text[0][:200] if text else ''}".rstrip(": ")


def _file_on_path(path):
    """The nearest existing ancestor of a local `path` (or `path`) when it is a file, else None."""
    while path and not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path = parent
    return path if path and os.path.isfile(path) else None
