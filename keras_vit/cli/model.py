"""The shared flags that choose a model (`--model`, `--weights`, `--image_size`, `--classes`, `--pooling`), checked
when they are parsed, and the one way the tools turn them into a Keras model (`model_from_flag_values`,
`model_from_flags`).

Every check is an absl validator (`flags.register_validator`; `require` for a required flag), so a bad or
missing value is a usage error found before Keras or TensorFlow is imported, in absl's words and the tools':
`flag --model=vit_zz: Unknown model. Received: 'vit_zz'. Known: ...`. A tool imports it beside the convention
(`keras_vit.cli`): `from keras_vit.cli import model as cli_model`, then `cli_model.define_model(FLAGS)`, ...
"""

from __future__ import annotations

import os

from absl import flags

from keras_vit import variants
from keras_vit.checkpoints.untrusted import FIELD_LIMITS
from keras_vit.cli import require
from keras_vit.cli.console import progress

flags.disclaim_key_flags()  # the flags defined here belong to the tool that calls the helpers

ARCHITECTURE_FLAGS = ("image_size", "classes", "pooling", "classifier")
"""Flags of a constructor that a `.keras` model (whose file fixes its architecture) refuses."""

BIT_REFUSED_FLAGS = {"pooling": "token", "classifier": None}
"""Flag values a BiT `--model` refuses (None: any value): a ResNet has no [class] token and no `classifier`."""


def check_bit_arguments(model: str, **given) -> None:
    """Raises a ValueError for constructor arguments a BiT `model` cannot take (`given`: name -> value, None
    when not given): `pooling="token"`, any `classifier`, and a published ViT checkpoint as `weights`."""
    for name, value in given.items():
        if value is None or (name not in BIT_REFUSED_FLAGS and name != "weights"):
            continue
        if name == "weights":
            from keras_vit.weights import is_name

            if is_name(value):
                raise ValueError(
                    f"--weights={value!r} is a published ViT checkpoint; a BiT ResNet ({model}) takes none "
                    "(BiT checkpoints are not supported): pass --weights=none or a .weights.h5 / .keras file of "
                    f"the same architecture. Received: --model={model!r}"
                )
        elif BIT_REFUSED_FLAGS[name] in (None, value):
            raise ValueError(
                f"--{name}={value} applies to ViT models only: a BiT ResNet has no tokens to pool"
                + (" (its features are pooled with --pooling=avg or max)" if name == "pooling" else "")
                + f". Received: --model={model!r}"
            )


def define_model(flag_values=flags.FLAGS, *, default=None, required=False, keras_files=True, extra_names=(),
                 refuse_bit=None, help=None):
    """`--model`: a variant name (`vit_b16`, any spelling `keras_vit.variants.get_variant` takes), a BiT ResNet
    name (`variants.BIT_MODELS`) or, with `keras_files`, a `.keras` file. Checked when the flags are parsed: an
    unknown name or a missing file is a usage error, and so is a `.keras` file together with `--image_size`,
    `--classes`, `--pooling` or `--classifier` (the file fixes the architecture), or a BiT name with a ViT-only
    value (`check_bit_arguments`). `extra_names`: more accepted values (e.g. "tiny"). `refuse_bit`: the tool's
    reason to refuse the BiT names (a usage error saying it; they are then not listed as known)."""
    names = [variant.model_name for variant in variants.VARIANTS.values()]
    names += [] if refuse_bit else list(variants.BIT_MODELS)
    what = "a variant name (" + ", ".join(names) + ")" + (" or a .keras file" if keras_files else "")
    holder = flags.DEFINE_string("model", default, help or f"The model: {what}.", flag_values=flag_values)
    if required:
        require(flag_values, "model")

    def check(model):
        if model is None or model in extra_names:
            return True
        if model.endswith(".keras"):
            if not keras_files:
                raise flags.ValidationError("--model must be a variant name here, not a .keras file.")
            if not os.path.isfile(model):
                raise flags.ValidationError("The model file does not exist.")
            _refuse_architecture_flags(flag_values)
            return True
        if variants.bit_name(model) is not None:
            if refuse_bit:
                raise flags.ValidationError(refuse_bit)
            given = {name: flag_values[name].value for name in (*BIT_REFUSED_FLAGS, "weights")
                     if name in flag_values}
            try:
                check_bit_arguments(model, **given)
            except ValueError as error:
                raise flags.ValidationError(str(error)) from None
            return True
        try:
            variants.get_variant(model)
        except ValueError:
            raise flags.ValidationError(f"Unknown model. Received: {model!r}. Known: {what}.") from None
        return True

    flags.register_validator("model", check, flag_values=flag_values)
    return holder


