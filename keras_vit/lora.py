"""LoRA (Hu et al. 2021) on keras_vit's models, as keras-hub's backbones: the encoder's projections get trainable
low-rank factors (Keras' own `Dense` / `EinsumDense.enable_lora`) while every other weight (biases, norms,
tokens, the ResNet stem of a hybrid) is frozen; the head, if any, stays trainable (a new task's classifier must learn). The model's config records the
adapters (`"lora"`), so `.keras` files and `from_config` rebuild a LoRA model; `merge_lora` folds them into the
kernels; `save_lora_weights` / `load_lora_weights` move the adapters with the task head they were trained with
(PEFT's `modules_to_save`; `include_head=False` moves the adapters alone). Enabling LoRA on a model that was
already compiled, fitted or used for `predict` drops Keras' traced functions and restarts its optimizer (a fresh
one of the same config): the next `fit` trains the adapters, not the weights that were trainable before.

The targets are the layer names inside each encoder block: `query`, `key`, `value`, `out` (the attention's
projections) and `mlp_dense_1`, `mlp_dense_2` (the MLP). The default, `("query", "value")`, is the paper's and
keras-hub's.

Example:
    >>> import keras_vit
    >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=2,
    ...                       mlp_dim=64, classes=3)
    >>> model.enable_lora(4)
    >>> sum(int(np.prod(w.shape)) for w in model.trainable_weights)  # 4 x (A 32x2x4 + B 4x16) + head 32x3+3
    1379
    >>> plain = model.merge_lora()
    >>> plain.get_config().get("lora") is None
    True
"""

import contextlib
import hashlib
import json
import logging

import keras
import numpy as np

from keras_vit import model_parts

log = logging.getLogger("keras_vit")

TARGETS = ("query", "key", "value", "out", "mlp_dense_1", "mlp_dense_2")
DEFAULT_TARGETS = ("query", "value")
FILE_SUFFIX = ".lora.h5"
_FILE_ATTRIBUTE = "keras_vit_lora"
_HEAD_GROUP = "task_head"
"""The group holding the task head's variables (`kernel`, `bias` as Keras orders them: datasets "0", "1")."""


def check_arguments(rank, targets, width: int | None) -> tuple:
    """`targets` as a tuple, after checking `rank` and `targets`.

    Raises:
        ValueError: a rank that is not an int in 1..width (width None: any positive int), or a target that names
            no projection.
    """
    if (isinstance(rank, bool) or not isinstance(rank, (int, np.integer))
            or not 1 <= rank <= (width or float("inf"))):
        bound = "a positive integer" if width is None else f"an integer from 1 to the projections' width ({width})"
        raise ValueError(f"The LoRA rank must be {bound}. Received: rank={rank!r}")
    targets = (targets,) if isinstance(targets, str) else tuple(targets)
    unknown = [target for target in targets if target not in TARGETS]
    if not targets or unknown:
        raise ValueError(f"LoRA targets are among {', '.join(TARGETS)}. Received: targets={targets!r}")
    return targets


def target_layers(model, targets) -> list:
    """The `targets` layers of every encoder block of `model`, in order (empty for a model without blocks)."""
    found = []
    for block in model_parts.encoder_blocks(model) if model_parts.is_vit(model) else ():
        for layer in block._flatten_layers(include_self=False):
            if layer.name in targets:
                found.append(layer)
    return found


def enabled_layers(model) -> list:
    """The layers of `model` with LoRA enabled."""
    return [layer for layer in model._flatten_layers(include_self=False) if getattr(layer, "lora_enabled", False)]


