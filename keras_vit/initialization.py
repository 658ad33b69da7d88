"""How a ViT built without a checkpoint starts: the official code's initialisation, or one for training from scratch.

A loaded checkpoint replaces every weight, so this only matters for `ViT(weights=None)`. Two schemes:

- `"official"`: the Flax code's (google-research/vision_transformer, big_vision): `lecun_normal` patch
  embedding, Glorot q/k/v/out kernels with the fans of the equivalent (D, D) matrix, Glorot MLP kernels, a
  zero head. It was made for pre-training on tens of millions of images, and it is what a published
  checkpoint's new head gets when fine-tuning (zero head).
- `"scratch"` (the default for `weights=None`): smaller patch and attention kernels and a non-zero head. The
  patch embedding is drawn as a Keras `Conv2D` patchify would be (Glorot with the convolution's fans,
  P*P*C in and P*P*D out); the q/k/v/out kernels with Glorot on Keras' default fans of their multi-axis shapes
  (the axes before the last two count as a receptive field: D*heads in and D*head_dim out for q/k/v), which
  is sqrt((heads + head_dim) / 2) times smaller than the official bound; the head as a Keras `Dense`
  (Glorot). On small data trained from scratch this learns markedly better (real MNIST digits in a user's
  `model.fit`: `benchmarks/fit_vs_plain.py`, results in benchmarks/TRAINING.md). The MLP, the biases, the
  class token and the position embedding are the same in both.

Random draws use Keras' global seed (`keras.utils.set_random_seed` makes them repeatable).

Example:
    >>> import keras_vit
    >>> from keras_vit import model_parts
    >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=64, num_layers=2, num_heads=4,
    ...                       mlp_dim=128, classes=10)  # weights=None: initialization="scratch"
    >>> bool(abs(model_parts.head(model).kernel.numpy()).max() > 0)
    True
    >>> official = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=64, num_layers=2, num_heads=4,
    ...                          mlp_dim=128, classes=10, initialization="official")
    >>> float(abs(model_parts.head(official).kernel.numpy()).max())
    0.0
"""

import math

import keras

from keras_vit import model_parts, variants

SCHEMES = variants.choices("initialization")


def glorot_limit(fan_in: int, fan_out: int) -> float:
    """The bound of Glorot's uniform distribution, sqrt(6 / (fan_in + fan_out))."""
    return math.sqrt(6.0 / (fan_in + fan_out))


def keras_fans(shape) -> tuple[int, int]:
    """Keras' fans of a kernel (`keras.initializers` `compute_fans`): the axes before the last two count as a
    receptive field, as for a convolution."""
    if len(shape) < 2:
        return shape[0], shape[0]
    receptive_field = math.prod(shape[:-2])
    return shape[-2] * receptive_field, shape[-1] * receptive_field


def _assign_uniform(variable, limit: float) -> None:
    if "float" not in str(variable.dtype):  # a layer built quantized from a config: the file's weights follow
        return
    variable.assign(keras.random.uniform(variable.shape, -limit, limit, dtype=variable.dtype))


def initialize(model: keras.Model, scheme: str) -> keras.Model:
    """Re-draws `model`'s weights by `scheme` (one of `SCHEMES`) and returns it; `"official"` leaves the
    layers' own initialisation as it is. The model must be a `keras_vit.ViT`; a hybrid's ResNet stem keeps
    its own initialisation.

    Raises:
        ValueError: for an unknown scheme.
    """
    if scheme not in SCHEMES:
        raise ValueError(f"Unknown initialization. Received: initialization={scheme!r}. Known: {', '.join(SCHEMES)}.")
    if scheme == "official":
        return model
    # (P*P*C, D): the fans of a Conv2D (P, P, C, D) over what `Patches` cuts: the image, the stacked shifted images,
    # or a stem's feature map (1x1 patches of a conv stem or an R50; 8x8 of R+Ti/16's root)
    projection = model_parts.patch_encoder(model).projection.kernel
    patch_area = model_parts.patches(model).patch_size ** 2
    _assign_uniform(projection, glorot_limit(projection.shape[0], patch_area * projection.shape[1]))
    for block in model_parts.encoder_blocks(model):
        attention = block.attention
        for dense in (attention.query, attention.key, attention.value, attention.out):
            _assign_uniform(dense.kernel, glorot_limit(*keras_fans(dense.kernel.shape)))
    for head in (model_parts.head(model), model_parts.distillation_head(model)):
        if head is not None:
            _assign_uniform(head.kernel, glorot_limit(*head.kernel.shape))
    return model
