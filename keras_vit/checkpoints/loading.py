"""Puts pretrained weights into keras_vit models, strictly: every model weight is set from the file and every
file tensor is used or reported as skipped; otherwise a ValueError lists what is missing, unexpected or
mis-shaped, and says which variant the file looks like. Weights holding NaN or Inf are refused as damaged.

`weights` may be a published name (`keras_vit.weights`), an official `.npz` (any spelling), a timm
`.safetensors`, a Hugging Face ViT folder or its `model.safetensors`, or a Keras `.weights.h5` or `.keras`; the
format is detected from the file itself. For checkpoints, `ViT(weights=...)` reads the file first, takes the
architecture from its shapes (validating what the caller fixed), builds a fresh model and then loads it, so
a failed load never leaves a half-loaded model behind. Resolution changes resample the position embedding
(paper section 3.2, `keras_vit.position_embedding`); a different number of classes gets a new zero-initialised head
(as the paper's fine-tuning); `include_top=False` skips the head. These decisions are reported on the
`"keras_vit"` logger, one line each: a resampled position embedding, a new head and the pre_logits it drops
at WARNING, so that Python prints them to stderr even when logging is not configured (quiet them with
`logging.getLogger("keras_vit").setLevel(logging.ERROR)`); what the user asked for (`include_top=False`) and
the count of loaded arrays at INFO. A raw ImageNet-21k zero head used for inference raises a `UserWarning`.

This module plans, assigns and reports. The steps before it each have their own place: what a `weights` argument
names, where its file is and its format (`keras_vit.checkpoints.weights_files.resolve`, formats told by
`keras_vit.checkpoints.detect`), the reader of each format (`keras_vit.checkpoints.readers`; one's own files:
`keras_vit.checkpoints.own`, then `keras_names.to_checkpoint`), and the `ViT` arguments a checkpoint implies
(`keras_vit.checkpoints.architecture`). The names of the model's layers are those of
`keras_vit.model_parts`.

Example:
    >>> import keras_vit
    >>> model = keras_vit.ViT(weights="ViT-B_16.npz", input_shape=(384, 384, 3))  # doctest: +SKIP
"""

import dataclasses
import logging
import warnings

import numpy as np

from keras_vit import model_parts, variants
from keras_vit.checkpoints import architecture, keras_names, own, position_embedding, readers, untrusted, weights_files
from keras_vit.checkpoints.canonical import Checkpoint, LazyArray, check_finite, listing

log = logging.getLogger("keras_vit")

_HEAD_KEYS = ("head/kernel", "head/bias", *architecture.DISTILLATION_HEAD_KEYS)
"""A head for other classes is new: DeiT's `head_dist` with `head`."""
_PRE_LOGITS_KEYS = ("pre_logits/kernel", "pre_logits/bias")


@dataclasses.dataclass
class LoadReport:
    """What a checkpoint load did.

    Args:
        loaded: official keys assigned to model variables.
        skipped: file keys deliberately not used (e.g. the head with `include_top=False`).
        reinitialised: model keys not taken from the file on purpose (a new head for other classes).
        resampled: ((old_h, old_w), (new_h, new_w), method) when the position embedding was resampled.
        adapted_channels: (file channels, model channels) when the kernel that sees the image was adapted.
    """

    loaded: list
    skipped: list
    reinitialised: list
    resampled: tuple | None = None
    adapted_channels: tuple | None = None


IMAGE_KERNELS = ("embedding/kernel", "conv_root/kernel")
"""The kernels that see the image: the patch embedding of a plain ViT, the root convolution of a hybrid."""


