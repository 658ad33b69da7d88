"""`python -m keras_vit`: builds a ViT, prints its summary and parameter count, classifies a generated image.

Runs offline with random weights (no download): a smoke test of an installation.
"""

import sys

import numpy as np

import keras_vit
from keras_vit.applications import CONSTRUCTORS


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    name = argv[0] if argv else "vit_b16"
    if name not in CONSTRUCTORS:
        print(f"Unknown model {name!r}; choose one of {', '.join(CONSTRUCTORS)}", file=sys.stderr)
        return 2
    model = CONSTRUCTORS[name](weights=None)
    model.summary()
    print(f"{name}: {model.count_params():,} parameters")
    height, width = model.input_shape[1:3]
    yy, xx = np.mgrid[0:height, 0:width] / max(height, width)
    image = np.stack([yy, xx, 1 - yy], axis=-1)[None].astype("float32") * 2 - 1  # a colour gradient in [-1, 1]
    probs = model.predict(image, verbose=0)[0]
    top = np.argsort(probs)[::-1][:3]
    print("top-3 classes of a generated image (random weights):", ", ".join(f"{i}: {probs[i]:.4f}" for i in top))
    print(f"keras_vit {keras_vit.__version__} OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
