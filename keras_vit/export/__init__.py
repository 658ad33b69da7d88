"""Export for serving: a SavedModel that TF Serving loads as is, plus TFLite, ONNX and OpenVINO files.

TensorFlow-specific and imported lazily (`import keras_vit` does not import it).

`export_saved_model` writes `export_base/<version>/` with the signatures of `signatures.py` (encoded
images in, top-k scores/classes/labels out, with decoding, resizing and preprocessing in the graph), the
label file as an asset and `assets.extra/tf_serving_warmup_requests`. Serve it with
`tensorflow_model_server --model_base_path=$PWD/export_base --model_name=NAME` or the official docker image
(see docs/SERVING.md); nothing of keras_vit or Keras is needed to load it.

Example:
    >>> import keras_vit, keras_vit.export
    >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=2,
    ...                       mlp_dim=64, classes=3)
    >>> path = keras_vit.export.export_saved_model(model, "/tmp/vit_tiny", overwrite=True)  # doctest: +SKIP
"""

import logging
import os
import tempfile

from keras_vit.export.limits import (  # noqa: F401  (no TensorFlow: the CLI reads the defaults before importing it)
    DEFAULT_MAX_BATCH_SIZE,
    DEFAULT_MAX_GIF_BLOCKS,
    DEFAULT_MAX_JPEG_SCANS,
    DEFAULT_MAX_PIXELS,
    DEFAULT_MAX_PNG_IDAT_RATIO,
    DEFAULT_MAX_REQUEST_PIXELS,
    Limits,
)

logger = logging.getLogger(__name__)


def serving_form(model):
    """The model an export writes: `model`, or with LoRA adapters merged into its kernels (`merge_lora`)."""
    from keras_vit import lora

    return model.merge_lora() if lora.enabled_layers(model) else model


def _check_tensorflow_backend():
    import keras

    if keras.backend.backend() != "tensorflow":
        raise ValueError(
            "SavedModel export needs the TensorFlow Keras backend (set KERAS_BACKEND=tensorflow). "
            f"Received: backend={keras.backend.backend()!r}"
        )


