"""The paper's experiments in miniature: ViT against a BiT ResNet and a hybrid as the data and compute grow.

    python -m training.experiments --out=experiments                 # digits: 60 short runs (timing: docs/EXPERIMENTS.md)
    python -m training.experiments --out=runs/cifar10 --dataset=cifar10 --image_size=32 --steps=3000 --seeds=3

Three studies (`--studies`, default all three), over the same trained runs:

* `data_size` (paper Figures 3 and 4): nested, class-stratified subsets of the training split (`--fractions`,
  default 5%, 10%, 25%, 50%, 100%; each subset holds the smaller ones, fixed by `--subset_seed`), the same
  recipe for `--steps` steps of `--global_batch_size` images whatever the subset (equal steps: every run sees
  the same number of images and costs the same compute, so a smaller subset is repeated for more epochs and
  only the amount of distinct data changes), for two ViT sizes, the BiT ResNet and the hybrid (a ResNet stem
  under the small ViT), `--seeds` seeds each. Every run is scored by its test accuracy and by the few-shot
  linear accuracy of its frozen representation (`training.fewshot`: `--shots` images per class drawn from the
  full training split, least squares, the test split).
* `compute` (Figure 5): accuracy against training compute, 3 x the forward FLOPs (counted from the model by
  `keras_vit.flops.forward_flops`) x the images seen, for the full-data runs.
* `attention_distance` (Figure 7, right): mean attention distance per head against depth for the trained ViTs
  and the trained hybrid (seed 0, full data), on the same `--attention_images` test images
  (`keras_vit.inspect`).

Writes into `--out`: `results.json` (every run: model, subset fraction and size, seed, accuracy, few-shot
accuracies, FLOPs, wall time; the attention distances; the reading), `data_size.png`, `compute.png`,
`attention_distance.png`, and `index.html` with the figures, a table and a paragraph read off the numbers.

Data come from the training app (`training.sources`, `training.data`; the subsets and their batches:
`training.experiments_data`): `digits` (embedded), `folder:PATH` or a prepared tensorflow-datasets name, with
the app's augmentation and, for a folder, the app's check of its images before anything trains
(`training.image_checks`: headers, `--max_image_pixels`, a full decode: a bad file is named, or left out with
`--skip_bad_images`); the recipe is the app's (`training.config`, the one `python -m training.train` would
choose for the dataset) and its optimizer (`training.optim`), under `--strategy` (`training.distribute`). Each
run trains with `model.fit` (`training.experiments_trainer`): the app's loop (`training.loop`) builds one model
from a config, reads whole named splits, and writes a workdir with checkpoints and an export per run, which a
study of many short runs on subsets of a split does not need. One baseline alone
trains with the app: `python -m training.train --model=bit_r50x1` (BiT-R50x1 from scratch) or
`--model=bit_tiny` (the "bit" model here).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time

import numpy as np
from absl import flags

from keras_vit import cli
from training.experiments_data import check_images, nested_subsets, split_labels, splits, train_dataset
from training.experiments_models import MODELS, PATCH, STUDIES
from training.experiments_trainer import ProgressCallback, Trainer, predict

FRACTIONS = (0.05, 0.1, 0.25, 0.5, 1.0)
HEADLINE_SHOTS = 5  # the few-shot accuracy of the figures (paper Figure 4: linear 5-shot)
EVAL_BATCH_SIZE = 256  # images per forward pass of the evaluations (accuracy, few-shot features)


@dataclasses.dataclass(frozen=True)
class Setup:
    """Everything the studies depend on (the flags of `python -m training.experiments`)."""

    dataset: str = "digits"
    data_dir: str | None = None
    train_split: str | None = None
    eval_split: str | None = None
    image_size: int = 16
    models: tuple = tuple(MODELS)
    fractions: tuple = FRACTIONS
    seeds: int = 3
    steps: int = 300
    global_batch_size: int = 64
    shots: tuple = (1, 5, 10)
    fewshot_seeds: int = 3
    subset_seed: int = 0
    strategy: str = "auto"
    attention_images: int = 64
    jit_compile: bool = True
    skip_bad_images: bool = False
    # None: the app's default (training.image_checks.DEFAULT_MAX_IMAGE_PIXELS); 0: no limit
    max_image_pixels: int | None = None

    def __post_init__(self):
        check_setup(self)


def check_setup(setup: Setup) -> None:
    """Raises ValueError for a setup the studies cannot run (before anything is imported or trained)."""
    unknown = [m for m in setup.models if m not in MODELS]
    if unknown or not setup.models:
        raise ValueError(f"Unknown or no models {unknown}. Known: {', '.join(MODELS)}")
    fractions = tuple(setup.fractions)
    if not fractions or any(not 0 < f <= 1 for f in fractions) or len(set(fractions)) != len(fractions):
        raise ValueError(f"Fractions must be distinct numbers in (0, 1]. Received: fractions={fractions}")
    for name in ("seeds", "steps", "global_batch_size", "fewshot_seeds", "attention_images", "image_size"):
        value = getattr(setup, name)
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"`{name}` must be a positive integer. Received: {name}={value!r}")
    if setup.image_size % PATCH:
        raise ValueError(f"`image_size` must be a multiple of {PATCH} (the patch size of the mini ViTs). "
                         f"Received: image_size={setup.image_size}")
    if not setup.shots or any(not isinstance(k, int) or k < 1 for k in setup.shots):
        raise ValueError(f"`shots` must be positive integers. Received: shots={setup.shots}")


def recipe(setup: Setup):
    """The training app's recipe for the dataset (`training.config.make_config` without `--recipe`: the
    digits demo's for `digits`, the small-data one otherwise), for `setup.steps` steps."""
    from training.config import make_config

    return make_config(None, dataset=setup.dataset, data_dir=setup.data_dir, image_size=setup.image_size,
                       steps=setup.steps, global_batch_size=setup.global_batch_size, strategy=setup.strategy,
                       jit_compile=setup.jit_compile)


