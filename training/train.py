r"""Trains or fine-tunes a ViT as the paper did: `python -m training.train [--recipe=...] [--flags]`.

Flags are parsed here only and become one frozen `training.config.Config` (the recipe's values, then the
flags given explicitly), written to `WORKDIR/config.json`. Without flags it runs the embedded demo: a small
ViT on scikit-learn's digits (install the `demo` extra), evaluated, exported and used to classify a few
test images.

Examples:
    python -m training.train                                       # the offline demo
    python -m training.train --dataset=folder:/data/flowers --model=vit_ti16 --image_size=64 --epochs=30
    python -m training.train --recipe=finetune --weights=imagenet21k --dataset=cifar10 \
        --data_dir=/data/tfds --workdir=/tmp/ft
    python -m training.train --recipe=augreg --dataset=imagenet2012 --strategy=tpu --tpu=local

A killed run resumes when restarted with the same command, from the newest checkpoint that can be read.
The exit status is 1 when the loss diverges (the message names the last good checkpoint and the flags that
continue from it: a lower --learning_rate with --resume_with_changes), 2 when the run cannot start or its data
fail (a numeric flag outside its range, an unwritable or mismatched --workdir, one another run holds, --weights
of a run another process is training, unreadable checkpoints, a missing dataset, unusable images, or an image
that fails to decode during the run: the state reached is saved first; also a Keras backend other than
TensorFlow, found before anything is imported), 4 when the disk is full (the checkpoints written whole are kept);
each prints one `error: ...` line (docs/TRAINING.md, "Exit statuses"; 5 is reserved for a training image deleted
or changed during the run). Rerunning a finished run says so and changes nothing (exit status 0).
"""

from __future__ import annotations

import dataclasses
import sys
import typing

from keras_vit import cli

cli.quiet_start()  # before TensorFlow loads: its start-up lines would bury the progress (--verbose shows them)

from absl import app, flags, logging  # noqa: E402

from training import backend  # noqa: E402
from training import config as config_lib  # noqa: E402
from training import recipes  # noqa: E402

FLAGS = flags.FLAGS

# The absl flag type of a config field's type (or of `type | None`); a field's `kind` or `enum_values`
# metadata (training.config._field) says it where the type does not.
_FLAG_KINDS = {str: "string", int: "integer", float: "float", bool: "bool"}


def _config_fields():
    """The `Config` fields that are flags (those with a help text), in their order, with their types."""
    types = typing.get_type_hints(config_lib.Config)
    return [(field, types[field.name]) for field in dataclasses.fields(config_lib.Config) if field.metadata.get("help")]


# Config values whose meaning `--help` spells out (training.config says it in comments): (field, value) -> text.
_VALUE_MEANS = {
    ("classifier", None): "'token', the checkpoint's with --weights",
    ("data_dir", None): "tensorflow-datasets' own, ~/tensorflow_datasets",
    ("dataset", None): "none, --dataset is required",
    ("initialization", None): "'scratch'",
    ("representation_size", -1): "the hidden size",
}
# The fields a recipe chosen from the situation (no --recipe) adapts (training.recipes.situational_*).
_SITUATIONAL = ("classifier", "crop", "crop_min_area", "flip")


def _value_text(name, value) -> str:
    if (name, value) in _VALUE_MEANS:
        return _VALUE_MEANS[name, value]
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)  # as the flag takes it: --randaugment=2,15
    return "none" if value is None else cli.default_text(value)


def _default_help(field) -> str:
    """The field's help with its default as `--help` shows it: the recipe's value (a flag left out keeps it),
    one value where every recipe has the same, else each value with its recipes. A help text that already
    says its default keeps it where every recipe agrees."""
    text = field.metadata["help"]
    values = {}  # value text -> recipes, in the order of RECIPES
    for name, recipe in config_lib.RECIPES.items():
        values.setdefault(_value_text(field.name, recipe.get(field.name, field.default)), []).append(name)
    valid = f" Range: {config_lib.RANGES[field.name]}." if field.name in config_lib.RANGES else ""
    if len(values) == 1 and "default" in text:
        return text + valid  # it says its default itself
    if len(values) == 1:
        default = next(iter(values))
    else:
        default = "the recipe's: " + "; ".join(f"{value} ({', '.join(names)})" for value, names in values.items())
    if field.name in _SITUATIONAL:
        default += "; a recipe chosen without --recipe adapts it, see --recipe"
    return f"{text} (default: {default}){valid}"


