"""The training app's one frozen configuration object and the paper's recipes as data.

Each field of `Config` is declared once, here: its type, default and help text (`_field`); `training/train.py`
derives a flag of the same name from each, parses them (only there), and they become one `Config` that is
passed down explicitly and written to `WORKDIR/config.json`. A recipe is a named set of field values (paper Tables 3
and 4, Appendix B.1; AugReg from big_vision); explicit flags override the recipe, which overrides the
defaults of `Config`.

Without a recipe (`recipe=None`, the app's default), `choose_recipe` picks one from the situation and says
why: the embedded digits get `demo`, `--weights` of a published checkpoint gets `finetune`, anything else
`scratch` (the small-data recipe, also from the weights of one's own Keras model); when the recipe was chosen, the augmentation also follows the image size (`situational_augmentation`) and a ViT trained from scratch gets a global-average-pooled head (`situational_head`) and the small-data
options that won on the benchmark (`situational_architecture`).

Example:
    >>> from training.config import make_config
    >>> cfg = make_config("finetune", dataset="cifar10", model="vit_b16")
    >>> cfg.optimizer, cfg.image_size, cfg.zero_head
    ('sgd', 384, True)
    >>> cfg = make_config(None, dataset="folder:/data/letters", image_size=28)
    >>> cfg.recipe, cfg.optimizer, cfg.crop, cfg.flip
    ('scratch', 'adamw', 'translate', False)
"""

from __future__ import annotations

import dataclasses
import json
import math

from training.recipes import (RECIPES, choose_recipe, situational_architecture, situational_augmentation,
                              situational_head)

OPTIMIZERS = ("adam", "adamw", "sgd")
SCHEDULES = ("cosine", "linear", "constant")
PRECISIONS = ("none", "bfloat16", "float16")
STRATEGIES = ("auto", "one_device", "mirrored", "multi_worker", "tpu")
CROPS = ("inception", "translate", "none")
AUGMENT_LIBRARIES = ("keras", "keras_cv")  # where RandAugment / Mixup / CutMix come from (training.augment)

# The small model of the embedded demo; any `keras_vit.variants` name (e.g. "vit_ti16") is accepted too.
TINY_MODEL = dict(patch_size=4, hidden_size=64, num_layers=4, num_heads=4, mlp_dim=128)


RESUME_ROLES = ("free", "optimisation")
"""How a field may change when a run resumes (metadata `resume`; unset: it may not, as the model and data fields):
`"free"` (it does not change what is computed: logging, checkpointing, export, the device setup) or
`"optimisation"` (with `--resume_with_changes` only: it changes the optimisation from the restored step on, the
schedule and its length, the update rule's hyperparameters, the loss; not the model's or the optimizer's
variables, nor the data stream)."""


def _field(default, help=None, *, vit_argument=False, vit_only=None, resume=None, **flag):
    """A `Config` field, declared once with its roles and its command-line flag (`training/train.py` defines one
    for each field with `help`); the lists of fields by role (`fields_where`) are computed from these.

    Args:
        default: the field's default (the demo's).
        help: the flag's help text; None: not a flag.
        vit_argument: the field is the `keras_vit.ViT` argument of its name (`Config.model_kwargs`).
        vit_only: a BiT model refuses any value but the default (default: `vit_argument`).
        resume: one of `RESUME_ROLES`, or None.
        **flag: `enum_values` (a choice), `lower_bound`, `kind` (the absl flag type where the field's type does not
            say it) and `from_flag` (converts the flag's value to the field's).
    """
    if resume not in (None, *RESUME_ROLES):
        raise ValueError(f"`resume` must be None or one of {RESUME_ROLES}. Received: resume={resume!r}")
    roles = dict(vit_argument=vit_argument, vit_only=vit_argument if vit_only is None else vit_only, resume=resume)
    return dataclasses.field(default=default, metadata=dict(flag, help=help, **roles) if help else roles)


def _parse_randaugment(text):
    if text.strip().lower() in ("", "none", "off"):
        return None
    try:
        num_ops, magnitude = (int(x) for x in text.split(","))
    except ValueError as error:
        raise ValueError(f"--randaugment takes 'num_ops,magnitude', e.g. 2,15. Received: {text!r}") from error
    if not (0 <= num_ops <= 10 and 0 <= magnitude <= 30):
        raise ValueError(f"--randaugment takes num_ops in [0, 10] and magnitude in [0, 30], e.g. 2,15. "
                         f"Received: --randaugment={text}")
    return (num_ops, magnitude)


