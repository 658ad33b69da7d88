"""The precision a SavedModel computes in: `float32` (the model as it is) or `bfloat16` (bf16 weights and matmuls).

`serving_model(model, "bfloat16")` returns a copy of a functional Keras model whose layers all use the Keras
`"bfloat16"` dtype policy (variables stored in bf16, rounded once from the model's weights; no per-call
float32-to-bf16 weight casts as under `mixed_bfloat16`), except the `head`, which keeps float32 variables and
float32 logits (as keras_vit builds it under any mixed policy). The signatures of the export are unchanged:
float32 or encoded images in, float32 scores out; only the graph in between computes in bf16.

On CPUs with AMX or AVX512-BF16 (Intel Sapphire Rapids and later, AMD Zen 4 and later) TensorFlow's oneDNN
kernels run bf16 matmuls several times faster than float32 ones; on GPUs bf16 runs on the tensor cores. On
CPUs without those instructions bf16 is emulated and slower than float32: export float32 there.

Example:
    >>> import keras_vit
    >>> from keras_vit import model_parts
    >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=2,
    ...                       mlp_dim=64, classes=3)
    >>> low = serving_model(model, "bfloat16")
    >>> model_parts.encoder_blocks(low)[0].dtype_policy.name, model_parts.head(low).dtype_policy.name
    ('bfloat16', 'float32')
"""

import keras

from keras_vit import model_parts

PRECISIONS = ("float32", "bfloat16")
"""What `export_saved_model(precision=...)` and `python -m keras_vit.export --precision` accept."""

FLOAT32_LAYERS = (model_parts.HEAD,)
"""Layers kept in float32 in a bfloat16 export: the classifier, so that the logits (and the softmax over
them) are float32, as the Keras mixed-precision guide asks."""


def host_warning(precision: str, cpu_flags: set | None = None) -> str | None:
    """A one-line warning when this CPU has no fast instructions for `precision`, else None."""
    if cpu_flags is None:
        cpu_flags = _cpu_flags()
    if not cpu_flags:
        return None  # not Linux: nothing known
    if precision == "bfloat16" and not cpu_flags & {"avx512_bf16", "amx_bf16"}:
        return ("this CPU has neither AMX-BF16 nor AVX512-BF16: a bf16 model runs emulated here, slower than "
                "float32 (it is fast on the CPUs that have them)")
    if precision == "int8" and not cpu_flags & {"amx_int8", "avx512_vnni", "avx_vnni"}:
        return ("this CPU has neither AMX-INT8 nor VNNI: an int8 model runs slowly here (it is fast on the CPUs "
                "that have them)")
    return None


def _cpu_flags() -> set:
    try:
        with open("/proc/cpuinfo") as file:
            for line in file:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def check_precision(precision):
    if precision not in PRECISIONS:
        raise ValueError(f"`precision` must be one of {PRECISIONS}. Received: precision={precision!r}")


def serving_model(model, precision="float32"):
    """`model` itself for float32; for bfloat16 a clone with bf16 layers (but the `head`) and the same weights.

    Args:
        model: a built functional Keras model (keras_vit models are).
        precision: one of `PRECISIONS`.

    Raises:
        ValueError: an unknown precision, or a model that cannot be cloned from its layers' configurations
            (a subclassed model) for bfloat16.
    """
    check_precision(precision)
    if precision == "float32":
        return model
    from keras_vit import quantization

    quantized = quantization.quantized_layers(model)
    if quantized:
        raise ValueError(f"A quantized model exports at precision='float32' (its {len(quantized)} "
                         f"{quantized[0].quantization_mode} layers compute as quantized); a {precision} export "
                         f"starts from the float model. Received: precision={precision!r}")
    def clone(layer):
        policy = "float32" if layer.name in FLOAT32_LAYERS else precision
        return layer.__class__.from_config({**layer.get_config(), "dtype": policy})

    try:
        low = keras.models.clone_model(model, clone_function=clone)
    except (TypeError, ValueError, NotImplementedError) as error:
        raise ValueError(
            f"A {precision} export clones the model layer by layer, so it must be a functional Keras model whose "
            f"layers rebuild from their configurations. Received: {type(model).__name__} ({error})"
        ) from error
    sources, targets = model.weights, low.weights
    if [w.path for w in sources] != [w.path for w in targets]:
        raise ValueError(f"The {precision} clone of the model does not hold the model's weights in the same order.")
    for source, target in zip(sources, targets):
        target.assign(keras.ops.cast(source.value, target.dtype))
    return low
