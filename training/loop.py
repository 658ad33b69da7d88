"""The training loop: one `strategy.run` code path for every `tf.distribute` strategy.

Keras 3's `model.fit` does not run under `MultiWorkerMirroredStrategy` (keras-team/keras#20585), so the app
drives the model with a small custom loop that is the same under one_device, mirrored, multi_worker and
tpu: per-replica forward/backward, cross-replica gradient sum, global-norm clipping of the summed gradient,
optimizer update (the paper's recipes: Tables 3-4, Appendix B.1). User code can still call `model.fit`
under `MirroredStrategy` (see docs/TRAINING.md).

Robustness:
    * A `tf.train.Checkpoint` of model, optimizer and step every `checkpoint_every` steps and at the end; a
      restart with the same command restores the newest one and replays the data stream from that step
      (`training.data`), so at most `checkpoint_every` steps are lost.
    * Resuming scans `checkpoints/ckpt-N.index` newest step first (the `checkpoint` state file is not trusted):
      a checkpoint that cannot be restored (corrupt, truncated, half deleted) or holds non-finite values gets a
      one-line message and the previous one is tried. The state file is then rewritten from what is on disk, so
      `keep_checkpoints` rotation counts (and deletes, oldest first) only the checkpoints up to the restored
      one; a damaged newer one is left alone until a save of the same step replaces it. A workdir whose
      checkpoint files are all unreadable is refused unless `overwrite_checkpoints` (they are deleted, training
      starts at step 0). Leftover `ckpt-N_temp/` folders of interrupted saves are removed at start.
    * Every step also checks that all weights and optimizer variables are finite after its update (one
      reduction, returned with the loss), so a checkpoint on disk is never NaN. The loss of the step after each
      checkpoint is recorded (`checkpoints/losses.json`): a checkpoint is good when it was finite and at most
      `SANE_LOSS_FACTOR` times the larger of ln(classes) and the run's first loss (an exploding run is finite,
      with losses of 1e10, a step or a few before it overflows). The rotation keeps the newest
      `keep_checkpoints` and the last good one. A non-finite loss or state at step N stops the run
      (`TrainingDiverged`, exit status 1 in `training.train`); every checkpoint after the last good one is
      renamed `diverged-ckpt-K` so that it is not resumed from, and the message names the last good checkpoint
      and the way out: rerun with a lower `--learning_rate` and `--resume_with_changes`, which lets the
      optimisation fields (`training.config.OPTIMISATION_FIELDS`) differ on resume and records each change in
      `config.json` under `"resumed_with_changes"`. Fields that change the model, the data or the numerics
      still refuse the workdir.
    * One run per workdir: an exclusive `flock` on `WORKDIR/.lock` (`training.workdir_lock`) from before the
      config check to the end of the run; a second run is refused (`WorkdirError`, naming the holder).
    * An unwritable workdir, one another run holds, a config that does not match the workdir's and unreadable
      checkpoints raise `WorkdirError`; a folder dataset's unusable images are found before training
      (`data.check_images`: headers, a pixel limit, a full decode) and refused, or skipped with
      `skip_bad_images`. An image that fails in the pipeline later (changed since, or checked by its header
      only) is found by decoding the split again: skipped (the pipeline rebuilt from the same step) or named
      after the state reached is saved; a final evaluation that fails so still writes the model and metrics.

Outputs (in `cfg.workdir`, written by the chief): `config.json`, `checkpoints/`, `tensorboard/`,
`metrics.json`, `model.keras` (with its class names in `model.labels.txt`, which `python -m keras_vit.export`
reads), `export/1/` (the TF Serving SavedModel, unless `--export=false`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import re
import shutil
import time

import keras
import numpy as np
import tensorflow as tf
from tensorflow.core.framework import summary_pb2

from training import augment, data, distribute, optim, progress, workdir_lock
from training.config import OPTIMISATION_FIELDS, Config, resolved_classifier
from training.model import build_model
from training.optim import make_optimizer

# Fields that may change between a run and its resumption (they do not change what is computed).
RESUMABLE_CHANGES = {"log_every", "show_predictions", "export", "strategy", "tpu", "jit_compile", "eval_every",
                     "checkpoint_every", "keep_checkpoints", "data_dir", "download", "workdir", "recipe_reason",
                     "rematerialize"}
# Fields that may change on resume with `resume_with_changes` (the optimisation's, see training.config).
OPTIMISATION_CHANGES = set(OPTIMISATION_FIELDS)
HISTORY_KEY = "resumed_with_changes"  # in config.json: [{"step": N, "changed": {field: [old, new]}}, ...]


EVAL_PROGRESS_FROM = 50  # evaluations of at least this many batches print progress
# A checkpoint is good when the loss of the step after it was finite and at most this many times the larger of
# ln(classes) and the run's first loss (`_Run._sane`); the record is WORKDIR/checkpoints/LOSSES_FILE.
SANE_LOSS_FACTOR = 10.0
LOSSES_FILE = "losses.json"


def _resolved(values: dict) -> dict:
    """A config.json's values with the defaults that mean the same thing made equal (`resolved_classifier`:
    an older run without --classifier resumes with --classifier=token)."""
    return dict(values, classifier=resolved_classifier(values))


class TrainingDiverged(RuntimeError):
    """The loss, the weights or the optimizer state became NaN or infinite; the last good checkpoint is kept."""


class WorkdirError(ValueError):
    """The workdir cannot be used as it is: unwritable, another run's config, or no readable checkpoint."""