def adapt_input_channels(kernel, channels: int):
    """A (H, W, C, D) kernel trained on C colour channels, for images with `channels`, as timm's `in_chans`:
    summed over the colour channels for one channel; else the colour channels repeated and scaled by
    C / channels, so that the response to a grey image is kept.

    Raises:
        ValueError: a kernel of other than 3 channels to more than one.

    Example:
        >>> import numpy as np
        >>> adapt_input_channels(np.ones((2, 2, 3, 4)), 1)[..., 0, 0].tolist()
        [[3.0, 3.0], [3.0, 3.0]]
    """
    kernel = np.asarray(kernel)
    if channels == 1:
        return kernel.sum(axis=2, keepdims=True)
    source = kernel.shape[2]
    if source != 3:
        raise ValueError(f"A kernel for {source} input channels adapts only to 1 channel (summed). Received: "
                         f"channels={channels}")
    repeats = -(-channels // source)
    return np.concatenate([kernel] * repeats, axis=2)[:, :, :channels] * (source / channels)


# ----------------------------------------------------------------------------------------------------------
# Loading into a built model


def _fit_array(key, array, variable, model, arch, interpolation, report):
    """The file array shaped for `variable`, or None when it cannot be."""
    target = tuple(variable.shape)
    if tuple(array.shape) == target:
        return array
    if key in IMAGE_KERNELS and array.ndim == 4 and array.shape[-1] == target[-1] and arch.options["tokenizer"] == \
            "patches":
        side = array.shape[0] * array.shape[1]
        channels = target[2] if len(target) == 4 else target[0] // side if target[0] % side == 0 else None
        if channels and channels != array.shape[2]:
            report.adapted_channels = (int(array.shape[2]), int(channels))
            return adapt_input_channels(array, channels).reshape(target)
    if key in keras_names.RESHAPED_KEYS and array.size == int(np.prod(target)) and array.shape[-1] == target[-1]:
        return array.reshape(target)
    if key == keras_names.POSITION_EMBEDDING and array.ndim == 3 and array.shape[-1] == target[-1]:
        prefix = model_parts.patch_encoder(model).num_prefix_tokens
        if arch.grid is None or array.shape[1] - prefix != arch.grid[0] * arch.grid[1]:
            return None
        new_grid = model_parts.model_grid(model)
        report.resampled = (arch.grid, new_grid, interpolation)
        resample = lambda: position_embedding.resample_position_embedding(  # noqa: E731
            np.asarray(array), new_grid, prefix, arch.grid, interpolation)
        return LazyArray(target, array.dtype, resample)
    return None


def plan_load(model, checkpoint: Checkpoint, interpolation: str = "bilinear", label=None):
    """Matches every model variable with a file array, without assigning anything.

    Names and shapes are checked first; only then are the arrays to assign read (a `LazyArray` of an `.npz`
    is decompressed here), cast to the variables' dtypes and checked to be finite.

    Returns:
        (assignments, report): a list of (variable, array) and a `LoadReport`.

    Raises:
        ValueError: listing missing, unexpected and mis-shaped keys, and naming the variant the file looks like;
            or naming the tensors that hold NaN or Inf.
    """
    label = checkpoint.path if label is None else label
    params = checkpoint.params
    arch = architecture.infer(checkpoint)
    targets = keras_names.targets(model)
    report = LoadReport(loaded=[], skipped=[], reinitialised=[])
    assignments, missing, misshaped = [], [], []
    head = targets.get("head/kernel")
    new_head = head is not None and ("head/kernel" not in params or params["head/kernel"].shape[-1] != head.shape[-1])
    _check_qkv_bias(model, targets, checkpoint, arch, label)
    _check_distillation(model, targets, checkpoint, arch, label, new_head)
    for key, variable in targets.items():
        if new_head and key in _HEAD_KEYS:
            report.reinitialised.append(key)
            assignments.append((key, variable, np.zeros(tuple(variable.shape))))
            continue
        if key not in params:
            if key in _PRE_LOGITS_KEYS and "pre_logits/kernel" not in params:
                report.reinitialised.append(key)  # representation_size asked for a layer the file lacks
                continue
            missing.append(key)
            continue
        if not untrusted.is_float_dtype(params[key].dtype):
            misshaped.append(f"{key} holds {np.dtype(params[key].dtype).name} values, not floats (damaged or crafted)")
            continue
        array = _fit_array(key, params[key], variable, model, arch, interpolation, report)
        if array is None:
            misshaped.append(f"{key} file {tuple(params[key].shape)} vs model {tuple(variable.shape)}")
            continue
        assignments.append((key, variable, array))
        report.loaded.append(key)
    unexpected = []
    for key in params:
        if key in targets:
            continue
        if (key in _HEAD_KEYS and head is None) or (key in _PRE_LOGITS_KEYS and (head is None or new_head)):
            report.skipped.append(key)  # include_top=False, or pre_logits dropped for a new head
        else:
            unexpected.append(key)
    if missing or unexpected or misshaped:
        parts = [listing(t, k) for t, k in (("missing in the file", missing), ("unexpected in the file", unexpected),
                                              ("mis-shaped", misshaped)) if k]
        raise ValueError(
            f"The checkpoint {label!r} does not match model {model.name!r}. " + "; ".join(parts) +
            f". The checkpoint looks like {arch.describe()}."
        )
    with np.errstate(over="ignore"):  # a float64 value beyond float32 becomes Inf here; check_finite says so
        arrays = [(key, variable, np.asarray(array, dtype=variable.dtype)) for key, variable, array in assignments]
    check_finite([(key, array) for key, _, array in arrays], checkpoint.path)
    return [(variable, array) for _, variable, array in arrays], report


def _check_qkv_bias(model, targets, checkpoint: Checkpoint, arch, label) -> None:
    """Refuses query/key/value biases for a `qkv_bias=False` model and their absence for a `qkv_bias=True` one."""
    model_has = any(key.endswith(architecture.QKV_BIAS_KEYS) for key in targets)
    file_keys = architecture.qkv_bias_keys(checkpoint.params)
    if model_has and not file_keys:
        raise ValueError(
            f"The checkpoint {label!r} has no query/key/value biases, but model {model.name!r} was built with them "
            f"(qkv_bias=True, the default): build it with qkv_bias=False. The checkpoint looks like {arch.describe()}."
        )
    if file_keys and not model_has:
        raise ValueError(
            f"The checkpoint {label!r} has query/key/value biases, but model {model.name!r} was built without them "
            f"(qkv_bias=False): build it with qkv_bias=True (the default, as every official checkpoint). "
            f"The checkpoint looks like {arch.describe()}."
        )


def _check_distillation(model, targets, checkpoint: Checkpoint, arch, label, new_head: bool) -> None:
    """Refuses DeiT's distillation token for a model without it and its absence for one with it; and a file whose
    token has no head of its own (transformers' `DeiTForImageClassification`: one head on the [class] token) for a
    distilled model's two heads, unless both are new."""
    key = architecture.DISTILLATION_TOKEN
    model_has, file_has = key in targets, key in checkpoint.params
    if model_has != file_has:
        raise ValueError(
            f"The checkpoint {label!r} has {'a' if file_has else 'no'} distillation token, but model {model.name!r} "
            f"was built {'without' if file_has else 'with'} one (distillation_token={model_has}): build it with "
            f"distillation_token={file_has}. The checkpoint looks like {arch.describe()}.")
    head_dist = architecture.DISTILLATION_HEAD_KEYS[0]
    if head_dist in targets and not new_head and head_dist not in checkpoint.params:
        raise ValueError(
            f"The checkpoint {label!r} has a distillation token but a single head, on the [class] token "
            f"(transformers' DeiTForImageClassification): model {model.name!r} averages two heads (head and "
            "head_dist), which would compute something else. Load it with include_top=False (features) or with "
            f"classes=N for two new heads to fine-tune. The checkpoint looks like {arch.describe()}.")


def load_checkpoint(model, checkpoint: Checkpoint, interpolation: str = "bilinear", label=None) -> LoadReport:
    """Loads a canonical checkpoint into a built model: everything is validated before anything is assigned.

    Raises:
        ValueError: see `plan_load`; the model is untouched.
    """
    label = checkpoint.path if label is None else label
    assignments, report = plan_load(model, checkpoint, interpolation, label)
    for variable, array in assignments:
        variable.assign(array)
    _report(model, checkpoint, report, label)
    return report


def _report(model, checkpoint, report: LoadReport, label) -> None:
    """One line per decision; those the caller may not expect at WARNING, visible without logging setup."""
    log.info("Loaded %d arrays of %s (%s) into %r.", len(report.loaded), label, checkpoint.source, model.name)
    if report.resampled:
        old, new, method = report.resampled
        kept = "class and distillation tokens kept" if model_parts.patch_encoder(model).num_prefix_tokens > 1 \
            else "class token kept"
        log.warning("Resampled the position embedding from a %dx%d to a %dx%d patch grid (%s, %s).",
                    *old, *new, method, kept)
    if report.adapted_channels:
        log.warning("Adapted the kernel that sees the image from %d to %d input channels (summed over the colour "
                    "channels for one, as timm's in_chans).", *report.adapted_channels)
    skipped = report.skipped
    if skipped and model_parts.head(model) is None:
        log.info("Skipped %s: the model has no classification head (include_top=False).", ", ".join(sorted(skipped)))
    elif skipped:
        log.warning("Skipped %s: fine-tuning with a new head drops pre_logits, as the official code does "
                    "(pass representation_size=N to keep it).", ", ".join(sorted(skipped)))
    head_new = [k for k in report.reinitialised if k.startswith("head/")]
    if head_new:
        kernel = checkpoint.params.get("head/kernel")
        found = f"has {kernel.shape[-1]} classes" if kernel is not None else "has no head"
        heads = "the heads (head and head_dist) are" if model_parts.distillation_head(model) is not None else \
            "the head is"
        log.warning("The checkpoint %s and the model %d classes: %s new and zero-initialised (as in the "
                    "paper's fine-tuning); train it before use.", found, model_parts.head(model).units, heads)
    if any(k.startswith("pre_logits/") for k in report.reinitialised):
        log.warning("The checkpoint has no pre_logits layer; the model's pre_logits is newly initialised.")
    if "head/kernel" in report.loaded and not np.any(checkpoint.params["head/kernel"]):
        warnings.warn(
            f"The head of {label!r} is all zeros: it is a raw ImageNet-21k pre-training checkpoint whose head "
            "was zeroed on purpose. Its predictions are meaningless; fine-tune the model first (pass "
            "`classes=...` for a new zero-initialised head, or `include_top=False` for features).",
            UserWarning,
            stacklevel=3,
        )


def load_weights(model, weights, interpolation: str = "bilinear") -> LoadReport | None:
    """Loads `weights` into an existing keras_vit model, strictly; the model is untouched when it fails.

    Unlike `ViT(weights=...)` the architecture is the model's: a checkpoint must fit it (the position
    embedding may be resampled and the head replaced, as described in the module docstring). A keras_vit file
    (`.keras`, `.weights.h5`, a run's workdir) loads the same way, and its GELU form and LayerNorm epsilon must
    be the model's.

    Args:
        model: a model built by `keras_vit.ViT` or a named constructor.
        weights: a published name, a checkpoint path, a Keras `.weights.h5` or `.keras` path, or a run's workdir.
        interpolation: position-embedding resampling, `"bilinear"` (official) or `"bicubic"`.

    Returns:
        A `LoadReport`; None for a Keras file that carries no keras_vit model (loaded into the very
        architecture it was saved from).

    Raises:
        ValueError: unknown name, missing or unreadable file, or weights that do not match the model.
    """
    args = model_parts.architecture(model)
    # A published name means the file of the model's variant; timm files do not store the head count: both
    # are taken from the model being loaded.
    variant = None if args is None else variants.find_variant(args)
    source = weights_files.resolve(weights, None if variant is None else variant.name)
    if source.is_keras:
        saved = own.open_model(source.path)
        if saved is None or args is None:
            return own.load_same_architecture(model, source.path)
        checkpoint = keras_names.to_checkpoint(saved, weights)
        architecture.check_carried(args, checkpoint, label=weights)
    else:
        checkpoint = readers.read_checkpoint(source.path, None if args is None else args["num_heads"], source.format)
    return load_checkpoint(model, checkpoint, interpolation=interpolation, label=weights)
