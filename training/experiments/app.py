"""The paper's experiments in miniature: ViT against a BiT ResNet and a hybrid as the data and compute grow,
and what the ViTs learn (Figure 7), from models trained to their family's budget.

    python -m training.experiments --out=experiments                  # digits at 28 px: 24 runs (docs/EXPERIMENTS.md)
    python -m training.experiments --out=runs/cifar10 --preset=large --data_dir=/data/tfds   # a GPU: hours

Three studies (`--studies`, default all three), over the same trained runs:

* `data_size` (paper Figures 3 and 4): nested, class-stratified subsets of the training split (`--fractions`;
  each subset holds the smaller ones, fixed by `--subset_seed`), each model trained for its family's budget of
  steps whatever the subset (`training.experiments.models`: the budget that brings the full-data run within
  about a point of the training app's; `--steps` gives every model the same), the app's recipe, `--seeds`
  seeds each. Every run is scored by its test accuracy and by the few-shot linear accuracy of its frozen
  representation (`training.fewshot`: `--shots` images per class of the full training split, least squares).
* `compute` (Figure 5): accuracy against the training FLOPs each full-data run spent (3 x the forward FLOPs
  counted by `keras_vit.flops.forward_flops` x the images of the steps it ran).
* `attention_distance` (Figure 7): for the ViTs and the hybrid (seed 0, full data), at initialisation and
  trained, on the same `--attention_images` test images (`training.experiments.probes`, `keras_vit.inspect`):
  mean attention distance and entropy relative to uniform attention per head (right), position-embedding
  similarity (centre), principal components of the embedding filters (left).

`--preset` chooses the models and the defaults of the other flags: `default` (the embedded digits at 28 px, a
7x7 patch grid) or `large` (a prepared tensorflow-datasets CIFAR-10 at 32 px, models of 1-14M parameters, six
fractions, three seeds: for a GPU). Writes into `--out`: `results.json` (every run, the Figure 7 measurements,
the reading), `data_size.png`, `compute.png`, `attention_distance.png`, `position_embeddings.png`,
`embedding_filters.png` and `index.html` with the figures, a table and a paragraph read off the numbers.

Data come from the training app (`training.sources`, `training.data`; subsets and batches:
`training.experiments.data`), with the app's augmentation and, for a folder, its check of the images before
anything trains (`training.image_checks`); the recipe is the one `python -m training.train` would choose for the
dataset, with its optimizer (`training.optim`), under `--strategy`. Each run trains with `model.fit` on one
compiled model per architecture (`training.experiments.trainer`), not with the app's loop, whose per-run
workdir, checkpoints and export a study of many short runs does not need.
"""

from __future__ import annotations

import dataclasses
import os
import time
import typing

from absl import flags

from keras_vit import cli
from training import backend
from training import config as config_ranges
from training.experiments.models import MODELS, PATCH, PRESETS, STUDIES, models_of


@dataclasses.dataclass(frozen=True)
class Setup:
    """Everything the studies depend on (the flags of `python -m training.experiments`); `make_setup` applies a
    preset's values. `steps` None: each model's budget in the preset."""

    preset: str = "default"
    dataset: str = "digits"
    data_dir: str | None = None
    train_split: str | None = None
    eval_split: str | None = None
    image_size: int = 28
    models: tuple = tuple(MODELS)
    fractions: tuple = (0.05, 0.2, 1.0)
    seeds: int = 2
    steps: int | None = None
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


def make_setup(preset: str = "default", **values) -> Setup:
    """The `Setup` of a preset (`training.experiments.models.PRESETS`), then `values`.

    Example:
        >>> setup = make_setup("large", seeds=1)
        >>> setup.dataset, setup.image_size, setup.seeds, len(setup.fractions)
        ('cifar10', 32, 1, 6)
    """
    models_of(preset)  # a ValueError naming the presets
    return Setup(preset=preset, **{**PRESETS[preset].values, **values})


