"""`python -m keras_vit.inspect`: the paper's section 4.5 figures for a model and a few images.

    python -m keras_vit.inspect --model=vit_b16 --weights=B16.npz --images=a.jpg --images=b.jpg --out=report/
    python -m keras_vit.inspect --model=trained.keras --images=a.png --out=report/

Writes attention_rollout.png, attention_distance.png, position_similarity.png, embedding_filters.png,
summary.json and an index.html that shows them into `--out`. embedding_filters.png is left out, with a line
saying so in index.html and here, where the patch embedding does not see pixels (a convolutional stem,
tokenizer="conv", or a hybrid's ResNet stem); for shifted patches it draws the filters on the unshifted image.
The images are given with `--images`, once per image. With a variant name `--weights` is required
(`--weights=none` for random weights, whose attention maps mean nothing); a `.keras` model has its own.
"""

import os

import numpy as np
from absl import flags

from keras_vit import cli
from keras_vit.cli import model as cli_model

FLAGS = flags.FlagValues()
NOT_A_VIT = ("keras_vit.inspect draws a ViT's attention maps, attention distances, position embeddings and "
             "patch-embedding filters; a BiT ResNet has none of them (no attention, no patches): inspect a ViT "
             "(e.g. vit_b16) or a hybrid (e.g. vit_r50_b16, vit_r26_s32) instead.")
cli_model.define_model(FLAGS, required=True, refuse_bit=NOT_A_VIT)
cli_model.define_weights(FLAGS, required=True, purpose="the attention maps and distances")
cli_model.define_image_size(FLAGS)
cli_model.define_classes(FLAGS)
flags.DEFINE_multi_string("images", None, "An image file (any format PIL reads), e.g. --images=a.jpg "
                          "--images=b.jpg for two", flag_values=FLAGS)  # absl adds "; repeat this option ..."
cli.require(FLAGS, "images")
cli.take_positional_as(FLAGS, "images")  # `python -m keras_vit.inspect a.jpg`: says --images=a.jpg


def _missing_image(paths):
    missing = [path for path in paths if not os.path.isfile(path)]
    if missing:
        raise flags.ValidationError(f"The image file does not exist: {missing[0]}")
    return True


flags.register_validator("images", _missing_image, flag_values=FLAGS)
cli.define_out(FLAGS, "The output folder (created if missing).")
cli.define_verbose(FLAGS)


def load_model(model, weights=None, image_size=None):
    """A keras_vit model from a constructor name (`vit_b16`) or a `.keras` file, with optional weights.

    Args:
        model: a name of `keras_vit.applications.CONSTRUCTORS` or a path to a `.keras` file.
        weights: optional weights for the constructor (see `keras_vit.ViT`), or a `.weights.h5` file
            loaded into the `.keras` model.
        image_size: optional input side for constructors (default 224).

    Returns:
        A `keras.Model`.
    """
    return cli_model.model_from_flag_values(model, weights, image_size=image_size)


def load_images(paths, size):
    """Image files as a float32 array (B, H, W, 3) in [0, 255], resized bilinearly to `size` = (H, W)."""
    from keras_vit import extras

    Image = extras.require("PIL.Image", "inspect", "reading the images of keras_vit.inspect")

    images = []
    for path in paths:
        _check_decoding_work(path)
        with Image.open(path) as image:
            image = image.convert("RGB").resize((size[1], size[0]), Image.BILINEAR)
            images.append(np.asarray(image, dtype=np.float32))
    return np.stack(images)


def _check_decoding_work(path):
    """Refuses, before decoding, an image whose decoding would do more work than the served model allows (the
    scans of a JPEG, the blocks of a GIF, a PNG's compressed data against its raw size:
    `keras_vit.export.limits.decoding_problem`, raised by the `KERAS_VIT_MAX_*` environment variables)."""
    from keras_vit.export.limits import decoding_problem, environment_limits

    with open(path, "rb") as f:
        problem = decoding_problem(f.read(), environment_limits())
    if problem:
        raise ValueError(f"The image {path} cannot be read within the decoding limits: {problem}. Re-encode it (e.g. "
                         f"as a baseline JPEG or a plain PNG), or raise the limit as said. Received: --images={path}")


def run(argv):
    paths = FLAGS.images
    from keras_vit.inspect.report import write_report

    model = cli_model.model_from_flags(FLAGS)
    from keras_vit import model_parts

    if not any(layer.name == model_parts.PATCH_ENCODER for layer in model.layers):  # e.g. a BiT .keras file
        raise ValueError(f"{NOT_A_VIT} Received: model {model.name!r} ({FLAGS.model})")
    cli.progress(f"reading {len(paths)} image{'s' if len(paths) > 1 else ''} ...")
    images = load_images(paths, model.input_shape[1:3])
    cli.progress(f"computing attention and writing the report to {FLAGS.out} ...")
    summary = write_report(model, images, FLAGS.out, names=[os.path.basename(p) for p in paths])
    distances = np.asarray(summary["mean_attention_distance"])
    print(f"model {summary['model']}: grid {summary['grid_shape']}, {summary['patch_size']} pixels per patch, "
          f"uniform attention distance {summary['uniform_attention_distance']:.2f} px")
    for layer, row in enumerate(distances):
        print(f"layer {layer + 1:2d}: mean attention distance {row.mean():6.2f} px  (heads: "
              + " ".join(f"{v:.1f}" for v in row) + ")")
    for name, why in summary["left_out"].items():
        print(f"{name} is left out: {why}")
    print(f"wrote {os.path.join(FLAGS.out, 'index.html')}")
    return 0


def main(argv=None) -> int:
    """The exit status of `python -m keras_vit.inspect` with `argv` (default: `sys.argv[1:]`)."""
    return cli.main(run, FLAGS, argv, usage=__doc__)


if __name__ == "__main__":
    cli.run(run, FLAGS, usage=__doc__)
