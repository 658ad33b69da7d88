"""`python -m keras_vit`: builds a ViT, prints its summary and parameter count, classifies an image.

    python -m keras_vit                                   # ViT-B/16, random weights: offline, no download
    python -m keras_vit --model=vit_ti16 --image_size=64
    python -m keras_vit --model=vit_b16 --weights=imagenet --image=cat.jpg
    python -m keras_vit --model=runs/x/model.keras --image=square.png

Without `--weights` (default `none`) it runs offline with random weights: a smoke test of an installation.
The image is `--image` (any format PIL reads, resized to the model's input; Pillow is the `image` extra) or a
generated colour gradient. The top-3 classes are printed with their probabilities: a softmax of the logits
for a head without activation (the training app saves `model.keras` so), said on the line.
"""

import os

import numpy as np
from absl import flags

from keras_vit import cli
from keras_vit.cli import model as cli_model

FLAGS = flags.FlagValues()
cli_model.define_model(FLAGS, default="vit_b16")
cli_model.define_weights(FLAGS, default="none")
cli_model.define_image_size(FLAGS)
cli_model.define_classes(FLAGS)
flags.DEFINE_string("image", None, "An image file to classify (default: a generated colour gradient).",
                    flag_values=FLAGS)
flags.register_validator("image", lambda image: image is None or os.path.isfile(image),
                         "The image file does not exist.", flag_values=FLAGS)
cli.define_verbose(FLAGS)


def _image(model, path):
    """(1, H, W, 3) float32: the file, or a colour gradient; in [-1, 1] (0..255 for a model with its own
    `preprocessing` layer)."""
    height, width = model.input_shape[1:3]
    if path is None:
        yy, xx = np.mgrid[0:height, 0:width] / max(height, width)
        pixels = np.stack([yy, xx, 1 - yy], axis=-1) * 255.0
    else:
        Image = _pillow()
        with Image.open(path) as image:
            pixels = np.asarray(image.convert("RGB").resize((width, height), Image.BILINEAR), dtype=np.float64)
    from keras_vit import preprocessing

    return preprocessing.model_inputs(model, pixels)[None].astype("float32")


def _pillow():
    """PIL.Image, or `keras_vit.extras.MissingExtra` naming the `image` extra."""
    from keras_vit import extras

    return extras.require("PIL.Image", "image", "reading --image")


def _labels(classes):
    from keras_vit.export import labels

    keras_file = cli_model.keras_file_of(FLAGS)
    sidecar = labels.sidecar_path(keras_file) if keras_file else None
    if sidecar and os.path.isfile(sidecar):
        found = labels.read(sidecar)
        if len(found) == classes:
            return found
    if FLAGS.weights.lower() != "none" and (own := labels.huggingface_labels(FLAGS.weights, classes)):
        return own  # a Hugging Face checkpoint's own id2label
    if FLAGS.weights.lower() != "none" or keras_file:
        return labels.default_labels(classes)
    return None  # random weights: the class names would only mislead


def probabilities(model, outputs):
    """`(values, what they are)` for the class outputs of `model`: a softmax head's as they are; those of a
    head without activation (logits, as in the training app's `model.keras`) through a softmax, as the
    exported serving signature does; any other head's (or a model without a `head` layer's) as they are."""
    from keras_vit import model_parts

    activation = model_parts.output_activation(model)
    if activation == "softmax":
        return outputs, "probabilities"
    if activation == "linear":
        exp = np.exp(outputs - outputs.max(axis=-1, keepdims=True))
        return exp / exp.sum(axis=-1, keepdims=True), "probabilities: a softmax of the model's logits"
    return outputs, f"the {activation} outputs of the head" if activation else "the model's outputs"


def run(argv):
    import keras_vit

    if FLAGS.image is not None:
        _pillow()  # a missing Pillow stops the run before the model is built
    model = cli_model.model_from_flags(FLAGS)
    model.summary()
    print(f"{model.name}: {model.count_params():,} parameters")
    outputs = np.asarray(model.predict(_image(model, FLAGS.image), verbose=0))[0]
    if outputs.ndim != 1:
        print(f"output shape {tuple(model.output_shape)}: features, no classes")
    else:
        probs, kind = probabilities(model, outputs.astype(np.float64))
        names = _labels(len(probs))
        top = np.argsort(probs)[::-1][:3]
        what = FLAGS.image or "a generated image"
        weights = "random weights" if FLAGS.weights.lower() == "none" and not cli_model.keras_file_of(FLAGS) else "trained"
        print(f"top-3 classes of {what} ({weights}):", ", ".join(
            f"{i}{f' ({names[i]})' if names else ''}: {probs[i]:.4f}" for i in top), f"({kind})")
    print(f"keras_vit {keras_vit.__version__} OK")
    return 0


def main(argv=None) -> int:
    """The exit status of `python -m keras_vit` with `argv` (default: `sys.argv[1:]`)."""
    return cli.main(run, FLAGS, argv, usage=__doc__)


if __name__ == "__main__":
    cli.run(run, FLAGS, usage=__doc__)
