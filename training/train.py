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

import sys

from keras_vit import cli

cli.quiet_start()  # before TensorFlow loads: its start-up lines would bury the progress (--verbose shows them)

from absl import app, flags, logging  # noqa: E402

from training import config as config_lib  # noqa: E402

FLAGS = flags.FLAGS

_FIELDS = {}


def _define(kind, name, help_text, **kwargs):
    if kind == "enum":
        flags.DEFINE_enum(name, None, kwargs.pop("enum_values"), help_text, **kwargs)
    else:
        getattr(flags, f"DEFINE_{kind}")(name, None, help_text, **kwargs)
    _FIELDS[name] = kind


flags.DEFINE_enum("recipe", None, list(config_lib.RECIPES), "Named set of hyperparameters; explicit flags "
                  "override it. Default: chosen from the situation (demo for the embedded digits, finetune with "
                  "--weights, scratch otherwise) and printed on the first line.")
# Model.
_define("string", "model", "'tiny' or a variant name such as vit_ti16, vit_b16, vit_l16.")
for _name in ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim"):
    _define("integer", _name, f"Overrides the variant's {_name}.", lower_bound=1)
_define("enum", "classifier", "token ([class] token) or gap (mean of the patch tokens).", enum_values=["token", "gap"])
_define("integer", "representation_size", "Width of the tanh pre-logits layer (imagenet21k pre-training).")
_define("float", "head_bias_init", "Initial head bias (-10 in the imagenet21k pre-training).")
_define("float", "dropout_rate", "Dropout rate.")
_define("float", "drop_path_rate", "Stochastic depth rate.")
_define("string", "weights", "Initial weights for fine-tuning: a published name or a file (keras_vit.ViT(weights=)).")
_define("bool", "zero_head", "Zero-initialise the head (on in --recipe=finetune).")
# Data.
_define("string", "dataset", "digits (embedded), folder:PATH (ImageFolder) or a tensorflow-datasets name.")
_define("string", "data_dir", "tensorflow-datasets data directory.")
_define("bool", "download", "Let tensorflow-datasets download and prepare a missing dataset.")
_define("string", "train_split", "Training split (default train).")
_define("string", "eval_split", "Evaluation split (default test, val or validation).")
_define("integer", "image_size", "Training and evaluation resolution.", lower_bound=1)
_define("enum", "crop", "Training crop: inception (random-resized), translate (random shift by up to a tenth of "
        "the side, reflected borders) or none.", enum_values=list(config_lib.CROPS))
_define("float", "crop_min_area", "Smallest Inception-crop area fraction (0.05 officially).")
_define("bool", "flip", "Random horizontal flips while training.")
_define("string", "randaugment", "RandAugment 'num_ops,magnitude' (magnitude 0..30), e.g. 2,15; 'none' to disable.")
_define("float", "mixup", "Mixup alpha (0 disables).")
_define("float", "cutmix", "CutMix alpha (0 disables).")
_define("integer", "shuffle_buffer", "Shuffle buffer in examples.")
# Optimisation.
_define("integer", "steps", "Training steps (replaces --epochs).")
_define("float", "epochs", "Training epochs (replaces --steps).")
_define("integer", "global_batch_size", "Batch size summed over all replicas.")
_define("enum", "optimizer", "adam, adamw (decoupled weight decay) or sgd (momentum).",
        enum_values=list(config_lib.OPTIMIZERS))
_define("float", "learning_rate", "Peak learning rate.")
_define("float", "beta_1", "Adam beta_1.")
_define("float", "beta_2", "Adam beta_2.")
_define("float", "momentum", "SGD momentum.")
_define("enum", "schedule", "Decay after warm-up.", enum_values=list(config_lib.SCHEDULES))
_define("integer", "warmup_steps", "Linear warm-up steps.")
_define("float", "weight_decay", "Decoupled weight decay on kernels (0 disables).")
_define("float", "grad_clip_norm", "Clip the global gradient norm (0 disables).")
_define("float", "label_smoothing", "Label smoothing.")
# Runtime.
_define("enum", "mixed_precision", "none, bfloat16 or float16 (with loss scaling).",
        enum_values=list(config_lib.PRECISIONS))
_define("bool", "jit_compile", "XLA-compile the training step.")
_define("enum", "strategy", "tf.distribute strategy.", enum_values=list(config_lib.STRATEGIES))
_define("string", "tpu", "TPU name or address for TPUClusterResolver ('local' on a TPU VM).")
_define("string", "workdir", "Where config, checkpoints, summaries, metrics and the export go.")
_define("integer", "seed", "Seed of initialisation, data order and augmentation.")
_define("integer", "checkpoint_every", "Checkpoint every N steps (and at the end).")
_define("integer", "keep_checkpoints", "Checkpoints kept.")
_define("integer", "log_every", "Progress and summaries every N steps (default: about 20 lines a run).")
_define("integer", "eval_every", "Evaluate every N steps (default: only at the end).")
_define("bool", "export", "Save model.keras and export a SavedModel at the end.")
_define("integer", "show_predictions", "Test images classified with the exported model at the end.")
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
    for name in _FIELDS:
        if FLAGS[name].present:
            overrides[name] = FLAGS[name].value
    if "randaugment" in overrides:
        overrides["randaugment"] = _parse_randaugment(overrides["randaugment"])
    if overrides.get("grad_clip_norm") == 0:
        overrides["grad_clip_norm"] = None
    return config_lib.make_config(FLAGS.recipe, **overrides)


def _parse_randaugment(text):
    if text.strip().lower() in ("", "none", "off"):
        return None
    try:
        num_ops, magnitude = (int(x) for x in text.split(","))
    except ValueError as error:
        raise ValueError(f"--randaugment takes 'num_ops,magnitude', e.g. 2,15. Received: {text!r}") from error
    return (num_ops, magnitude)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # TensorFlow's INFO lines would bury the progress
    cfg = config_from_flags()
    from training import data, loop  # imports TensorFlow and Keras only once the flags are valid

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