def is_transformer(name: str) -> bool:
    return MODELS[name].family == "vit"


# --- the studies -------------------------------------------------------------------------------------------


def planned_runs(setup: Setup, studies=STUDIES) -> list[tuple[str, float, int]]:
    """(model, fraction, seed) of every run the studies need: all of them for `data_size`; the full-data runs
    for `compute`; seed 0 on full data of the ViTs and the hybrid for `attention_distance`."""
    full = max(setup.fractions)
    wanted = set()
    for model in setup.models:
        for fraction in setup.fractions:
            for seed in range(setup.seeds):
                if ("data_size" in studies or ("compute" in studies and fraction == full)
                        or ("attention_distance" in studies and fraction == full and seed == 0
                            and is_transformer(model))):
                    wanted.add((model, fraction, seed))
    return sorted(wanted, key=lambda run: (setup.models.index(run[0]), run[1], run[2]))



def train_runs(setup: Setup, studies=STUDIES, log=print) -> dict:
    """Trains and scores every run the studies need (`planned_runs`).

    Returns:
        {"runs": [one dict per run], "attention": {model: (layers, heads) distances in pixels},
         "setup": ..., "dataset": {...}}.
    """
    from keras_vit import inspect
    from training import data, distribute, fewshot, optim, progress
    from training.sources import dataset_source

    cfg = recipe(setup)
    strategy = distribute.make_strategy(setup.strategy)
    train_split, eval_split = splits(setup)
    skip = check_images(setup, train_split, eval_split, log)
    source = dataset_source(setup.dataset, train_split, setup.data_dir, skip_files=skip)
    labels = split_labels(source)
    subsets = nested_subsets(labels, setup.fractions, setup.subset_seed)
    batch = setup.global_batch_size
    eval_batch = max(batch, EVAL_BATCH_SIZE)
    eval_ds, num_classes = data.make_dataset(setup.dataset, eval_split, setup.data_dir, setup.image_size, eval_batch,
                                             skip_files=skip)
    pool_ds, _ = data.make_dataset(setup.dataset, train_split, setup.data_dir, setup.image_size, eval_batch,
                                   skip_files=skip)
    attention_images = np.concatenate([images.numpy() for images, _ in eval_ds])[: setup.attention_images]
    plan = planned_runs(setup, studies)
    total_steps = len(plan) * setup.steps
    warmup = optim.fitted_warmup(cfg.warmup_steps, setup.steps)[0]  # as the schedule of each run clamps it
    log(f"{len(plan)} runs of {setup.steps} steps of {batch} images on {setup.dataset} [{train_split}: "
        f"{source.num_examples} images, {num_classes} classes; {eval_split} for accuracy], recipe {cfg.recipe} "
        f"({cfg.optimizer} lr {cfg.learning_rate:g}, {cfg.schedule}, warm-up {warmup}, crop {cfg.crop}), "
        f"{type(strategy).__name__}")
    shown = progress.Progress(total_steps, progress.log_cadence(total_steps), items_per_step=batch)
    trainers, runs, attention = {}, [], {}
    full = max(setup.fractions)
    for number, (name, fraction, seed) in enumerate(plan):
        started = time.perf_counter()
        if name not in trainers:
            for other in list(trainers):  # one architecture at a time: the runs are ordered by model
                del trainers[other]
            trainers[name] = Trainer(name, setup, cfg, strategy, num_classes)
        trainer = trainers[name]
        trainer.reinitialise(seed)
        indices = subsets[fraction]
        trainer.fit(train_dataset(source, indices, cfg, seed), ProgressCallback(shown, number * setup.steps))
        logits, test_labels = predict(trainer.model, eval_ds)
        accuracy = float(np.mean(logits.argmax(-1) == test_labels))
        train_x, train_y = fewshot.representations(trainer.representation, pool_ds)
        test_x, test_y = fewshot.representations(trainer.representation, eval_ds)
        shots = fewshot.evaluate(train_x, train_y, test_x, test_y, setup.shots, setup.fewshot_seeds)
        images_seen = setup.steps * batch
        run = dict(
            model=name, label=MODELS[name].label, family=MODELS[name].family, fraction=fraction,
            train_examples=int(len(indices)), seed=seed, steps=setup.steps, images_seen=images_seen,
            epochs=images_seen / len(indices), parameters=int(trainer.parameters),
            accuracy=accuracy, fewshot={str(k): v for k, v in shots.items()},
            fewshot_accuracy=float(np.mean(shots[_headline_shots(setup)])),
            forward_flops=int(trainer.forward_flops),
            train_flops=float(progress_flops(trainer.forward_flops, images_seen)),
        )
        if fraction == full and seed == 0 and is_transformer(name) and "attention_distance" in studies:
            probabilities = inspect.attention_probabilities(trainer.model, attention_images)
            geometry = inspect.token_geometry(trainer.model)
            attention[name] = inspect.mean_attention_distance(
                probabilities, geometry.grid_shape, geometry.patch_size, geometry.num_prefix_tokens).tolist()
        run["wall_time_s"] = time.perf_counter() - started
        runs.append(run)
        log(f"run {number + 1}/{len(plan)}: {run['label']} on {run['train_examples']} images ({fraction:.0%}), "
            f"seed {seed}: accuracy {accuracy:.3f}, {_headline_shots(setup)}-shot {run['fewshot_accuracy']:.3f} "
            f"({progress.format_duration(run['wall_time_s'])})")
    return {
        "setup": dataclasses.asdict(setup),
        "dataset": dict(name=setup.dataset, train_split=train_split, eval_split=eval_split,
                        train_examples=int(source.num_examples), classes=int(num_classes),
                        subset_sizes={str(f): int(len(i)) for f, i in subsets.items()}),
        "recipe": json.loads(cfg.to_json()),
        "fewshot_shots": _headline_shots(setup),
        "runs": runs,
        "attention_distance": attention,
        "uniform_attention_distance": _uniform_distance(setup.image_size),
    }