def define_weights(flag_values=flags.FLAGS, *, default=None, required=False, purpose="the results", help=None):
    """`--weights`: `none` (random initialisation), a published name, or a file (a checkpoint, a
    `.weights.h5`, or a trained `.keras` model, which then is the model). Checked when the flags are parsed:
    a value that is neither `none`, a published name nor an existing file or folder is a usage error. With
    `required`, a variant-name `--model` needs `--weights` (random weights would silently make `purpose`
    meaningless): `--weights=none` asks for them explicitly."""
    from keras_vit.weights import IMAGENET_ALIAS, all_names, is_name

    published = ", ".join(all_names())
    text = help or (
        f"The weights: none (random initialisation), a published name ({published}, {IMAGENET_ALIAS}) "
        "or a file (.npz, .safetensors, Hugging Face folder, .weights.h5, or a trained .keras model, which "
        "then is the model)" + (". Required with a variant name: pass --weights=none explicitly for random "
                                "weights (default with a .keras model: its own)" if required else "") + "."
    )
    holder = flags.DEFINE_string("weights", default, text, flag_values=flag_values)

    def check(weights):
        model = flag_values["model"].value if "model" in flag_values else None
        if weights is None:
            if required and model is not None and not model.endswith(".keras"):
                raise flags.ValidationError(
                    f"--weights is required with a variant name: random weights would make {purpose} meaningless. "
                    "Pass --weights=none explicitly for random weights, or a published name or a weights file."
                )
            return True
        if not (weights.lower() == "none" or is_name(weights) or os.path.exists(weights)):
            raise flags.ValidationError(
                f"--weights is neither none, a published name ({published}, {IMAGENET_ALIAS}) nor an existing "
                "file or folder."
            )
        if weights.endswith(".keras") and model is not None:
            _refuse_architecture_flags(flag_values)
        return True

    flags.register_validator("weights", check, flag_values=flag_values)
    return holder


def _refuse_architecture_flags(flag_values):
    for name in ARCHITECTURE_FLAGS:
        if name in flag_values and flag_values[name].present:
            raise flags.ValidationError(
                f"--{name} cannot apply to a .keras model: the file fixes its architecture. Drop --{name}, or "
                "pass a variant name as --model."
            )


def define_image_size(flag_values=flags.FLAGS, *, help=None):
    """`--image_size`: the input side of a variant (resamples the position embedding of loaded weights)."""
    return flags.DEFINE_integer(
        "image_size", None, help or "Input height and width for a variant name, a multiple of the patch size "
        f"(default: the weights' resolution, 224 without weights; at most {FIELD_LIMITS['image_side']}); resamples the "
        "position embedding.", lower_bound=1, upper_bound=FIELD_LIMITS["image_side"], flag_values=flag_values,
    )


def define_classes(flag_values=flags.FLAGS, *, help=None):
    """`--classes`: the head's classes of a variant (another count than the weights' gives a new zero head)."""
    return flags.DEFINE_integer(
        "classes", None, help or "Classes of the head for a variant name (default: the weights', 1000 without "
        f"weights; at most {FIELD_LIMITS['classes']:,}); another count gives a new zero-initialised head.", lower_bound=1,
        upper_bound=FIELD_LIMITS["classes"], flag_values=flag_values,
    )


