"""Keras' `model.quantize(...)` on keras_vit's models, kept by their config: which layers quantize, the per-layer
dtype policies a quantized model records (a `keras.dtype_policies.DTypePolicyMap`, as keras-hub's backbones), and
their re-application when the model is rebuilt from that config, before its weights are read.

Example:
    >>> import keras, keras_vit
    >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=2,
    ...                       mlp_dim=64, classes=3)
    >>> model.quantize("int8")
    >>> policies = policy_map(model)
    >>> policies["encoder_block_0/attention/query"].name
    'int8_from_float32'
    >>> rebuilt = type(model).from_config(model.get_config())
    >>> rebuilt.get_layer("head").quantization_mode
    'int8'
"""

import keras

MODES = ("int8", "int4", "float8")
"""The modes a keras_vit model quantizes to and rebuilds from its config alone (GPTQ and AWQ need calibration
data and a config object: quantize the float model with Keras directly, and keep the `.keras` file)."""


def quantizable(layer) -> bool:
    """Whether `layer` implements Keras' quantization (Dense, EinsumDense, Embedding, ...): the layers
    `model.quantize` changes. Norms, pooling, dropout and keras_vit's own layers have no int8 form."""
    return type(layer).quantize is not keras.layers.Layer.quantize and not list(layer._layers)


def quantized_layers(model) -> list:
    """The layers of `model` that hold a quantized dtype policy, in the model's order."""
    return [layer for layer in model._flatten_layers(include_self=False)
            if quantizable(layer) and layer.quantization_mode is not None]


def check_mode(mode) -> str:
    """`mode` if keras_vit rebuilds it from a config.

    Raises:
        ValueError: naming the mode and the supported ones.
    """
    if mode not in MODES:
        raise ValueError(f"keras_vit models quantize to one of {', '.join(MODES)} (their config then rebuilds the "
                         f"quantized model). Received: mode={mode!r}. For GPTQ or AWQ call keras.Model.quantize "
                         f"with its config on the float model and save it as .keras.")
    return mode


def check_not_quantized(model) -> None:
    """Refuses to quantize a model twice.

    Raises:
        ValueError: naming the first quantized layer and its mode.
    """
    done = quantized_layers(model)
    if done:
        raise ValueError(f"The model {model.name!r} is already quantized ({len(done)} layers, e.g. "
                         f"{done[0].path!r} in {done[0].quantization_mode}). Quantize the float model it came from "
                         f"(rebuild it with keras_vit.ViT(weights=<float file>)).")


def policy_map(model):
    """The `DTypePolicyMap` of a quantized `model`: its quantized layers' policies by path over the model's own
    policy; None for a float model."""
    layers = quantized_layers(model)
    if not layers:
        return None
    policies = keras.dtype_policies.DTypePolicyMap(default_policy=model.dtype_policy)
    for layer in layers:
        policies[layer.path] = layer.dtype_policy
    return policies


def read_policy(dtype):
    """`(policy name, DTypePolicyMap or None)` of a config's `dtype` (a name, a policy, or a serialized map).

    Raises:
        ValueError: a map that is not a `DTypePolicyMap`, or a mode keras_vit does not rebuild.
    """
    if isinstance(dtype, dict):
        if dtype.get("class_name") != "DTypePolicyMap":
            raise ValueError(f"A keras_vit model config's dtype is a policy name or a DTypePolicyMap. Received: "
                             f"dtype of class {dtype.get('class_name')!r}")
        dtype = keras.saving.deserialize_keras_object(dtype)
    if isinstance(dtype, keras.dtype_policies.DTypePolicyMap):
        for path, policy in dtype.items():
            if policy.quantization_mode is not None:
                check_mode(policy.quantization_mode)
        return dtype.default_policy.name, dtype
    return dtype, None


def apply_policy_map(model, policies) -> None:
    """Quantizes each layer of `model` that `policies` names (its weights are then replaced by the file's).

    Raises:
        ValueError: a path the map names that is not a quantizable layer of `model`.
    """
    by_path = {layer.path: layer for layer in model._flatten_layers(include_self=False) if quantizable(layer)}
    for path, policy in policies.items():
        if policy.quantization_mode is None:
            continue
        if path not in by_path:
            raise ValueError(f"The model config's dtype map names the layer {path!r}, which model {model.name!r} "
                             f"does not have as a quantizable layer: the config is damaged or of another model.")
        by_path[path].quantize(policy.quantization_mode)
