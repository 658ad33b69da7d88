"""`python -m keras_vit.convert SRC DST.weights.h5 [--variant vit_b16] [--image-size 384] [--classes N]`.

Converts any supported checkpoint (an official `.npz` in any spelling, a timm `.safetensors`, a Hugging Face
ViT folder, or a published name together with `--variant`) into a Keras `.weights.h5` file, loading it
strictly on the way, and prints the sha256 of the source file (for a published name: the downloaded file, the
value to pin into `keras_vit.weights`; for a Hugging Face folder: its `model.safetensors`) and of the written
file, a summary of the architecture and the call that rebuilds the model around the converted weights.

Example:
    python -m keras_vit.convert ViT-B_16.npz vit_b16_in21k.weights.h5 --variant vit_b16
"""

import argparse
import os
import sys

from keras_vit.rebuild import ARGUMENT_ORDER, architecture_of
from keras_vit.weights import sha256


def source_file(source, variant: str | None = None) -> str | None:
    """The file whose sha256 identifies `source`: the file itself, the cached download of a published name, or
    the `model.safetensors` of a Hugging Face folder; None when there is no single such file."""
    from keras_vit import loading
    from keras_vit.variants import get_variant

    if not loading.is_path(source):
        path, _ = loading.resolve_path(source, get_variant(variant).name if variant else None)
        return path
    path = os.fspath(source)
    if os.path.isdir(path):
        path = os.path.join(path, "model.safetensors")
    return path if os.path.isfile(path) else None


def check_destination(destination: str) -> None:
    """The destination must be a `.weights.h5` path in an existing, writable folder (checked before loading).

    Raises:
        ValueError: naming the path and what is wrong with it.
    """
    if not str(destination).endswith(".weights.h5"):
        raise ValueError(f"The destination must end in `.weights.h5`. Received: destination={destination!r}")
    folder = os.path.dirname(os.path.abspath(destination))
    if not os.path.isdir(folder):
        raise ValueError(
            f"The destination folder {folder!r} does not exist; create it first or choose another destination. "
            f"Received: destination={destination!r}"
        )
    if not os.access(folder, os.W_OK):
        raise ValueError(
            f"The destination folder {folder!r} is not writable; choose another destination. "
            f"Received: destination={destination!r}"
        )


def _save(model, destination: str) -> None:
    try:
        model.save_weights(destination)
    except OSError as error:  # a read-only file system, a full disk, a folder where the file should be, ...
        raise ValueError(
            f"Cannot write the destination ({error.strerror or error}); choose another destination. "
            f"Received: destination={destination!r}"
        ) from error


def convert(source, destination: str, variant: str | None = None, image_size: int | None = None,
            classes: int | None = None):
    """Loads `source` strictly into a keras_vit model and saves its weights to `destination`.

    Args:
        source: a checkpoint path, or a published name (then `variant` is required).
        destination: the output path; must end in `.weights.h5`.
        variant: a variant name (`"vit_b16"`, `"B16"`, ...) that the checkpoint must match.
        image_size: build at this resolution (resampling the position embedding) instead of the checkpoint's.
        classes: a new zero-initialised head with this many classes instead of the checkpoint's.

    Returns:
        (model, sha256 of the written file).

    Raises:
        ValueError: a bad or unwritable destination, an unknown variant, or any loading error (a damaged file
            holding NaN or Inf included).
        keras_vit.WeightsDownloadError: a published name whose file cannot be downloaded (an `OSError`).
    """
    import keras_vit
    from keras_vit.applications import CONSTRUCTORS
    from keras_vit.variants import get_variant

    check_destination(destination)
    shape = None if image_size is None else (image_size, image_size, 3)
    if variant is not None:
        constructor = CONSTRUCTORS[get_variant(variant).model_name]
        model = constructor(weights=source, input_shape=shape, classes=classes, classifier_activation=None)
    else:
        model = keras_vit.ViT(weights=source, input_shape=shape, classes=classes, classifier_activation=None)
    _save(model, destination)
    return model, sha256(destination)


def summary(model, source, destination: str, digest: str, source_path: str | None = None) -> str:
    """The text the CLI prints.

    Args:
        digest: sha256 of the written file.
        source_path: the file `source` was read from (`source_file`), whose sha256 is printed; None: not printed.
    """
    args = architecture_of(model)
    rebuild = ", ".join(f"{k}={args[k]!r}" for k in ARGUMENT_ORDER if k in args and (k != "hybrid" or args[k]))
    source_line = []
    if source_path is not None:
        where = "" if os.fspath(source_path) == os.fspath(source) else f" ({source_path})"
        source_line = [f"source sha256:  {sha256(source_path)}{where}"]
    return "\n".join([
        f"source:         {source}",
        *source_line,
        f"written:        {destination}",
        f"written sha256: {digest}",
        f"parameters:     {model.count_params():,}",
        f"input:          {model.input_shape[1]}x{model.input_shape[2]}x{model.input_shape[3]}",
        f"classes:        {args['classes']} ({args['classifier']} classifier"
        + (f", pre_logits {args['representation_size']})" if args["representation_size"] else ")"),
        f"rebuild:        keras_vit.ViT({rebuild}, weights={destination!r})",
    ])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m keras_vit.convert", description=__doc__.split("\n")[0])
    parser.add_argument("source", help="checkpoint path (.npz, .safetensors, HF folder) or published name")
    parser.add_argument("destination", help="output .weights.h5 path")
    parser.add_argument("--variant", help="variant the checkpoint must match, e.g. vit_b16 (needed for names)")
    parser.add_argument("--image-size", type=int, help="resolution to build at (resamples position embeddings)")
    parser.add_argument("--classes", type=int, help="classes of a new zero-initialised head")
    args = parser.parse_args(argv)
    try:
        model, digest = convert(args.source, args.destination, args.variant, args.image_size, args.classes)
        source_path = source_file(args.source, args.variant)
    except (ValueError, OSError) as error:  # OSError: keras_vit.WeightsDownloadError for a published name
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(summary(model, args.source, args.destination, digest, source_path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