_OVERRIDE = "Overrides the variant's {}."


@dataclasses.dataclass(frozen=True)
class Config:
    """Everything one training run depends on; immutable, JSON-serialisable.

    Defaults are those of the demo on the embedded digits; `RECIPES` hold the paper's values.
    `None` for a model dimension means "take it from the variant named by `model`".
    Each field with a help text is also the `--flag` of the same name (its metadata: `_field`); `--recipe`
    chooses the recipe in `training/train.py`.
    """

    recipe: str = "demo"
    recipe_reason: str | None = _field(None, resume="free")  # why the recipe was chosen, when no --recipe was given
    # Model.
    model: str = _field("tiny", "'tiny' or a variant name such as vit_ti16, vit_b16, vit_l16; or the BiT ResNet "
                        "baseline, from scratch: bit_r50x1, or bit_tiny (a miniature) (training.model).")
    patch_size: int | None = _field(None, _OVERRIDE.format("patch_size"), lower_bound=1, vit_argument=True)
    hidden_size: int | None = _field(None, _OVERRIDE.format("hidden_size"), lower_bound=1, vit_argument=True)
    num_layers: int | None = _field(None, _OVERRIDE.format("num_layers"), lower_bound=1, vit_argument=True)
    num_heads: int | None = _field(None, _OVERRIDE.format("num_heads"), lower_bound=1, vit_argument=True)
    mlp_dim: int | None = _field(None, _OVERRIDE.format("mlp_dim"), lower_bound=1, vit_argument=True)
    classifier: str | None = _field(  # None: the checkpoint's with --weights, else "token"
        None, "token ([class] token) or gap (mean of the patch tokens).", enum_values=["token", "gap"], vit_argument=True)
    representation_size: int | None = _field(None, "Width of the tanh pre-logits layer (imagenet21k pre-training).", vit_argument=True)
    qkv_bias: bool | None = _field(  # None: the checkpoint's with --weights, else the variant's (biases)
        None, "Biases on the attention's query/key/value projections (default: the checkpoint's, else on).", vit_argument=True)
    initialization: str | None = _field(  # None: keras_vit's default, "scratch" without --weights
        None, "How a ViT without --weights starts (keras_vit.initialization): scratch (smaller patch and attention "
        "kernels and a non-zero head, better from scratch on small data; the default) or official (the Flax code's: the paper's recipes). "
        "A BiT model starts as BiT does.",
        enum_values=["scratch", "official"], vit_argument=True, vit_only=False)
    position_embedding: str | None = _field(  # None: the checkpoint's with --weights, else "learned"
        None, "learned (the paper's 1-D table) or sincos2d (big_vision's fixed 2-D sin-cos table, no weights).",
        enum_values=["learned", "sincos2d"], vit_argument=True)
    tokenizer: str | None = _field(  # None: the checkpoint's with --weights, else "patches"
        None, "How images become tokens (keras_vit.ViT's tokenizer): patches (the paper's linear projection), conv "
        "(a convolutional stem) or shifted_patches (shifted patch tokenization).",
        enum_values=["patches", "conv", "shifted_patches"], vit_argument=True)
    locality_attention: bool | None = _field(  # None: the checkpoint's with --weights, else off
        None, "Locality self-attention in every block (no attention to oneself, a learned temperature).",
        vit_argument=True)
    distillation_token: bool | None = _field(  # None: the checkpoint's with --weights, else off
        None, "DeiT's distillation token and its head_dist beside head (a student to distil from a teacher); the "
        "output is the mean of the two heads (default: the checkpoint's, else off).", vit_argument=True)
    head_bias_init: float = _field(0.0, "Initial head bias (-10 in the imagenet21k pre-training).")
    rematerialize: bool = _field(True, "Recompute each block's MLP hidden layer and attention probabilities in the "
                                 "backward pass instead of storing them (keras_vit.ViT's rematerialize): the same "
                                 "gradients with less memory and some more compute; false stores them.", vit_argument=True, resume="free")
    dropout_rate: float = _field(0.0, "Dropout rate.", vit_argument=True)
    drop_path_rate: float = _field(0.0, "Stochastic depth rate.", vit_argument=True)
    weights: str | None = _field(
        None, "Initial weights for fine-tuning: a published name or a file (keras_vit.ViT(weights=)).")
    zero_head: bool = _field(False, "Zero-initialise the head (on in --recipe=finetune).")
    lora_rank: int | None = _field(None, "Fine-tune LoRA adapters of this rank (keras_vit's enable_lora) with the "
                                   "encoder frozen (the head trains); the export merges them.", lower_bound=1,
                                   vit_only=True)
    lora_targets: str = _field("query,value", "The projections LoRA adapts, comma-separated among query, key, value, "
                               "out, mlp_dense_1, mlp_dense_2.", vit_only=True)
    # Data.
    dataset: str | None = _field(
        "digits", "digits (embedded), folder:PATH (ImageFolder) or a tensorflow-datasets name.")
    data_dir: str | None = _field(None, "tensorflow-datasets data directory.", resume="free")
    download: bool = _field(False, "Let tensorflow-datasets download and prepare a missing dataset.", resume="free")
    train_split: str | None = _field(None, "Training split (default train).")
    eval_split: str | None = _field(None, "Evaluation split (default test, val or validation).")
    validation_split: float | None = _field(  # None: none held out (training.sources.held_out_splits)
        None, "Fraction of each class of a folder dataset's training images held out for the evaluation, chosen at "
        "random by --seed (e.g. 0.2), for an image folder with only train/ or a flat PATH/<label>/ layout; in (0, 1).")
    image_size: int = _field(16, "Training and evaluation resolution.", lower_bound=1)
    crop: str = _field("inception", "Training crop: inception (random-resized), translate (random shift by up to 8% "
                       "of the side, bilinear, reflected borders) or none.", enum_values=list(CROPS))
    crop_min_area: float = _field(0.05, "Smallest Inception-crop area fraction (0.05 officially).")
    flip: bool = _field(True, "Random horizontal flips while training.")
    randaugment: tuple[int, int] | None = _field(
        None, "RandAugment 'num_ops,magnitude' (magnitude 0..30), e.g. 2,15; 'none' to disable.", kind="string",
        from_flag=_parse_randaugment)
    mixup: float = _field(0.0, "Mixup alpha (0 disables).")
    cutmix: float = _field(0.0, "CutMix alpha (0 disables).")
    augment_library: str = _field(
        "keras", "Library of the RandAugment, Mixup and CutMix layers: keras (Keras core) or keras_cv (pip install "
        '"keras-vit-applications[keras-cv]").', enum_values=list(AUGMENT_LIBRARIES))
    shuffle_buffer: int = _field(
        10_000, "Shuffle buffer in examples of a tensorflow-datasets split; 1 does not shuffle (a folder dataset's file "
        "list is otherwise shuffled whole each epoch).")
    # Optimisation.
    steps: int | None = _field(None, "Training steps (replaces --epochs).", resume="optimisation")
    epochs: float | None = _field(None, "Training epochs (replaces --steps).", resume="optimisation")
    global_batch_size: int = _field(128, "Batch size summed over all replicas.")
    optimizer: str = _field("adam", "adam, adamw (decoupled weight decay) or sgd (momentum).",
                            enum_values=list(OPTIMIZERS))
    learning_rate: float = _field(1e-3, "Peak learning rate.", resume="optimisation")
    beta_1: float = _field(0.9, "Adam beta_1.", resume="optimisation")
    beta_2: float = _field(0.999, "Adam beta_2.", resume="optimisation")
    momentum: float = _field(0.9, "SGD momentum.", resume="optimisation")
    schedule: str = _field("cosine", "Decay after warm-up.", enum_values=list(SCHEDULES), resume="optimisation")
    warmup_steps: int = _field(0, "Linear warm-up steps.", resume="optimisation")
    weight_decay: float = _field(0.0, "Decoupled weight decay on kernels (0 disables).", resume="optimisation")
    grad_clip_norm: float | None = _field(1.0, "Clip the global gradient norm (0 disables).",
                                          from_flag=lambda value: value or None, resume="optimisation")
    label_smoothing: float = _field(0.0, "Label smoothing.", resume="optimisation")
    # Distillation (DeiT): a frozen teacher's logits train the student's distillation head (or its one head).
    teacher: str | None = _field(None, "A trained classifier to distil from (DeiT): a run folder or a keras_vit "
                                 ".keras / .weights.h5 file with logits, of the dataset's classes.",
                                 resume="optimisation")
    teacher_sha256: str | None = _field(None, resume="optimisation")  # the teacher file's content, set at start
    distillation: str = _field("hard", "With --teacher: hard (cross-entropy to the teacher's class, DeiT's default) "
                               "or soft (KL at --distillation_tau, weighted by --distillation_alpha).",
                               enum_values=["hard", "soft"], resume="optimisation")
    distillation_alpha: float = _field(0.5, "Weight of the soft distillation loss (the labels' loss gets 1 - it).",
                                       resume="optimisation")
    distillation_tau: float = _field(1.0, "Temperature of the soft distillation loss.", resume="optimisation")
    # Runtime.
    mixed_precision: str = _field("none", "none, bfloat16 or float16 (with loss scaling).",
                                  enum_values=list(PRECISIONS))
    jit_compile: bool = _field(False, "XLA-compile the training step.", resume="free")
    strategy: str = _field("auto", "tf.distribute strategy.", enum_values=list(STRATEGIES), resume="free")
    tpu: str | None = _field(None, "TPU name or address for TPUClusterResolver ('local' on a TPU VM).", resume="free")
    workdir: str = _field("workdir", "Where config, checkpoints, summaries, metrics and the export go.", resume="free")
    seed: int = _field(0, "Seed of initialisation, data order and augmentation.")
    checkpoint_every: int = _field(500, "Checkpoint every N steps (and at the end).", resume="free")
    keep_checkpoints: int = _field(2, "Checkpoints kept.", resume="free")
    log_every: int | None = _field(  # None: about 20 lines a run (training.progress.log_cadence)
        None, "Progress and summaries every N steps (default: about 20 lines a run).", resume="free")
    eval_every: int | None = _field(None, "Evaluate every N steps (default: only at the end).", resume="free")
    export: bool = _field(True, "Save model.keras and export a SavedModel at the end.", resume="free")
    show_predictions: int = _field(8, "Test images classified with the exported model at the end.", resume="free")

    def __post_init__(self):
        _validate(self)

    def model_kwargs(self) -> dict:
        """The `keras_vit.ViT` keyword arguments of the config: the variant's (or the tiny model's) architecture,
        then every `vit_argument` field that is set (not None)."""
        if self.model == "tiny":
            args = dict(TINY_MODEL)
        else:
            from keras_vit.variants import get_variant

            args = get_variant(self.model).architecture()
        args.update({name: getattr(self, name) for name in VIT_ARGUMENTS if getattr(self, name) is not None})
        return args

    def train_steps(self, num_train_examples: int) -> int:
        """Total optimizer steps: `steps`, or `epochs` passes over the training split."""
        if self.steps is not None:
            return self.steps
        return max(1, math.ceil(self.epochs * num_train_examples / self.global_batch_size))

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Config":
        """The config of a `config.json` (its `resumed_with_changes` history and `weights_source`, if any, are not
        fields)."""
        values = json.loads(text)
        values.pop("resumed_with_changes", None)
        values.pop("weights_source", None)  # training.weights_source.SOURCE_KEY: a fine-tune's source, not a field
        if values.get("randaugment") is not None:
            values["randaugment"] = tuple(values["randaugment"])
        return cls(**values)