def _define_config_flags():
    """One flag per config field, named, typed and explained by the field; default None: the recipe's value,
    which the help shows (`_default_help`)."""
    for field, annotation in _config_fields():
        meta = field.metadata
        base = next(t for t in typing.get_args(annotation) or (annotation,) if t is not type(None))
        kind = meta.get("kind") or ("enum" if "enum_values" in meta else _FLAG_KINDS[base])
        bounds = {"lower_bound": meta["lower_bound"]} if "lower_bound" in meta else {}
        if kind == "enum":
            flags.DEFINE_enum(field.name, None, meta["enum_values"], _default_help(field), **bounds)
        else:
            getattr(flags, f"DEFINE_{kind}")(field.name, None, _default_help(field), **bounds)


flags.DEFINE_enum("recipe", None, list(config_lib.RECIPES), "Named set of hyperparameters; explicit flags "
                  "override it. Default: chosen from the situation (demo for the embedded digits, finetune with "
                  "--weights, scratch otherwise) and printed on the first line; a chosen recipe also adapts the "
                  f"augmentation to the image size (up to {recipes.SMALL_IMAGE} pixels a side: --crop=translate "
                  "--noflip, above: --crop=inception --flip and --crop_min_area at least 0.25, unless --crop or "
                  "--flip is given; not for the digits) and, for a ViT under the chosen scratch recipe, the head "
                  "(--classifier=gap; from --weights of an own run, that run's head).")
_define_config_flags()

# How to treat an existing workdir and the data (not part of the config).
flags.DEFINE_bool("resume_with_changes", False, "Resume although optimisation flags "
                  f"({', '.join(config_lib.OPTIMISATION_FIELDS)}) differ from WORKDIR/config.json, e.g. with a "
                  "lower --learning_rate after a divergence; each change is recorded there. Model and data flags "
                  "must still match.")
flags.DEFINE_bool("overwrite_checkpoints", False, "Delete WORKDIR/checkpoints' files and train from step 0 when "
                  "none of them can be restored (without it such a workdir is refused). Readable checkpoints "
                  "are always resumed from.")
cli.define_verbose()
flags.DEFINE_bool("skip_bad_images", False, "Leave out the files of a folder dataset that cannot be used (found "
                  "by the check of both splits before training: headers, --max_image_pixels, a full decode; or "
                  "when one fails later in the pipeline) instead of stopping.")
flags.DEFINE_integer("max_image_pixels", None, "Largest image of a folder dataset, in pixels (width x height, times "
                     "the frames of a GIF), checked from the headers before training: a larger one is refused, "
                     "naming it and its size (or skipped with --skip_bad_images). 0: no limit. Default: "
                     "40,000,000 (the pipeline holds about 10 bytes per pixel of an image while it decodes and "
                     "crops it). Range: [0, 10**12].", lower_bound=0, upper_bound=10**12)
flags.DEFINE_enum("image_check", "decode", ["decode", "headers"], "How a folder dataset's images are checked "
                  "before training: decode (headers, then every image but a BMP decoded once with TensorFlow, "
                  "in parallel) or headers (headers only: faster on very large folders; an image that then fails "
                  "to decode stops the run naming it, after saving the state reached).")


def _register_range_validators():
    """A usage error (exit status 2, one line naming the flag and the value) for a numeric flag that is NaN, infinite
    or outside its `training.config.RANGES` range; a `--randaugment` it cannot take likewise."""
    for name in config_lib.RANGES:
        if name == "validation_split":
            continue  # its own message, below
        flags.register_validator(name, lambda value, name=name: config_lib.range_problem(name, value) is None,
                                 message=f"--{name} must be a finite number in {config_lib.RANGES[name]}")

    def randaugment(value):
        if value is not None:
            try:
                config_lib._parse_randaugment(value)
            except ValueError as error:
                raise flags.ValidationError(str(error)) from None
        return True

    flags.register_validator("randaugment", randaugment)


_register_range_validators()
cli.require_utf8_path(FLAGS, "workdir")
flags.register_validator(
    "validation_split", lambda value: value is None or 0.0 < value < 1.0,
    "--validation_split must be a fraction of the training images strictly between 0 and 1, e.g. 0.2 (leave it "
    "out to evaluate on the folder's test/, val/ or validation/ split)")


