"""The training state of a run (model, optimizer, step) in its workdir's `checkpoints/`: `RunCheckpoints`, which
`training.loop`'s run owns, writes and rotates it, resumes from it, and sets it aside when the run diverges (the
weight files that models load are `keras_vit.checkpoints`', another thing).

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
    * Every step checks that all weights and optimizer variables are finite after its update (`training.loop`),
      so a checkpoint on disk is never NaN. The loss of the step after each checkpoint is recorded
      (`checkpoints/losses.json`): a checkpoint is good when it was finite and at most `SANE_LOSS_FACTOR` times
      the larger of ln(classes) and the run's first loss (an exploding run is finite, with losses of 1e10, a
      step or a few before it overflows). The rotation keeps the newest `keep_checkpoints` and the last good
      one. A non-finite loss or state at step N stops the run (`TrainingDiverged`, exit status 1 in
      `training.train`); every checkpoint after the last good one is renamed `diverged-ckpt-K` so that it is
      not resumed from, and the message names the last good checkpoint and the way out: rerun with a lower
      `--learning_rate` and `--resume_with_changes` (`training.workdir`).
"""

from __future__ import annotations

import json
import math
import os
import re

import keras
import numpy as np
import tensorflow as tf

from training import checkpoint_files
from training.workdir import WorkdirError, disk_full, is_disk_full, short_error, write_atomically

# A checkpoint is good when the loss of the step after it was finite and at most this many times the larger of
# ln(classes) and the run's first loss (`RunCheckpoints._sane`); the record is WORKDIR/checkpoints/LOSSES_FILE.
SANE_LOSS_FACTOR = 10.0
LOSSES_FILE = "losses.json"


class TrainingDiverged(RuntimeError):
    """The loss, the weights or the optimizer state became NaN or infinite; the last good checkpoint is kept."""


