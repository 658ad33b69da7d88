"""`python -m keras_vit.inspect`: the paper's section 4.5 figures for a model and a few images.

    python -m keras_vit.inspect --model vit_b16 --weights vit_b16.weights.h5 --images a.jpg b.jpg --out report/
    python -m keras_vit.inspect --model trained.keras --images a.png --out report/

Writes attention_rollout.png, attention_distance.png, position_similarity.png, embedding_filters.png,
summary.json and an index.html that shows them.
"""

import argparse
import os
import sys

import numpy as np


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
    from keras_vit.applications import build_model

    shape = None if image_size is None else (image_size, image_size, 3)
    return build_model(model, weights, input_shape=shape)


def load_images(paths, size):
    """Image files as a float32 array (B, H, W, 3) in [0, 255], resized bilinearly to `size` = (H, W)."""
    from PIL import Image

    images = []
    for path in paths:
        with Image.open(path) as image:
            image = image.convert("RGB").resize((size[1], size[0]), Image.BILINEAR)
            images.append(np.asarray(image, dtype=np.float32))
    return np.stack(images)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m keras_vit.inspect", description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="constructor name (vit_b16, ...) or a .keras file")
    parser.add_argument("--weights", default=None,
                        help="weights for the constructor (omit: random initialisation) or a .weights.h5 file")
    parser.add_argument("--image-size", type=int, default=None, help="input side for constructors")
    parser.add_argument("--images", nargs="+", required=True, help="image files (any format PIL reads)")
    parser.add_argument("--out", required=True, help="output folder")
    args = parser.parse_args(argv)

    from keras_vit.inspect.report import write_report

    model = load_model(args.model, args.weights, args.image_size)
    images = load_images(args.images, model.input_shape[1:3])
    summary = write_report(model, images, args.out, names=[os.path.basename(p) for p in args.images])
    distances = np.asarray(summary["mean_attention_distance"])
    print(f"model {summary['model']}: grid {summary['grid_shape']}, {summary['patch_size']} pixels per patch, "
          f"uniform attention distance {summary['uniform_attention_distance']:.2f} px")
    for layer, row in enumerate(distances):
        print(f"layer {layer + 1:2d}: mean attention distance {row.mean():6.2f} px  (heads: "
              + " ".join(f"{v:.1f}" for v in row) + ")")
    print(f"wrote {os.path.join(args.out, 'index.html')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
