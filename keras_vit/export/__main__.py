"""`python -m keras_vit.export`: export a ViT for TF Serving (SavedModel), TFLite or ONNX.

    python -m keras_vit.export --model vit_b16 --weights none --export_base models/vit_b16
    python -m keras_vit.export --model vit_b16 --weights trained.keras --export_base models/vit_b16 --version 2
    python -m keras_vit.export --model vit_b16 --weights none --export_base models/vit_b16 --format tflite

`--model` is a lower-case variant name (`vit_b16`, see `keras_vit.applications.CONSTRUCTORS`) or a `.keras`
file; `--weights` is `none` (random initialisation), a `.keras` file (the whole trained model), or what the
constructors take. SavedModels go to `<export_base>/<version>/`; `--format tflite` writes
`<export_base>/tflite/model.tflite` and `model_int8.tflite` (dynamic-range int8); `--format onnx` writes
`<export_base>/onnx/model.onnx`. Nothing existing is overwritten without `--overwrite`.
"""

import argparse
import os
import sys

FORMATS = ("saved_model", "tflite", "onnx")


def _parser():
    from keras_vit.export import DEFAULT_MAX_BATCH_SIZE, DEFAULT_MAX_PIXELS

    parser = argparse.ArgumentParser(prog="python -m keras_vit.export", description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="variant name (vit_b16, ...) or a .keras file")
    parser.add_argument(
        "--weights", default=None, help="required with a variant name: none (random), a .keras file, or what the "
        "constructors take (a published name such as imagenet21k+imagenet2012_224, or a checkpoint file)"
    )
    parser.add_argument("--export_base", required=True, help="TF Serving model base path")
    parser.add_argument("--version", type=int, default=None, help="default: next free integer")
    parser.add_argument("--format", choices=FORMATS, default="saved_model")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing version or file")
    parser.add_argument("--top_k", type=int, default=5)
    parser.add_argument("--labels", default=None, help="text file with one label per class, one a line")
    parser.add_argument("--image_size", type=int, default=None, help="constructor input size (default: the constructor's)")
    parser.add_argument("--classes", type=int, default=None, help="constructor classes (default: the constructor's)")
    parser.add_argument("--pooling", default=None, help="export features: no head, this pooling (token|avg)")
    parser.add_argument("--max_pixels", type=int, default=DEFAULT_MAX_PIXELS)
    parser.add_argument("--max_batch_size", type=int, default=DEFAULT_MAX_BATCH_SIZE)
    parser.add_argument("--preprocessing", choices=("auto", "vit", "none"), default="auto",
                        help="auto: scale 0..255 to [-1, 1] unless the model has a `preprocessing` layer")
    parser.add_argument("--jit_compile", action="store_true", help="XLA-compile the forward pass (SavedModel)")
    return parser


def build_model(args):
    """The Keras model the flags describe."""
    from keras_vit import applications

    if args.model.endswith(".keras") or (args.weights or "").endswith(".keras"):
        return applications.build_model(args.model if args.model.endswith(".keras") else args.weights)
    if args.weights is None and args.model.lower() in applications.CONSTRUCTORS:
        raise ValueError(
            "--weights is required with a variant name: `none` for random initialisation (never served by "
            "accident), a .keras file, or what the constructors take"
        )
    kwargs = {}
    if args.image_size:
        kwargs["input_shape"] = (args.image_size, args.image_size, 3)
    if args.classes:
        kwargs["classes"] = args.classes
    if args.pooling:
        kwargs.update(include_top=False, pooling=args.pooling)
    weights = None if (args.weights or "none").lower() == "none" else args.weights
    return applications.build_model(args.model, weights, **kwargs)


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    import keras_vit.export as export

    try:
        labels = None
        if args.labels:
            with open(args.labels, encoding="utf-8") as file:
                labels = [line.rstrip("\n") for line in file if line.strip()]
        if args.format == "saved_model":
            from keras_vit.export import versions

            versions.resolve(args.export_base, args.version, args.overwrite)  # refuse before building
            model = build_model(args)
            path = export.export_saved_model(
                model, args.export_base, version=args.version, top_k=args.top_k, labels=labels,
                max_pixels=args.max_pixels, max_batch_size=args.max_batch_size, overwrite=args.overwrite,
                preprocessing=args.preprocessing, jit_compile=args.jit_compile,
            )
            written = [path]
        elif args.format == "tflite":
            targets = {None: "model.tflite", "dynamic_int8": "model_int8.tflite"}
            paths = {q: os.path.join(args.export_base, "tflite", name) for q, name in targets.items()}
            _refuse_existing(paths.values(), args.overwrite)
            model = build_model(args)
            written = [
                export.export_tflite(model, p, quantize=q, preprocessing=args.preprocessing, overwrite=args.overwrite)
                for q, p in paths.items()
            ]
        else:
            path = os.path.join(args.export_base, "onnx", "model.onnx")
            _refuse_existing([path], args.overwrite)
            written = [
                export.export_onnx(build_model(args), path, preprocessing=args.preprocessing, overwrite=args.overwrite)
            ]
    except (ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    return 0


def _refuse_existing(paths, overwrite):
    for path in paths:
        if os.path.exists(path) and not overwrite:
            raise ValueError(f"{path!r} already exists; pass --overwrite to replace it")


if __name__ == "__main__":
    sys.exit(main())