class RunCheckpoints:
    """The checkpoints of one run's state, owned by `training.loop`'s run: `restore` at its start, `save` and
    `record_loss` as it trains, `diverged` when it stops on a non-finite value.

    Args:
        cfg: the run's `training.config.Config`.
        chief: whether this task is the chief (it alone rewrites the state file, the loss record, renames).
        num_classes: the classes of the data (a sane loss is measured against ln(classes)).
        directory: the run's `WORKDIR/checkpoints` (restored from; its state file and loss record).
        own_directory: where this task saves (the chief: `directory`; a worker: its own folder).
        log: prints a message (the run's: the chief only).
    """

    def __init__(self, cfg, chief: bool, num_classes: int, directory: str, own_directory: str, log):
        self.cfg = cfg
        self.chief = chief
        self.num_classes = num_classes
        self.directory = directory
        self.own_directory = own_directory
        self._print = log
        self.checkpoint = self.step = None  # the state's, given by `track`
        self._float_variables = []
        self._losses = {"first_loss": None, "after": {}}
        self._awaiting_loss = None  # the checkpoint whose next step's loss is still to be recorded

    def track(self, model, optimizer, step, float_variables):
        """The state to save and restore: `model`, `optimizer` and the `step` variable (a `tf.train.Checkpoint`
        of them); `float_variables`, those of them that must stay finite."""
        self.checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step)
        self.step = step
        self._float_variables = float_variables

    def restore(self, overwrite, rebuild):
        """Restores the newest checkpoint that can be read and is finite, falling back to older ones.

        Args:
            overwrite: delete checkpoint files none of which can be restored (else `WorkdirError`).
            rebuild: builds the state afresh (and `track`s it), after a failed restore may have assigned some of it.
        """
        directory = self.directory
        self._losses = _read_losses(directory)
        self._awaiting_loss = None  # the checkpoint whose next step's loss is still to be recorded
        if self.chief:
            self._remove_temp_dirs()
        found = checkpoint_files.on_disk(directory)
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
        leftovers = [os.path.join(directory, n) for n in checkpoint_files.listdir(directory)
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
            rebuild()
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
            return short_error(error)
        if not self._state_is_finite():
            return "its weights or optimizer state are not finite"
        return None

    def _remove_temp_dirs(self):
        """Deletes the `ckpt-N_temp/` folders that a save killed midway leaves (the chief, at start)."""
        stale = sorted(n for n in checkpoint_files.listdir(self.directory) if re.fullmatch(r"ckpt-\d+_temp", n))
        for name in stale:
            tf.io.gfile.rmtree(os.path.join(self.directory, name))
        if stale:
            self._print(f"removed {len(stale)} unfinished checkpoint folder(s) of interrupted saves from "
                        f"{self.directory}: {', '.join(stale)}")

    def _state_is_finite(self) -> bool:
        """Whether every float variable of the model and the optimizer is finite (copied here: no collective)."""
        return all(np.isfinite(np.asarray(v.numpy())).all() for v in self._float_variables)

    def save(self, step):
        """Writes ckpt-`step` (model, optimizer, step) and rotates: the newest `keep_checkpoints` up to `step`
        stay, and so does the last good one (`_last_good`), however old; newer ones (a damaged checkpoint of an
        earlier run that was not resumed from) are left alone until a save of their step replaces them."""
        directory = self.own_directory
        prefix = os.path.join(directory, f"ckpt-{step}")
        self.checkpoint.save_counter.assign_add(1)  # as tf.train.CheckpointManager.save: every checkpoint holds it
        try:
            self.checkpoint.write(prefix)
        except (OSError, tf.errors.OpError) as error:
            if is_disk_full(error):  # a half-written ckpt-N is not resumed from (`restore` falls back)
                raise disk_full(error, f"the checkpoint of step {step}", prefix,
                                "The checkpoints written before are kept.") from error
            raise
        self._awaiting_loss = step
        if self._losses["after"].pop(step, None) is not None:  # a record of an earlier ckpt-`step`: void now
            self._write_losses()
        ours = [(n, p) for n, p in checkpoint_files.on_disk(directory) if n <= step]  # newest first
        kept = ours[: self.cfg.keep_checkpoints]
        good = self._last_good(ours) if self.chief else None
        if good is not None and good not in kept:
            kept.append(good)
        for number, old in ours:
            if (number, old) not in kept:
                name = os.path.basename(old)
                for file_name in checkpoint_files.listdir(directory):
                    if file_name.startswith(name + "."):
                        tf.io.gfile.remove(os.path.join(directory, file_name))
        _write_checkpoint_state(directory, [p for _, p in sorted(kept)])
        return prefix

    def record_loss(self, step, loss):
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
            write_atomically(os.path.join(self.directory, LOSSES_FILE),
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

    def diverged(self, step, loss) -> TrainingDiverged:
        """The error for a non-finite loss or state at `step`; moves the checkpoints after the last good one aside.

        The loss of step N is computed from the state saved as ckpt-(N-1), before the update, and the state is
        checked after every update: ckpt-(step-1) produced the non-finite value. A checkpoint is good when the
        loss of the step after it was recorded finite and sane (`record_loss`, `_sane`): finite weights alone
        are not enough, an exploded state is finite a few steps before it overflows. A checkpoint without a
        record (saved by a run killed before its next step) counts as good at step - 2 or before (a finite
        loss and a finite update followed it). The newer ones are renamed `diverged-ckpt-N` (chief), so that a
        rerun with `--resume_with_changes` resumes from the last good one.
        """
        if math.isfinite(loss):
            what = f"The weights or optimizer state became non-finite at step {step} (the loss was {loss:.4g})"
        else:
            what = f"Loss became {loss} at step {step}"
        directory = self.directory
        found = [(n, p) for n, p in checkpoint_files.on_disk(directory) if n <= step - 1]  # newest first
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
                for file_name in checkpoint_files.listdir(directory) if self.chief else ():
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
    write_atomically(os.path.join(directory, "checkpoint"), "\n".join(lines) + "\n")



def _read_losses(directory) -> dict:
    """The loss record of `RunCheckpoints.record_loss` ({"first_loss": x, "after": {checkpoint number:
    loss}}), empty when there is none (or it cannot be read: it only refines which checkpoint is good)."""
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