@dataclasses.dataclass(frozen=True)
class Range:
    """The values a numeric flag takes: finite, from `low` to `high` (each end included unless `*_open`)."""

    low: float
    high: float
    low_open: bool = False
    high_open: bool = False

    def __contains__(self, value) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return False
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    def __str__(self):
        def text(x):
            return f"{x:,}" if isinstance(x, int) and abs(x) >= 10_000 else f"{x:g}"

        return f"{'(' if self.low_open else '['}{text(self.low)}, {text(self.high)}{')' if self.high_open else ']'}"


_STEPS = 10**9  # no run has more steps (or a cadence beyond them)
RANGES: dict[str, Range] = {
    # The model: the largest published ViT (H/14, G/14) is far inside these.
    "patch_size": Range(1, 1024), "hidden_size": Range(1, 65_536), "num_layers": Range(1, 1024),
    "num_heads": Range(1, 1024), "mlp_dim": Range(1, 262_144), "representation_size": Range(1, 65_536),
    "head_bias_init": Range(-100.0, 100.0), "lora_rank": Range(1, 65_536),
    "dropout_rate": Range(0.0, 1.0, high_open=True), "drop_path_rate": Range(0.0, 1.0, high_open=True),
    # The data.
    "validation_split": Range(0.0, 1.0, low_open=True, high_open=True),
    "image_size": Range(1, 8192), "crop_min_area": Range(0.0, 1.0, low_open=True),
    "mixup": Range(0.0, 100.0), "cutmix": Range(0.0, 100.0),
    "shuffle_buffer": Range(1, 10_000_000),  # examples held in memory: a larger buffer exhausts it
    # The optimisation.
    "steps": Range(1, _STEPS), "epochs": Range(0.0, 1_000_000.0, low_open=True),
    "global_batch_size": Range(1, 65_536),  # beyond it the step does not compile in reasonable time or memory
    "learning_rate": Range(0.0, 1000.0, low_open=True),  # far above any that trains (a test of divergence)
    "beta_1": Range(0.0, 1.0, high_open=True), "beta_2": Range(0.0, 1.0, high_open=True),
    "momentum": Range(0.0, 1.0, high_open=True), "warmup_steps": Range(0, _STEPS),
    "weight_decay": Range(0.0, 10.0), "grad_clip_norm": Range(0.0, 1e6),
    "label_smoothing": Range(0.0, 1.0, high_open=True), "distillation_alpha": Range(0.0, 1.0),
    "distillation_tau": Range(0.0, 100.0, low_open=True),
    # The run.
    "seed": Range(0, 2**31 - 1), "checkpoint_every": Range(1, _STEPS), "keep_checkpoints": Range(1, 1000),
    "log_every": Range(1, _STEPS), "eval_every": Range(1, _STEPS), "show_predictions": Range(0, 1000),
}
"""The range of each numeric `Config` flag (its `--help` says it; `training.train` refuses a value outside it, or
NaN or infinity, as a usage error naming the flag: `range_problem`)."""


