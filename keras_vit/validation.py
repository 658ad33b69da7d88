"""Up-front checks of constructor arguments; each error quotes the received value."""

import math
import numbers

from keras_vit import variants

CLASSIFIERS = variants.choices("classifier")
POOLING_MODES = variants.choices("pooling")
INTERPOLATIONS = variants.choices("position_embedding_interpolation")


def check_rate(name: str, value) -> None:
    """A dropout-like rate must be a number in [0, 1)."""
    if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(f"`{name}` must be a number in [0, 1). Received: {name}={value!r}")


def check_positive_int(name: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"`{name}` must be a positive integer. Received: {name}={value!r}")


def check_positive_number(name: str, value) -> None:
    """A finite real number > 0 (an epsilon); bools and strings are refused."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"`{name}` must be a positive number, e.g. 1e-6. Received: {name}={value!r}")


def check_bool(name: str, value) -> None:
    """True or False, nothing that merely converts to one (1, "yes", None)."""
    if not isinstance(value, bool):
        raise ValueError(f"`{name}` must be a bool, True or False. Received: {name}={value!r}")


def check_interpolation(value) -> None:
    """A position-embedding resampling method of `keras_vit.position_embedding`, or None for the default."""
    if value is not None and value not in INTERPOLATIONS:
        raise ValueError(
            f"`position_embedding_interpolation` must be one of {INTERPOLATIONS}. "
            f"Received: position_embedding_interpolation={value!r}"
        )


def check_choice(name: str, value, choices) -> None:
    if value not in choices:
        raise ValueError(f"`{name}` must be one of {tuple(choices)}. Received: {name}={value!r}")


def check_pooling(pooling, classifier: str) -> None:
    if pooling is None:
        return
    check_choice("pooling", pooling, POOLING_MODES + (None,))
    if pooling == "token" and classifier != "token":
        raise ValueError(
            "`pooling='token'` needs a [class] token, which a model with `classifier='gap'` does not have. "
            f"Received: pooling={pooling!r}, classifier={classifier!r}"
        )


def as_pair(name: str, value) -> tuple[int, int]:
    """An int or an (int, int) pair, as (height, width)."""
    pair = (value, value) if isinstance(value, int) else tuple(value)
    if len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in pair):
        raise ValueError(f"`{name}` must be a positive int or a (height, width) pair. Received: {name}={value!r}")
    return pair


def _divisible_neighbours(size: int, patch_size: int) -> str:
    lower = (size // patch_size) * patch_size
    options = [s for s in (lower, lower + patch_size) if s > 0]
    return " or ".join(str(s) for s in options)


def check_divisible(height: int, width: int, patch_size: int) -> None:
    """Height and width must be multiples of the patch size (N = HW/P^2 exactly)."""
    bad = [(axis, size) for axis, size in (("height", height), ("width", width)) if size % patch_size]
    if bad:
        hints = "; ".join(f"{axis} {size} -> {_divisible_neighbours(size, patch_size)}" for axis, size in bad)
        raise ValueError(
            f"The image size must be divisible by the patch size {patch_size} ({hints} would work). "
            f"Received: input_shape=({height}, {width}, ...)"
        )


def _is_size(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value > 0


def check_input_shape(input_shape, any_size: bool = False) -> tuple:
    """(height, width, channels) with known, positive integer sizes (a zero size would change the batch size);
    with `any_size`, height and width may also be None (any size at run time, `keras_vit.ViT`).

    Without `any_size`, height and width must be known: a model with a learned position embedding of fixed
    length (or a BiT ResNet here) is built for one size.
    """
    input_shape = tuple(input_shape)
    if len(input_shape) != 3:
        raise ValueError(
            f"`input_shape` must be (height, width, channels), channels last. Received: input_shape={input_shape}"
        )
    height, width, channels = input_shape
    if not any_size and (height is None or width is None):
        raise ValueError(
            "A ViT needs a defined spatial size: its position embedding has one row per patch. "
            "Pass `input_shape=(height, width, channels)` with integers (the position embeddings of "
            f"pretrained weights are resampled to it). Received: input_shape={input_shape}"
        )
    if not all(_is_size(size) or (any_size and size is None) for size in (height, width)):
        raise ValueError(
            "The image height and width must be positive integers, multiples of the patch size, e.g. "
            f"input_shape=(224, 224, 3){', or None for any size at run time' if any_size else ''}. "
            f"Received: input_shape={input_shape}"
        )
    if not _is_size(channels):
        raise ValueError(f"The channel count must be a positive integer. Received: input_shape={input_shape}")
    return input_shape


def resolve_input_shape(image_size, input_shape, input_tensor, patch_size: int, any_size: bool = False) -> tuple:
    """The model's (height, width, channels), from `input_shape`, `input_tensor` or `image_size`; with `any_size`,
    height and width may be None (any multiple of `patch_size` at run time: `nominal_size`)."""
    if input_shape is None and input_tensor is not None:
        input_shape = tuple(input_tensor.shape[1:])
    if input_shape is None:
        height, width = as_pair("image_size", image_size)
        input_shape = (height, width, 3)
    height, width, channels = check_input_shape(input_shape, any_size)
    check_divisible(height or patch_size, width or patch_size, patch_size)
    return (None if height is None else int(height)), (None if width is None else int(width)), int(channels)


def is_any_size(input_shape) -> bool:
    """Whether a model's (height, width, channels) leaves the height or width to run time."""
    return input_shape is not None and len(input_shape) == 3 and None in tuple(input_shape)[:2]


def nominal_size(input_shape, image_size, patch_size: int) -> tuple[int, int]:
    """The (height, width) a model's position table covers: `input_shape`'s, `image_size`'s where it has None.

    Example:
        >>> nominal_size((None, None, 3), 224, 16), nominal_size((None, 64, 3), (32, 48), 16)
        ((224, 224), (32, 64))
    """
    pair = as_pair("image_size", image_size)
    size = tuple(pair[axis] if input_shape[axis] is None else int(input_shape[axis]) for axis in (0, 1))
    bad = [(axis, value) for axis, value in zip(("height", "width"), size) if value % patch_size]
    if bad:
        hints = "; ".join(f"{axis} {value} -> {_divisible_neighbours(value, patch_size)}" for axis, value in bad)
        raise ValueError(
            f"`image_size` is the size the position embedding covers in a model of any input size: it must be "
            f"divisible by the patch size {patch_size} ({hints} would work). Received: image_size={image_size!r}, "
            f"input_shape={tuple(input_shape)}"
        )
    return size


def check_before_loading(arguments: dict) -> None:
    """The checks of `keras_vit.ViT` arguments that need no checkpoint, done before one is read (the builder
    repeats them on the resolved arguments)."""
    from keras_vit.variants import DEFAULTS

    check_interpolation(arguments.get("position_embedding_interpolation"))
    for name, default in DEFAULTS.items():  # the switches: gelu_approximate, qkv_bias
        if isinstance(default, bool) and arguments.get(name) is not None:
            check_bool(name, arguments[name])
    if arguments.get("layer_norm_epsilon") is not None:
        check_positive_number("layer_norm_epsilon", arguments["layer_norm_epsilon"])
    if arguments.get("input_shape") is not None:
        check_input_shape(arguments["input_shape"], any_size=True)