def check_setup(setup: Setup) -> None:
    """Raises ValueError for a setup the studies cannot run (before anything is imported or trained)."""
    known = models_of(setup.preset)
    unknown = [m for m in setup.models if m not in known]
    if unknown or not setup.models:
        raise ValueError(f"Unknown or no models {unknown}. Known: {', '.join(known)}")
    fractions = tuple(setup.fractions)
    if not fractions or any(not 0 < f <= 1 for f in fractions) or len(set(fractions)) != len(fractions):
        raise ValueError(f"Fractions must be distinct numbers in (0, 1]. Received: fractions={fractions}")
    for name in ("seeds", "steps", "global_batch_size", "fewshot_seeds", "attention_images", "image_size"):
        value = getattr(setup, name)
        if (value is not None or name != "steps") and (not isinstance(value, int) or value < 1):
            raise ValueError(f"`{name}` must be a positive integer. Received: {name}={value!r}")
    if setup.image_size % PATCH:
        raise ValueError(f"`image_size` must be a multiple of {PATCH} (the patch size of the mini ViTs). "
                         f"Received: image_size={setup.image_size}")
    if not setup.shots or any(not isinstance(k, int) or k < 1 for k in setup.shots):
        raise ValueError(f"`shots` must be positive integers. Received: shots={setup.shots}")


def is_transformer(setup: Setup, name: str) -> bool:
    return models_of(setup.preset)[name].family == "vit"


# --- the studies -------------------------------------------------------------------------------------------


def planned_runs(setup: Setup, studies=STUDIES) -> list[tuple[str, float, int]]:
    """(model, fraction, seed) of every run the studies need: all of them for `data_size`; the full-data runs
    for `compute`; seed 0 on full data of the ViTs and the hybrid for `attention_distance`."""
    full, probed = max(setup.fractions), probed_runs(setup, studies)
    wanted = set()
    for model in setup.models:
        for fraction in setup.fractions:
            for seed in range(setup.seeds):
                if ("data_size" in studies or ("compute" in studies and fraction == full)
                        or (model, fraction, seed) in probed):
                    wanted.add((model, fraction, seed))
    return sorted(wanted, key=lambda run: (setup.models.index(run[0]), run[1], run[2]))


def probed_runs(setup: Setup, studies=STUDIES) -> set:
    """The runs measured for Figure 7 (at initialisation and trained): seed 0 on full data of each ViT."""
    if "attention_distance" not in studies:
        return set()
    return {(m, max(setup.fractions), 0) for m in setup.models if is_transformer(setup, m)}


def run_studies(setup: Setup, out: str, studies=STUDIES, log=print) -> dict:
    """Trains the runs the `studies` need and writes results.json, the figures and index.html into `out`."""
    from training.experiments import report
    from training.experiments.trainer import train_runs

    unknown = [s for s in studies if s not in STUDIES]
    if unknown or not studies:
        raise ValueError(f"Unknown or no studies {unknown}. Known: {', '.join(STUDIES)}")
    os.makedirs(out, exist_ok=True)
    started = time.perf_counter()
    results = dict(setup=dataclasses.asdict(setup), studies=list(studies))
    results.update(train_runs(setup, planned_runs(setup, studies), probed_runs(setup, studies), log))
    results["wall_time_s"] = time.perf_counter() - started
    results["reading"] = report.reading(results)
    report.write(results, out, studies)
    log(f"wrote {', '.join(report.outputs(studies))} into {out} "
        f"({results['wall_time_s'] / 60:.1f} minutes)")
    log(results["reading"])
    return results


# --- the command line --------------------------------------------------------------------------------------

FLAGS = flags.FlagValues()
CONFIG_FLAGS = ("dataset", "data_dir", "train_split", "eval_split", "image_size", "global_batch_size")
"""The flags declared once as `training.config.Config` fields (their type and help text), as in the app."""


_NONE_MEANS = dict(steps="each model's budget", data_dir="tensorflow-datasets' own")


def _preset_default(name) -> str:
    def text(value):
        return _NONE_MEANS.get(name, "none") if value is None else cli.default_text(value)

    default, large = (text(PRESETS[p].values.get(name, getattr(Setup, name, None))) for p in ("default", "large"))
    return default if default == large else f"{default}; --preset=large: {large}"


def _define(kind, name, help, **kwargs):
    said = "(default" in help  # the field's help says its default
    getattr(flags, f"DEFINE_{kind}")(name, None, help if said else f"{help} (default: {_preset_default(name)})",
                                     flag_values=FLAGS, **kwargs)


def _define_config_flags():
    from training.config import Config

    types = typing.get_type_hints(Config)
    for field in dataclasses.fields(Config):
        if field.name in CONFIG_FLAGS:
            kind = "integer" if int in (types[field.name], *typing.get_args(types[field.name])) else "string"
            _define(kind, field.name, field.metadata["help"], **({"lower_bound": 1} if kind == "integer" else {}))