def run(cfg: Config, strategy: tf.distribute.Strategy | None = None, *, resume_with_changes: bool = False,
        overwrite_checkpoints: bool = False, skip_bad_images: bool = False,
        max_image_pixels: int | None = data.DEFAULT_MAX_IMAGE_PIXELS, image_check: str = "decode") -> dict:
    """Trains, evaluates and exports as `cfg` says; returns the metrics written to `metrics.json`.

    Args:
        cfg: the run's config.
        strategy: a `tf.distribute` strategy (default: the one `cfg.strategy` names).
        resume_with_changes: let the `OPTIMISATION_CHANGES` fields differ from the workdir's `config.json`
            (the change is recorded there).
        overwrite_checkpoints: delete the workdir's checkpoint files and start at step 0 when none of them
            can be restored (else `WorkdirError`).
        skip_bad_images: leave out the files of a folder dataset that cannot be used (else an error).
        max_image_pixels: a folder dataset's images with more pixels are bad (None or 0: no limit).
        image_check: `"decode"` (headers and a full decode of every image of a folder dataset before training)
            or `"headers"` (headers only; an image that then fails to decode is named when the pipeline hits it).

    Raises:
        TrainingDiverged: on a non-finite loss, weight or optimizer variable.
        WorkdirError: for an unwritable workdir, one another run holds (its lock), one holding a run with a
            different config, or checkpoint files none of which can be restored.
        data.InvalidDatasetError: for unusable images or an empty class folder of a folder dataset (also when
            an image fails to decode during training or the final evaluation: the state reached is saved first).
        ValueError: for a config that does not fit the data or the strategy.
    """
    previous_policy = keras.config.dtype_policy()
    try:
        if cfg.mixed_precision != "none":
            keras.config.set_dtype_policy(f"mixed_{cfg.mixed_precision}")
        with contextlib.ExitStack() as cleanup:  # releases the workdir lock however the run ends
            images = dict(skip=skip_bad_images, max_pixels=max_image_pixels, check=image_check)
            return _Run(cfg, strategy, resume_with_changes, overwrite_checkpoints, images, cleanup).train_and_evaluate()
    finally:
        keras.config.set_dtype_policy(previous_policy)


