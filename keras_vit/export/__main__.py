"""`python -m keras_vit.export`: export a ViT for TF Serving (SavedModel), TFLite, ONNX or OpenVINO.

    python -m keras_vit.export --model=vit_b16 --weights=none --out=models/vit_b16
    python -m keras_vit.export --model=runs/x/model.keras --out=models/x --version=2
    python -m keras_vit.export --model=vit_b16 --weights=none --out=models/vit_b16 --format=tflite
    python -m keras_vit.export --model=vit_b16 --weights=none --out=models/vit_b16_bf16 --precision=bfloat16
    python -m keras_vit.export --model=runs/x/model.keras --out=models/x_ov --format=openvino --precision=int8 \\
        --calibration_images=calibration/

`--precision` by format (`PRECISIONS`; any other pair is a usage error): a SavedModel computes in float32 or
bfloat16 (bf16 weights and matmuls, same signatures: for CPUs with AMX or AVX512-BF16 and GPUs; TensorFlow's
int8 matmul on a CPU is slower than its float32 one, so int8 is not offered there); TFLite in float32 or
int8 (dynamic-range: int8 weights); ONNX in float32; OpenVINO in float32, bfloat16 (the IR's precision hint)
or int8 (static, calibrated on `--calibration_images`, 8 to 300 images of the model's size).

`--model` is a variant name (`vit_b16`, ...) or a trained `.keras` file; with a variant name `--weights` is
required: `none` (random initialisation, never served by accident), a published name, a checkpoint file, or a
trained `.keras` file (which is then the model). `--image_size`, `--classes` and `--pooling` shape a variant;
with a `.keras` model they are refused (the file fixes its architecture). SavedModels go to
`<out>/<version>/`; `--format=tflite` writes `<out>/tflite/model.tflite` (`model_int8.tflite` with
`--precision=int8`); `--format=onnx` writes `<out>/onnx/model.onnx`; `--format=openvino` writes
`<out>/<version>/model.xml` and `model.bin` (an OpenVINO Model Server base path). Nothing existing is
overwritten without `--overwrite`.

Labels (`assets/labels.txt`, the `labels` output): `--labels FILE` (one label a line), else the labels file
beside a `.keras` model, `<model path without .keras>.labels.txt` (`model.labels.txt` beside `model.keras`,
one label a line: what the training run knew, written by `training.train` with its export), else ImageNet's
class names for 1000 and 21843 classes, else `class_<i>`.

Request limits, checked from the encoded bytes before decoding and recorded in the SavedModel's graph (it
enforces them without keras_vit): `--max_pixels` per image, `--max_request_pixels` per request,
`--max_batch_size`, and the decoding work of one image, `--max_jpeg_scans`, `--max_gif_blocks`,
`--max_png_idat_ratio`; docs/SERVING.md ("Request limits") has what each costs at worst.
"""

import os

from absl import flags

from keras_vit import cli
from keras_vit.cli import model as cli_model
from keras_vit.export import limits as limits_module

PRECISIONS = {
    "saved_model": ("float32", "bfloat16"),
    "tflite": ("float32", "int8"),
    "onnx": ("float32",),
    "openvino": ("float32", "bfloat16", "int8"),
}
"""The precisions each `--format` writes."""
FORMATS = tuple(PRECISIONS)

FLAGS = flags.FlagValues()
cli_model.define_model(FLAGS, required=True)
cli_model.define_weights(FLAGS, required=True, purpose="the served predictions")
cli.define_out(FLAGS, "The model base path TF Serving or OpenVINO Model Server watches: SavedModels and "
               "OpenVINO IRs go to OUT/<version>/, TFLite files to OUT/tflite/, ONNX to OUT/onnx/.")
flags.DEFINE_enum("format", "saved_model", list(FORMATS), "What to write.", flag_values=FLAGS)
flags.DEFINE_integer("version", None, "SavedModel version, from 1 to 2**63-1 (TF Serving's int64; default: the next "
                     "free integer, 1 for a new --out).", flag_values=FLAGS)
flags.register_validator(
    "version", lambda value: value is None or 1 <= value <= 2**63 - 1,
    "--version must be an integer from 1 to 2**63-1 (TF Serving reads a version as an int64); leave it out for the "
    "next free version", flag_values=FLAGS)
flags.DEFINE_bool("overwrite", False, "Replace an existing version or file.", flag_values=FLAGS)
flags.DEFINE_integer("top_k", 5, "Classes returned per image by serving_default.", lower_bound=1, flag_values=FLAGS)
flags.DEFINE_string("labels", None, "Text file with one label per class, one a line (default: "
                    "<model>.labels.txt beside a .keras model, else ImageNet's names or class_<i>).",
                    flag_values=FLAGS)
cli_model.define_image_size(FLAGS)
cli_model.define_classes(FLAGS)
cli_model.define_pooling(FLAGS, help="Export features instead of classes: no head, this pooling of the tokens "
                   "(token: the [class] token, avg/max: over the patch tokens) (default: the head).")
