"""What keras_vit can build and load, by name: `list_models()` and `list_weights()` (timm's `list_models`,
keras-hub's presets).

No Keras import here: the names come from the variant table (`keras_vit.variants`) and the table of published
files (`keras_vit.weights`).

Example:
    >>> import keras_vit
    >>> keras_vit.list_models("vit_b*")
    ['vit_b8', 'vit_b16', 'vit_b32']
    >>> [(w.name, w.imagenet_top1) for w in keras_vit.list_weights("vit_b16")][:2]
    [('imagenet21k', None), ('imagenet21k+imagenet2012', 83.97)]
"""

import fnmatch

from keras_vit import variants
from keras_vit import weights as weights_table


def list_models(pattern: str = "*", pretrained: bool = False) -> list[str]:
    """The model names the constructors and the command-line tools' `--model` take, in table order.

    Args:
        pattern: a shell-style pattern over the names (`"vit_b*"`, `"*r50*"`), any case.
        pretrained: only the models with at least one published checkpoint.

    Returns:
        Names such as `"vit_b16"` (constructor `keras_vit.ViT_B16`), `"vit_r50_b16"`, `"bit_r50x1"`.
    """
    names = [variant.model_name for variant in variants.VARIANTS.values()
             if not pretrained or weights_table.names_for(variant.name)]
    if not pretrained:
        names += list(variants.BIT_MODELS)
    return [name for name in names if fnmatch.fnmatch(name, pattern.lower())]


def list_weights(model: str | None = None) -> list[weights_table.WeightsEntry]:
    """The published checkpoints, one `keras_vit.weights.WeightsEntry` each (`.name` is the `weights=` value,
    `.imagenet_top1` the upstream ImageNet top-1 where reported, `.image_size`, `.classes`, `.url`).

    Args:
        model: a model name (`"vit_b16"`, any spelling `keras_vit.variants.get_variant` takes) for its files
            only; None for every file.

    Raises:
        ValueError: an unknown model name, listing the known ones.
    """
    if model is None:
        return list(weights_table.PUBLISHED)
    variant = variants.get_variant(model)
    return [entry for entry in weights_table.PUBLISHED if entry.variant == variant.name]
