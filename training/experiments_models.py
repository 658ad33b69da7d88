"""What the studies of `training.experiments` are and which miniature models they compare: the data both the
trainer (`training.experiments`) and the report (`training.experiments_report`) read.

Example:
    >>> MODELS["vit_base"].label, STUDIES
    ('ViT-B/4', ('data_size', 'compute', 'attention_distance'))
"""

import dataclasses

from training.model import TINY_BIT  # no Keras import: the module imports it when it builds

STUDIES = ("data_size", "compute", "attention_distance")
PATCH = 4  # patch size of the mini ViTs and stride of the hybrid's stem: image sizes are multiples of it


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """A model of the studies: `family` "vit" (`keras_vit.ViT`, a hybrid with `hybrid`) or "bit" (`keras_vit.BiT`)."""

    label: str
    family: str
    arguments: dict


MODELS = {
    "vit_small": ModelSpec("ViT-S/4", "vit", dict(patch_size=PATCH, hidden_size=32, num_layers=2, num_heads=2,
                                                  mlp_dim=64)),
    "vit_base": ModelSpec("ViT-B/4", "vit", dict(patch_size=PATCH, hidden_size=64, num_layers=4, num_heads=4,
                                                 mlp_dim=128)),  # the training app's "tiny" demo model
    "bit": ModelSpec("BiT-R11", "bit", dict(TINY_BIT)),  # the training app's --model=bit_tiny
    "hybrid": ModelSpec("R5+ViT-S/4", "vit", dict(patch_size=PATCH, hidden_size=32, num_layers=2, num_heads=2,
                                                  mlp_dim=64, hybrid=dict(block_units=(1,), width=16, groups=8))),
}
"""The miniature models: two ViT sizes, a BiT ResNet v2 (1 root conv + 3 units x 3 convs + head: 11 layers) and
the hybrid (ViT-S over a one-unit ResNet v1 stem of stride 4, so that its patch grid equals the ViTs')."""