def export_saved_model(
    model,
    export_base,
    version=None,
    top_k=5,
    labels=None,
    preprocessing="auto",
    max_pixels=DEFAULT_MAX_PIXELS,
    max_batch_size=DEFAULT_MAX_BATCH_SIZE,
    overwrite=False,
    jit_compile=False,
    model_name=None,
    precision="float32",
    max_request_pixels=None,
    max_jpeg_scans=DEFAULT_MAX_JPEG_SCANS,
    max_gif_blocks=DEFAULT_MAX_GIF_BLOCKS,
    max_png_idat_ratio=DEFAULT_MAX_PNG_IDAT_RATIO,
    freeze_weights="auto",
) -> str:
    """Writes `model` as a TF Serving version directory `export_base/<version>/` and returns its path.

    The request limits (`max_*`, `keras_vit.export.limits`) are constants of the served graphs: the SavedModel
    enforces them wherever it is loaded. docs/SERVING.md lists them with what each costs at worst.

    Args:
        model: a built Keras model of fixed input size (a keras_vit model, or any model whose input is
            (batch, H, W, 3) and output one vector per image); with a `head` layer it is a classifier,
            without one its output is exported as `features`.
        export_base: the model base path TF Serving watches.
        version: integer version; None for one more than the highest existing one (1 for a new base).
        top_k: classes returned per image by `serving_default`.
        labels: one label per class; default: ImageNet names for 1000/21843 classes, else `class_{i}`.
        preprocessing: `"auto"` (scale 0..255 to [-1, 1] unless the model has a `preprocessing` layer),
            `"vit"` (always scale) or `"none"`.
        max_pixels: refuse encoded images whose header claims more pixels (checked before decoding; a GIF
            counts every frame).
        max_batch_size: refuse requests with more images.
        overwrite: replace an existing version directory.
        jit_compile: compile the model's forward pass with XLA (the serving binary must have XLA).
        model_name: the model name written into the warmup requests; default: basename of export_base.
        precision: `"float32"`, or `"bfloat16"`: the served graph computes in bf16 with bf16 weights (the
            `head` stays float32; inputs and outputs are float32 as before). Use it on CPUs with AMX or
            AVX512-BF16 and on GPUs, where bf16 matmuls are several times faster; on other CPUs bf16 is
            emulated and slower (`keras_vit.export.precision`).
        max_request_pixels: refuse requests whose images' headers add up to more pixels (each GIF block
            walked counting 16384); default: the larger of 268435456 (64 images of 2048x2048) and `max_pixels`.
        max_jpeg_scans: refuse JPEGs with more scans (SOS markers; a progressive JPEG's scans each cost a pass
            over the image).
        max_gif_blocks: refuse GIFs with more blocks (extensions, frames, extension sub-blocks, runs of
            image-data sub-blocks).
        max_png_idat_ratio: refuse PNGs whose compressed image data (IDAT) exceeds this many times the raw
            size their header declares, plus 64 KiB (an inflate bomb).
        freeze_weights: `"auto"` (default) writes the weights into the graph as constants when they take at
            most 1 GiB, else as variables; `True` always (an error above 1 GiB), `False` never. Frozen weights
            serve faster in bf16 on AMX CPUs (oneDNN keeps their tile layout between calls) and compute the
            same outputs (`keras_vit.export.frozen`).

    Returns:
        The version directory written.

    Raises:
        ValueError: a bad argument, a model that cannot be served, or an existing version.

    Example:
        >>> import keras_vit
        >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=2,
        ...                       mlp_dim=64, classes=3)
        >>> export_saved_model(model, "/tmp/keras_vit_doc/tiny", version=1, overwrite=True)
        '/tmp/keras_vit_doc/tiny/1'
    """
    import tensorflow as tf

    from keras_vit import validation
    from keras_vit.export import frozen
    from keras_vit.export import labels as label_utils
    from keras_vit.export import precision as precision_utils
    from keras_vit.export import signatures, versions, warmup

    _check_tensorflow_backend()
    validation.check_positive_int("top_k", top_k)
    limits = Limits(max_pixels=max_pixels, max_batch_size=max_batch_size, max_request_pixels=max_request_pixels,
                    max_jpeg_scans=max_jpeg_scans, max_gif_blocks=max_gif_blocks,
                    max_png_idat_ratio=max_png_idat_ratio)  # a ValueError before anything is written
    precision_utils.check_precision(precision)
    frozen.check_freeze_weights(freeze_weights)
    model = serving_form(model)
    spec = signatures.inspect_model(model, preprocessing)
    export_base = os.fspath(export_base)
    version, path = versions.resolve(export_base, version, overwrite)
    model_name = model_name or os.path.basename(os.path.normpath(export_base))
    model = precision_utils.serving_model(model, precision)
    freeze = frozen.should_freeze(model, freeze_weights)
    warning = precision_utils.host_warning(precision)
    if warning:
        logger.warning("%s export: %s.", precision, warning)

    with tempfile.TemporaryDirectory() as scratch, versions.staged(path) as staging:
        labels_asset = None
        if spec.classes is not None:
            label_file = os.path.join(scratch, "labels.txt")
            label_utils.write(label_file, label_utils.resolve(labels, spec.classes))
            labels_asset = tf.saved_model.Asset(label_file)
        serving = signatures.Signatures(model, spec, labels_asset, top_k, limits, jit_compile=jit_compile,
                                       frozen=freeze)
        root, concrete = serving.module()
        tf.saved_model.save(root, staging, signatures=concrete)
        warmup.write(staging, model_name, {name: "images" for name in concrete}, spec.height, spec.width)
    logger.info("Exported %s version %d to %s", model_name, version, path)
    return path


def export_tflite(model, path, quantize=None, preprocessing="auto", overwrite=False) -> str:
    """Writes a TFLite flatbuffer of the float signature (`predict_images`); see `keras_vit.export.tflite`."""
    from keras_vit.export import tflite

    _check_tensorflow_backend()
    return tflite.export(serving_form(model), path, quantize=quantize, preprocessing=preprocessing,
                         overwrite=overwrite)


def export_onnx(model, path, preprocessing="auto", opset=None, overwrite=False) -> str:
    """Writes an ONNX model of the float signature through tf2onnx; see `keras_vit.export.onnx`."""
    from keras_vit.export import onnx

    _check_tensorflow_backend()
    return onnx.export(serving_form(model), path, preprocessing=preprocessing, opset=opset, overwrite=overwrite)


def export_openvino(model, export_base, version=None, precision="float32", calibration_images=None,
                    max_batch_size=DEFAULT_MAX_BATCH_SIZE, preprocessing="auto", overwrite=False, labels=None) -> str:
    """Writes an OpenVINO IR of the float signature at `export_base/<version>/`; see `keras_vit.export.openvino`."""
    from keras_vit.export import openvino

    _check_tensorflow_backend()
    return openvino.export(serving_form(model), export_base, version=version, precision=precision,
                           calibration_images=calibration_images, max_batch_size=max_batch_size,
                           preprocessing=preprocessing, overwrite=overwrite, labels=labels)


def export_features(extractor, export_base, version=None, max_batch_size=DEFAULT_MAX_BATCH_SIZE, preprocessing="auto",
                    overwrite=False) -> str:
    """Writes a SavedModel of a `keras_vit.feature_extractor` with a `features` signature; see
    `keras_vit.export.features`."""
    from keras_vit.export import features

    _check_tensorflow_backend()
    return features.export(extractor, export_base, version=version, max_batch_size=max_batch_size,
                           preprocessing=preprocessing, overwrite=overwrite)


__all__ = ["export_saved_model", "export_tflite", "export_onnx", "export_openvino", "export_features", "Limits"]
