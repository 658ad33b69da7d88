"""Puts pretrained weights into keras_vit models, strictly: every model weight is set from the file and every
file tensor is used or reported as skipped; otherwise a ValueError lists what is missing, unexpected or
mis-shaped, and says which variant the file looks like. Weights holding NaN or Inf are refused as damaged.

`weights` may be a published name (`keras_vit.weights`), an official `.npz` (any spelling), a timm
`.safetensors`, a Hugging Face ViT folder or its `model.safetensors`, or a Keras `.weights.h5` or `.keras`; the
format is detected from the file itself. For checkpoints, `ViT(weights=...)` reads the file first, takes the
architecture from its shapes (validating what the caller fixed), builds a fresh model and then loads it, so
a failed load never leaves a half-loaded model behind. Resolution changes resample the position embedding
(paper section 3.2, `keras_vit.pos_embed`); a different number of classes gets a new zero-initialised head
(as the paper's fine-tuning); `include_top=False` skips the head. These decisions are reported on the
`"keras_vit"` logger, one line each: a resampled position embedding, a new head and the pre_logits it drops
at WARNING, so that Python prints them to stderr even when logging is not configured (quiet them with
`logging.getLogger("keras_vit").setLevel(logging.ERROR)`); what the user asked for (`include_top=False`) and
the count of loaded arrays at INFO. A raw ImageNet-21k zero head used for inference raises a `UserWarning`.

Example:
    >>> import keras_vit
    >>> model = keras_vit.ViT(weights="ViT-B_16.npz", input_shape=(384, 384, 3))  # doctest: +SKIP
"""

import dataclasses
import logging
import os
import warnings
import zipfile

import numpy as np

from keras_vit import pos_embed, validation
from keras_vit import weights as weights_table
from keras_vit.checkpoints import architecture, keras_names, npz
from keras_vit.checkpoints.canonical import Checkpoint, LazyArray

log = logging.getLogger("keras_vit")

_FILE_SUFFIXES = (".npz", ".h5", ".keras", ".safetensors", ".json", ".bin", ".pth", ".pt", ".ckpt")
_KERAS_SUFFIXES = (".h5", ".keras")
_HEAD_KEYS = ("head/kernel", "head/bias")
_PRE_LOGITS_KEYS = ("pre_logits/kernel", "pre_logits/bias")
_LISTED = 12  # keys shown per category in an error message


@dataclasses.dataclass
class LoadReport:
    """What a checkpoint load did.

    Args:
        loaded: official keys assigned to model variables.
        skipped: file keys deliberately not used (e.g. the head with `include_top=False`).
        reinitialised: model keys not taken from the file on purpose (a new head for other classes).
        resampled: ((old_h, old_w), (new_h, new_w), method) when the position embedding was resampled.
    """

    loaded: list
    skipped: list
    reinitialised: list
    resampled: tuple | None = None


# ----------------------------------------------------------------------------------------------------------
# Where the weights come from


def is_path(weights) -> bool:
    """Whether `weights` names a file or folder (rather than a published name).

    Raises:
        ValueError: when `weights` is neither a string nor a path.
    """
    if isinstance(weights, os.PathLike):
        return True
    if not isinstance(weights, str):
        raise ValueError(
            "`weights` must be None, a published name or the path to a weights file or folder. "
            f"Received: weights={weights!r}"
        )
    if weights_table.is_name(weights):
        return False
    return "/" in weights or os.sep in weights or weights.lower().endswith(_FILE_SUFFIXES) or os.path.exists(weights)


def is_keras_weights(weights) -> bool:
    """Whether `weights` is a Keras `.weights.h5` or `.keras` path (loaded with `model.load_weights`)."""
    return weights is not None and is_path(weights) and os.fspath(weights).lower().endswith(_KERAS_SUFFIXES)


def check_keras_archive(path: str) -> None:
    """A `.keras` file must be a complete zip archive holding `model.weights.h5`.

    Raises:
        ValueError: naming the file and its size, for a truncated or otherwise corrupt archive.
    """
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
        problem = None if "model.weights.h5" in names else "its zip archive holds no model.weights.h5"
    except (zipfile.BadZipFile, OSError):
        problem = "it is not a valid zip/.keras archive (truncated or damaged)"
    if problem:
        raise ValueError(
            f"The .keras file {path!r} ({os.path.getsize(path):,} bytes) is corrupt: {problem}. Save the model "
            f"again with `model.save(...)` (or copy the file again). Received: path={path!r}"
        )


