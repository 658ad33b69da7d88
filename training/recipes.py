"""The training app's recipes, as data (the paper's, AugReg's and the small-data ones), and how a run without
`--recipe` gets one from its situation (`choose_recipe`, `situational_augmentation`, `situational_head`);
`training.config.make_config` applies them.

Example:
    >>> choose_recipe({"dataset": "folder:/data/letters"})[0], RECIPES["finetune"]["optimizer"]
    ('scratch', 'sgd')
"""

from keras_vit import variants
from training.weights_source import is_own_model, recorded_source

APP_BIT_MODELS = {"bit_tiny": dict(block_units=(1, 1, 1), width=16, groups=8)}
"""The app's own BiT ResNets (`--model` name -> `keras_vit.BiT` arguments), declared here only; the library's
are `keras_vit.variants.BIT_MODELS`. `bit_tiny` is the miniature BiT ResNet v2 of `training.experiments`
("BiT-R11", `training.model.TINY_BIT`)."""

BIT_MODELS = (*APP_BIT_MODELS, *variants.BIT_MODELS)
"""The `--model` values that train a BiT ResNet (`keras_vit.BiT`) instead of a ViT: the app's, then the library's."""


def is_bit(model: str) -> bool:
    """Whether the config's `model` is a BiT ResNet (`BIT_MODELS`: an `APP_BIT_MODELS` name, or any spelling of
    `keras_vit.variants.bit_name`)."""
    return model in APP_BIT_MODELS or variants.bit_name(model) is not None


SMALL_IMAGE = 64  # at most this many pixels a side: translation, not crops, and no flips (glyphs, icons)


# Paper Table 3 (pre-training), Appendix B.1.1 (fine-tuning), big_vision AugReg configs, and the small-data
# recipe for training from scratch on a user's dataset. The values the recipes share are given once: every
# recipe clips the gradient norm at 1 and (but for the demo) needs a --dataset; the two small recipes train the
# tiny model without flips, XLA-compiled, checkpointing every 500 steps; the three paper recipes train ViT-B/16
# from the official initialisation with the Inception crop from 5% of the area and flips, checkpointing every 1000 steps, and the two
# ImageNet-scale ones (pre-training, AugReg) run at 224 in batches of 4096 with lr 1e-3 after 10k warm-up steps.
_EVERY_RECIPE = dict(dataset=None, grad_clip_norm=1.0)
_SMALL = dict(
    _EVERY_RECIPE,
    model="tiny",
    flip=False,
    checkpoint_every=500,
    jit_compile=True,  # XLA: faster per step than the plain graph for small models (benchmarks/TRAINING.md)
)
_PAPER = dict(_EVERY_RECIPE, model="vit_b16", crop="inception", crop_min_area=0.05, flip=True, checkpoint_every=1000,
              initialization="official")
_IMAGENET_SCALE = dict(_PAPER, image_size=224, global_batch_size=4096, learning_rate=1e-3, warmup_steps=10_000)

RECIPES: dict[str, dict] = {
    # Training from scratch on a small dataset (thousands of images), the common case of a user's folder. The
    # AugReg finding (Steiner et al. 2021) at small scale: augmentation and regularisation stand in for data.
    # AdamW 2e-3 with decoupled weight decay 0.05, warm-up 200 steps (clamped to a tenth of a short run),
    # cosine decay, label smoothing 0.1 and, for small images, random translation by up to 8% of the side
    # in fractions of a pixel, as the plain Keras ViT's RandomTranslation (a resized crop cuts glyphs; flips
    # change them); the training step XLA-compiled, as Keras'
    # `model.fit` does by default. Measured against a plain Keras ViT in benchmarks/train_quality.py
    # (benchmarks/TRAINING.md).
    "scratch": dict(
        _SMALL,
        image_size=32,
        epochs=30,
        global_batch_size=128,
        optimizer="adamw",
        learning_rate=2e-3,
        warmup_steps=200,
        schedule="cosine",
        weight_decay=0.05,
        label_smoothing=0.1,
        crop="translate",
    ),
    # The embedded offline demo: a small ViT (142k parameters) on scikit-learn's 8x8 digits.
    "demo": dict(
        _SMALL,
        dataset="digits",
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
    ),
    # ImageNet-21k pre-training: Adam(0.9, 0.999), batch 4096, 10k warm-up, linear decay, wd 0.03,
    # clip 1, dropout 0.1, a tanh pre-logits layer of width D, head bias -10, 90 epochs at 224.
    "pretrain_i21k": dict(
        _IMAGENET_SCALE,
        epochs=90,
        optimizer="adam",
        schedule="linear",
        weight_decay=0.03,
        dropout_rate=0.1,
        representation_size=-1,  # -1: the model's hidden size
        head_bias_init=-10.0,
    ),
    # Fine-tuning: SGD momentum 0.9, batch 512, cosine, 500 warm-up, no weight decay, clip 1, resolution
    # 384 (position embeddings resampled by the loader), zero-initialised head; 10k steps (CIFAR).
    "finetune": dict(
        _PAPER,
        image_size=384,
        steps=10_000,
        global_batch_size=512,
        optimizer="sgd",
        momentum=0.9,
        learning_rate=0.01,
        warmup_steps=500,
        schedule="cosine",
        weight_decay=0.0,
        zero_head=True,
    ),
    # AugReg (Steiner et al. 2021, big_vision): Adam with decoupled weight decay 0.1, lr 1e-3, batch 4096,
    # 10k warm-up, cosine, 300 epochs, RandAugment(2, 15) + Mixup 0.2 ("medium1"), inception crop + flip.
    "augreg": dict(
        _IMAGENET_SCALE,
        epochs=300,
        optimizer="adamw",
        schedule="cosine",
        weight_decay=0.1,
        randaugment=(2, 15),
        mixup=0.2,
    ),
}


