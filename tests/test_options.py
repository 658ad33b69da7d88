"""Every architecture option of `keras_vit.ViT` through the same checks, one row each (`OPTION_CASES`), as timm's
registry test runs every model: it builds, every trainable weight gets a gradient, the model reloads from its own
`.keras` file through `ViT(weights=...)` with equal outputs, its training-app flag exists, and docs/MODEL.md
documents it. A new option's test is one row; the per-option test files keep only what is specific to them."""

import dataclasses
import os

import numpy as np
import pytest
import tensorflow as tf

import keras_vit
from training.config import Config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = dict(image_size=16, patch_size=4, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32, classes=3,
            classifier_activation=None)


SHIFT_INVARIANT = "attention/key/bias"
"""A key bias adds the same q.b to every logit of a query's row: the softmax, and so the loss, does not change."""


@dataclasses.dataclass(frozen=True)
class OptionCase:
    name: str
    arguments: dict
    flag: str | None  # the training app's flag, or None where the app has none (the reason in `why`)
    documented: str  # what docs/MODEL.md says of it, verbatim
    why: str = ""


OPTION_CASES = [
    OptionCase("tokenizer=patches", dict(tokenizer="patches"), "tokenizer", "`tokenizer`"),
    OptionCase("tokenizer=conv", dict(tokenizer="conv"), "tokenizer", '`tokenizer="conv"`'),
    OptionCase("tokenizer=shifted_patches", dict(tokenizer="shifted_patches"), "tokenizer",
               '`tokenizer="shifted_patches"`'),
    OptionCase("position_embedding=sincos2d", dict(position_embedding="sincos2d"), "position_embedding",
               '`position_embedding="sincos2d"`'),
    OptionCase("classifier=gap", dict(classifier="gap"), "classifier", 'classifier="gap"'),
    OptionCase("locality_attention", dict(locality_attention=True), "locality_attention", "`locality_attention=True`"),
    OptionCase("qkv_bias=False", dict(qkv_bias=False), "qkv_bias", "`qkv_bias=False`"),
    OptionCase("representation_size", dict(representation_size=8), "representation_size", "`representation_size`"),
    OptionCase("hybrid", dict(hybrid=dict(block_units=(1,), width=8, groups=4), patch_size=4), None, "`hybrid=`",
               why="a hybrid is chosen by --model (a published hybrid variant), not a flag"),
    OptionCase("include_preprocessing", dict(include_preprocessing=True), None, "`include_preprocessing=True`",
               why="the app scales images in its pipeline"),
    OptionCase("distillation_token", dict(distillation_token=True), "distillation_token", "`distillation_token=True`"),
]


@pytest.fixture(scope="module")
def model_doc():
    with open(os.path.join(ROOT, "docs", "MODEL.md"), encoding="utf-8") as file:
        return file.read()


@pytest.mark.parametrize("case", OPTION_CASES, ids=lambda case: case.name)
def test_every_option(case, tmp_path, model_doc):
    model = keras_vit.ViT(**{**TINY, **case.arguments})
    rng = np.random.default_rng(1)  # random weights everywhere: no zero-initialised layer blocks a gradient
    for weight in model.weights:
        weight.assign(rng.normal(0, 0.3, weight.shape).astype(weight.dtype))
    images = np.random.default_rng(0).uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(images, training=True) * np.array([1.0, -2.0, 0.5], "float32"))
    gradients = tape.gradient(loss, model.trainable_weights)
    dead = [w.path for w, g in zip(model.trainable_weights, gradients)
            if (g is None or not np.any(tf.convert_to_tensor(g).numpy())) and not w.path.endswith(SHIFT_INVARIANT)]
    assert not dead, f"{case.name}: weights without a gradient: {dead}"
    path = str(tmp_path / "own.keras")
    model.save(path)
    reloaded = keras_vit.ViT(weights=path)
    np.testing.assert_array_equal(reloaded.predict(images, verbose=0), model.predict(images, verbose=0))
    for key, value in case.arguments.items():
        if key != "hybrid":
            assert reloaded.arguments[key] == value, key
    fields = {field.name for field in dataclasses.fields(Config)}
    assert case.flag in fields if case.flag else case.why, case.name
    assert case.documented in model_doc, f"docs/MODEL.md does not document {case.documented}"