def _headline_shots(setup: Setup) -> int:
    return HEADLINE_SHOTS if HEADLINE_SHOTS in setup.shots else max(setup.shots)


def _uniform_distance(image_size: int) -> float:
    from keras_vit.inspect.distance import patch_distances

    grid = image_size // PATCH
    return float(patch_distances((grid, grid), PATCH).mean())


def progress_flops(forward_flops: float, images_seen: int) -> float:
    """Training FLOPs: forward + backward (3 forwards, `keras_vit.flops.TRAIN_FORWARD_MULTIPLE`) per image seen."""
    from keras_vit.flops import TRAIN_FORWARD_MULTIPLE

    return TRAIN_FORWARD_MULTIPLE * forward_flops * images_seen


def run_studies(setup: Setup, out: str, studies=STUDIES, log=print) -> dict:
    """Trains the runs the `studies` need and writes results.json, the figures and index.html into `out`."""
    from training import experiments_report

    unknown = [s for s in studies if s not in STUDIES]
    if unknown or not studies:
        raise ValueError(f"Unknown or no studies {unknown}. Known: {', '.join(STUDIES)}")
    os.makedirs(out, exist_ok=True)
    started = time.perf_counter()
    results = train_runs(setup, studies, log)
    results["studies"] = list(studies)
    results["wall_time_s"] = time.perf_counter() - started
    results["reading"] = experiments_report.reading(results)
    experiments_report.write(results, out, studies)
    log(f"wrote {', '.join(experiments_report.outputs(studies))} into {out} "
        f"({results['wall_time_s'] / 60:.1f} minutes)")
    log(results["reading"])
    return results


# --- the command line --------------------------------------------------------------------------------------

FLAGS = flags.FlagValues()
cli.define_out(FLAGS, "Folder for results.json, the figures and index.html.")
flags.DEFINE_list("studies", list(STUDIES), "Studies to run: " + ", ".join(STUDIES) + ".", flag_values=FLAGS)
flags.DEFINE_list("models", list(MODELS), "Models: " + ", ".join(f"{k} ({v.label})" for k, v in MODELS.items())
                  + ".", flag_values=FLAGS)