_CEILINGS = limits_module.CEILINGS
flags.DEFINE_integer("max_pixels", limits_module.DEFAULT_MAX_PIXELS, "Largest decoded image (width x height, "
                     "times the frames of a GIF) accepted, read from the header before decoding.",
                     lower_bound=1, upper_bound=_CEILINGS["max_pixels"], flag_values=FLAGS)
flags.DEFINE_integer("max_batch_size", limits_module.DEFAULT_MAX_BATCH_SIZE, "Most images accepted in one request.",
                     lower_bound=1, upper_bound=_CEILINGS["max_batch_size"], flag_values=FLAGS)
flags.DEFINE_integer("max_request_pixels", None, "Most decoded pixels in one request, summed over its images from "
                     f"their headers (each GIF block walked counts {limits_module.GIF_BLOCK_PIXELS}) (default: the "
                     f"larger of {limits_module.DEFAULT_MAX_REQUEST_PIXELS}, 64 images of 2048x2048, and "
                     "--max_pixels).", lower_bound=1, upper_bound=_CEILINGS["max_request_pixels"], flag_values=FLAGS)
flags.DEFINE_integer("max_jpeg_scans", limits_module.DEFAULT_MAX_JPEG_SCANS, "Most scans (SOS markers) in one "
                     "JPEG: each scan of a progressive JPEG is a pass over the whole image (libjpeg writes 10).",
                     lower_bound=1, upper_bound=_CEILINGS["max_jpeg_scans"], flag_values=FLAGS)
flags.DEFINE_integer("max_gif_blocks", limits_module.DEFAULT_MAX_GIF_BLOCKS, "Most blocks in one GIF: extensions, "
                     "frames, extension sub-blocks and runs of image-data sub-blocks (about 5 per frame).",
                     lower_bound=1, upper_bound=_CEILINGS["max_gif_blocks"], flag_values=FLAGS)
flags.DEFINE_float("max_png_idat_ratio", limits_module.DEFAULT_MAX_PNG_IDAT_RATIO, "Most compressed image data "
                   "(IDAT bytes) a PNG may hold per byte of the raw image its header declares, plus "
                   f"{limits_module.PNG_IDAT_SLACK} bytes: refuses inflate bombs (deflate inflates up to 1032x).",
                   lower_bound=limits_module.MIN_PNG_IDAT_RATIO, upper_bound=_CEILINGS["max_png_idat_ratio"],
                   flag_values=FLAGS)
flags.DEFINE_enum("preprocessing", "auto", ["auto", "vit", "none"], "auto: scale 0..255 to [-1, 1] unless the "
                  "model has its own `preprocessing` layer; vit: always; none: never.", flag_values=FLAGS)
flags.DEFINE_bool("jit_compile", False, "XLA-compile the forward pass (SavedModel).", flag_values=FLAGS)
flags.DEFINE_enum("precision", "float32", ["float32", "bfloat16", "int8"], "What the export computes in "
                  "(inputs and outputs unchanged): bfloat16 for saved_model and openvino (faster on CPUs with AMX or "
                  "AVX512-BF16 and on GPUs, slower on other CPUs); int8 for tflite (int8 weights) and openvino "
                  "(static, with --calibration_images).", flag_values=FLAGS)
FREEZE_WEIGHTS = {"auto": "auto", "true": True, "false": False}
"""`--freeze_weights` spelled as a flag -> `export_saved_model(freeze_weights=...)` (`frozen.FREEZE_CHOICES`)."""
flags.DEFINE_enum("freeze_weights", "auto", list(FREEZE_WEIGHTS), "SavedModel: write the weights into the "
                  "graph as constants (faster in bf16 on AMX CPUs, same outputs); auto: when they take at most 1 GiB.",
                  flag_values=FLAGS)
flags.DEFINE_string("calibration_images", None, "Folder of 8 to 300 images of the model's size for "
                    "--format=openvino --precision=int8, like the ones it will serve (default: none; that pair "
                    "needs it).", flag_values=FLAGS)
cli.define_verbose(FLAGS)
cli.name_arguments(FLAGS, export_base="out")  # keras_vit.export's errors in the flags' words


def _check_labels(fv, argv):
    if fv.labels is not None and not os.path.isfile(fv.labels):
        raise cli.UsageError(f"The labels file does not exist. Received: --labels={fv.labels!r}")


cli.add_check(FLAGS, _check_labels)


def _check_precision(fv, argv):
    if fv.precision not in PRECISIONS[fv.format]:
        raise cli.UsageError(f"--format={fv.format} writes --precision={'|'.join(PRECISIONS[fv.format])}. Received: "
                             f"--precision={fv.precision}")
    if (fv.calibration_images is not None) != (fv.format == "openvino" and fv.precision == "int8"):
        raise cli.UsageError("--calibration_images is for --format=openvino --precision=int8, which needs it. "
                             f"Received: --format={fv.format} --precision={fv.precision} "
                             f"--calibration_images={fv.calibration_images}")
    if fv.freeze_weights != "auto" and fv.format != "saved_model":
        raise cli.UsageError(f"--freeze_weights is for --format=saved_model. Received: --format={fv.format} "
                             f"--freeze_weights={fv.freeze_weights}")
    if fv.calibration_images is not None and not os.path.isdir(fv.calibration_images):
        raise cli.UsageError(f"--calibration_images must be a folder of images. Received: "
                             f"--calibration_images={fv.calibration_images!r}")


