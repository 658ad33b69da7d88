"""A ViT-B/16 SavedModel, fresh from `export_saved_model`, answers request after request through both loaders a
server uses: on main 9a09833 every request after the first failed with AlreadyExistsError (grappler rewrote an
add chain inside the image checks' `tf.scan` into a per-step temporary variable), at ViT-B/16 size only; Ti/16
and S/16 did not show it. Standalone (test_flagship.py checks the same on its fine-tuned model), so that it runs
on its own against any commit."""

import numpy as np
import pytest
import tensorflow as tf

import keras_vit
from export_fixtures import encode
from keras_vit.export import export_saved_model

pytestmark = pytest.mark.journeys

SIZES = (1, 1, 8, 3)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    model = keras_vit.ViT_B16(weights=None, input_shape=(64, 64, 3), classes=3)
    pixels = np.random.default_rng(0).integers(0, 256, (8, 64, 64, 3), dtype=np.uint8)
    expected = model.predict(keras_vit.preprocess_input(pixels.astype("float32")), verbose=0)
    path = export_saved_model(model, tmp_path_factory.mktemp("b16") / "vit_b16", top_k=3)
    return path, [encode(image, "PNG") for image in pixels], expected


def _check(scores, classes, expected):
    np.testing.assert_allclose(np.take_along_axis(expected, np.asarray(classes), axis=1), scores, atol=1e-5)


def test_tf_saved_model_load_answers_every_request(exported):
    path, images, expected = exported
    serve = tf.saved_model.load(path).signatures["serving_default"]
    for size in SIZES:
        reply = serve(images=tf.constant(images[:size]))
        _check(reply["scores"].numpy(), reply["classes"].numpy(), expected[:size])


def test_the_tf1_session_loader_answers_every_request(exported):
    path, images, expected = exported
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        signature = tf.compat.v1.saved_model.loader.load(session, ["serve"], path).signature_def["serving_default"]
        fetch = {key: signature.outputs[key].name for key in ("scores", "classes")}
        for size in SIZES:
            reply = session.run(fetch, {signature.inputs["images"].name: images[:size]})
            _check(reply["scores"], reply["classes"], expected[:size])
