"""OpenVINO IR export of the float signature (`pip install "keras-vit-applications[openvino]"`: openvino, nncf).

`export(model, export_base, precision=...)` writes `export_base/<version>/model.xml` and `model.bin`: the layout
of a TF Serving model base path, which OpenVINO Model Server (it speaks TF Serving's REST and gRPC API) serves as
it is. Input `images` float32 (batch, H, W, 3) in 0..255 with the batch bounded to `1..max_batch_size` in the IR
itself; output `probabilities` (or `logits`, or `features`); the [-1, 1] scaling in the graph.

Precisions (OpenVINO runs bf16 silently by default on CPUs with AMX or AVX512-BF16, so each export says which):
- `float32`: the model's numbers; served with `INFERENCE_PRECISION_HINT=f32`.
- `bfloat16`: the same IR served with `INFERENCE_PRECISION_HINT=bf16` (weights kept in float32 on disk).
- `int8`: static post-training quantization by NNCF from calibration images (weights and activations of the
  matmuls in int8, per-channel), the rest in bf16 where the CPU has it.

The hint is stored in the IR (`rt_info["keras_vit"]["inference_precision_hint"]`) and in
`keras_vit_openvino.json` beside it; `compile_model(path)` applies it, and OpenVINO Model Server takes it as
`--plugin_config '{"INFERENCE_PRECISION_HINT": "bf16"}'` (docs/SERVING.md). A classifier's labels are written
beside the IR as `labels.txt`, one a line. Running an IR (`compile_model`) imports neither TensorFlow nor Keras.

Example:
    >>> export(model, "models/vit_ov", precision="bfloat16")  # doctest: +SKIP
    'models/vit_ov/1'
"""

import contextlib
import io
import json
import logging
import os

from keras_vit import extras
from keras_vit.export import labels as labels_lib
from keras_vit.export import versions

logger = logging.getLogger(__name__)

PRECISIONS = ("float32", "bfloat16", "int8")
HINTS = {"float32": "f32", "bfloat16": "bf16", "int8": "bf16"}
"""The `INFERENCE_PRECISION_HINT` each export is served with (int8's non-quantized ops run in bf16)."""
SIDECAR = "keras_vit_openvino.json"
LABELS_FILE = "labels.txt"
"""A classifier's labels beside its IR, one a line (the IR itself has no place for them)."""
MIN_CALIBRATION_IMAGES = 8
MAX_CALIBRATION_IMAGES = 300


def require_openvino():
    """The `openvino` module, or `keras_vit.extras.MissingExtra` naming the `openvino` extra."""
    return extras.require("openvino", "openvino", "the OpenVINO export")