class _Run:
    def __init__(self, cfg: Config, strategy, resume_with_changes=False, overwrite_checkpoints=False, images=None,
                 cleanup=None):
        self.cfg = cfg
        self.images = dict(dict(skip=False, max_pixels=data.DEFAULT_MAX_IMAGE_PIXELS, check="decode"), **(images or {}))
        keras.utils.set_random_seed(cfg.seed)
        self.strategy = strategy or distribute.make_strategy(cfg.strategy, cfg.tpu)
        self.chief = distribute.is_chief(self.strategy)
        self.replicas = self.strategy.num_replicas_in_sync
        if cfg.global_batch_size % self.replicas:
            raise ValueError(
                f"`global_batch_size` must be a multiple of the {self.replicas} replicas. "
                f"Received: global_batch_size={cfg.global_batch_size}"
            )
        self._prepare_workdir()
        self._lock_workdir(cleanup)
        config_changes = self._check_config(resume_with_changes)
        default_train, default_eval = data.default_splits(cfg.dataset, cfg.data_dir)
        self.train_split = cfg.train_split or default_train
        self.eval_split = cfg.eval_split or default_eval
        # Both splits before anything trains: a bad eval image would otherwise stop the run after training.
        self.skip_files = data.check_images(
            cfg.dataset, (self.train_split, self.eval_split), skip=self.images["skip"],
            max_pixels=self.images["max_pixels"], decode=self.images["check"] == "decode", log=self._print)
        if self.skip_files:
            self._print(f"skipping {len(self.skip_files)} image file(s) of {data.shown_path(cfg.dataset)} that cannot "
                        f"be used (--skip_bad_images), e.g. {data.shown_path(min(self.skip_files))}")
        train_source = data.dataset_source(cfg.dataset, self.train_split, cfg.data_dir, cfg.download,
                                           self.skip_files)
        self.num_classes = train_source.num_classes
        self.class_names = train_source.class_names
        self.num_train = train_source.num_examples
        self.num_eval = data.dataset_source(cfg.dataset, self.eval_split, cfg.data_dir,
                                            skip_files=self.skip_files).num_examples
        self.total_steps = cfg.train_steps(self.num_train)

        self._build_state()
        self._evaluation = None  # (dataset, steps, eval_step), built by the first `evaluate`
        self.checkpoint_dir = os.path.join(cfg.workdir, "checkpoints")
        self._restore(overwrite_checkpoints)
        self._write_config(config_changes)
        # Where this task saves (a worker: its own folder); rotated by `_save`, which keeps the last good one.
        self.own_checkpoint_dir = self.checkpoint_dir if self.chief else self._worker_dir("checkpoints")
        tf.io.gfile.makedirs(self.own_checkpoint_dir)
        if self.chief:
            self.writers = {k: tf.summary.create_file_writer(os.path.join(cfg.workdir, "tensorboard", k))
                            for k in ("train", "eval")}
        else:
            self.writers = {k: tf.summary.create_noop_writer() for k in ("train", "eval")}

    # --- setup ---------------------------------------------------------------------------------------

    def _worker_dir(self, *parts):
        return os.path.join(self.cfg.workdir, "workers", str(distribute.task_id(self.strategy)), *parts)

    def _prepare_workdir(self):
        """Creates the workdir (a worker's own folder on the other workers) and checks that it takes a file."""
        workdir = self.cfg.workdir
        own = workdir if self.chief else self._worker_dir()
        probe = os.path.join(own, f".write_test.{os.getpid()}")
        try:
            tf.io.gfile.makedirs(own)
            with tf.io.gfile.GFile(probe, "w") as f:
                f.write("")
            tf.io.gfile.remove(probe)
        except (OSError, tf.errors.OpError) as error:
            blocker = _file_on_path(own)
            reason = f"{blocker!r} is a file, not a directory" if blocker else _short(error)
            raise WorkdirError(
                f"Cannot write to --workdir={workdir!r}: {reason}. Pass a --workdir that is (or can be created "
                f"as) a writable directory."
            ) from error

    def _lock_workdir(self, cleanup):
        """Takes `WORKDIR/.lock` (a worker: its own folder's) until the run ends; refuses a workdir another run holds.

        Two runs in one workdir would pass the config check together and write into the same checkpoints.
        """
        own = self.cfg.workdir if self.chief else self._worker_dir()
        if not workdir_lock.is_lockable(own):  # gs:// and other remote paths: flock cannot lock them
            return
        path = os.path.join(own, workdir_lock.LOCK_NAME)
        lock = workdir_lock.WorkdirLock(path)
        try:
            stale = lock.acquire()
        except workdir_lock.WorkdirLocked as holder:
            raise WorkdirError(
                f"--workdir={self.cfg.workdir!r} is in use by another run: {holder} holds {data.shown_path(path)}. "
                f"Two runs in one workdir would write into the same checkpoints: wait for that run to end (or stop "
                f"it), or use another --workdir."
            ) from None
        except OSError as error:
            raise WorkdirError(f"Cannot lock --workdir={self.cfg.workdir!r}: {data.shown_path(path)}: "
                               f"{error.strerror or error}. Pass a --workdir on a local or NFS file system.") from error
        if cleanup is not None:
            cleanup.callback(lock.release)
        if stale:
            self._print(f"note: {data.shown_path(path)} named a run that ended without releasing it (crashed or "
                        f"killed): {workdir_lock.describe(stale)}; no process holds it now, so this run took it over "
                        f"(a stale lock) and resumes from the checkpoints as usual")

    def _build_state(self):
        with self.strategy.scope():
            self.model = build_model(self.cfg, self.num_classes)
            self.optimizer = make_optimizer(self.cfg, self.total_steps, self.model)
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self.checkpoint = tf.train.Checkpoint(model=self.model, optimizer=self.optimizer, step=self.step)
        self.float_variables = [v for v in [*self.model.weights, *self.optimizer.variables]
                                if tf.as_dtype(v.dtype).is_floating]

    def _check_config(self, resume_with_changes):
        """The `OPTIMISATION_CHANGES` allowed against the workdir's config.json; raises for any other change."""
        path = os.path.join(self.cfg.workdir, "config.json")
        self._config_history = []
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
        # A field newer than that config.json (e.g. augment_library) had its default there, as in `Config.from_json`.
        old = _resolved({**{f.name: f.default for f in dataclasses.fields(Config)}, **old})
        new = _resolved(json.loads(self.cfg.to_json()))
        changed = {k: (old.get(k), new[k]) for k in new if old.get(k) != new[k] and k not in RESUMABLE_CHANGES}
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

    def _write_config(self, changed):
        """Writes config.json (the chief), adding the allowed changes at the restored step to its history."""
        if changed:
            step = int(self.step.numpy())
            self._config_history.append({"step": step, "changed": {k: list(v) for k, v in changed.items()}})
            self._print(f"resumed with changes at step {step} (--resume_with_changes, recorded in config.json): "
                        + ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in changed.items()))
        if not self.chief:
            return
        values = json.loads(self.cfg.to_json())
        if self._config_history:
            values[HISTORY_KEY] = self._config_history
        _write_atomically(os.path.join(self.cfg.workdir, "config.json"), json.dumps(values, indent=2, sort_keys=True))

    # --- checkpoints ---------------------------------------------------------------------------------

    def _restore(self, overwrite):
        """Restores the newest checkpoint that can be read and is finite, falling back to older ones."""
        directory = self.checkpoint_dir
        self._losses = _read_losses(directory)
        self._awaiting_loss = None  # the checkpoint whose next step's loss is still to be recorded
        if self.chief:
            self._remove_temp_dirs()
        found = _checkpoints_on_disk(directory)
        problems = []
        for i, (number, prefix) in enumerate(found):
            problem = self._try_restore(prefix)
            if problem is None:
                self._print(f"resumed from {prefix} at step {int(self.step.numpy())}")
                self._awaiting_loss = int(self.step.numpy())
                if self.chief:  # the manager then counts and rotates only the checkpoints up to this one
                    _write_checkpoint_state(directory, [p for n, p in reversed(found) if n <= number])
                return
            problems.append(f"{prefix} ({problem})")
            older = "falling back to the previous checkpoint" if i + 1 < len(found) else "no older checkpoint"
            self._print(f"cannot restore {prefix}: {problem}; {older}")
        leftovers = [os.path.join(directory, n) for n in _listdir(directory)
                     if n.startswith("ckpt-") and not n.endswith("_temp")]
        state_file = os.path.join(directory, "checkpoint")
        self._losses = {"first_loss": None, "after": {}}  # step 0: the record of earlier checkpoints is void
        if not leftovers:  # a fresh start; a state file left alone would name checkpoints that are gone
            if self.chief and tf.io.gfile.exists(state_file):
                tf.io.gfile.remove(state_file)
            return
        if not overwrite:
            listed = "; ".join(problems) if problems else f"no ckpt-N.index beside {os.path.basename(leftovers[0])}"
            raise WorkdirError(
                f"{directory} holds checkpoint files but none can be restored: {listed}. Put back intact copies to "
                f"resume, or pass --overwrite_checkpoints to delete them and train from step 0 (or use another "
                f"--workdir)."
            )
        if problems:  # a failed restore may have assigned some variables: start from a fresh initialisation
            keras.utils.set_random_seed(self.cfg.seed)
            self._build_state()
        if self.chief:
            for path in leftovers + [state_file]:
                if tf.io.gfile.exists(path):
                    tf.io.gfile.remove(path)
            self._print(f"deleted {len(leftovers)} unreadable checkpoint file(s) from {directory} "
                        f"(--overwrite_checkpoints); training from step 0")

    def _try_restore(self, prefix):
        """Restores `prefix`; returns why it cannot be used (None: restored, all finite)."""
        try:
            self.checkpoint.restore(prefix).assert_existing_objects_matched()
        except Exception as error:  # a bad file raises IndexError, DataLossError, NotFoundError, ...
            return _short(error)
        if not self._state_is_finite():
            return "its weights or optimizer state are not finite"
        return None

    def _remove_temp_dirs(self):
        """Deletes the `ckpt-N_temp/` folders that a save killed midway leaves (the chief, at start)."""
        stale = sorted(n for n in _listdir(self.checkpoint_dir) if re.fullmatch(r"ckpt-\d+_temp", n))
        for name in stale:
            tf.io.gfile.rmtree(os.path.join(self.checkpoint_dir, name))
        if stale:
            self._print(f"removed {len(stale)} unfinished checkpoint folder(s) of interrupted saves from "
                        f"{self.checkpoint_dir}: {', '.join(stale)}")

    def _state_is_finite(self) -> bool:
        """Whether every float variable of the model and the optimizer is finite (copied here: no collective)."""
        return all(np.isfinite(np.asarray(v.numpy())).all() for v in self.float_variables)

    def _save(self, step):
        """Writes ckpt-`step` (model, optimizer, step) and rotates: the newest `keep_checkpoints` up to `step`
        stay, and so does the last good one (`_last_good`), however old; newer ones (a damaged checkpoint of an
        earlier run that was not resumed from) are left alone until a save of their step replaces them."""
        directory = self.own_checkpoint_dir
        prefix = os.path.join(directory, f"ckpt-{step}")
        self.checkpoint.save_counter.assign_add(1)  # as tf.train.CheckpointManager.save: every checkpoint holds it
        self.checkpoint.write(prefix)
        self._awaiting_loss = step
        if self._losses["after"].pop(step, None) is not None:  # a record of an earlier ckpt-`step`: void now
            self._write_losses()
        ours = [(n, p) for n, p in _checkpoints_on_disk(directory) if n <= step]  # newest first
        kept = ours[: self.cfg.keep_checkpoints]
        good = self._last_good(ours) if self.chief else None
        if good is not None and good not in kept:
            kept.append(good)
        for number, old in ours:
            if (number, old) not in kept:
                name = os.path.basename(old)
                for file_name in _listdir(directory):
                    if file_name.startswith(name + "."):
                        tf.io.gfile.remove(os.path.join(directory, file_name))
        _write_checkpoint_state(directory, [p for _, p in sorted(kept)])
        return prefix

    def _record_loss(self, step, loss):
        """Records the first loss of the run and the loss of the step after each checkpoint: a checkpoint is good
        when that loss was finite and sane (`_sane`), the test of a state a run can continue from."""
        changed = False
        if step == 1:
            self._losses["first_loss"], changed = loss, True
        if self._awaiting_loss == step - 1:
            self._losses["after"][step - 1], self._awaiting_loss, changed = loss, None, True
        if changed:
            self._write_losses()

    def _write_losses(self):
        if self.chief:
            after = {str(k): v for k, v in sorted(self._losses["after"].items())}
            _write_atomically(os.path.join(self.checkpoint_dir, LOSSES_FILE),
                              json.dumps({"first_loss": self._losses["first_loss"], "after": after}, indent=1))

    def _loss_limit(self) -> float:
        """The largest loss of a sane step: `SANE_LOSS_FACTOR` times the larger of ln(classes) (the loss of a
        uniform guess) and the run's first loss."""
        first = self._losses["first_loss"]
        scale = max(math.log(max(self.num_classes, 2)), first if first is not None and math.isfinite(first) else 0.0)
        return SANE_LOSS_FACTOR * scale

    def _sane(self, loss) -> bool:
        return loss is not None and math.isfinite(loss) and loss <= self._loss_limit()

    def _last_good(self, checkpoints):
        """The newest of `checkpoints` ((number, prefix), newest first) whose next step had a sane loss."""
        return next(((n, p) for n, p in checkpoints if self._sane(self._losses["after"].get(n))), None)

    def _diverged(self, step, loss) -> TrainingDiverged:
        """The error for a non-finite loss or state at `step`; moves the checkpoints after the last good one aside.

        The loss of step N is computed from the state saved as ckpt-(N-1), before the update, and the state is
        checked after every update: ckpt-(step-1) produced the non-finite value. A checkpoint is good when the
        loss of the step after it was recorded finite and sane (`_record_loss`, `_sane`): finite weights alone
        are not enough, an exploded state is finite a few steps before it overflows. A checkpoint without a
        record (saved by a run killed before its next step) counts as good at step - 2 or before (a finite
        loss and a finite update followed it). The newer ones are renamed `diverged-ckpt-N` (chief), so that a
        rerun with `--resume_with_changes` resumes from the last good one.
        """
        if math.isfinite(loss):
            what = f"The weights or optimizer state became non-finite at step {step} (the loss was {loss:.4g})"
        else:
            what = f"Loss became {loss} at step {step}"
        directory = self.checkpoint_dir
        found = [(n, p) for n, p in _checkpoints_on_disk(directory) if n <= step - 1]  # newest first
        after = self._losses["after"]

        def good(number):
            if number == step - 1:
                return False
            return self._sane(after[number]) if number in after else number <= step - 2

        last_good = next(((n, p) for n, p in found if good(n)), None)
        aside = [(n, p) for n, p in found if last_good is None or n > last_good[0]]
        moved = ""
        if aside:
            reasons = []
            for number, prefix in aside:  # ckpt-N.index, ckpt-N.data-* -> diverged-ckpt-N.*: no longer resumed from
                name = os.path.basename(prefix)
                for file_name in _listdir(directory) if self.chief else ():
                    if file_name.startswith(name + "."):
                        tf.io.gfile.rename(os.path.join(directory, file_name),
                                           os.path.join(directory, "diverged-" + file_name), overwrite=True)
                next_loss = loss if number == step - 1 else after.get(number)
                reasons.append(f"{name} (next loss {next_loss:.3g})" if next_loss is not None else name)
            moved = (f" {_count(len(aside), 'checkpoint')} after the last good one, whose next steps' losses were not "
                     f"finite or over {SANE_LOSS_FACTOR:g}x the loss of a uniform guess or the first step "
                     f"(above {self._loss_limit():.3g}), moved aside to diverged-ckpt-N in {directory}: "
                     f"{', '.join(reversed(reasons))}.")
            if self.chief:
                kept = [p for n, p in reversed(found) if last_good is not None and n <= last_good[0]]
                if kept:
                    _write_checkpoint_state(directory, kept)
                elif tf.io.gfile.exists(os.path.join(directory, "checkpoint")):
                    tf.io.gfile.remove(os.path.join(directory, "checkpoint"))
        if last_good is not None:
            number, prefix = last_good
            why = (f"the loss of the step after it was {after[number]:.4g}" if number in after
                   else "all finite, a finite step after it")
            where = f"The last good checkpoint is {prefix} (step {number}: {why})."
            then = f"to continue from {prefix}"
        else:
            where, then = "There is no last good checkpoint to resume from.", "to train again from step 0"
        return TrainingDiverged(
            f"{what}; stopped without saving.{moved} {where} The same command would diverge the same way: rerun "
            f"it with --learning_rate=<lower than {self.cfg.learning_rate:g}> --resume_with_changes {then} (more "
            f"--warmup_steps, a --grad_clip_norm or another --schedule can be given the same way), or use a new "
            f"--workdir."
        )

    # --- data -------------------------------------------------------------------------------------

    def _train_dataset(self, start_step):
        cfg = self.cfg
        transform = augment.make_batch_transform(
            self.num_classes, cfg.randaugment, cfg.mixup, cfg.cutmix, seed=cfg.seed + 1_000_003 * start_step,
            library=cfg.augment_library,
        )

        def dataset_fn(context):
            ds, _ = data.make_dataset(
                cfg.dataset, self.train_split, cfg.data_dir, cfg.image_size,
                context.get_per_replica_batch_size(cfg.global_batch_size), training=True, seed=cfg.seed,
                crop=cfg.crop, crop_min_area=cfg.crop_min_area, flip=cfg.flip, shuffle_buffer=cfg.shuffle_buffer,
                start_index=start_step * cfg.global_batch_size // context.num_input_pipelines,
                input_context=context, batch_transform=transform, skip_files=self.skip_files,
            )
            return ds

        return self.strategy.distribute_datasets_from_function(dataset_fn)

    def _eval_dataset(self):
        cfg = self.cfg
        steps = []

        def dataset_fn(context):
            per_replica = context.get_per_replica_batch_size(cfg.global_batch_size)
            ds, _ = data.make_dataset(cfg.dataset, self.eval_split, cfg.data_dir, cfg.image_size, per_replica,
                                      training=False, input_context=context, skip_files=self.skip_files)
            pipelines = context.num_input_pipelines
            steps.append(data.eval_batches_per_pipeline(self.num_eval, cfg.global_batch_size, pipelines))
            return data.pad_eval_batches(ds, per_replica, steps[-1] * (context.num_replicas_in_sync // pipelines))

        dataset = self.strategy.distribute_datasets_from_function(dataset_fn)
        return dataset, steps[0]

    # --- steps ---------------------------------------------------------------------------------------

    def _make_train_step(self):
        cfg, model, optimizer, replicas = self.cfg, self.model, self.optimizer, self.replicas
        loss_scaled = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)

        def replica_step(images, labels):
            if labels.shape.rank == 1:
                labels = tf.one_hot(labels, self.num_classes)
            with tf.GradientTape() as tape:
                logits = model(images, training=True)
                per_example = keras.losses.categorical_crossentropy(
                    labels, tf.cast(logits, tf.float32), from_logits=True, label_smoothing=cfg.label_smoothing
                )
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=cfg.global_batch_size)
                if model.losses:
                    loss += tf.nn.scale_regularization_loss(tf.add_n(model.losses))
                scaled_loss = optimizer.scale_loss(loss)
            variables = model.trainable_variables
            grads = tape.gradient(scaled_loss, variables)
            # Sum over replicas first, then clip the global gradient (clipping is scale-equivariant, so the
            # loss scale just multiplies the limit). Keras' optimizer sums the replicas again: divide first.
            grads = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, grads)
            if cfg.grad_clip_norm:
                limit = cfg.grad_clip_norm * (tf.cast(optimizer.dynamic_scale, tf.float32) if loss_scaled else 1.0)
                grads, _ = tf.clip_by_global_norm(grads, limit)
            if replicas > 1:
                grads = [g / replicas for g in grads]
            optimizer.apply(grads, variables)
            # 1.0 when a weight or optimizer variable is no longer finite (this replica's copy, after the update).
            bad = 1.0 - tf.cast(tf.reduce_all(tf.stack([tf.reduce_all(tf.math.is_finite(v))
                                                         for v in self.float_variables])), tf.float32)
            return tf.stack([loss, bad])

        if cfg.jit_compile:
            replica_step = tf.function(replica_step, jit_compile=True)

        @tf.function
        def train_step(iterator):  # [loss, replicas whose state is not finite], one reduction
            images, labels = next(iterator)
            # No update before the batch is there (the optimizer's and the step's counters would not wait for it):
            # a batch that fails to load (a bad file, `_checked_step`) leaves the state of the previous step.
            with tf.control_dependencies(tf.nest.flatten((images, labels), expand_composites=True)):
                loss_and_bad = self.strategy.run(replica_step, args=(images, labels))
                self.step.assign_add(1)
            return self.strategy.reduce(tf.distribute.ReduceOp.SUM, loss_and_bad, axis=None)

        return train_step

    def _make_eval_step(self):
        model = self.model

        def replica_step(images, labels, mask):
            logits = tf.cast(model(images, training=False), tf.float32)
            loss = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
            correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels), tf.float32)
            return tf.reduce_sum(loss * mask), tf.reduce_sum(correct * mask), tf.reduce_sum(mask)

        @tf.function
        def eval_step(iterator):
            results = self.strategy.run(replica_step, args=next(iterator))
            return [self.strategy.reduce(tf.distribute.ReduceOp.SUM, r, axis=None) for r in results]

        return eval_step

    # --- loop ----------------------------------------------------------------------------------------

    def evaluate(self) -> dict:
        if self._evaluation is None:  # built once: mid-training evaluations reuse the dataset and its tf.function
            dataset, steps = self._eval_dataset()
            self._evaluation = dataset, steps, self._make_eval_step()
        dataset, steps, eval_step = self._evaluation
        iterator = iter(dataset)
        totals = np.zeros(3)
        # A line per tenth of a long evaluation (the batch size is per step, summed over replicas).
        shown = progress.Progress(steps, max(1, steps // 10), items_per_step=self.cfg.global_batch_size,
                                  enabled=self.chief and steps >= EVAL_PROGRESS_FROM, label="eval batch")
        for batch in range(1, steps + 1):
            totals += [float(x) for x in eval_step(iterator)]
            shown.update(batch)
        loss_sum, correct, count = totals
        return {"eval_loss": loss_sum / count, "eval_accuracy": correct / count, "eval_examples": int(count)}

    def train_and_evaluate(self) -> dict:
        cfg = self.cfg
        start = int(self.step.numpy())
        if cfg.recipe_reason:
            self._print(f"recipe: {cfg.recipe}, chosen for {cfg.recipe_reason}; --recipe=NAME chooses another")
        else:
            self._print(f"recipe: {cfg.recipe} (--recipe)")
        _, warmup_note = optim.fitted_warmup(cfg.warmup_steps, self.total_steps)
        if warmup_note:
            self._print(warmup_note)
        self._print(
            f"training {self.model.name} ({self.model.count_params():,} parameters) on {cfg.dataset} "
            f"[{self.train_split}: {self.num_train} images, {self.num_classes} classes] for {self.total_steps} steps "
            f"of {cfg.global_batch_size} images, {self.replicas} replica(s), {type(self.strategy).__name__}"
        )
        images_per_sec = None  # nothing left to train: a finished run restarted only evaluates
        if start < self.total_steps:
            images_per_sec = self._train(start)
        metrics_path = os.path.join(cfg.workdir, "metrics.json")
        if images_per_sec is None and tf.io.gfile.exists(metrics_path):
            with tf.io.gfile.GFile(metrics_path) as f:
                images_per_sec = json.loads(f.read()).get("train_images_per_sec")
        trained = dict(train_images_per_sec=images_per_sec, steps=int(self.step.numpy()),
                       total_steps=self.total_steps, dataset=cfg.dataset, model=self.model.name)
        try:
            eval_metrics = self._checked_evaluate(None)
        except data.InvalidDatasetError as failure:  # keep what training made: the model, its metrics
            self._keep_after_failed_evaluation(trained, metrics_path, failure)
        metrics = dict(eval_metrics, **trained)
        with self.writers["eval"].as_default():
            for key in ("eval_loss", "eval_accuracy"):
                _scalar(key, metrics[key], step=metrics["steps"])
        self.writers["eval"].flush()
        if self.chief:
            with tf.io.gfile.GFile(metrics_path, "w") as f:
                f.write(json.dumps(metrics, indent=2, sort_keys=True))
        self._save_and_export(metrics)
        self._print(
            f"final: eval_accuracy={metrics['eval_accuracy']:.4f} eval_loss={metrics['eval_loss']:.4f} "
            f"on {metrics['eval_examples']} {self.eval_split} images after {metrics['steps']} steps, "
            f"{'n/a' if images_per_sec is None else f'{images_per_sec:.0f}'} train images/s, workdir {cfg.workdir}"
        )
        return metrics

    def _train(self, start) -> float | None:
        cfg = self.cfg
        train_step = self._make_train_step()
        iterator = _Batches(self._train_dataset, start)  # rebuilt without a file that fails (--skip_bad_images)
        every = cfg.log_every or progress.log_cadence(self.total_steps)
        shown = progress.Progress(self.total_steps, every, start=start, items_per_step=cfg.global_batch_size,
                                  enabled=self.chief)
        self._print("compiling the training step (the first step takes a while on CPU) ...")
        timed_from, timed_steps, window_start, window_step = None, 0, time.perf_counter(), start
        for step in range(start + 1, self.total_steps + 1):
            loss, bad = (float(x) for x in self._checked_step(train_step, iterator, step))
            if not math.isfinite(loss) or bad:
                raise self._diverged(step, loss)
            self._record_loss(step, loss)
            now = time.perf_counter()
            if timed_from is None:
                timed_from = now  # the first step includes tracing; throughput counts the rest
                self._print(f"compiled the training step: the first step took {now - window_start:.1f} s")
            else:
                timed_steps += 1
            if step % cfg.checkpoint_every == 0 or step == self.total_steps:
                self._save(step)  # the state was checked finite by this step
            if shown.due(step):
                rate = cfg.global_batch_size * (step - window_step) / max(now - window_start, 1e-9)
                window_start, window_step = now, step
                lr = float(self.optimizer.learning_rate)
                with self.writers["train"].as_default():
                    _scalar("loss", loss, step=step)
                    _scalar("learning_rate", lr, step=step)
                    _scalar("images_per_sec", rate, step=step)
                shown.update(step, now=now, loss=loss, lr=lr)
            else:
                shown.update(step, now=now)
            if cfg.eval_every and step % cfg.eval_every == 0 and step != self.total_steps:
                metrics = self._checked_evaluate(step)
                with self.writers["eval"].as_default():
                    for key in ("eval_loss", "eval_accuracy"):
                        _scalar(key, metrics[key], step=step)
                self._print(f"step {step}: eval_accuracy={metrics['eval_accuracy']:.4f} "
                            f"eval_loss={metrics['eval_loss']:.4f}")
        for writer in self.writers.values():
            writer.flush()
        elapsed = time.perf_counter() - timed_from if timed_from is not None else 0.0
        return cfg.global_batch_size * timed_steps / elapsed if timed_steps and elapsed > 0 else None

    # --- images that fail during the run ---------------------------------------------------------------

    def _checked_step(self, train_step, batches, step):
        """`train_step(batches.current)`; when the input pipeline fails on a file: rebuilt without it and run again
        (--skip_bad_images), else the state reached is saved and the file named (`data.InvalidDatasetError`)."""
        while True:
            try:
                return train_step(batches.current)
            except _INPUT_ERRORS as error:
                bad = self._bad_files(error, self.train_split)
                if not self.images["skip"]:
                    raise self._bad_files_error(bad, self.train_split, f"at training step {step}", step - 1) from None
                self._skip(bad, self.train_split)
                batches.rebuild(step - 1)

    def _checked_evaluate(self, step):
        """`evaluate()`, with a file that fails to decode skipped (--skip_bad_images) or named (after saving the
        state of `step` when it is given, the mid-training evaluations)."""
        while True:
            try:
                return self.evaluate()
            except _INPUT_ERRORS as error:
                bad = self._bad_files(error, self.eval_split)
                if not self.images["skip"]:
                    when = f"evaluating at step {step}" if step is not None else "in the final evaluation"
                    raise self._bad_files_error(bad, self.eval_split, when, step) from None
                self._skip(bad, self.eval_split)

    def _bad_files(self, error, split):
        """The files of `split` that fail now (after `error` from the pipeline); re-raises `error` when none does
        (not a bad file: a bug, memory, ... to see as it is)."""
        bad = data.find_bad_files(self.cfg.dataset, split, self.skip_files, self.images["max_pixels"])
        if not bad:
            raise error
        return bad

    def _skip(self, bad, split):
        self.skip_files = self.skip_files | {path for path, _ in bad}
        named = "; ".join(f"{data.shown_path(path)} ({problem})" for path, problem in bad[:5])
        self._print(f"skipping {len(bad)} more image file(s) of {split} that failed in the pipeline "
                    f"(--skip_bad_images): {named}")
        if split == self.eval_split:
            self.num_eval = data.dataset_source(self.cfg.dataset, self.eval_split, self.cfg.data_dir,
                                                skip_files=self.skip_files).num_examples
            self._evaluation = None  # rebuilt without them
        if split == self.train_split:
            self.num_train = data.dataset_source(self.cfg.dataset, self.train_split, self.cfg.data_dir,
                                                 skip_files=self.skip_files).num_examples

    def _bad_files_error(self, bad, split, when, save_step):
        """The error naming the files of `split` that failed `when`, after saving the state of `save_step`."""
        saved = ""
        if save_step:
            prefix = os.path.join(self.checkpoint_dir, f"ckpt-{save_step}")
            if not tf.io.gfile.exists(prefix + ".index"):
                self._save(save_step)
            saved = f" The state of step {save_step} is saved ({prefix}); the rerun resumes from it."
        check = ("it was checked by its header only (--image_check=headers)" if self.images["check"] != "decode"
                 else "it passed the check before training, so it changed since")
        files = "; ".join(f"{data.shown_path(path)} ({problem})" for path, problem in bad[:5])
        more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
        return data.InvalidDatasetError(
            f"{_count(len(bad), 'image file')} of {data.shown_path(self.cfg.dataset)} {split} failed {when} ({check}): "
            f"{files}{more}.{saved} Delete or replace {'it' if len(bad) == 1 else 'them'} and rerun the same "
            f"command, or rerun it with --skip_bad_images to leave {'it' if len(bad) == 1 else 'them'} out."
        )

    def _keep_after_failed_evaluation(self, trained, metrics_path, failure):
        """Writes what a run whose final evaluation failed has (metrics.json without the evaluation, model.keras,
        the export; its last checkpoint is on disk) and raises `failure` saying so."""
        metrics = dict(trained, eval_error=str(failure))
        if self.chief:
            with tf.io.gfile.GFile(metrics_path, "w") as f:
                f.write(json.dumps(metrics, indent=2, sort_keys=True))
        self._save_and_export(metrics, show_predictions=False)
        raise data.InvalidDatasetError(
            f"{failure} Training finished ({trained['steps']} steps): the model "
            f"({os.path.join(self.cfg.workdir, 'model.keras')}), "
            f"its checkpoint and metrics.json (without the evaluation) are written; the rerun only evaluates."
        ) from None

    def _save_and_export(self, metrics, show_predictions=True):
        """Saves a float32 single-device copy (model.keras), exports it, classifies a few eval images."""
        cfg = self.cfg
        model = _float32_copy(self.model)
        if not self.chief:
            os.makedirs(self._worker_dir(), exist_ok=True)
            model.save_weights(self._worker_dir("model.weights.h5"))
            shutil.rmtree(self._worker_dir("checkpoints"), ignore_errors=True)
            return
        model.save(os.path.join(cfg.workdir, "model.keras"))
        with tf.io.gfile.GFile(os.path.join(cfg.workdir, "model.labels.txt"), "w") as f:  # for later exports
            f.write("".join(f"{name}\n" for name in self.class_names))
        model.save_weights(os.path.join(cfg.workdir, "model.weights.h5"))
        classify = None
        if cfg.export:
            classify = self._export(model)
        if classify is None:
            def classify(images):
                logits = model.predict(data.to_model_range(images), verbose=0)
                return [self.class_names[i] for i in np.argmax(logits, -1)], _softmax(logits).max(-1)
        if cfg.show_predictions and show_predictions:
            self._show_predictions(classify)

    def _export(self, model):
        """Exports a TF Serving SavedModel to WORKDIR/export/1 and returns a classifier that uses it."""
        from keras_vit import export  # part of the package: a failing import is a bug to see, not to skip

        path = export.export_saved_model(model, os.path.join(self.cfg.workdir, "export"), version=1,
                                         labels=list(self.class_names), overwrite=True, model_name="vit")
        self._print(f"exported a SavedModel for TF Serving to {path}")
        serving = tf.saved_model.load(path).signatures["serving_default"]

        def classify(images):  # encoded PNGs in, as a TF Serving client sends them
            encoded = tf.stack([tf.io.encode_png(tf.cast(image, tf.uint8)) for image in images])
            outputs = serving(images=encoded)
            labels = [label.decode() for label in outputs["labels"].numpy()[:, 0]]
            return labels, outputs["scores"].numpy()[:, 0]

        return classify

    def _show_predictions(self, classify):
        cfg = self.cfg
        source = data.dataset_source(cfg.dataset, self.eval_split, cfg.data_dir, skip_files=self.skip_files)
        images, labels = [], []
        for image, label in source.elements.shuffle(1000, seed=0).take(cfg.show_predictions):
            image = data.eval_image(source.decode(image), (cfg.image_size, cfg.image_size))
            images.append(tf.cast(tf.round(image), tf.uint8).numpy())
            labels.append(int(label))
        predicted, scores = classify(np.stack(images))
        names = self.class_names
        lines = [f"  {i}: predicted {p} ({s:.2f}), label {names[t]}{'' if p == names[t] else '  <- wrong'}"
                 for i, (p, s, t) in enumerate(zip(predicted, scores, labels))]
        self._print(f"classified {len(lines)} {self.eval_split} images with the exported model:\n" + "\n".join(lines))

    def _print(self, message):
        if self.chief:
            print(message, flush=True)


_SCALAR_METADATA = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
)