def enable(model, rank, targets=DEFAULT_TARGETS, alpha=None) -> dict:
    """Enables LoRA on `model` (see the module docstring) and returns its record `{"rank", "alpha", "targets"}`.

    Raises:
        ValueError: LoRA already enabled, a bad rank or target, a model with no such layer, or a quantized
            model (nothing is changed then).
    """
    from keras_vit import quantization

    if enabled_layers(model):
        raise ValueError(f"LoRA is already enabled on model {model.name!r} ({len(enabled_layers(model))} layers). "
                         f"Enable it once; merge_lora() returns a plain model to start again from.")
    targets = check_arguments(rank, targets, None)
    layers = target_layers(model, targets)
    if not layers:
        raise ValueError(f"Model {model.name!r} has no {'/'.join(targets)} layer for LoRA: it applies to a ViT's "
                         f"encoder blocks. Received: targets={targets!r}")
    check_arguments(rank, targets, int(model.get_config()["hidden_size"]))
    check_alpha(alpha)
    quantized = quantization.quantized_layers(model)
    if quantized:
        raise ValueError(f"LoRA on a quantized model is not kept by keras_vit's config (layer {quantized[0].path!r} "
                         f"is {quantized[0].quantization_mode}). Enable LoRA on the float model, then quantize the "
                         f"merged model (merge_lora()).")
    optimizer = fresh_optimizer(model)  # before any change: an optimizer that cannot be rebuilt changes nothing
    head = model_parts.head(model) if model_parts.is_vit(model) else None
    kept = {id(variable) for variable in (head.weights if head is not None else ())}
    for variable in model.weights:
        variable.trainable = id(variable) in kept
    for layer in layers:
        layer.enable_lora(int(rank), lora_alpha=alpha)
    # Keras' compiled train / test / predict functions hold the variables they were traced with (a `predict`
    # traced before kept the model without adapters, a `fit` kept training the frozen weights): dropped, as Keras'
    # own `quantize` does, and a built optimizer replaced by `fresh_optimizer`'s.
    model.train_function = model.test_function = model.predict_function = None
    if optimizer is not None:
        model.optimizer = optimizer
    return {"rank": int(rank), "alpha": float(layers[0].lora_alpha), "targets": list(targets)}


def check_alpha(alpha) -> None:
    """Refuses a LoRA `alpha` that is not None or a finite positive number.

    Raises:
        ValueError: naming the value.
    """
    if alpha is not None and (isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.integer, np.floating))
                              or not np.isfinite(alpha) or alpha <= 0):
        raise ValueError(f"The LoRA alpha must be a finite positive number (the adapters are scaled by alpha / rank), "
                         f"or None for the rank. Received: alpha={alpha!r}")


def fresh_optimizer(model):
    """None if `model` has no built optimizer; else a new one of its config, for the adapters: its slots were the
    old trainable weights'. It is made under the strategy the old one was made under (a `tf.distribute` model's
    variables are mirrored), keeps its weight-decay exclusions, and starts at step 0 (a schedule restarts; a
    `LossScaleOptimizer` starts from its initial scale).

    Raises:
        ValueError: an optimizer that cannot be rebuilt from its config (compile the model again instead).
    """
    optimizer = getattr(model, "optimizer", None)
    if optimizer is None or not optimizer.built:
        return None
    strategy = getattr(optimizer, "_distribution_strategy", None)  # TensorFlow's optimizers record theirs
    try:
        with strategy.scope() if strategy is not None else contextlib.nullcontext():
            fresh = type(optimizer).from_config(optimizer.get_config())
    except Exception as error:  # noqa: BLE001  any failure of a user's optimizer class: one line, nothing changed
        raise ValueError(f"enable_lora needs a new optimizer for the adapters, and {type(optimizer).__name__} cannot "
                         f"be rebuilt from its config ({type(error).__name__}: {error}). Call enable_lora before "
                         f"compile, or compile the model again after it.") from None
    for name in ("_exclude_from_weight_decay", "_exclude_from_weight_decay_pattern"):
        if hasattr(optimizer, name):
            setattr(fresh, name, getattr(optimizer, name))
    return fresh


def merged(model, rebuild):
    """A plain model (no LoRA, all weights trainable) with `model`'s adapters folded into its kernels.

    Args:
        model: a keras_vit model.
        rebuild: builds the plain model from `model`'s config without its `"lora"` entry.
    """
    plain = rebuild({key: value for key, value in model.get_config().items() if key != "lora"})
    sources = list(model._flatten_layers(include_self=False))
    targets = list(plain._flatten_layers(include_self=False))
    for source, target in zip(sources, targets, strict=True):
        store = {}
        source.save_own_variables(store)  # each layer's own variables; Keras writes a LoRA kernel merged
        if store:
            target.load_own_variables(store)
    return plain