def resolve_path(weights, variant: str | None) -> tuple[str, weights_table.WeightsEntry | None]:
    """The local path for `weights` (downloading a published name into the Keras cache) and its table entry.

    Raises:
        ValueError: an unknown name (listing the known ones) or a path that does not exist.
        keras_vit.WeightsDownloadError: a published file that cannot be downloaded (an `OSError`).
    """
    if is_path(weights):
        path = os.fspath(weights)
        if not os.path.exists(path):
            raise ValueError(f"The weights file does not exist. Received: weights={weights!r}")
        return path, None
    if not weights_table.is_name(weights):
        raise ValueError(
            f"Unknown weights name. Received: weights={weights!r}. Known names: "
            f"{', '.join(repr(n) for n in weights_table.all_names())} (not every variant has every one), "
            f"{weights_table.IMAGENET_ALIAS!r} (each variant's best ImageNet-1k fine-tune), "
            "None, or the path to a .npz, .safetensors, Hugging Face folder or .weights.h5 file."
        )
    entry = weights_table.get_entry(variant, weights)
    return weights_table.fetch(entry), entry


def _detect(path: str) -> str:
    if os.path.isfile(path) and path.lower().endswith(".keras"):
        return "keras"
    if os.path.isfile(path):
        with open(path, "rb") as handle:
            if handle.read(4) == b"PK\x03\x04":
                return "official_npz"
    from keras_vit.checkpoints.detect import detect_format

    return detect_format(path)


def read_checkpoint(path, num_heads: int | None = None) -> Checkpoint:
    """Reads any supported checkpoint file or folder into the canonical (official) layout.

    Args:
        path: an official `.npz`, a timm `.safetensors`, a Hugging Face folder or `model.safetensors`.
        num_heads: heads per block, for timm files (which do not store it); inferred from the width if None.

    Raises:
        ValueError: an unknown, pickle-based, truncated or corrupt file, or a Keras `.weights.h5`.
    """
    path = os.fspath(path)
    kind = _detect(path)
    if kind == "official_npz":
        return npz.read(path)
    if kind == "timm":
        from keras_vit.checkpoints import timm

        return timm.read(path, num_heads=num_heads)
    if kind == "huggingface":
        from keras_vit.checkpoints import huggingface

        return huggingface.read(path)
    if kind == "keras":
        check_keras_archive(path)
    raise ValueError(
        "A Keras .weights.h5 or .keras file holds no checkpoint to read; build the model and pass the file as "
        f"`weights=` (or use `model.load_weights`). Received: path={path!r}"
    )


# ----------------------------------------------------------------------------------------------------------
# Building a model from a checkpoint


def _variant_key(args: dict) -> str | None:
    """The variant table key (`"B16"`, `"R50_B16"`) of the requested architecture, or None."""
    from keras_vit.variants import VARIANTS

    wanted = dict(patch_size=args.get("patch_size") or 16, hidden_size=args.get("hidden_size") or 768,
                  num_layers=args.get("num_layers") or 12, num_heads=args.get("num_heads") or 12,
                  mlp_dim=args.get("mlp_dim") or 3072)
    if args.get("hybrid") is not None:
        wanted["hybrid"] = args["hybrid"]
    for key, variant in VARIANTS.items():
        if variant.architecture() == wanted:
            return key
    return None


def _same_stem(requested, found: dict) -> bool:
    from keras_vit.layers.resnet import RESNET_STEMS

    stem = RESNET_STEMS.get(requested) if isinstance(requested, str) else requested
    if not isinstance(stem, dict):
        return False
    return all(tuple(np.atleast_1d(stem[k])) == tuple(np.atleast_1d(found[k])) for k in found if k in stem)


def _resolve_architecture(args: dict, arch: architecture.CheckpointArchitecture, label) -> None:
    """Fills unset architecture arguments from the checkpoint; raises on a conflict with set ones."""
    conflicts = []
    for key, value in arch.model_arguments().items():
        given = args.get(key)
        if given is None:
            args[key] = value
        elif key == "hybrid":
            if not _same_stem(given, arch.hybrid):
                conflicts.append(f"hybrid={given!r} (checkpoint stem: {arch.hybrid})")
            args[key] = given  # keep the caller's spelling (it may carry GroupNorm groups)
        elif given != value:
            conflicts.append(f"{key}={given!r} (checkpoint: {value!r})")
    if args.get("hybrid") is not None and arch.hybrid is None:
        conflicts.append(f"hybrid={args['hybrid']!r} (checkpoint: a plain ViT without a ResNet stem)")
    classifier = args.get("classifier")
    if classifier is not None and classifier != arch.classifier:
        conflicts.append(f"classifier={classifier!r} (checkpoint: {arch.classifier!r})")
    args["classifier"] = arch.classifier
    if conflicts:
        raise ValueError(
            f"The checkpoint does not match the requested architecture: {'; '.join(conflicts)}. "
            f"The checkpoint looks like {arch.describe()}. Use the matching constructor or leave these arguments "
            f"unset to take them from the checkpoint. Received: weights={label!r}"
        )


