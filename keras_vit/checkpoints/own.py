"""keras_vit's own files as the start of the next model: a `.keras` file, a `.weights.h5` written by a keras_vit
model (its `save_weights`, `python -m keras_vit.convert`, the training app) and a training run's workdir (its
`model.keras`).

Each carries the arguments of the model that wrote it (the `.keras` config; the `.weights.h5` attribute
`keras_vit.model_config.MODEL_ATTRIBUTE`). `open_model` rebuilds that model with its weights, strictly;
`keras_vit.checkpoints.keras_names.to_checkpoint` turns it into the canonical `Checkpoint` the loader plans from, so
that a new head, another resolution or no head follow the same path as the published files, and the numerics (GELU
form, LayerNorm epsilon) come from the file. `load_same_architecture` is the strict Keras load of a file into a model of the
very architecture it was saved from (the fallback for Keras files that carry no keras_vit arguments).

Example:
    >>> import keras_vit
    >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=2,
    ...                       mlp_dim=64, classes=3)
    >>> model.save_weights("/tmp/own.weights.h5")
    >>> open_model("/tmp/own.weights.h5").arguments["classes"]
    3
"""

import contextlib
import logging
import os
import re
import zipfile

import numpy as np

from keras_vit import model_config
from keras_vit.checkpoints import untrusted
from keras_vit.checkpoints.runs import RUN_MODEL, is_run, model_file  # noqa: F401  (public here too)
from keras_vit.checkpoints.canonical import check_finite
from keras_vit.checkpoints.detect import check_keras_archive

log = logging.getLogger("keras_vit")

@contextlib.contextmanager
def _h5_file(path: str):
    """The HDF5 file of a `.weights.h5`, or the `model.weights.h5` inside a `.keras` archive, open for reading.

    Raises:
        ValueError: a truncated or corrupt file.
    """
    import h5py

    try:
        with contextlib.ExitStack() as stack:
            if path.lower().endswith(".keras"):
                archive = stack.enter_context(zipfile.ZipFile(path))
                stream = stack.enter_context(archive.open("model.weights.h5"))
                file = stack.enter_context(h5py.File(stream, "r"))
            else:
                file = stack.enter_context(h5py.File(path, "r"))
            yield file
    except (OSError, zipfile.BadZipFile, KeyError) as error:
        raise ValueError(f"The weights file is truncated or corrupt. Received: weights={path!r} ({error})") from None


def _carried_config(path: str) -> dict | None:
    """The serialized model a `.keras` (config.json) or `.weights.h5` (attribute) file carries, or None; its
    declared sizes checked (`keras_vit.checkpoints.untrusted`) before anything is built from it."""
    if path.lower().endswith(".keras"):
        check_keras_archive(path)
        with zipfile.ZipFile(path) as archive:
            untrusted.check_archive(archive, path)
            if "config.json" not in archive.namelist():
                return None
            config = untrusted.read_json(archive.read("config.json"), path)
    else:
        with _h5_file(path) as file:
            if model_config.MODEL_ATTRIBUTE not in file.attrs:
                return None
            size = file.attrs.get_id(model_config.MODEL_ATTRIBUTE).get_storage_size()
            if size > untrusted.MAX_JSON_BYTES:
                raise ValueError(f"The weights file {path!r} declares a model config of {size:,} bytes (limit "
                                 f"{untrusted.MAX_JSON_BYTES:,}): it is damaged or crafted.")
            config = untrusted.read_json(file.attrs[model_config.MODEL_ATTRIBUTE], path)
    untrusted.check_model_config(config, path)
    return config


def open_model(weights):
    """The keras_vit model the file (or run) `weights` carries, rebuilt from its arguments with its weights.

    Returns:
        A `keras_vit.model_config.ConfigModel` (a `VisionTransformer` or `BiTResNet`), or None for a Keras file
        that carries no keras_vit model (a `.weights.h5` saved by another model, a `.keras` of another class).

    Raises:
        ValueError: a missing, corrupt or unfinished file, a class Keras cannot find, or weights that do not fit.
    """
    import keras

    path = untrusted.check_regular_file(model_file(weights))
    config = _carried_config(path)
    if config is None or str(config.get("registered_name", "")).split(">")[0] != "keras_vit":
        return None
    if isinstance(config.get("config", {}).get("dtype"), dict):
        raise ValueError(
            f"The file holds a quantized keras_vit model (its config carries per-layer quantized dtype policies). "
            f"Received: weights={weights!r}. Weights are read into a float model: pass the float file it was "
            f"quantized from, or load the quantized model itself with keras.saving.load_model({path!r}).")
    if path.lower().endswith(".keras"):
        return _load_keras(path, config)
    config = {key: value for key, value in config.items() if key != "compile_config"}  # the model, no optimizer
    with _registered_classes(path):
        model = keras.saving.deserialize_keras_object(config)
    load_same_architecture(model, path)
    return model