cli.define_out(FLAGS, "Folder for results.json, the figures and index.html.")
flags.DEFINE_enum("preset", "default", list(PRESETS), "default: the embedded digits at 28 px, minutes on 2 CPU "
                  "cores; large: a prepared tensorflow-datasets CIFAR-10 at 32 px, bigger models, six fractions, "
                  "for a GPU (docs/EXPERIMENTS.md). Sets the models and the defaults of the flags below.",
                  flag_values=FLAGS)
flags.DEFINE_list("studies", list(STUDIES), "Studies to run: " + ", ".join(STUDIES) + ".", flag_values=FLAGS)
_define("list", "models", "Models: " + ", ".join(f"{k} ({v.label}, {v.steps} steps)" for k, v in MODELS.items())
        + " in the default preset")
_define_config_flags()
_define("list", "fractions", "Nested subset fractions of the training split")
_define("integer", "seeds", "Seeds (model initialisation and data order) per model and subset", lower_bound=1)
_define("integer", "steps", "Training steps of every run, replacing each model's budget in the preset",
        lower_bound=1)
_define("list", "shots", "Few-shot images per class")
_define("integer", "attention_images", "Test images of the Figure 7 measurements", lower_bound=1)
flags.DEFINE_integer("subset_seed", 0, "Seed of the nested subsets.", flag_values=FLAGS)
flags.DEFINE_enum("strategy", "auto", ["auto", "one_device", "mirrored", "multi_worker", "tpu"],
                  "tf.distribute strategy (training.distribute).", flag_values=FLAGS)
flags.DEFINE_bool("jit_compile", True, "XLA-compile the training step.", flag_values=FLAGS)
flags.DEFINE_bool("skip_bad_images", False, "Leave out the files of a folder dataset that cannot be used (found by "
                  "the training app's check of both splits before anything trains) instead of stopping.",
                  flag_values=FLAGS)
flags.DEFINE_integer("max_image_pixels", None, "Largest image of a folder dataset in pixels, as in "
                     "python -m training.train (default 40,000,000; 0: no limit).", lower_bound=0, flag_values=FLAGS)
cli.define_verbose(FLAGS)

# The numeric flags' ranges (a value outside one, NaN or infinity: a usage error naming the flag and the value).
_RANGES = dict(image_size=config_ranges.RANGES["image_size"],
               global_batch_size=config_ranges.RANGES["global_batch_size"], seeds=config_ranges.Range(1, 100), steps=config_ranges.RANGES["steps"],
               attention_images=config_ranges.Range(1, 100_000), subset_seed=config_ranges.RANGES["seed"],
               max_image_pixels=config_ranges.Range(0, 10**12))
for _name, _range in _RANGES.items():
    flags.register_validator(_name, lambda value, name=_name: config_ranges.range_problem(name, value, _RANGES) is None,
                             message=f"--{_name} must be a number in {_range}", flag_values=FLAGS)
    FLAGS[_name].help += f" Range: {_range}."


def _numbers(fv, name, kind):
    try:
        return tuple(kind(v) for v in fv[name].value)
    except ValueError:
        raise ValueError(f"--{name} must be comma-separated {'integers' if kind is int else 'numbers'}. "
                         f"Received: {','.join(fv[name].value)!r}") from None


def setup_from_flags(fv=FLAGS) -> Setup:
    """The `Setup` of the parsed flags (a flag left out keeps the preset's value); ValueError for values the
    studies cannot take."""
    values = {name: fv[name].value for name in (*CONFIG_FLAGS, "seeds", "steps", "attention_images")}
    values.update(models=fv.models and tuple(fv.models),
                  fractions=fv.fractions and tuple(sorted(_numbers(fv, "fractions", float))),
                  shots=fv.shots and _numbers(fv, "shots", int))
    given = {k: v for k, v in values.items() if v is not None}
    return make_setup(fv.preset, subset_seed=fv.subset_seed, strategy=fv.strategy, jit_compile=fv.jit_compile,
                      skip_bad_images=fv.skip_bad_images, max_image_pixels=fv.max_image_pixels, **given)


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


# First, before any import: the studies use tf.data, tf.distribute and TensorFlow's tracing (forward_flops).
cli.add_check(FLAGS, lambda fv, argv: backend.check_tensorflow_backend(
    "training.experiments", "tf.data, tf.distribute and TensorFlow to count FLOPs"))
cli.add_check(FLAGS, _check)


def run(argv):
    run_studies(setup_from_flags(), FLAGS.out, tuple(FLAGS.studies), log=print)
    return 0


def main(argv=None) -> int:
    """The exit status of `python -m training.experiments` with `argv` (default: `sys.argv[1:]`)."""
    return cli.main(run, FLAGS, argv, usage=__doc__, tensorflow=True)