def _resolve_head(args: dict, arch: architecture.CheckpointArchitecture, label) -> None:
    if not args.get("include_top", True):
        args["representation_size"] = None
        return
    given = args.get("representation_size")
    if given is not None and arch.representation_size is not None and given != arch.representation_size:
        raise ValueError(
            f"`representation_size={given}` does not match the checkpoint's pre_logits width "
            f"{arch.representation_size}. Received: weights={label!r}"
        )
    if args.get("classes") is None:
        args["classes"] = arch.classes or 1000
    if given is None:
        # A new head means fine-tuning, which drops pre_logits as the official code does (vit_jax
        # `load_pretrained`, "drop-head variant"); representation_size=N keeps it.
        new_head = arch.classes is not None and args["classes"] != arch.classes
        args["representation_size"] = None if new_head else arch.representation_size


def _resolve_numerics(args: dict, checkpoint: Checkpoint) -> None:
    """GELU form and LayerNorm epsilon follow the source unless the caller set them."""
    for key, value in (("gelu_approximate", checkpoint.gelu_approximate),
                       ("layer_norm_epsilon", checkpoint.layer_norm_epsilon)):
        if args.get(key) is None:
            args[key] = value
        elif args[key] != value:
            log.warning("Using %s=%r although the %s checkpoint was trained with %r: outputs will differ from "
                        "the source model.", key, args[key], checkpoint.source, value)


def _resolve_input(args: dict, arch: architecture.CheckpointArchitecture, entry, label) -> None:
    shape = args.get("input_shape")
    tensor = args.get("input_tensor")
    if shape is None and tensor is not None:
        shape = tuple(tensor.shape[1:])
    if shape is None:
        size = args.get("image_size")
        if size is None:
            size = arch.image_size or (entry.image_size if entry else 224)
        height, width = (size, size) if isinstance(size, int) else tuple(size)
        args["input_shape"] = (height, width, arch.channels)
        return
    if len(shape) == 3 and shape[-1] is not None and shape[-1] != arch.channels:
        raise ValueError(
            f"The checkpoint expects images with {arch.channels} channels (its patch embedding kernel is "
            f"(P, P, {arch.channels}, D)). Received: input_shape={tuple(shape)}, weights={label!r}"
        )


def _check_arguments(args: dict) -> None:
    """The checks that need no checkpoint, done before one is read (the builder repeats them)."""
    validation.check_interpolation(args.get("pos_embed_interpolation"))
    if args.get("gelu_approximate") is not None:
        validation.check_bool("gelu_approximate", args["gelu_approximate"])
    if args.get("layer_norm_epsilon") is not None:
        validation.check_positive_number("layer_norm_epsilon", args["layer_norm_epsilon"])
    if args.get("input_shape") is not None:
        validation.check_input_shape(args["input_shape"])


def build_from_checkpoint(builder, arguments: dict):
    """Builds `builder(**arguments)` with the architecture of the checkpoint `arguments["weights"]`, then loads it.

    Args:
        builder: `keras_vit.ViT`.
        arguments: the caller's `ViT` arguments; None means "take it from the checkpoint".

    Returns:
        The loaded `keras.Model`.

    Raises:
        ValueError: unknown name, unreadable file, architecture conflict, wrong channels, or a strict-load failure.
    """
    args = dict(arguments)
    label = args.pop("weights")
    _check_arguments(args)
    interpolation = args.get("pos_embed_interpolation") or "bilinear"
    path, entry = resolve_path(label, _variant_key(args))
    checkpoint = read_checkpoint(path, num_heads=args.get("num_heads"))
    arch = architecture.infer(checkpoint)
    _resolve_architecture(args, arch, label)
    _resolve_head(args, arch, label)
    _resolve_numerics(args, checkpoint)
    _resolve_input(args, arch, entry, label)
    model = builder(**args, weights=None)
    load_checkpoint(model, checkpoint, interpolation=interpolation, label=label)
    return model