def _scalar(name, value, step):
    """`tf.summary.scalar` without the tensorboard package (tensorflow-cpu does not ship it)."""
    tf.summary.write(name, tf.constant(value, tf.float32), step=step, metadata=_SCALAR_METADATA)


def _checkpoints_on_disk(directory):
    """`(number, prefix)` of every `ckpt-N.index` in `directory`, the newest (highest N) first."""
    found = [re.fullmatch(r"ckpt-(\d+)\.index", name) for name in _listdir(directory)]
    return sorted(((int(m.group(1)), os.path.join(directory, m.group(0)[:-len(".index")])) for m in found if m),
                  reverse=True)


def _listdir(directory):
    """The names in `directory` (listed, not globbed), none when it does not exist."""
    if not tf.io.gfile.isdir(directory):
        return []
    return [name.rstrip("/") for name in tf.io.gfile.listdir(directory)]


def _write_checkpoint_state(directory, prefixes):
    """Rewrites the `checkpoint` state file that `tf.train.CheckpointManager` reads: `prefixes`, oldest first.

    Their files' times go in as the save times (and the last preserved time before them), so the manager
    rotates exactly these, oldest first, and the last one is the latest.
    """
    names = [os.path.basename(p) for p in prefixes]
    times = [tf.io.gfile.stat(p + ".index").mtime_nsec / 1e9 for p in prefixes]
    lines = [f'model_checkpoint_path: "{names[-1]}"']
    lines += [f'all_model_checkpoint_paths: "{name}"' for name in names]
    lines += [f"all_model_checkpoint_timestamps: {t!r}" for t in times]
    lines.append(f"last_preserved_timestamp: {min(times) - 1.0!r}")
    _write_atomically(os.path.join(directory, "checkpoint"), "\n".join(lines) + "\n")