def choose_recipe(overrides: dict, workdir: str | None = None) -> tuple[str, str]:
    """(recipe, reason) for a run given without `--recipe`, from the flags that were given.

    `workdir`: the run's; a fine-tune whose `config.json` there records these `--weights` as one's own model
    (`training.weights_source.SOURCE_KEY`) keeps the recipe it started with when that source is gone or replaced since."""
    dataset = overrides.get("dataset")
    weights = overrides.get("weights")
    if is_own_model(weights) or _recorded_as_own(workdir, weights):
        # A model of one's own (a Keras file or a run of this app): the small-data recipe from its weights.
        # The paper's SGD fine-tune is for published large-scale checkpoints; on short runs from small
        # pre-trained models it did worse than training from scratch (benchmarks/TRAINING.md).
        return "scratch", (f"fine-tuning your own model from --weights={weights}: the small-data recipe "
                           "(--recipe=finetune is the paper's, for published checkpoints)")
    if weights:
        return "finetune", f"fine-tuning from --weights={weights}"
    if dataset in (None, "digits"):
        return "demo", "the embedded digits demo"
    return "scratch", f"training from scratch on {dataset}: the small-data recipe (--recipe=augreg for large data)"


def _recorded_as_own(workdir, weights) -> bool:
    return workdir is not None and recorded_source(workdir, weights) is not None


def situational_augmentation(values: dict, overrides: dict) -> dict:
    """Crop and flip by image size for a chosen recipe (explicit --crop/--flip win): small images
    (<= `SMALL_IMAGE`) are translated, not cropped, and not flipped; larger ones get the Inception crop from
    a quarter of the area (0.05 is for ImageNet-scale pre-training) with flips."""
    if "crop" in overrides or "flip" in overrides or values.get("dataset") == "digits":
        return values
    if values["image_size"] <= SMALL_IMAGE:
        return dict(values, crop="translate", flip=False)
    return dict(values, crop="inception", crop_min_area=max(values.get("crop_min_area", 0.05), 0.25), flip=True)


def situational_head(values: dict, overrides: dict) -> dict:
    """The head of a ViT run by the chosen `scratch` recipe (explicit --classifier wins): from scratch, a
    global-average-pooled head instead of the [class] token, as in "Better plain ViT baselines" (Beyer et al.
    2022); benchmarks/TRAINING.md has what it gained and cost here. From one's own model (`--weights` of a
    keras_vit file or run), the head that model has: the file carries it (`classifier` stays None)."""
    if values["recipe"] != "scratch" or "classifier" in overrides or is_bit(values["model"]):
        return values
    if values.get("weights"):
        return values
    reason = f"{values['recipe_reason']}, with a global-average-pooled head (--classifier=token for the [class] token)"
    return dict(values, classifier="gap", recipe_reason=reason)


SMALL_DATA_ARCHITECTURE = dict(tokenizer="shifted_patches")
"""The `keras_vit.ViT` options a ViT trained from scratch by the `scratch` recipe gets (`situational_architecture`):
what won on `benchmarks/train_quality.py` (benchmarks/TRAINING.md, "Small-data options")."""
SMALL_DATA_FLAGS = ("tokenizer", "locality_attention")
"""The flags of the small-data options: giving any of them explicitly turns `situational_architecture` off."""


def situational_architecture(values: dict, overrides: dict) -> dict:
    """The small-data options of a ViT trained from scratch by the chosen `scratch` recipe
    (`SMALL_DATA_ARCHITECTURE`); any of `SMALL_DATA_FLAGS` given explicitly turns the choice off
    (`--tokenizer=patches`: the paper's architecture). One's own model (`--weights`) keeps the architecture its
    file carries."""
    from keras_vit.variants import get_variant
    try:
        hybrid = bool(get_variant(values["model"]).hybrid)  # a hybrid's ResNet stem is its tokenizer
    except ValueError:  # 'tiny', a BiT, or a name the config's own check refuses
        hybrid = False
    if (values["recipe"] != "scratch" or values.get("weights") or is_bit(values["model"]) or hybrid
            or any(key in overrides for key in SMALL_DATA_FLAGS)):
        return values
    chosen = ", ".join(f"--{key}={str(value).lower()}" for key, value in SMALL_DATA_ARCHITECTURE.items())
    reason = (f"{values['recipe_reason']}; small-data options {chosen} (--tokenizer=patches for the paper's "
              "architecture)")
    return dict(values, **SMALL_DATA_ARCHITECTURE, recipe_reason=reason)