# ----------------------------------------------------------------------------------------------------------
# Loading into a built model


def _model_grid(model) -> tuple[int, int]:
    """The (rows, cols) patch grid the model's position embedding covers."""
    patches = model.get_layer("patches")
    _, height, width, _ = patches.input.shape
    return height // patches.patch_size, width // patches.patch_size


def _fit_array(key, array, variable, model, arch, interpolation, report):
    """The file array shaped for `variable`, or None when it cannot be."""
    target = tuple(variable.shape)
    if tuple(array.shape) == target:
        return array
    if key in keras_names.RESHAPED_KEYS and array.size == int(np.prod(target)) and array.shape[-1] == target[-1]:
        return array.reshape(target)
    if key == keras_names.POSITION_EMBEDDING and array.ndim == 3 and array.shape[-1] == target[-1]:
        prefix = model.get_layer("patch_encoder").num_prefix_tokens
        if arch.grid is None or array.shape[1] - prefix != arch.grid[0] * arch.grid[1]:
            return None
        new_grid = _model_grid(model)
        report.resampled = (arch.grid, new_grid, interpolation)
        resample = lambda: pos_embed.resample_position_embedding(  # noqa: E731
            np.asarray(array), new_grid, prefix, arch.grid, interpolation)
        return LazyArray(target, array.dtype, resample)
    return None


def _listing(title, keys) -> str:
    keys = sorted(keys)
    more = f" ... and {len(keys) - _LISTED} more" if len(keys) > _LISTED else ""
    return f"{title} ({len(keys)}): {', '.join(keys[:_LISTED])}{more}"


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
        parts = [_listing(t, k) for t, k in (("missing in the file", missing), ("unexpected in the file", unexpected),
                                              ("mis-shaped", misshaped)) if k]
        raise ValueError(
            f"The checkpoint {label!r} does not match model {model.name!r}. " + "; ".join(parts) +
            f". The checkpoint looks like {arch.describe()}."
        )
    with np.errstate(over="ignore"):  # a float64 value beyond float32 becomes Inf here; check_finite says so
        arrays = [(key, variable, np.asarray(array, dtype=variable.dtype)) for key, variable, array in assignments]
    check_finite([(key, array) for key, _, array in arrays], checkpoint.path)
    return [(variable, array) for _, variable, array in arrays], report


def _non_finite(named_arrays) -> list[str]:
    """`name (n of N values)` for each floating-point array holding NaN or Inf."""
    found = []
    for name, array in named_arrays:
        array = np.asarray(array)
        if array.dtype.kind in "biu":
            continue
        count = array.size - int(np.count_nonzero(np.isfinite(array)))
        if count:
            found.append(f"{name} ({count:,} of {array.size:,} values)")
    return found


def check_finite(named_arrays, path) -> None:
    """Refuses weights holding NaN or Inf: every prediction of the model would be NaN.

    Args:
        named_arrays: (tensor name, array) pairs, as they would be assigned (after the cast to the variable
            dtype, so a float64 value beyond the float32 range counts as the Inf it becomes).
        path: the file, for the message.

    Raises:
        ValueError: naming the file, the tensors and how many values are not finite.
    """
    found = _non_finite(named_arrays)
    if found:
        raise ValueError(
            f"The weights file {os.fspath(path)!r} is damaged: it holds NaN or Inf values (or values too large "
            f"for float32, which become Inf), so every prediction would be NaN. "
            f"{_listing('tensors with non-finite values', found)}. "
            "Delete the file and download or export it again; nothing was loaded."
        )


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
        log.warning("Resampled the position embedding from a %dx%d to a %dx%d patch grid (%s, class token kept).",
                    *old, *new, method)
    if report.skipped and "head" not in {layer.name for layer in model.layers}:
        log.info("Skipped %s: the model has no classification head (include_top=False).",
                 ", ".join(sorted(report.skipped)))
    elif report.skipped:
        log.warning("Skipped %s: fine-tuning with a new head drops pre_logits, as the official code does "
                    "(pass representation_size=N to keep it).", ", ".join(sorted(report.skipped)))
    head_new = [k for k in report.reinitialised if k.startswith("head/")]
    if head_new:
        kernel = checkpoint.params.get("head/kernel")
        found = f"has {kernel.shape[-1]} classes" if kernel is not None else "has no head"
        log.warning("The checkpoint %s and the model %d classes: the head is new and zero-initialised (as in the "
                    "paper's fine-tuning); train it before use.", found, model.get_layer("head").kernel.shape[-1])
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