def save(model, record: dict, path, include_head: bool = True) -> None:
    """Writes the adapters of `model` (LoRA `record`) to `path` (`*.lora.h5`) with the architecture they fit
    and, with `include_head` (the default), the task head trained beside them: what reproduces the task on a
    fresh base model.

    Raises:
        ValueError: no LoRA on the model, or another file suffix.
    """
    import h5py

    path = str(path)
    if not path.endswith(FILE_SUFFIX):
        raise ValueError(f"LoRA weights are written to a '{FILE_SUFFIX}' file. Received: path={path!r}")
    layers = enabled_layers(model)
    if not layers:
        raise ValueError(f"Model {model.name!r} has no LoRA adapters: call enable_lora(rank) and train first.")
    if not any(np.any(keras.ops.convert_to_numpy(layer.lora_kernel_b)) for layer in layers):
        log.warning("Saving LoRA adapters that are all zero to %s: the model is unchanged by them (not trained yet, or "
                    "a LoRA model reloaded from .keras, which holds its adapters merged into the kernels).", path)
    head = model_parts.head(model) if include_head else None
    with h5py.File(path, "w") as file:
        file.attrs[_FILE_ATTRIBUTE] = json.dumps({**record, "architecture": _architecture(model),
                                                  "base_sha256": base_fingerprint(layers)})
        for layer in layers:
            group = file.create_group(layer.path)
            group["a"] = np.asarray(layer.lora_kernel_a.numpy())
            group["b"] = np.asarray(layer.lora_kernel_b.numpy())
        if head is not None:
            store = {}
            head.save_own_variables(store)
            group = file.create_group(_HEAD_GROUP)
            for key, value in store.items():
                group[key] = np.asarray(value)


def load(model, path, enable_with, include_head: bool = True) -> None:
    """Reads adapters written by `save` into `model`, enabling LoRA with the file's rank and targets first if
    needed (`enable_with(rank, targets, alpha)`), replacing any it has; with `include_head`, the task head the
    file holds too.

    Raises:
        ValueError: a file that is not a keras_vit LoRA file, of another architecture, rank or targets, whose
            head does not fit the model's, or whose tensors do not fit or are not finite (nothing is assigned
            then).
    """
    import h5py

    from keras_vit.checkpoints import untrusted

    path = untrusted.check_regular_file(str(path))
    try:
        file = h5py.File(path, "r")
    except OSError as error:
        raise ValueError(f"The LoRA file cannot be read ({error}). Received: path={path!r}") from None
    with file:
        if _FILE_ATTRIBUTE not in file.attrs:
            raise ValueError(f"{path!r} is not a keras_vit LoRA file (written by save_lora_weights).")
        record = untrusted.read_json(file.attrs[_FILE_ATTRIBUTE], path, "LoRA record")
        mine, theirs = _architecture(model), record.get("architecture")
        if theirs != mine:
            differ = sorted(key for key in set(mine) | set(theirs or {}) if mine.get(key) != (theirs or {}).get(key))
            raise ValueError(f"The LoRA file {path!r} was trained on another architecture: "
                             + ", ".join(f"{key} {(theirs or {}).get(key)!r} in the file, {mine.get(key)!r} here"
                                         for key in differ) + ". Load it into the model it was trained on.")
        current = enabled_layers(model)
        if current and (current[0].lora_rank != record["rank"]
                        or sorted({layer.name for layer in current}) != sorted(record["targets"])):
            raise ValueError(f"The LoRA file {path!r} holds rank {record['rank']} on {record['targets']}; model "
                             f"{model.name!r} has rank {current[0].lora_rank} on "
                             f"{sorted({layer.name for layer in current})}. Load it into a model without LoRA.")
        layers = current or target_layers(model, record["targets"])
        expected = {layer.path: layer for layer in layers}
        if sorted(expected) != sorted(_groups(file)):
            raise ValueError(f"The LoRA file {path!r} holds adapters for {len(_groups(file))} layers; the model has "
                             f"{len(expected)} {record['targets']} layers. It is damaged or of another model.")
        head, head_arrays = model_parts.head(model), None
        untrusted.check_datasets(file, path, max_elements=10 * sum(
            int(np.prod(layer.kernel.shape)) for layer in layers) + (head.count_params() if head else 0))
        if include_head and _HEAD_GROUP in file:
            head_arrays = _read_head(file[_HEAD_GROUP], head, path)
        arrays = {name: (file[name]["a"][()], file[name]["b"][()]) for name in expected}
    rank = record["rank"]
    try:
        check_alpha(record.get("alpha"))
    except ValueError as error:
        raise ValueError(f"The LoRA file {path!r} is damaged: {error}") from None
    for name, layer in expected.items():
        a, b = arrays[name]
        shape = tuple(layer.kernel.shape)
        if a.shape != shape[:-1] + (rank,) or b.shape != (rank, shape[-1]):
            raise ValueError(f"The LoRA file {path!r} holds {name} adapters of shapes {a.shape}, {b.shape}; a rank "
                             f"{rank} adapter of that layer is {shape[:-1] + (rank,)}, {(rank, shape[-1])}.")
        for part, array in zip("ab", arrays[name]):
            if not np.isfinite(array).all():
                raise ValueError(f"The LoRA file {path!r} holds non-finite values (NaN or Inf) in {name}'s adapter "
                                 f"{part}: it is damaged; save the adapters again from the trained model.")
    if record.get("base_sha256") not in (None, base_fingerprint(layers)):
        log.warning("The LoRA file %s was trained on a base whose %s kernels differ from this model's: its outputs "
                    "will differ from the trained model's. Load it into the model the adapters were trained on "
                    "(the published file, or your own model saved before enable_lora).", path,
                    "/".join(record["targets"]))
    if not current:
        enable_with(rank, tuple(record["targets"]), record["alpha"])
    for name, layer in expected.items():
        layer.lora_kernel_a.assign(arrays[name][0])
        layer.lora_kernel_b.assign(arrays[name][1])
    if head_arrays is not None:
        head.load_own_variables(head_arrays)