# What a failing input pipeline raises: a file that does not decode (InvalidArgument), is gone (NotFound), cannot
# be read (PermissionDenied, DataLoss, Unknown for other I/O errors).
_INPUT_ERRORS = (tf.errors.InvalidArgumentError, tf.errors.NotFoundError, tf.errors.PermissionDeniedError,
                 tf.errors.DataLossError, tf.errors.UnknownError)


class _Batches:
    """The training iterator, which `_Run._checked_step` rebuilds from a step (without the files then skipped)."""

    def __init__(self, make_dataset, start):
        self._make_dataset = make_dataset
        self.current = iter(make_dataset(start))

    def rebuild(self, start):
        self.current = iter(self._make_dataset(start))


def _read_losses(directory) -> dict:
    """The loss record of `_Run._record_loss` ({"first_loss": x, "after": {checkpoint number: loss}}), empty
    when there is none (or it cannot be read: it only refines which checkpoint is good)."""
    path = os.path.join(directory, LOSSES_FILE)
    try:
        with tf.io.gfile.GFile(path) as f:
            values = json.loads(f.read())
        return {"first_loss": values.get("first_loss"),
                "after": {int(k): float(v) for k, v in values.get("after", {}).items()}}
    except (tf.errors.OpError, OSError, ValueError, AttributeError, TypeError):
        return {"first_loss": None, "after": {}}


def _count(n, one, many=None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


def _write_atomically(path, text):
    """Writes whole, then renames: other workers may be reading `path`."""
    with tf.io.gfile.GFile(path + ".tmp", "w") as f:
        f.write(text)
    tf.io.gfile.rename(path + ".tmp", path, overwrite=True)


def _short(error) -> str:
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


def _softmax(logits):
    logits = np.asarray(logits, np.float64)
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _float32_copy(model):
    """The same model (from its config, its constructor's arguments: numerics carry over) in float32, unreplicated."""
    copy = type(model).from_config({**model.get_config(), "dtype": "float32"})
    copy.set_weights([np.asarray(w, np.float32) for w in model.get_weights()])
    return copy