def _model_variant_key(model) -> str | None:
    """The variant table key of a built keras_vit model, read from its layers' configurations."""
    from keras_vit.rebuild import architecture_of

    args = architecture_of(model)
    return None if args is None else _variant_key(args)


def load_weights(model, weights, interpolation: str = "bilinear") -> LoadReport | None:
    """Loads `weights` into an existing keras_vit model, strictly; the model is untouched when it fails.

    Unlike `ViT(weights=...)` the architecture is the model's: a checkpoint must fit it (the position
    embedding may be resampled and the head replaced, as described in the module docstring).

    Args:
        model: a model built by `keras_vit.ViT` or a named constructor.
        weights: a published name, a checkpoint path, or a Keras `.weights.h5` or `.keras` path.
        interpolation: position-embedding resampling, `"bilinear"` (official) or `"bicubic"`.

    Returns:
        A `LoadReport` for checkpoints; None for `.weights.h5` and `.keras` files.

    Raises:
        ValueError: unknown name, missing or unreadable file, or weights that do not match the model.
    """
    if is_keras_weights(weights):
        return _load_keras_weights(model, os.fspath(weights))
    path, _ = resolve_path(weights, _model_variant_key(model))
    layer_names = {layer.name for layer in model.layers}
    # timm files do not store the head count: take it from the model being loaded.
    num_heads = model.get_layer("encoder_block_0").num_heads if "encoder_block_0" in layer_names else None
    checkpoint = read_checkpoint(path, num_heads=num_heads)
    return load_checkpoint(model, checkpoint, interpolation=interpolation, label=weights)


def _h5_datasets(path: str) -> list[str]:
    """The dataset names of a `.weights.h5` file, or of the `model.weights.h5` inside a `.keras` archive."""
    import h5py

    datasets = []
    visit = lambda name, item: datasets.append(name) if isinstance(item, h5py.Dataset) else None  # noqa: E731
    if path.lower().endswith(".keras"):
        with zipfile.ZipFile(path) as archive, archive.open("model.weights.h5") as stream:
            with h5py.File(stream, "r") as file:
                file.visititems(visit)
    else:
        with h5py.File(path, "r") as file:
            file.visititems(visit)
    return datasets


def _check_keras_weights_count(model, path: str) -> None:
    """`model.load_weights` ignores file tensors the model lacks; refuse a file with more or fewer tensors."""
    try:
        datasets = _h5_datasets(path)
    except (OSError, zipfile.BadZipFile) as error:
        raise ValueError(f"The weights file is truncated or corrupt. Received: weights={path!r} ({error})") from error
    if len(datasets) != len(model.weights):
        raise ValueError(
            f"The weights file {path!r} does not match the architecture of model {model.name!r}: it holds "
            f"{len(datasets)} tensors, the model has {len(model.weights)} weights (another depth, head or "
            "include_top?). Rebuild the model with the architecture the file was saved from."
        )


def _restore(model, values) -> None:
    for variable, value in zip(model.weights, values):  # never leave the model half-loaded
        variable.assign(value)


def _load_keras_weights(model, path: str) -> None:
    if not os.path.exists(path):
        raise ValueError(f"The weights file does not exist. Received: weights={path!r}")
    if path.lower().endswith(".keras"):
        check_keras_archive(path)
    elif not path.endswith(".weights.h5"):
        raise ValueError(f"Keras weights files must end in `.weights.h5` or `.keras`. Received: weights={path!r}")
    _check_keras_weights_count(model, path)
    # `variable.numpy()`, not `np.array(variable)`: Keras variables' `__array__` takes no `copy` argument, for
    # which numpy 2 emits a DeprecationWarning per variable; the copy keeps the snapshot independent.
    before = [np.array(v.numpy(), copy=True) for v in model.weights]
    try:
        model.load_weights(path)
    except (ValueError, OSError, KeyError, zipfile.BadZipFile) as error:
        _restore(model, before)
        raise ValueError(
            f"The weights file {path!r} does not match the architecture of model {model.name!r}, or is corrupt: "
            f"{error}"
        ) from error
    try:
        check_finite([(variable.path, variable.numpy()) for variable in model.weights], path)
    except ValueError:
        _restore(model, before)
        raise
