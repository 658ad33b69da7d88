"""What the studies of `training.experiments` are, which miniature models they compare and how long each
trains: the data both the trainer (`training.experiments.trainer`) and the report (`training.experiments.report`)
read, per preset (`--preset`).

Example:
    >>> MODELS["vit_base"].label, MODELS["vit_base"].steps, STUDIES[-1]
    ('ViT-B/4', 1500, 'attention_distance')
    >>> PRESETS["large"].models["vit_base"].label, PRESETS["large"].values["dataset"]
    ('ViT-B/4', 'cifar10')
"""

import dataclasses

from training.model import TINY_BIT  # no Keras import: the module imports it when it builds

STUDIES = ("data_size", "compute", "attention_distance")
PATCH = 4  # patch size of the mini ViTs and stride of the hybrid's stem: image sizes are multiples of it


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """A model of the studies: `family` "vit" (`keras_vit.ViT`, a hybrid with `hybrid`) or "bit" (`keras_vit.BiT`),
    and `steps`, its training budget (steps of the preset's batch) when `--steps` is not given."""

    label: str
    family: str
    arguments: dict
    steps: int


def _vit(label, width, depth, heads, steps, hybrid=None):
    arguments = dict(patch_size=PATCH, hidden_size=width, num_layers=depth, num_heads=heads, mlp_dim=2 * width)
    if width >= 128:
        arguments["mlp_dim"] = 4 * width  # the paper's ratio at the larger widths
    if hybrid:
        arguments["hybrid"] = hybrid
    return ModelSpec(label, "vit", arguments, steps)


MODELS = {
    "vit_small": _vit("ViT-S/4", 32, 2, 2, 2000),
    "vit_base": _vit("ViT-B/4", 64, 4, 4, 1500),  # the training app's "tiny" demo model
    "bit": ModelSpec("BiT-R11", "bit", dict(TINY_BIT), 600),  # the training app's --model=bit_tiny
    "hybrid": _vit("R5+ViT-S/4", 32, 2, 2, 1000, hybrid=dict(block_units=(1,), width=16, groups=8)),
}
"""The default study's models (digits at 28 px: a 7x7 patch grid): two ViT sizes, a BiT ResNet v2 (1 root conv
+ 3 units x 3 convs + head: 11 layers) and the hybrid (ViT-S over a one-unit ResNet v1 stem of stride 4, so that
its patch grid equals the ViTs'). `steps`: each family's budget on the digits, chosen so that the full-data runs
are within about a point of the training app's 2,000-step demo budget (docs/EXPERIMENTS.md, "Budgets")."""

LARGE_MODELS = {
    "vit_small": _vit("ViT-S/4", 192, 6, 3, 10_000),
    "vit_base": _vit("ViT-B/4", 384, 8, 6, 10_000),
    "bit": ModelSpec("BiT-R26", "bit", dict(block_units=(2, 2, 2, 2), width=64, groups=32), 5_000),
    "hybrid": _vit("R5+ViT-S/4", 192, 6, 3, 5_000, hybrid=dict(block_units=(1,), width=32, groups=16)),
}
"""The `large` preset's models (CIFAR at 32 px: an 8x8 patch grid), for a GPU or many cores; the budgets
are steps of 128 images (25.6 and 12.8 epochs of CIFAR's 50,000)."""


@dataclasses.dataclass(frozen=True)
class Preset:
    """A named study: its models and the `training.experiments.app.Setup` values it changes."""

    models: dict
    values: dict


PRESETS = {
    "default": Preset(MODELS, {}),
    "large": Preset(LARGE_MODELS, dict(dataset="cifar10", image_size=32, fractions=(0.02, 0.05, 0.1, 0.25, 0.5, 1.0),
                                       seeds=3, global_batch_size=128, attention_images=128)),
}
"""`default`: the embedded digits, minutes on two CPU cores; `large`: a prepared tensorflow-datasets CIFAR
(`--dataset=cifar100` works too), hours (docs/EXPERIMENTS.md, "The large preset")."""


def models_of(preset: str) -> dict:
    """The models of a preset; ValueError naming the presets for an unknown one."""
    if preset not in PRESETS:
        raise ValueError(f"Unknown preset. Received: preset={preset!r}. Known: {', '.join(PRESETS)}")
    return PRESETS[preset].models
