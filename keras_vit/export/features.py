"""SavedModel of a feature extractor (`keras_vit.feature_extractor`): one `features` signature (also
`serving_default`), float32 pixels (batch, H, W, 3) in 0..255 in, the extractor's named feature maps out (float32),
with the [-1, 1] scaling, the shape, batch-size and pixel-range checks of the classifier's float signature.

Example:
    >>> import keras_vit
    >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=2,
    ...                       mlp_dim=64, include_top=False)
    >>> extractor = keras_vit.feature_extractor(model, blocks=(-1,))
    >>> export(extractor, "/tmp/keras_vit_doc/features", version=1, overwrite=True)
    '/tmp/keras_vit_doc/features/1'
"""

import logging

import tensorflow as tf

from keras_vit.export import signatures, versions
from keras_vit.export.limits import DEFAULT_MAX_BATCH_SIZE, Limits

logger = logging.getLogger(__name__)


def export(extractor, export_base, version=None, max_batch_size=DEFAULT_MAX_BATCH_SIZE, preprocessing="auto",
           overwrite=False) -> str:
    """Writes `extractor` as a SavedModel at `export_base/<version>/` and returns that folder.

    Raises:
        ValueError: a model without dict outputs or of another input, a bad limit, or an existing version.
    """
    from keras_vit import preprocessing as vit_preprocessing

    if not isinstance(extractor.output, dict):
        raise ValueError(f"export_features takes a model with named outputs (keras_vit.feature_extractor). Received: "
                         f"{extractor.name!r} with outputs {extractor.output_shape}")
    shape = tuple(extractor.input_shape)
    if len(shape) != 4 or shape[3] != 3 or not all(isinstance(size, int) for size in shape[1:3]):
        raise ValueError(f"The extractor must take images of a fixed size, (batch, height, width, 3). Received "
                         f"input_shape={shape}")
    if preprocessing not in signatures.PREPROCESSING:
        raise ValueError(f"`preprocessing` must be one of {signatures.PREPROCESSING}. Received: "
                         f"preprocessing={preprocessing!r}")
    limits = Limits(max_batch_size=max_batch_size)
    scale = preprocessing == "vit" or (preprocessing == "auto" and not vit_preprocessing.scales_own_input(extractor))
    spec = signatures.ModelSpec(height=shape[1], width=shape[2], classes=None, activation=None, scale_inputs=scale)
    version, path = versions.resolve(str(export_base), version, overwrite)

    def features(images):
        with tf.control_dependencies(signatures.check_pixels(images, spec, limits)):
            images = tf.ensure_shape(tf.identity(images), [None, spec.height, spec.width, 3])
        if spec.scale_inputs:
            images = vit_preprocessing.to_model_range(images)
        return {name: tf.cast(value, tf.float32) for name, value in extractor(images, training=False).items()}

    root = tf.Module(name="keras_vit_features")
    root.features = tf.function(features, input_signature=[
        tf.TensorSpec([None, spec.height, spec.width, 3], tf.float32, name="images")])
    concrete = root.features.get_concrete_function()
    root.model_variables = list({id(v): v for v in concrete.variables}.values())
    with versions.staged(path) as staging:
        tf.saved_model.save(root, staging, signatures={"serving_default": concrete, "features": concrete})
    logger.info("Exported the feature extractor %s to %s", extractor.name, path)
    return path
