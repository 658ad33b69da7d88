"""LoRA (Hu et al. 2021) on keras_vit's models, as keras-hub's backbones: the encoder's projections get trainable
low-rank factors (Keras' own `Dense` / `EinsumDense.enable_lora`) while every other weight (biases, norms,
tokens, the ResNet stem of a hybrid) is frozen; the head, if any, stays trainable (a new task's classifier must learn). The model's config records the
adapters (`"lora"`), so `.keras` files and `from_config` rebuild a LoRA model; `merge_lora` folds them into the
kernels; `save_lora_weights` / `load_lora_weights` move the adapters alone.

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

import json

import numpy as np

from keras_vit import model_parts

TARGETS = ("query", "key", "value", "out", "mlp_dense_1", "mlp_dense_2")
DEFAULT_TARGETS = ("query", "value")
FILE_SUFFIX = ".lora.h5"
_FILE_ATTRIBUTE = "keras_vit_lora"


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
    quantized = quantization.quantized_layers(model)
    if quantized:
        raise ValueError(f"LoRA on a quantized model is not kept by keras_vit's config (layer {quantized[0].path!r} "
                         f"is {quantized[0].quantization_mode}). Enable LoRA on the float model, then quantize the "
                         f"merged model (merge_lora()).")
    head = model_parts.head(model) if model_parts.is_vit(model) else None
    kept = {id(variable) for variable in (head.weights if head is not None else ())}
    for variable in model.weights:
        variable.trainable = id(variable) in kept
    for layer in layers:
        layer.enable_lora(int(rank), lora_alpha=alpha)
    return {"rank": int(rank), "alpha": float(layers[0].lora_alpha), "targets": list(targets)}


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


def save(model, record: dict, path) -> None:
    """Writes the adapters of `model` (LoRA `record`) to `path` (`*.lora.h5`) with the architecture they fit.

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
    with h5py.File(path, "w") as file:
        file.attrs[_FILE_ATTRIBUTE] = json.dumps({**record, "architecture": _architecture(model)})
        for layer in layers:
            group = file.create_group(layer.path)
            group["a"] = np.asarray(layer.lora_kernel_a.numpy())
            group["b"] = np.asarray(layer.lora_kernel_b.numpy())


def load(model, path, enable_with) -> None:
    """Reads adapters written by `save` into `model`, enabling LoRA with the file's rank and targets first if
    needed (`enable_with(rank, targets, alpha)`), replacing any it has.

    Raises:
        ValueError: a file that is not a keras_vit LoRA file, of another architecture, rank or targets, or
            whose tensors do not fit (nothing is assigned then).
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
        untrusted.check_datasets(file, path, max_elements=10 * sum(
            int(np.prod(layer.kernel.shape)) for layer in layers))
        arrays = {name: (file[name]["a"][()], file[name]["b"][()]) for name in expected}
    rank = record["rank"]
    for name, layer in expected.items():
        a, b = arrays[name]
        shape = tuple(layer.kernel.shape)
        if a.shape != shape[:-1] + (rank,) or b.shape != (rank, shape[-1]):
            raise ValueError(f"The LoRA file {path!r} holds {name} adapters of shapes {a.shape}, {b.shape}; a rank "
                             f"{rank} adapter of that layer is {shape[:-1] + (rank,)}, {(rank, shape[-1])}.")
    if not current:
        enable_with(rank, tuple(record["targets"]), record["alpha"])
    for name, layer in expected.items():
        layer.lora_kernel_a.assign(arrays[name][0])
        layer.lora_kernel_b.assign(arrays[name][1])


def _groups(file) -> list:
    found = []
    file.visititems(lambda name, item: found.append(name) if "a" in getattr(item, "keys", lambda: ())() else None)
    return found


def _architecture(model) -> dict:
    """What adapters depend on: the encoder's shape (not the head, the image size or the classes)."""
    config = model.get_config()
    keys = ("hidden_size", "num_layers", "num_heads", "mlp_dim", "patch_size", "hybrid", "qkv_bias")
    return {key: config.get(key) for key in keys}
