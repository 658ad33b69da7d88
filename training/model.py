"""Builds the ViT of a training config: variant or tiny model, overrides, weights, recipe head init.

Example:
    >>> from training.config import make_config
    >>> model = build_model(make_config("demo"), num_classes=10)
    >>> model.output_shape
    (None, 10)
"""

from __future__ import annotations

import keras

import keras_vit
from keras_vit import model_parts


def build_model(cfg, num_classes: int) -> keras.Model:
    """`keras_vit.ViT` for `cfg` (a `training.config.Config`), returning logits (no softmax).

    `cfg.weights` goes to `ViT(weights=...)` (the loader resamples position embeddings to
    `cfg.image_size`, paper section 3.2). `cfg.zero_head` zero-initialises the head (fine-tuning,
    Appendix B.1.1); `cfg.head_bias_init` sets the head bias (-10 in the imagenet21k pre-training).
    """
    name = cfg.model if cfg.model != "tiny" else "vit_tiny"
    model = keras_vit.ViT(
        image_size=cfg.image_size,
        classes=num_classes,
        classifier=cfg.classifier,
        representation_size=cfg.representation_size,
        weights=cfg.weights,
        classifier_activation=None,
        dropout_rate=cfg.dropout_rate,
        drop_path_rate=cfg.drop_path_rate,
        name=name,
        **cfg.model_kwargs(),
    )
    head = model_parts.head(model)
    if cfg.zero_head:
        head.kernel.assign(keras.ops.zeros_like(head.kernel))
        head.bias.assign(keras.ops.zeros_like(head.bias))
    if cfg.head_bias_init:
        head.bias.assign(keras.ops.full_like(head.bias, cfg.head_bias_init))
    return model
