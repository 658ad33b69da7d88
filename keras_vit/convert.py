"""`python -m keras_vit.convert --weights=SRC --out=DST.weights.h5 [--model=vit_b16] [--image_size=384] [--classes=N]`.

Converts any supported checkpoint (`--weights`: an official `.npz` in any spelling, a timm `.safetensors`, a
Hugging Face ViT folder, or a published name together with `--model`) into a Keras `.weights.h5` file
(`--out`), loading it strictly on the way, and prints the sha256 of the source file (for a published name: the
downloaded file, the value to pin into `keras_vit.weights`; for a Hugging Face folder: its
`model.safetensors`) and of the written file, a summary of the architecture and the call that rebuilds the
model around the converted weights. `--model` is the variant the checkpoint must match (default: the
architecture the checkpoint describes).

Example:
    python -m keras_vit.convert --weights=ViT-B_16.npz --out=vit_b16_in21k.weights.h5 --model=vit_b16
"""

import os

from absl import flags

from keras_vit import cli, model_parts
from keras_vit.checkpoints import weights_files
from keras_vit.cli import model as cli_model
from keras_vit.checkpoints.download import sha256


def source_file(source, variant: str | None = None) -> str | None:
    """The file whose sha256 identifies `source`: the file itself, the cached download of a published name, or
    the `model.safetensors` of a Hugging Face folder; None when there is no single such file."""
    from keras_vit.variants import get_variant

    if not weights_files.is_path(source):
        return weights_files.resolve(source, get_variant(variant).name if variant else None).path
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
    from keras_vit.variants import get_variant

    check_destination(destination)
    if variant is not None:
        variant = get_variant(variant).model_name
    model = cli_model.model_from_flag_values(variant, source, image_size=image_size, classes=classes)  # the head as Keras Applications build it (softmax): the file carries it
    cli.progress(f"writing {destination} ...")
    _save(model, destination)
    return model, sha256(destination)


def summary(model, source, destination: str, digest: str, source_path: str | None = None) -> str:
    """The text the CLI prints.

    Args:
        digest: sha256 of the written file.
        source_path: the file `source` was read from (`source_file`), whose sha256 is printed; None: not printed.
    """
    args = model_parts.architecture(model)
    from keras_vit.vit import ARGUMENTS

    unrelated = ("initialization", "classifier_activation")  # how the model starts and its head's activation
    rebuild = ", ".join(f"{k}={v!r}" for k, v in args.items() if v != ARGUMENTS[k] and k not in unrelated)
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


FLAGS = flags.FlagValues()
cli_model.define_weights(FLAGS, help="The checkpoint to convert: a .npz, .safetensors or Hugging Face folder, or a "
                   "published name (then --model is required).")
cli.require(FLAGS, "weights")
flags.register_validator("weights", lambda weights: weights.lower() != "none", "--weights=none has nothing to "
                         "convert: pass a checkpoint file or a published name", flag_values=FLAGS)
NOT_CONVERTIBLE = ("keras_vit.convert converts ViT checkpoints; BiT checkpoints are not supported (a BiT ResNet "
                   "trains from scratch: python -m training.train --model=bit_r50x1).")
cli_model.define_model(FLAGS, keras_files=False, refuse_bit=NOT_CONVERTIBLE, help="The variant the checkpoint must "
                 "match, e.g. vit_b16 (default: the architecture the checkpoint describes; required with a "
                 "published name).")
flags.register_multi_flags_validator(
    ["weights", "model"], lambda given: given["model"] is not None or os.path.exists(given["weights"]),
    "--model is required with a published name: the variant to download it for", flag_values=FLAGS)
cli.define_out(FLAGS, "The .weights.h5 file to write.")
flags.register_validator("out", lambda out: out.endswith(".weights.h5"), "--out must end in `.weights.h5`",
                         flag_values=FLAGS)
cli_model.define_image_size(FLAGS, help="Resolution to build at, resampling the position embedding (default: the "
                      "checkpoint's).")
cli_model.define_classes(FLAGS, help="Classes of a new zero-initialised head (default: the checkpoint's head).")
cli.define_verbose(FLAGS)
cli.name_arguments(FLAGS, destination="out")  # `convert`'s errors in the flags' words


def run(argv):
    model, digest = convert(FLAGS.weights, FLAGS.out, FLAGS.model, FLAGS.image_size, FLAGS.classes)
    source_path = source_file(FLAGS.weights, FLAGS.model)
    print(summary(model, FLAGS.weights, FLAGS.out, digest, source_path))
    return 0


def main(argv=None) -> int:
    """The exit status of `python -m keras_vit.convert` with `argv` (default: `sys.argv[1:]`)."""
    return cli.main(run, FLAGS, argv, usage=__doc__)


if __name__ == "__main__":
    cli.run(run, FLAGS, usage=__doc__)
