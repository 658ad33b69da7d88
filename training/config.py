"""The training app's one frozen configuration object and the paper's recipes as data.

Flags are parsed only in `training/train.py`; they become one `Config` (this file) that is passed down
explicitly and written to `WORKDIR/config.json`. A recipe is a named set of field values (paper Tables 3
and 4, Appendix B.1; AugReg from big_vision); explicit flags override the recipe, which overrides the
defaults of `Config`.

Without a recipe (`recipe=None`, the app's default), `choose_recipe` picks one from the situation and says
why: the embedded digits get `demo`, `--weights` of a published checkpoint gets `finetune`, anything else
`scratch` (the small-data recipe, also from the weights of one's own Keras model); when the recipe was chosen, the augmentation also follows the image size (`situational_augmentation`).

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

OPTIMIZERS = ("adam", "adamw", "sgd")
SCHEDULES = ("cosine", "linear", "constant")
PRECISIONS = ("none", "bfloat16", "float16")
STRATEGIES = ("auto", "one_device", "mirrored", "multi_worker", "tpu")
CROPS = ("inception", "translate", "none")
SMALL_IMAGE = 64  # at most this many pixels a side: translation, not crops, and no flips (glyphs, icons)

# Fields that a run may change when it resumes with `--resume_with_changes`: they change the optimisation from
# the restored step on (the schedule and its length, the update rule's hyperparameters, the loss), not the
# model's or the optimizer's variables, nor the data stream. `optimizer`, `mixed_precision`,
# `global_batch_size`, `seed` and the model and data fields are not among them.
OPTIMISATION_FIELDS = ("learning_rate", "warmup_steps", "schedule", "steps", "epochs", "weight_decay",
                       "grad_clip_norm", "label_smoothing", "beta_1", "beta_2", "momentum")

# The small model of the embedded demo; any `keras_vit.variants` name (e.g. "vit_ti16") is accepted too.
TINY_MODEL = dict(patch_size=4, hidden_size=64, num_layers=4, num_heads=4, mlp_dim=128)


@dataclasses.dataclass(frozen=True)
class Config:
    """Everything one training run depends on; immutable, JSON-serialisable.

    Defaults are those of the demo on the embedded digits; `RECIPES` hold the paper's values.
    `None` for a model dimension means "take it from the variant named by `model`".
    """

    recipe: str = "demo"
    recipe_reason: str | None = None  # why the recipe was chosen, when no --recipe was given
    # Model.
    model: str = "tiny"
    patch_size: int | None = None
    hidden_size: int | None = None
    num_layers: int | None = None
    num_heads: int | None = None
    mlp_dim: int | None = None
    classifier: str | None = None  # None: the checkpoint's with --weights, else "token"
    representation_size: int | None = None
    head_bias_init: float = 0.0
    dropout_rate: float = 0.0
    drop_path_rate: float = 0.0
    weights: str | None = None
    zero_head: bool = False
    # Data.
    dataset: str | None = "digits"
    data_dir: str | None = None
    download: bool = False
    train_split: str | None = None
    eval_split: str | None = None
    image_size: int = 16
    crop: str = "inception"
    crop_min_area: float = 0.05
    flip: bool = True
    randaugment: tuple[int, int] | None = None
    mixup: float = 0.0
    cutmix: float = 0.0
    shuffle_buffer: int = 10_000
    # Optimisation.
    steps: int | None = None
    epochs: float | None = None
    global_batch_size: int = 128
    optimizer: str = "adam"
    learning_rate: float = 1e-3
    beta_1: float = 0.9
    beta_2: float = 0.999
    momentum: float = 0.9
    schedule: str = "cosine"
    warmup_steps: int = 0
    weight_decay: float = 0.0
    grad_clip_norm: float | None = 1.0
    label_smoothing: float = 0.0
    # Runtime.
    mixed_precision: str = "none"
    jit_compile: bool = False
    strategy: str = "auto"
    tpu: str | None = None
    workdir: str = "workdir"
    seed: int = 0
    checkpoint_every: int = 500
    keep_checkpoints: int = 2
    log_every: int | None = None  # None: about 20 lines a run (training.progress.log_cadence)
    eval_every: int | None = None
    export: bool = True
    show_predictions: int = 8

    def __post_init__(self):
        _validate(self)

    def model_kwargs(self) -> dict:
        """Architecture keyword arguments of `keras_vit.ViT` (variant or tiny model, then overrides)."""
        if self.model == "tiny":
            args = dict(TINY_MODEL)
        else:
            from keras_vit.variants import get_variant

            args = get_variant(self.model).architecture()
        for key in ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim"):
            if getattr(self, key) is not None:
                args[key] = getattr(self, key)
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
        """The config of a `config.json` (its `resumed_with_changes` history, if any, is not a field)."""
        values = json.loads(text)
        values.pop("resumed_with_changes", None)
        if values.get("randaugment") is not None:
            values["randaugment"] = tuple(values["randaugment"])
        return cls(**values)


# Paper Table 3 (pre-training), Appendix B.1.1 (fine-tuning), big_vision AugReg configs, and the small-data
# recipe for training from scratch on a user's dataset.
RECIPES: dict[str, dict] = {
    # Training from scratch on a small dataset (thousands of images), the common case of a user's folder. The
    # AugReg finding (Steiner et al. 2021) at small scale: augmentation and regularisation stand in for data.
    # AdamW 2e-3 with decoupled weight decay 0.05, warm-up 200 steps (clamped to a tenth of a short run),
    # cosine decay, label smoothing 0.1 and, for small images, random translation by up to a tenth of the
    # side (a resized crop cuts glyphs; flips change them); the training step XLA-compiled, as Keras'
    # `model.fit` does by default. Measured against a plain Keras ViT in benchmarks/train_quality.py
    # (benchmarks/TRAINING.md).
    "scratch": dict(
        dataset=None,
        model="tiny",
        image_size=32,
        epochs=30,
        global_batch_size=128,
        optimizer="adamw",
        learning_rate=2e-3,
        warmup_steps=200,
        schedule="cosine",
        weight_decay=0.05,
        grad_clip_norm=1.0,
        label_smoothing=0.1,
        crop="translate",
        flip=False,
        checkpoint_every=500,
        jit_compile=True,  # XLA: faster per step than the plain graph for small models (benchmarks/TRAINING.md)
    ),
    # The embedded offline demo: a small ViT (142k parameters) on scikit-learn's 8x8 digits.
    "demo": dict(
        dataset="digits",
        model="tiny",
        image_size=16,  # 8x8 digits upsampled; 4x4 patches: 16 tokens of 2x2 original pixels
        crop="inception",
        crop_min_area=0.7,
        flip=False,  # a mirrored digit is another glyph
        steps=2000,
        global_batch_size=64,
        optimizer="adam",
        learning_rate=1e-3,
        warmup_steps=100,
        schedule="cosine",
        weight_decay=0.0,
        grad_clip_norm=1.0,
        checkpoint_every=500,
        jit_compile=True,  # XLA: faster per step than the plain graph for small models (benchmarks/TRAINING.md)
    ),
    # ImageNet-21k pre-training: Adam(0.9, 0.999), batch 4096, 10k warm-up, linear decay, wd 0.03,
    # clip 1, dropout 0.1, a tanh pre-logits layer of width D, head bias -10, 90 epochs at 224.
    "pretrain_i21k": dict(
        dataset=None,
        model="vit_b16",
        image_size=224,
        epochs=90,
        global_batch_size=4096,
        optimizer="adam",
        learning_rate=1e-3,
        warmup_steps=10_000,
        schedule="linear",
        weight_decay=0.03,
        grad_clip_norm=1.0,
        dropout_rate=0.1,
        representation_size=-1,  # -1: the model's hidden size
        head_bias_init=-10.0,
        crop="inception",
        crop_min_area=0.05,
        flip=True,
        checkpoint_every=1000,
    ),
    # Fine-tuning: SGD momentum 0.9, batch 512, cosine, 500 warm-up, no weight decay, clip 1, resolution
    # 384 (position embeddings resampled by the loader), zero-initialised head; 10k steps (CIFAR).
    "finetune": dict(
        dataset=None,
        model="vit_b16",
        image_size=384,
        steps=10_000,
        global_batch_size=512,
        optimizer="sgd",
        momentum=0.9,
        learning_rate=0.01,
        warmup_steps=500,
        schedule="cosine",
        weight_decay=0.0,
        grad_clip_norm=1.0,
        zero_head=True,
        crop="inception",
        crop_min_area=0.05,
        flip=True,
        checkpoint_every=1000,
    ),
    # AugReg (Steiner et al. 2021, big_vision): Adam with decoupled weight decay 0.1, lr 1e-3, batch 4096,
    # 10k warm-up, cosine, 300 epochs, RandAugment(2, 15) + Mixup 0.2 ("medium1"), inception crop + flip.
    "augreg": dict(
        dataset=None,
        model="vit_b16",
        image_size=224,
        epochs=300,
        global_batch_size=4096,
        optimizer="adamw",
        learning_rate=1e-3,
        warmup_steps=10_000,
        schedule="cosine",
        weight_decay=0.1,
        grad_clip_norm=1.0,
        randaugment=(2, 15),
        mixup=0.2,
        crop="inception",
        crop_min_area=0.05,
        flip=True,
        checkpoint_every=1000,
    ),
}


KERAS_WEIGHT_FILES = (".keras", ".weights.h5", ".h5")


def choose_recipe(overrides: dict) -> tuple[str, str]:
    """(recipe, reason) for a run given without `--recipe`, from the flags that were given."""
    dataset = overrides.get("dataset")
    weights = overrides.get("weights")
    if weights and str(weights).lower().endswith(KERAS_WEIGHT_FILES):
        # A model of one's own (a Keras file, e.g. a run of this app): the small-data recipe from its weights.
        # The paper's SGD fine-tune is for published large-scale checkpoints; on short runs from small
        # pre-trained models it did worse than training from scratch (benchmarks/TRAINING.md).
        return "scratch", (f"fine-tuning your own model from --weights={weights}: the small-data recipe "
                           "(--recipe=finetune is the paper's, for published checkpoints)")
    if weights:
        return "finetune", f"fine-tuning from --weights={weights}"
    if dataset in (None, "digits"):
        return "demo", "the embedded digits demo"
    return "scratch", f"training from scratch on {dataset}: the small-data recipe (--recipe=augreg for large data)"


def situational_augmentation(values: dict, overrides: dict) -> dict:
    """Crop and flip by image size for a chosen recipe (explicit --crop/--flip win): small images
    (<= `SMALL_IMAGE`) are translated, not cropped, and not flipped; larger ones get the Inception crop from
    a quarter of the area (0.05 is for ImageNet-scale pre-training) with flips."""
    if "crop" in overrides or "flip" in overrides or values.get("dataset") == "digits":
        return values
    if values["image_size"] <= SMALL_IMAGE:
        return dict(values, crop="translate", flip=False)
    return dict(values, crop="inception", crop_min_area=max(values.get("crop_min_area", 0.05), 0.25), flip=True)


def make_config(recipe: str | None = "demo", **overrides) -> Config:
    """The recipe's values, then `overrides` (the explicitly given flags), as one frozen `Config`.

    `recipe=None` chooses one from the situation (`choose_recipe`) and records why in `recipe_reason`.

    Raises:
        ValueError: for an unknown recipe or field, or an invalid value.
    """
    reason = None
    if recipe is None:
        recipe, reason = choose_recipe(overrides)
    if recipe not in RECIPES:
        raise ValueError(f"Unknown recipe. Received: recipe={recipe!r}. Known recipes: {', '.join(RECIPES)}.")
    fields = {f.name for f in dataclasses.fields(Config)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise ValueError(f"Unknown config fields. Received: {unknown}.")
    values = dict(RECIPES[recipe], recipe=recipe, recipe_reason=reason)
    values.update(overrides)
    if reason is not None:
        values = situational_augmentation(values, overrides)
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

    choice("optimizer", OPTIMIZERS)
    choice("schedule", SCHEDULES)
    choice("mixed_precision", PRECISIONS)
    choice("strategy", STRATEGIES)
    choice("crop", CROPS)
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
    if not 0.0 < cfg.crop_min_area <= 1.0:
        raise ValueError(f"`crop_min_area` must be in (0, 1]. Received: crop_min_area={cfg.crop_min_area}")
    if cfg.mixup < 0 or cfg.cutmix < 0:
        raise ValueError(f"`mixup` and `cutmix` are Beta alphas >= 0. Received: mixup={cfg.mixup}, cutmix={cfg.cutmix}")
    if cfg.randaugment is not None and (len(cfg.randaugment) != 2 or min(cfg.randaugment) < 0):
        raise ValueError(f"`randaugment` is (num_ops, magnitude). Received: randaugment={cfg.randaugment!r}")
    if cfg.model != "tiny":
        from keras_vit.variants import get_variant

        get_variant(cfg.model)  # raises a ValueError listing the known names
    if cfg.strategy == "tpu" and cfg.mixed_precision == "float16":
        raise ValueError("TPUs compute in bfloat16. Received: strategy='tpu', mixed_precision='float16'")
