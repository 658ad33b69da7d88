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


def policy_map(model, default=None):
    """The `DTypePolicyMap` of a quantized `model`: its quantized layers' policies by path over `default` (the
    policy its layers were built under; None: the model's own); None for a float model."""
    layers = quantized_layers(model)
    if not layers:
        return None
    default = model.dtype_policy if default is None else keras.dtype_policies.get(default)
    policies = keras.dtype_policies.DTypePolicyMap(default_policy=default)
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


def settle_policy_map(model, policies) -> None:
    """Gives each layer of `model`, built under `policies` (a `DTypePolicyMap`: Keras builds a layer the map
    quantizes with quantized variables directly, as keras-hub's backbones), its own policy from the map.

    Building quantized, rather than quantizing float layers after the build, is what makes an int8 ViT-B/16
    `.keras` load as fast as the float file: Keras' `quantize` frees each float kernel with a `gc.collect()`.

    Raises:
        ValueError: a path the map names that is not a quantizable layer of `model`, or a layer whose built
            form disagrees with the map (the config is damaged or of another model).
    """
    by_path = {layer.path: layer for layer in model._flatten_layers(include_self=False) if quantizable(layer)}
    named = dict(policies.items())
    for path in named:
        if path not in by_path:
            raise ValueError(f"The model config's dtype map names the layer {path!r}, which model {model.name!r} "
                             f"does not have as a quantizable layer: the config is damaged or of another model.")
    for layer in model._flatten_layers(include_self=True):
        if isinstance(layer._dtype_policy, keras.dtype_policies.DTypePolicyMap):
            layer._dtype_policy = named.get(layer.path, policies.default_policy)  # no setter: nothing to convert
    for path, layer in by_path.items():
        wanted = named.get(path, policies.default_policy).quantization_mode
        built = getattr(layer, "_is_quantized", False) or any(
            "int" in str(variable.dtype) or "float8" in str(variable.dtype) for variable in layer.weights)
        if wanted is not None and not built:  # a layer given a dtype of its own: quantize it as Keras would
            layer.quantize(wanted)
        elif wanted is None and built:
            raise ValueError(f"Layer {path!r} of model {model.name!r} was built quantized but the config's dtype "
                             f"map has no quantized policy for it: the config is damaged.")
