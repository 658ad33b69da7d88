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

Data come from the training app (`training.data`): `digits` (embedded), `folder:PATH` or a prepared
tensorflow-datasets name, with the app's augmentation and, for a folder, the app's check of its images before
anything trains (headers, `--max_image_pixels`, a full decode: a bad file is named, or left out with
`--skip_bad_images`); the recipe is the app's (`training.config`, the one
`python -m training.train` would choose for the dataset) and its optimizer (`training.optim`), under
`--strategy` (`training.distribute`). Each run trains with `model.fit`: the app's loop (`training.loop`)
builds one model from a config, reads whole named splits, and writes a workdir with checkpoints and an
export per run, which a study of many short runs on subsets of a split does not need. One baseline alone
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
from training.experiments_models import MODELS, PATCH, STUDIES

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
    max_image_pixels: int | None = None  # None: the app's default (training.data.DEFAULT_MAX_IMAGE_PIXELS); 0: none

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


# --- data --------------------------------------------------------------------------------------------------


def nested_subsets(labels, fractions, seed=0) -> dict:
    """Nested, class-stratified subsets of a split: {fraction: sorted example indices}.

    Every class's examples are shuffled (by `seed`) and ranked; an example's place in the one order is its
    rank relative to its class size (ties broken at random), so every prefix of the order holds each class in
    proportion, and a subset is a prefix: the smaller subsets are contained in the larger ones. The same
    labels, fractions and seed give the same subsets.

    Args:
        labels: int array (N,) of the split's labels.
        fractions: fractions of the split in (0, 1]; a subset has max(1, round(f * N)) examples.
        seed: seed of the order.

    Example:
        >>> labels = np.array([0, 0, 0, 0, 1, 1, 1, 1])
        >>> subsets = nested_subsets(labels, (0.25, 0.5, 1.0))
        >>> [len(subsets[f]) for f in (0.25, 0.5, 1.0)], labels[subsets[0.25]].tolist()
        ([2, 4, 8], [0, 1])
    """
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    keys = np.empty(len(labels))
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        keys[members] = (np.arange(len(members)) + 0.5) / len(members)
    order = np.lexsort((rng.permutation(len(labels)), keys))
    return {f: np.sort(order[: max(1, int(round(f * len(labels))))]) for f in fractions}


def recipe(setup: Setup):
    """The training app's recipe for the dataset (`training.config.make_config` without `--recipe`: the
    digits demo's for `digits`, the small-data one otherwise), for `setup.steps` steps."""
    from training.config import make_config

    return make_config(None, dataset=setup.dataset, data_dir=setup.data_dir, image_size=setup.image_size,
                       steps=setup.steps, global_batch_size=setup.global_batch_size, strategy=setup.strategy,
                       jit_compile=setup.jit_compile)


def _splits(setup: Setup):
    from training import data

    default_train, default_eval = data.default_splits(setup.dataset, setup.data_dir)
    return setup.train_split or default_train, setup.eval_split or default_eval


def check_images(setup: Setup, train_split: str, eval_split: str, log=print) -> frozenset:
    """The training app's check of a folder dataset's images before anything trains (`training.data.check_images`:
    headers, the pixel limit, a full decode of both splits): the bad files to skip with `skip_bad_images`, else
    `training.data.InvalidDatasetError` naming them."""
    from training import data

    limit = data.DEFAULT_MAX_IMAGE_PIXELS if setup.max_image_pixels is None else setup.max_image_pixels
    skip = data.check_images(setup.dataset, (train_split, eval_split), skip=setup.skip_bad_images,
                             max_pixels=limit or None, log=log)
    if skip:
        log(f"skipping {len(skip)} image file(s) of {data.shown_path(setup.dataset)} that cannot be used "
            f"(--skip_bad_images), e.g. {data.shown_path(min(skip))}")
    return skip


def split_labels(source) -> np.ndarray:
    """The labels of a `training.data.Source`, in element order (the images are not decoded)."""
    return np.concatenate([np.asarray(labels) for _, labels in source.elements.map(
        lambda image, label: (0, label)).batch(4096).as_numpy_iterator()])