def check_arguments(precision, calibration_images) -> None:
    """Refuses an unknown precision, int8 without calibration images, or calibration images without int8.

    Raises:
        ValueError: naming the argument, its value and the fix.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"`precision` must be one of {PRECISIONS} for OpenVINO. Received: precision={precision!r}")
    if precision == "int8" and calibration_images is None:
        raise ValueError("An int8 OpenVINO export quantizes activations too, so it needs calibration images: pass "
                         "calibration_images=FOLDER (`--calibration_images=FOLDER`, 8 to 300 images of the model's "
                         "size, like the ones it will serve). Received: calibration_images=None")
    if precision != "int8" and calibration_images is not None:
        raise ValueError(f"Calibration images are for precision='int8'. Received: precision={precision!r}, "
                         f"calibration_images={calibration_images!r}")


def export(model, export_base, version=None, precision="float32", calibration_images=None,
           max_batch_size=64, preprocessing="auto", overwrite=False, labels=None) -> str:
    """Writes `model` as an OpenVINO IR at `export_base/<version>/` and returns that folder.

    Args:
        model: a model `keras_vit.export.export_saved_model` accepts.
        export_base: the model base path (versions are numbered folders inside it, as TF Serving's).
        version: the version number (default: the next free one).
        precision: one of `PRECISIONS`.
        calibration_images: for int8, a folder of images (`keras_vit.export.calibration`).
        max_batch_size: the largest batch the IR accepts.
        preprocessing: as `export_saved_model`.
        overwrite: replace an existing version.
        labels: one label per class, written as `labels.txt` beside the IR (named in the sidecar) for a
            classifier; default: ImageNet's names for 1000/21843 classes, else `class_{i}`.

    Raises:
        ValueError: a bad argument or calibration folder (before anything is written), or an existing version.
        keras_vit.extras.MissingExtra: openvino (or, for int8, nncf) is not installed.
    """
    from keras_vit import validation
    from keras_vit.export import calibration, signatures, tflite  # TensorFlow and Keras: to write an IR, not run it
    from keras_vit.export import precision as precision_utils

    check_arguments(precision, calibration_images)
    validation.check_positive_int("max_batch_size", max_batch_size)
    ov = require_openvino()
    nncf = extras.require("nncf", "openvino", "the int8 OpenVINO export") if precision == "int8" else None
    spec = signatures.inspect_model(model, preprocessing)
    classes = None if spec.output_name == "features" else int(model.output_shape[-1])
    labels = None if classes is None else labels_lib.resolve(labels, classes)
    samples = None
    if precision == "int8":
        samples = calibration.read_folder(calibration_images, spec.height, spec.width,
                                          MIN_CALIBRATION_IMAGES, MAX_CALIBRATION_IMAGES)
    warning = precision_utils.host_warning(precision)
    if warning:
        logger.warning("%s export: %s.", precision, warning)
    export_base = os.fspath(export_base)
    version, path = versions.resolve(export_base, version, overwrite)

    _, concrete = tflite.float_function(model, spec)
    ir = ov.convert_model(concrete)
    ir.reshape({ir.inputs[0]: ov.PartialShape([ov.Dimension(1, max_batch_size), spec.height, spec.width, 3])})
    ir.inputs[0].get_tensor().set_names({"images"})
    ir.outputs[0].get_tensor().set_names({spec.output_name})
    if nncf is not None:
        nncf.set_log_level(logging.ERROR)
        logger.info("Calibrating int8 on %d images with NNCF (about a minute for ViT-B/16 on 2 cores) ...",
                    len(samples))
        with contextlib.redirect_stdout(io.StringIO()):  # the tools' own progress lines only: no bars of NNCF's
            ir = nncf.quantize(ir, nncf.Dataset([sample[None] for sample in samples]),
                               model_type=nncf.ModelType.TRANSFORMER, subset_size=len(samples),
                               advanced_parameters=_without_smooth_quant(nncf))
    hint = HINTS[precision]
    ir.set_rt_info(hint, ["keras_vit", "inference_precision_hint"])
    ir.set_rt_info(precision, ["keras_vit", "precision"])
    with versions.staged(path) as staging:
        ov.save_model(ir, os.path.join(staging, "model.xml"), compress_to_fp16=False)
        if labels is not None:
            labels_lib.write(os.path.join(staging, LABELS_FILE), labels)
        with open(os.path.join(staging, SIDECAR), "w") as file:
            json.dump({"precision": precision, "plugin_config": {"INFERENCE_PRECISION_HINT": hint},
                       "input": "images", "output": spec.output_name, "max_batch_size": max_batch_size,
                       "image_size": [spec.height, spec.width],
                       "labels": None if labels is None else LABELS_FILE}, file, indent=1)
    logger.info("Exported the OpenVINO IR (%s) to %s", precision, path)
    return path


def _without_smooth_quant(nncf):
    """NNCF's transformer preset without SmoothQuant, which moved a small ViT's logits 4x further from float32
    (0.08 vs 0.02 relative, tests/test_export_openvino.py's model) and is meant for LLM activation outliers."""
    return nncf.AdvancedQuantizationParameters(
        smooth_quant_alphas=nncf.AdvancedSmoothQuantParameters(convolution=-1, matmul=-1))


def compile_model(path, threads=None):
    """The IR at `path` (a version folder or its `model.xml`) compiled for the CPU with its recorded precision
    hint (`ov.CompiledModel`).

    Raises:
        ValueError: a folder without `model.xml`.
    """
    ov = require_openvino()
    xml = os.path.join(path, "model.xml") if os.path.isdir(path) else os.fspath(path)
    if not os.path.isfile(xml):
        raise ValueError(f"No OpenVINO IR found: {xml!r} does not exist. Received: path={os.fspath(path)!r}")
    core = ov.Core()
    ir = core.read_model(xml)
    config = {"INFERENCE_PRECISION_HINT": "f32"}
    if ir.has_rt_info(["keras_vit", "inference_precision_hint"]):
        config["INFERENCE_PRECISION_HINT"] = ir.get_rt_info(["keras_vit", "inference_precision_hint"]).astype(str)
    if threads:
        config["INFERENCE_NUM_THREADS"] = int(threads)
    return core.compile_model(ir, "CPU", config)