def range_problem(name: str, value, ranges: dict = RANGES) -> str | None:
    """The one-line problem of `--name=value` outside its range, or None (also for None: the flag left out)."""
    if value is None or value in ranges[name]:
        return None
    return (f"--{name} must be a finite number in {ranges[name]}. Received: --{name}={value}")


def fields_where(role: str, *values) -> tuple[str, ...]:
    """The `Config` fields whose metadata `role` is one of `values`, in declaration order.

    Example:
        >>> fields_where("resume", "optimisation")[:3]
        ('steps', 'epochs', 'learning_rate')
    """
    return tuple(f.name for f in dataclasses.fields(Config) if f.metadata.get(role) in values)


VIT_ARGUMENTS = fields_where("vit_argument", True)
"""The fields that are `keras_vit.ViT` arguments of the same name (`Config.model_kwargs`)."""
VIT_ONLY_FIELDS = fields_where("vit_only", True)
"""The fields a BiT model refuses any value but the default for (`training.model.check_model`)."""
OPTIMISATION_FIELDS = fields_where("resume", "optimisation")
"""The fields `--resume_with_changes` lets change on resume."""
RESUMABLE_FIELDS = fields_where("resume", "free")
"""The fields that may change on any resume: they do not change what is computed."""


def make_config(recipe: str | None = "demo", **overrides) -> Config:
    """The recipe's values, then `overrides` (the explicitly given flags), as one frozen `Config`.

    `recipe=None` chooses one from the situation (`choose_recipe`) and records why in `recipe_reason`.

    Raises:
        ValueError: for an unknown recipe or field, or an invalid value.
    """
    reason = None
    if recipe is None:
        workdir = overrides.get("workdir", Config.__dataclass_fields__["workdir"].default)
        recipe, reason = choose_recipe(overrides, workdir)  # the workdir: a fine-tune's recorded source
    if recipe not in RECIPES:
        raise ValueError(f"Unknown recipe. Received: recipe={recipe!r}. Known recipes: {', '.join(RECIPES)}.")
    fields = {f.name for f in dataclasses.fields(Config)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise ValueError(f"Unknown config fields. Received: {unknown}.")
    values = dict(RECIPES[recipe], recipe=recipe, recipe_reason=reason)
    values.update(overrides)
    if reason is not None:
        values = situational_head(situational_augmentation(values, overrides), overrides)
        values = situational_architecture(values, overrides)
    # An explicit --steps replaces the recipe's epochs and vice versa.
    for given, other in (("steps", "epochs"), ("epochs", "steps")):
        if overrides.get(given) is not None and other not in overrides:
            values[other] = None
    if values.get("representation_size") == -1:
        values["representation_size"] = Config(**{**values, "representation_size": None}).model_kwargs()[
            "hidden_size"
        ]
    return Config(**values)


def _validate(cfg: Config) -> None:
    def choice(name, options):
        if getattr(cfg, name) not in options:
            raise ValueError(f"`{name}` must be one of {options}. Received: {name}={getattr(cfg, name)!r}")

    def positive(name, allow_none=False):
        value = getattr(cfg, name)
        if value is None and allow_none:
            return
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ValueError(f"`{name}` must be a positive number. Received: {name}={value!r}")

    def rate(name):
        value = getattr(cfg, name)
        if not 0.0 <= value < 1.0:
            raise ValueError(f"`{name}` must be in [0, 1). Received: {name}={value!r}")

    for name in RANGES:  # finite (the flags are also checked against their ranges; Python callers may go beyond)
        value = getattr(cfg, name)
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"`{name}` must be a finite number. Received: {name}={value}")
    choice("optimizer", OPTIMIZERS)
    choice("schedule", SCHEDULES)
    choice("mixed_precision", PRECISIONS)
    choice("strategy", STRATEGIES)
    choice("crop", CROPS)
    choice("augment_library", AUGMENT_LIBRARIES)
    choice("classifier", (None, "token", "gap"))
    if cfg.dataset is None:
        raise ValueError(
            f"Recipe {cfg.recipe!r} needs a dataset: pass --dataset=NAME (a tensorflow-datasets name, "
            "folder:PATH or digits). Received: dataset=None"
        )
    if (cfg.steps is None) == (cfg.epochs is None):
        raise ValueError(f"Give exactly one of `steps` and `epochs`. Received: steps={cfg.steps}, epochs={cfg.epochs}")
    for name in ("image_size", "global_batch_size", "learning_rate", "checkpoint_every",
                 "keep_checkpoints", "shuffle_buffer"):
        positive(name)
    for name in ("steps", "epochs", "eval_every", "log_every", "grad_clip_norm", "patch_size", "hidden_size",
                 "num_layers",
                 "num_heads", "mlp_dim", "representation_size"):
        positive(name, allow_none=True)
    for name in ("dropout_rate", "drop_path_rate", "label_smoothing"):
        rate(name)
    if cfg.weight_decay < 0:
        raise ValueError(f"`weight_decay` must be >= 0. Received: weight_decay={cfg.weight_decay}")
    if cfg.warmup_steps < 0:
        raise ValueError(f"`warmup_steps` must be >= 0. Received: warmup_steps={cfg.warmup_steps}")
    if cfg.validation_split is not None and not 0.0 < cfg.validation_split < 1.0:
        raise ValueError(f"`validation_split` must be a fraction in (0, 1). Received: "
                         f"validation_split={cfg.validation_split!r}")
    if not 0.0 < cfg.crop_min_area <= 1.0:
        raise ValueError(f"`crop_min_area` must be in (0, 1]. Received: crop_min_area={cfg.crop_min_area}")
    if cfg.mixup < 0 or cfg.cutmix < 0:
        raise ValueError(f"`mixup` and `cutmix` are Beta alphas >= 0. Received: mixup={cfg.mixup}, cutmix={cfg.cutmix}")
    if cfg.randaugment is not None and (len(cfg.randaugment) != 2 or min(cfg.randaugment) < 0):
        raise ValueError(f"`randaugment` is (num_ops, magnitude). Received: randaugment={cfg.randaugment!r}")
    from training.model import check_model

    check_model(cfg, RECIPES.get(cfg.recipe))  # a known ViT or BiT name (else a ValueError listing them), no ViT-only field with a BiT
    if cfg.strategy == "tpu" and cfg.mixed_precision == "float16":
        raise ValueError("TPUs compute in bfloat16. Received: strategy='tpu', mixed_precision='float16'")