def _check_validation_split(fv, argv):
    if fv.validation_split is None:
        return
    if not (fv.dataset or "").startswith("folder:"):
        raise cli.UsageError(
            f"--validation_split holds out part of an image folder (--dataset=folder:PATH); for another dataset "
            f"choose the splits with --train_split and --eval_split (e.g. 'train[:90%]' and 'train[90%:]'). "
            f"Received: --dataset={fv.dataset or 'digits'}")
    given = [f"--{name}={fv[name].value}" for name in ("train_split", "eval_split") if fv[name].present]
    if given:
        raise cli.UsageError(f"--validation_split makes both splits of the folder's training images; leave out "
                             f"{' and '.join(given)}, or --validation_split. Received: {', '.join(given)}")


cli.add_check(FLAGS, _check_validation_split)


def _check_weights_not_training(fv, argv):
    from training import workdir_lock

    try:
        workdir_lock.check_not_training(fv.weights)
    except workdir_lock.WorkdirLocked as error:
        raise cli.UsageError(str(error)) from None


cli.add_check(FLAGS, _check_weights_not_training)
# Once the flags parse, before Keras or TensorFlow is imported: another Keras backend would build the model and
# then fail in TensorFlow's checkpoint code.
cli.add_check(FLAGS, lambda fv, argv: backend.check_tensorflow_backend(
    "training.train", "tf.data, tf.distribute and TF checkpoints"))


def _check_distillation_needs_a_teacher(fv, argv):
    given = [name for name in ("distillation", "distillation_alpha", "distillation_tau") if fv[name].present]
    if given and fv.teacher is None:
        raise cli.UsageError(f"--{given[0]} sets how the student learns from a teacher: pass --teacher=PATH (a run "
                             f"folder or a keras_vit model file). Received: --{given[0]}={fv[given[0]].value} without "
                             f"--teacher")


cli.add_check(FLAGS, _check_distillation_needs_a_teacher)


def config_from_flags() -> config_lib.Config:
    """The frozen config: the recipe's values, then every flag given on the command line."""
    overrides = {}
    for field, _ in _config_fields():
        if FLAGS[field.name].present:  # only the flags given: the others keep the recipe's values
            convert = field.metadata.get("from_flag")
            value = FLAGS[field.name].value
            overrides[field.name] = convert(value) if convert else value
    return config_lib.make_config(FLAGS.recipe, **overrides)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # TensorFlow's INFO lines would bury the progress
    cfg = config_from_flags()
    from training import teacher

    try:  # the teacher's file is part of the run (config.json records its content): read before anything else
        cfg = dataclasses.replace(cfg, teacher_sha256=teacher.teacher_sha256(cfg.teacher))
    except teacher.TeacherError as error:
        raise cli.UsageError(str(error)) from None
    from training import augment, loop  # imports TensorFlow and Keras only once the flags are valid
    from training.run_state import TrainingDiverged
    from training.image_checks import DEFAULT_MAX_IMAGE_PIXELS
    from training.model import ModelBuildError
    from training.sources import DatasetNotFoundError, ImageFailedMidRunError, InvalidDatasetError
    from training.workdir import DISK_FULL_EXIT, DiskFull, WorkdirError, disk_full, is_disk_full

    try:
        augment.layers_of(cfg.augment_library)
    except augment.MissingLibraryError as error:
        raise cli.UsageError(str(error)) from None
    try:
        max_pixels = DEFAULT_MAX_IMAGE_PIXELS if FLAGS.max_image_pixels is None else FLAGS.max_image_pixels
        loop.run(cfg, resume_with_changes=FLAGS.resume_with_changes, overwrite_checkpoints=FLAGS.overwrite_checkpoints,
                 skip_bad_images=FLAGS.skip_bad_images, max_image_pixels=max_pixels or None,
                 image_check=FLAGS.image_check)
    except TrainingDiverged as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        sys.exit(1)
    except ImageFailedMidRunError as error:  # before InvalidDatasetError, its base class: a status of its own
        print(f"error: {cli.flag_spelling(str(error), FLAGS)}", file=sys.stderr, flush=True)
        sys.exit(error.exit_status)
    except (WorkdirError, DatasetNotFoundError, InvalidDatasetError, ModelBuildError, teacher.TeacherError) as error:
        print(f"error: {cli.flag_spelling(str(error), FLAGS)}", file=sys.stderr, flush=True)  # in the flags' words
        sys.exit(2)
    except Exception as error:  # noqa: BLE001  a full disk wherever the run wrote: its own status
        if not is_disk_full(error):
            raise
        if not isinstance(error, DiskFull):
            error = disk_full(error, "the run's files", cfg.workdir, "The checkpoints written whole are kept.")
        print(f"error: {error}", file=sys.stderr, flush=True)
        sys.exit(DISK_FULL_EXIT)


if __name__ == "__main__":
    cli.run(main, usage=__doc__, tensorflow=True)