flags.DEFINE_string("dataset", "digits", "digits (embedded), folder:PATH (ImageFolder) or a tensorflow-datasets "
                    "name.", flag_values=FLAGS)
flags.DEFINE_string("data_dir", None, "tensorflow-datasets data directory.", flag_values=FLAGS)
flags.DEFINE_string("train_split", None, "Split the subsets are taken from (default: train).", flag_values=FLAGS)
flags.DEFINE_string("eval_split", None, "Split the accuracies are measured on (default: the dataset's test or "
                    "validation split).", flag_values=FLAGS)
flags.DEFINE_integer("image_size", Setup.image_size, f"Input side, a multiple of {PATCH}.", lower_bound=PATCH,
                     flag_values=FLAGS)
flags.DEFINE_list("fractions", [str(f) for f in FRACTIONS], "Nested subset fractions of the training split.",
                  flag_values=FLAGS)
flags.DEFINE_integer("seeds", Setup.seeds, "Seeds (model initialisation and data order) per model and subset.",
                     lower_bound=1, flag_values=FLAGS)
flags.DEFINE_integer("steps", Setup.steps, "Training steps of every run (equal steps for every subset).",
                     lower_bound=1, flag_values=FLAGS)
flags.DEFINE_integer("global_batch_size", Setup.global_batch_size, "Images per step.", lower_bound=1,
                     flag_values=FLAGS)
flags.DEFINE_list("shots", [str(k) for k in Setup.shots], "Few-shot images per class.", flag_values=FLAGS)
flags.DEFINE_integer("subset_seed", 0, "Seed of the nested subsets.", flag_values=FLAGS)
flags.DEFINE_integer("attention_images", Setup.attention_images, "Test images of the attention-distance study.",
                     lower_bound=1, flag_values=FLAGS)
flags.DEFINE_enum("strategy", "auto", ["auto", "one_device", "mirrored", "multi_worker", "tpu"],
                  "tf.distribute strategy (training.distribute).", flag_values=FLAGS)
flags.DEFINE_bool("jit_compile", True, "XLA-compile the training step.", flag_values=FLAGS)
flags.DEFINE_bool("skip_bad_images", False, "Leave out the files of a folder dataset that cannot be used (found by "
                  "the training app's check of both splits before anything trains) instead of stopping.",
                  flag_values=FLAGS)
flags.DEFINE_integer("max_image_pixels", None, "Largest image of a folder dataset in pixels, as in "
                     "python -m training.train (default 40,000,000; 0: no limit).", lower_bound=0, flag_values=FLAGS)
cli.define_verbose(FLAGS)


def setup_from_flags(fv=FLAGS) -> Setup:
    """The `Setup` of the parsed flags; ValueError for values the studies cannot take."""
    try:
        fractions = tuple(float(f) for f in fv.fractions)
    except ValueError:
        raise ValueError(f"--fractions must be comma-separated numbers. Received: {','.join(fv.fractions)!r}") from None
    try:
        shots = tuple(int(k) for k in fv.shots)
    except ValueError:
        raise ValueError(f"--shots must be comma-separated integers. Received: {','.join(fv.shots)!r}") from None
    return Setup(dataset=fv.dataset, data_dir=fv.data_dir, train_split=fv.train_split, eval_split=fv.eval_split,
                 image_size=fv.image_size, models=tuple(fv.models), fractions=tuple(sorted(fractions)),
                 seeds=fv.seeds, steps=fv.steps, global_batch_size=fv.global_batch_size, shots=shots,
                 subset_seed=fv.subset_seed, strategy=fv.strategy, attention_images=fv.attention_images,
                 jit_compile=fv.jit_compile, skip_bad_images=fv.skip_bad_images, max_image_pixels=fv.max_image_pixels)


def _check(fv, argv):
    unknown = [s for s in fv.studies if s not in STUDIES]
    if unknown or not fv.studies:
        raise cli.UsageError(f"--studies must name some of {', '.join(STUDIES)}. Received: --studies={','.join(fv.studies)!r}")
    try:
        setup_from_flags(fv)
    except ValueError as error:
        text = str(error)
        for name in ("fractions", "models", "image_size", "shots"):
            text = text.replace(f"`{name}`", f"--{name}").replace(f"{name}=", f"--{name}=")
        raise cli.UsageError(text) from None


cli.add_check(FLAGS, _check)


def run(argv):
    run_studies(setup_from_flags(), FLAGS.out, tuple(FLAGS.studies), log=print)
    return 0


def main(argv=None) -> int:
    """The exit status of `python -m training.experiments` with `argv` (default: `sys.argv[1:]`)."""
    return cli.main(run, FLAGS, argv, usage=__doc__, tensorflow=True)


if __name__ == "__main__":
    cli.run(run, FLAGS, usage=__doc__, tensorflow=True)