def load_keras_model(path: str):
    """A `.keras` file loaded in safe mode, without its optimizer (never read), its declarations checked first
    (`keras_vit.checkpoints.untrusted`), with one clear error for what Keras cannot find or read.

    Raises:
        ValueError: a missing or corrupt file, or a class no imported module registered with Keras.
    """
    if not os.path.lexists(path):
        raise ValueError(f"The model file does not exist. Received: {path!r}")
    untrusted.check_regular_file(path)
    return _load_keras(path, _carried_config(path))


def _load_keras(path: str, config: dict | None):
    """`load_keras_model` of a file whose config (`_carried_config`, already checked) has been read."""
    import keras

    bound = None
    if config is not None and str(config.get("registered_name", "")) == "keras_vit>VisionTransformer":
        bound = untrusted.estimated_parameters(config["config"], path)
    with _h5_file(path) as file:
        untrusted.check_datasets(file, path, max_elements=bound)
    with _registered_classes(path):
        return keras.saving.load_model(path, safe_mode=True, compile=False)


@contextlib.contextmanager
def _registered_classes(path: str):
    """Turns Keras' `Could not locate class` TypeError into a ValueError that says how to recover."""
    try:
        yield
    except TypeError as error:
        missing = re.search(r"Could not locate (?:class|function) '([^']+)'", str(error))
        if missing is None:
            raise
        raise ValueError(
            f"Cannot load the model file {path!r}: it uses {missing.group(1)!r}, which no imported module has "
            "registered with Keras. keras_vit's own layers are registered by `import keras_vit`; a custom layer "
            "or function of your own must be decorated with `@keras.saving.register_keras_serializable()` and its "
            f"module imported before loading. Received: {path!r}") from None


# ----------------------------------------------------------------------------------------------------------
# The strict Keras load of a file into the architecture it was saved from


def _check_declared_weights(model, path: str) -> None:
    """`model.load_weights` ignores file tensors the model lacks and reads what the file declares: refuse a file
    whose tensors (by their HDF5 metadata, nothing read) are not the model's weights, in count and shape."""
    with _h5_file(path) as file:
        datasets = untrusted.declared_datasets(file)
        optimizer = []
        file.visit(lambda name: optimizer.append(name) if name.startswith(untrusted.OPTIMIZER_GROUP) else None)
        if optimizer:
            log.warning("Ignored the optimizer state in %s: the model's weights are loaded, a new `compile` starts a "
                        "new optimizer.", path)
        if len(datasets) != len(model.weights):
            raise ValueError(
                f"The weights file {path!r} does not match the architecture of model {model.name!r}: it holds "
                f"{len(datasets)} tensors, the model has {len(model.weights)} weights (another depth, head, "
                "include_top, or classifier: a 'gap' model has no [class] token, one tensor fewer than 'token'). "
                "Rebuild the model with the architecture the file was saved from."
            )
        untrusted.check_datasets(file, path, expected=[tuple(weight.shape) for weight in model.weights])


def _restore(model, values) -> None:
    for variable, value in zip(model.weights, values):  # never leave the model half-loaded
        variable.assign(value)


def load_same_architecture(model, path: str) -> None:
    """`model.load_weights(path)`, strictly: the tensor count must match, the values be finite; on failure the
    model is left as it was.

    Raises:
        ValueError: naming the file and what does not match.
    """
    if not os.path.lexists(path):
        raise ValueError(f"The weights file does not exist. Received: weights={path!r}")
    untrusted.check_regular_file(path)
    if path.lower().endswith(".keras"):
        check_keras_archive(path)
    elif not path.endswith(".weights.h5"):
        raise ValueError(f"Keras weights files must end in `.weights.h5` or `.keras`. Received: weights={path!r}")
    _check_declared_weights(model, path)
    # `variable.numpy()`, not `np.array(variable)`: Keras variables' `__array__` takes no `copy` argument, for
    # which numpy 2 emits a DeprecationWarning per variable; the copy keeps the snapshot independent.
    before = [np.array(v.numpy(), copy=True) for v in model.weights]
    try:
        model.load_weights(path)
    except (ValueError, OSError, KeyError, zipfile.BadZipFile) as error:
        _restore(model, before)
        first = str(error).strip().split("\n\n")[0].splitlines()[0][:300]  # Keras lists every object it could not load
        raise ValueError(
            f"The weights file {path!r} does not match the architecture of model {model.name!r}, or is corrupt: "
            f"{first}"
        ) from error
    try:
        check_finite([(variable.path, variable.numpy()) for variable in model.weights], path)
    except ValueError:
        _restore(model, before)
        raise