def train_dataset(source, indices, cfg, seed):
    """Endless training batches of the examples `indices` of `source`, with the app's augmentation
    (`training.data.train_image`, `cfg`'s crop and flip, stateless per element) and one-hot labels."""
    import tensorflow as tf

    from training import data

    keep = np.zeros(source.num_examples, bool)
    keep[np.asarray(indices)] = True
    keep = tf.constant(keep)
    size = (cfg.image_size, cfg.image_size)
    num_classes = source.num_classes

    def kept(index, element):
        return keep[index]

    def decoded(index, element):
        image, label = element
        return source.decode(image), label

    ds = source.elements.enumerate().filter(kept).map(decoded, num_parallel_calls=tf.data.AUTOTUNE).cache()
    ds = ds.shuffle(len(indices), seed=seed, reshuffle_each_iteration=True).repeat().enumerate()

    def prepare(index, element):
        image, label = element
        image = data.train_image(image, size, tf.stack([tf.constant(seed, tf.int64), index]), cfg.crop,
                                 cfg.crop_min_area, cfg.flip)
        return image, tf.one_hot(label, num_classes)

    ds = ds.map(prepare, num_parallel_calls=tf.data.AUTOTUNE).batch(cfg.global_batch_size, drop_remainder=True)
    ds = ds.map(lambda images, labels: (data.to_model_range(images), labels))
    options = tf.data.Options()
    options.deterministic = True
    return ds.with_options(options).prefetch(tf.data.AUTOTUNE)


# --- models ------------------------------------------------------------------------------------------------


def build_model(name: str, image_size: int, classes: int):
    """A model of `MODELS` for (image_size, image_size, 3) images in [-1, 1], returning logits."""
    import keras_vit

    spec = MODELS[name]
    builder = keras_vit.BiT if spec.family == "bit" else keras_vit.ViT
    return builder(**spec.arguments, input_shape=(image_size, image_size, 3), classes=classes,
                   classifier_activation=None, name=name)


def is_transformer(name: str) -> bool:
    return MODELS[name].family == "vit"


class _Trainer:
    """One compiled model per architecture, reinitialised for each run: the training step is traced (and
    XLA-compiled) once per architecture, not once per run."""

    def __init__(self, name, setup, cfg, strategy, num_classes):
        import keras

        from keras_vit.flops import forward_flops
        from training import fewshot, optim

        self.name, self.setup, self.cfg, self.strategy, self.num_classes = name, setup, cfg, strategy, num_classes
        with strategy.scope():
            self.model = build_model(name, setup.image_size, num_classes)
            self.optimizer = optim.make_optimizer(cfg, setup.steps, self.model)
            if cfg.grad_clip_norm:
                self.optimizer.global_clipnorm = cfg.grad_clip_norm  # the app's global-norm clipping
            self.model.compile(
                optimizer=self.optimizer,
                loss=keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=cfg.label_smoothing),
                jit_compile=cfg.jit_compile,
            )
        self.representation = fewshot.representation_model(self.model)
        self.forward_flops = forward_flops(self.model)
        self.parameters = self.model.count_params()
        self.fresh = True

    def reinitialise(self, seed):
        """The weights of a model built with `seed`, and a new optimizer state (step 0 of the schedule)."""
        import keras

        keras.utils.set_random_seed(seed)
        with self.strategy.scope():
            weights = build_model(self.name, self.setup.image_size, self.num_classes).get_weights()
        self.model.set_weights(weights)
        for variable in self.optimizer.variables:
            variable.assign(np.zeros(variable.shape, variable.dtype))
        keras.utils.set_random_seed(seed)

    def fit(self, dataset, callback):
        self.model.fit(dataset, epochs=1, steps_per_epoch=self.setup.steps, verbose=0, callbacks=[callback],
                       shuffle=False)


def _predict(model, dataset):
    """(outputs, labels) of a finite dataset of (images, labels) batches."""
    outputs, labels = [], []
    for images, batch_labels in dataset:
        outputs.append(np.asarray(model.predict_on_batch(images), dtype=np.float32))
        labels.append(np.asarray(batch_labels))
    return np.concatenate(outputs), np.concatenate(labels)


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


class _ProgressCallback:
    """A Keras callback feeding `training.progress.Progress` with the steps of all the runs."""

    def __new__(cls, shown, done):
        import keras

        class Callback(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                loss = (logs or {}).get("loss")
                values = {} if loss is None else {"loss": float(loss)}
                shown.update(done + batch + 1, **values)

        return Callback()


def train_runs(setup: Setup, studies=STUDIES, log=print) -> dict:
    """Trains and scores every run the studies need (`planned_runs`).

    Returns:
        {"runs": [one dict per run], "attention": {model: (layers, heads) distances in pixels},
         "setup": ..., "dataset": {...}}.
    """
    from keras_vit import inspect
    from training import data, distribute, fewshot, optim, progress

    cfg = recipe(setup)
    strategy = distribute.make_strategy(setup.strategy)
    train_split, eval_split = _splits(setup)
    skip = check_images(setup, train_split, eval_split, log)
    source = data.dataset_source(setup.dataset, train_split, setup.data_dir, skip_files=skip)
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
            trainers[name] = _Trainer(name, setup, cfg, strategy, num_classes)
        trainer = trainers[name]
        trainer.reinitialise(seed)
        indices = subsets[fraction]
        trainer.fit(train_dataset(source, indices, cfg, seed), _ProgressCallback(shown, number * setup.steps))
        logits, test_labels = _predict(trainer.model, eval_ds)
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
