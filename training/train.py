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
continue from it: a lower --learning_rate with --resume_with_changes), 2 when the run cannot start (an
unwritable or mismatched --workdir, unreadable checkpoints, a missing dataset, undecodable images); both
print one `error: ...` line.
"""

from __future__ import annotations

import dataclasses
import sys
import typing

from keras_vit import cli

cli.quiet_start()  # before TensorFlow loads: its start-up lines would bury the progress (--verbose shows them)

from absl import app, flags, logging  # noqa: E402

from training import config as config_lib  # noqa: E402

FLAGS = flags.FLAGS

# The absl flag type of a config field's type (or of `type | None`); a field's `kind` or `enum_values`
# metadata (training.config._field) says it where the type does not.
_FLAG_KINDS = {str: "string", int: "integer", float: "float", bool: "bool"}


def _config_fields():
    """The `Config` fields that are flags (those with a help text), in their order, with their types."""
    types = typing.get_type_hints(config_lib.Config)
    return [(field, types[field.name]) for field in dataclasses.fields(config_lib.Config) if field.metadata.get("help")]


def _define_config_flags():
    """One flag per config field, named, typed and explained by the field; default None: the recipe's value."""
    for field, annotation in _config_fields():
        meta = field.metadata
        base = next(t for t in typing.get_args(annotation) or (annotation,) if t is not type(None))
        kind = meta.get("kind") or ("enum" if "enum_values" in meta else _FLAG_KINDS[base])
        bounds = {"lower_bound": meta["lower_bound"]} if "lower_bound" in meta else {}
        if kind == "enum":
            flags.DEFINE_enum(field.name, None, meta["enum_values"], meta["help"], **bounds)
        else:
            getattr(flags, f"DEFINE_{kind}")(field.name, None, meta["help"], **bounds)


flags.DEFINE_enum("recipe", None, list(config_lib.RECIPES), "Named set of hyperparameters; explicit flags "
                  "override it. Default: chosen from the situation (demo for the embedded digits, finetune with "
                  "--weights, scratch otherwise) and printed on the first line.")
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
flags.DEFINE_bool("skip_bad_images", False, "Leave out the files of a folder dataset that cannot be decoded "
                  "(found by a header check of both splits before training) instead of stopping.")


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
    from training import augment, data, loop  # imports TensorFlow and Keras only once the flags are valid

    try:
        augment.layers_of(cfg.augment_library)
    except augment.MissingLibraryError as error:
        raise cli.UsageError(str(error)) from None
    try:
        loop.run(cfg, resume_with_changes=FLAGS.resume_with_changes, overwrite_checkpoints=FLAGS.overwrite_checkpoints,
                 skip_bad_images=FLAGS.skip_bad_images)
    except loop.TrainingDiverged as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        sys.exit(1)
    except (loop.WorkdirError, data.DatasetNotFoundError, data.InvalidDatasetError) as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        sys.exit(2)


if __name__ == "__main__":
    cli.run(main, usage=__doc__, positional=True, tensorflow=True)