cli.add_check(FLAGS, _check_precision)


def _check_limits(fv, argv):
    try:
        limits_module.Limits(**limits_from_flags(fv))
    except ValueError as error:  # "`name` must ... Received: name=value" -> "--name must ... Received: --name=value"
        raise cli.UsageError(cli.flag_spelling(str(error), fv)) from None


cli.add_check(FLAGS, _check_limits)


def limits_from_flags(fv=FLAGS) -> dict:
    """The request limits the flags set, as keyword arguments of `export_saved_model`."""
    names = ("max_pixels", "max_batch_size", "max_request_pixels", "max_jpeg_scans", "max_gif_blocks",
             "max_png_idat_ratio")
    return {name: fv[name].value for name in names}


def labels_from_flags():
    """The labels `--labels` names, else those of the sidecar of a `.keras` model, else None (the defaults)."""
    from keras_vit.export import labels

    path = FLAGS.labels
    if path is None:
        keras_file = cli_model.keras_file_of(FLAGS)
        sidecar = labels.sidecar_path(keras_file) if keras_file else None
        if sidecar is None or not os.path.isfile(sidecar):
            return None
        path = sidecar
    found = labels.read(path)
    cli.progress(f"labels: {len(found)} from {path}")
    return found


def run(argv):
    import keras_vit.export as export
    from keras_vit.export import versions

    out = FLAGS.out
    if FLAGS.format in ("saved_model", "openvino"):
        if FLAGS.format == "openvino":
            from keras_vit.export import openvino

            openvino.require_openvino()  # a missing package stops before the model is built
        versions.resolve(out, FLAGS.version, FLAGS.overwrite)  # refuse before building
        targets = []
    elif FLAGS.format == "tflite":
        name = "model_int8.tflite" if FLAGS.precision == "int8" else "model.tflite"
        targets = [("dynamic_int8" if FLAGS.precision == "int8" else None, os.path.join(out, "tflite", name))]
    else:
        from keras_vit.export import onnx

        onnx.require_tf2onnx()  # a missing tf2onnx stops before the model is built
        targets = [(None, os.path.join(out, "onnx", "model.onnx"))]
    _refuse_existing([path for _, path in targets], FLAGS.overwrite)
    labels = labels_from_flags()
    model = cli_model.model_from_flags(FLAGS)
    if labels is None and FLAGS.weights:  # a Hugging Face checkpoint exported as it is: its own id2label
        from keras_vit.export import labels as label_utils

        labels = label_utils.huggingface_labels(FLAGS.weights, int(model.output_shape[-1]))
        if labels is not None:
            cli.progress(f"labels: {len(labels)} from the id2label of {FLAGS.weights}")
    if FLAGS.format == "saved_model":
        cli.progress(f"exporting a SavedModel to {out} ...")
        written = [export.export_saved_model(
            model, out, version=FLAGS.version, top_k=FLAGS.top_k, labels=labels, overwrite=FLAGS.overwrite,
            preprocessing=FLAGS.preprocessing, jit_compile=FLAGS.jit_compile, precision=FLAGS.precision,
            freeze_weights=FREEZE_WEIGHTS[FLAGS.freeze_weights], **limits_from_flags(),
        )]
    elif FLAGS.format == "openvino":
        cli.progress(f"exporting an OpenVINO IR ({FLAGS.precision}) to {out} ...")
        written = [export.export_openvino(
            model, out, version=FLAGS.version, precision=FLAGS.precision, overwrite=FLAGS.overwrite,
            calibration_images=FLAGS.calibration_images, max_batch_size=FLAGS.max_batch_size,
            preprocessing=FLAGS.preprocessing, labels=labels)]
    else:
        written = []
        for quantize, path in targets:
            cli.progress(f"writing {path} ...")
            if FLAGS.format == "tflite":
                written.append(export.export_tflite(model, path, quantize=quantize,
                                                    preprocessing=FLAGS.preprocessing, overwrite=FLAGS.overwrite))
            else:
                written.append(export.export_onnx(model, path, preprocessing=FLAGS.preprocessing,
                                                  overwrite=FLAGS.overwrite))
    for path in written:
        print(f"wrote {path}")
    return 0


def _refuse_existing(paths, overwrite):
    for path in paths:
        if os.path.exists(path) and not overwrite:
            raise ValueError(f"{path!r} already exists; pass --overwrite to replace it")


def main(argv=None) -> int:
    """The exit status of `python -m keras_vit.export` with `argv` (default: `sys.argv[1:]`)."""
    return cli.main(run, FLAGS, argv, usage=__doc__, tensorflow=True)


if __name__ == "__main__":
    cli.run(run, FLAGS, usage=__doc__, tensorflow=True)
