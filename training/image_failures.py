"""What a run does when an image of a folder dataset fails in its pipeline after the check before training.

An image that fails in the pipeline (changed since the check, or checked by its header only) is found by
decoding the split again (`training.image_checks.find_bad_files`): with `skip_bad_images` it is left out and the
pipeline rebuilt from the same step (the training stream, `Batches`) or the evaluation rebuilt; otherwise it is
named (`training.sources.ImageFailedMidRunError`, exit status 5) after the state reached is saved. A file deleted
since the pipeline was built is found too: the files it was built with (`listed_files`) are checked, not only
those the folder holds now.
"""

from __future__ import annotations

import os

import tensorflow as tf

from training.image_checks import count, find_bad_files
from training.sources import ImageFailedMidRunError, dataset_source, folder_listing, shown_path

# What a failing input pipeline raises: a file that does not decode (InvalidArgument), is gone (NotFound), cannot
# be read (PermissionDenied, DataLoss, Unknown for other I/O errors).
_INPUT_ERRORS = (tf.errors.InvalidArgumentError, tf.errors.NotFoundError, tf.errors.PermissionDeniedError,
                 tf.errors.DataLossError, tf.errors.UnknownError)


def listed_files(name: str, splits) -> dict:
    """{split: the image paths of that split} of a folder dataset (empty for others): the files its pipelines are
    built with, so that one deleted mid-run can be named (`find_bad_files(listed=...)`)."""
    if not name.startswith("folder:"):
        return {}
    return {split: tuple(folder_listing(name[len("folder:"):], split).paths) for split in dict.fromkeys(splits)}


class Batches:
    """The training iterator, which `ImageFailuresMixin._checked_step` rebuilds from a step (without the files
    then skipped)."""

    def __init__(self, make_dataset, start):
        self._make_dataset = make_dataset
        self.current = iter(make_dataset(start))

    def rebuild(self, start):
        self.current = iter(self._make_dataset(start))


class ImageFailuresMixin:
    """The image-failure steps of `training.loop`'s run; it has `cfg`, `images`, `skip_files`, `train_split`,
    `eval_split`, `checkpoints` (`training.run_state.RunCheckpoints`), `evaluate` and `_print` (and `listed`:
    `listed_files`). A mixin, not an object the run owns: a failing file changes the run's own data state (the
    files both pipelines skip, the split sizes, the evaluation it rebuilds), which the loop reads."""

    def _checked_step(self, train_step, batches, step):
        """`train_step(batches.current)`; when the input pipeline fails on a file: rebuilt without it and run again
        (--skip_bad_images), else the state reached is saved and the file named (`ImageFailedMidRunError`)."""
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
        bad = find_bad_files(self.cfg.dataset, split, self.skip_files, self.images["max_pixels"],
                             listed=getattr(self, "listed", {}).get(split, ()))
        if not bad:
            raise error
        return bad

    def _skip(self, bad, split):
        self.skip_files = self.skip_files | {path for path, _ in bad}
        named = "; ".join(f"{shown_path(path)} ({problem})" for path, problem in bad[:5])
        self._print(f"skipping {len(bad)} more image file(s) of {split} that failed in the pipeline "
                    f"(--skip_bad_images): {named}")
        if split == self.eval_split:
            self.num_eval = dataset_source(self.cfg.dataset, self.eval_split, self.cfg.data_dir,
                                           skip_files=self.skip_files).num_examples
            self._evaluation = None  # rebuilt without them
        if split == self.train_split:
            self.num_train = dataset_source(self.cfg.dataset, self.train_split, self.cfg.data_dir,
                                            skip_files=self.skip_files).num_examples

    def _bad_files_error(self, bad, split, when, save_step):
        """The error naming the files of `split` that failed `when`, after saving the state of `save_step`."""
        saved = ""
        if save_step:
            prefix = os.path.join(self.checkpoints.directory, f"ckpt-{save_step}")
            if not tf.io.gfile.exists(prefix + ".index"):
                self.checkpoints.save(save_step)
            saved = f" The state of step {save_step} is saved ({prefix}); the rerun resumes from it."
        check = ("it was checked by its header only (--image_check=headers)" if self.images["check"] != "decode"
                 else "it passed the check before training, so it was changed or deleted since")
        files = "; ".join(f"{shown_path(path)} ({problem})" for path, problem in bad[:5])
        more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
        return ImageFailedMidRunError(
            f"{count(len(bad), 'image file')} of {shown_path(self.cfg.dataset)} {split} failed {when} ({check}): "
            f"{files}{more}.{saved} Delete or replace {'it' if len(bad) == 1 else 'them'} and rerun the same "
            f"command, or rerun it with --skip_bad_images to leave {'it' if len(bad) == 1 else 'them'} out."
        )