def define_pooling(flag_values=flags.FLAGS, *, help=None):
    """`--pooling`: no head, the pooled features (`token`, `avg` or `max`)."""
    return flags.DEFINE_enum(
        "pooling", None, ["token", "avg", "max"], help or "Features instead of classes for a variant name: no "
        "head, the [class] token (token) or the patch-token mean (avg) or max (default: the head).",
        flag_values=flag_values,
    )


# --- flags -> a model --------------------------------------------------------------------------------------


def _describe_weights(weights):
    return "random weights" if weights is None else f"weights {weights}"


def model_from_flag_values(model, weights=None, *, image_size=None, classes=None, pooling=None, **kwargs):
    """The one way the tools turn `--model`, `--weights`, `--image_size`, `--classes` and `--pooling` into a
    Keras model: `keras_vit.applications.model_from_name`, with a progress line.

    Args:
        model: a variant name (any spelling of `keras_vit.variants.get_variant`), a BiT name (`variants.BIT_MODELS`,
            `bit_name`), a `.keras` file, or None:
            the architecture the checkpoint `weights` describes (`keras_vit.ViT(weights=...)`).
        weights: None or "none" (random), a published name, a checkpoint or `.weights.h5` file, or (with a
            variant name) a trained `.keras` file, which is then loaded as the model itself.
        image_size, classes, pooling: for a variant name (or a checkpoint); a `.keras` model refuses them.
        **kwargs: more constructor arguments (`include_top`, `classifier_activation`, ...).

    Raises:
        ValueError: an unknown name, flags a `.keras` model cannot take, or any loading error.
    """
    from keras_vit import applications
    from keras_vit.checkpoints import weights_files

    weights = weights_files.none_if_none(weights)
    keras_file = model if model is not None and model.endswith(".keras") else None
    if keras_file is None and weights is not None and str(weights).endswith(".keras"):
        keras_file, weights = weights, None  # a trained .keras model given as --weights is the model itself
    if keras_file is not None:
        given = {"image_size": image_size, "classes": classes, "pooling": pooling}
        given.update({k: kwargs[k] for k in ("classifier",) if kwargs.get(k) is not None})
        refused = [name for name, value in given.items() if value is not None]
        if refused:
            raise ValueError(
                f"--{refused[0]} cannot apply to a .keras model ({keras_file!r}): the file fixes its architecture."
            )
        progress(f"loading {keras_file}" + (f" with {_describe_weights(weights)}" if weights else "") + " ...")
        return applications.model_from_name(keras_file, weights)
    if image_size is not None:
        kwargs["input_shape"] = (image_size, image_size, 3)
    if classes is not None:
        kwargs["classes"] = classes
    if pooling is not None:
        kwargs.update(include_top=False, pooling=pooling)
    if model is None:
        progress(f"loading {weights} ...")
        return applications.ViT(weights=weights, **kwargs)
    bit = variants.bit_name(model)
    if bit is not None:
        check_bit_arguments(model, weights=weights, pooling=kwargs.get("pooling"), classifier=kwargs.get("classifier"))
        model = bit
    else:
        try:
            model = variants.get_variant(model).model_name
        except ValueError:
            pass  # applications.model_from_name names the known models
    progress(f"building {model} with {_describe_weights(weights)} ...")
    return applications.model_from_name(model, weights, **kwargs)


def model_from_flags(flag_values=flags.FLAGS, **kwargs):
    """`model_from_flag_values` from the parsed `--model`, `--weights`, `--image_size`, `--classes` and `--pooling` (those
    of them that `flag_values` defines); `kwargs` go to the constructor."""
    values = {name: flag_values[name].value for name in ("image_size", "classes", "pooling") if name in flag_values}
    weights = flag_values["weights"].value if "weights" in flag_values else None
    return model_from_flag_values(flag_values["model"].value, weights, **values, **kwargs)


def keras_file_of(flag_values=flags.FLAGS) -> str | None:
    """The `.keras` file the flags load as the model (`--model`, or `--weights` with a variant name), or None."""
    for name in ("model", "weights"):
        value = flag_values[name].value if name in flag_values else None
        if value is not None and value.endswith(".keras"):
            return value
    return None