def _read_head(group, head, path) -> dict:
    """The task head's variables from the file's `group`, once they fit `head` (the model's).

    Raises:
        ValueError: a model without a head, another number of classes, or non-finite values.
    """
    keys = sorted(group.keys(), key=lambda key: (len(key), key))
    if keys != [str(index) for index in range(len(keys))] or not all(hasattr(group[key], "shape") for key in keys):
        raise ValueError(f"The LoRA file {path!r} holds a task head group {_HEAD_GROUP!r} of entries {keys[:4]}; "
                         f"keras_vit writes datasets '0' (kernel) and '1' (bias). It is damaged or not a keras_vit "
                         f"LoRA file.")
    arrays = {key: group[key][()] for key in keys}
    theirs = [tuple(array.shape) for array in arrays.values()]
    if head is None:
        raise ValueError(f"The LoRA file {path!r} holds the task head it was trained with (shapes {theirs}), and "
                         f"this model has no head (include_top=False): load the adapters alone with "
                         f"load_lora_weights(..., include_head=False).")
    mine = [tuple(variable.shape) for variable in head.weights]
    if theirs != mine:
        raise ValueError(f"The LoRA file {path!r} holds a task head of shapes {theirs}; this model's head is "
                         f"{mine}. Build the base with the file's classes (classes={theirs[0][-1]}), or load the "
                         f"adapters alone with load_lora_weights(..., include_head=False).")
    for key, array in arrays.items():
        if not np.isfinite(array).all():
            raise ValueError(f"The LoRA file {path!r} holds non-finite values (NaN or Inf) in its task head "
                             f"(variable {key}): it is damaged; save it again from the trained model.")
    return arrays


def base_fingerprint(layers) -> str:
    """The sha256 of the frozen kernels under the adapters of `layers` (`target_layers`): which base they fit."""
    digest = hashlib.sha256()
    for layer in sorted(layers, key=lambda layer: layer.path):
        digest.update(layer.path.encode() + b"\0")
        digest.update(np.ascontiguousarray(keras.ops.convert_to_numpy(layer._kernel), np.float32).tobytes())
    return digest.hexdigest()


def _groups(file) -> list:
    found = []
    file.visititems(lambda name, item: found.append(name) if "a" in getattr(item, "keys", lambda: ())() else None)
    return found


def _architecture(model) -> dict:
    """What adapters depend on: the encoder's shape (not the head, the image size or the classes)."""
    config = model.get_config()
    keys = ("hidden_size", "num_layers", "num_heads", "mlp_dim", "patch_size", "hybrid", "qkv_bias")
    return {key: config.get(key) for key in keys}
