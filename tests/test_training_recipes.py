"""The app's defaults by situation: which recipe a run gets without --recipe, the augmentation that follows
the image size, the translate crop, and a short run per recipe that learns on a tiny generated set."""

import contextlib
import io
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from training import config, data, loop

SMALL = dict(patch_size=4, hidden_size=32, num_layers=2, num_heads=2, mlp_dim=64, show_predictions=0)


@pytest.mark.parametrize("overrides, recipe, crop, flip", [
    ({}, "demo", "inception", False),
    ({"dataset": "digits"}, "demo", "inception", False),
    ({"dataset": "folder:/data/letters", "image_size": 28}, "scratch", "translate", False),
    ({"dataset": "folder:/data/flowers", "image_size": 128}, "scratch", "inception", True),
    ({"dataset": "folder:/data/letters", "image_size": 28, "weights": "run/model.weights.h5"}, "scratch",
     "translate", False),
    ({"dataset": "folder:/data/letters", "image_size": 28, "weights": "imagenet21k"}, "finetune",
     "translate", False),
    ({"dataset": "cifar10", "weights": "augreg_in21k"}, "finetune", "inception", True),
    ({"dataset": "folder:/data/letters", "image_size": 28, "crop": "none"}, "scratch", "none", False),
])
def test_a_run_without_recipe_gets_the_recipe_of_its_situation(overrides, recipe, crop, flip):
    cfg = config.make_config(None, **overrides)
    assert (cfg.recipe, cfg.crop, cfg.flip) == (recipe, crop, flip)
    assert cfg.recipe_reason and json.loads(cfg.to_json())["recipe_reason"] == cfg.recipe_reason
    if crop == "inception" and recipe != "demo":
        assert cfg.crop_min_area >= 0.25  # not the 5% of ImageNet-scale pre-training


@pytest.mark.parametrize("overrides, classifier", [
    ({"dataset": "folder:/data/letters", "image_size": 28}, "gap"),  # a ViT from scratch, recipe chosen
    ({"dataset": "folder:/data/letters", "image_size": 28, "classifier": "token"}, "token"),  # the flag wins
    ({"dataset": "folder:/data/letters", "image_size": 28, "weights": "run/model.weights.h5"}, None),  # the file's
    ({"dataset": "folder:/data/letters", "image_size": 28, "model": "bit_tiny"}, None),  # no ViT head
    ({"dataset": "cifar10", "weights": "augreg_in21k"}, None),  # finetune: the checkpoint's
    ({}, None),  # the demo
])
def test_a_vit_from_scratch_gets_a_global_average_pooled_head_when_the_recipe_is_chosen(overrides, classifier):
    cfg = config.make_config(None, **overrides)
    assert cfg.classifier == classifier
    from_scratch = classifier == "gap" and "classifier" not in overrides and "weights" not in overrides
    assert ("global-average-pooled head" in cfg.recipe_reason) == from_scratch
    if "dataset" in overrides:  # an explicit --recipe takes its values as they are
        assert config.make_config("scratch", **overrides).classifier == overrides.get("classifier")


@pytest.mark.parametrize("classifier", ["gap", "token"])
def test_a_fine_tune_from_ones_own_run_takes_the_head_of_that_run(tmp_path, classifier):
    import keras_vit
    from keras_vit import model_parts
    from training.config import TINY_MODEL
    from training.model import model_from_config

    weights = str(tmp_path / "model.weights.h5")
    keras_vit.ViT(image_size=16, classes=10, classifier=classifier, **TINY_MODEL).save_weights(weights)
    cfg = config.make_config(None, dataset="folder:/data/letters", image_size=16, weights=weights)
    assert cfg.classifier is None  # the file carries its head
    model = model_from_config(cfg, num_classes=3)
    assert model.arguments["classifier"] == classifier and model_parts.head(model).units == 3


def test_an_explicit_recipe_is_taken_as_it_is():
    cfg = config.make_config("finetune", dataset="folder:/data/letters", image_size=28)
    assert (cfg.recipe, cfg.recipe_reason, cfg.crop, cfg.flip, cfg.crop_min_area) == ("finetune", None, "inception",
                                                                                     True, 0.05)


def test_the_scratch_recipe_is_the_small_data_recipe():
    cfg = config.make_config(None, dataset="folder:/data/x", image_size=28)
    assert (cfg.optimizer, cfg.learning_rate, cfg.weight_decay, cfg.label_smoothing) == ("adamw", 2e-3, 0.05, 0.1)
    assert cfg.warmup_steps == 200 and cfg.schedule == "cosine" and cfg.log_every is None and cfg.jit_compile


def test_translate_shifts_by_at_most_its_fraction_of_the_side_and_keeps_the_content():
    image = np.zeros((20, 30, 3), np.uint8)
    image[10, 15] = 255  # one bright pixel in the middle
    ys, xs = np.indices((20, 30))
    centres = set()
    for seed in range(30):
        out = data.train_image(tf.constant(image), (20, 30), tf.constant([seed, 1]), crop="translate", flip=False)
        assert out.shape == (20, 30, 3)
        grey = out.numpy()[..., 0]
        np.testing.assert_allclose(grey.sum(), 255, rtol=1e-4)  # moved (bilinear), not cut or duplicated
        y, x = (ys * grey).sum() / grey.sum(), (xs * grey).sum() / grey.sum()
        assert abs(y - 10) <= data.TRANSLATE * 20 + 1e-4 and abs(x - 15) <= data.TRANSLATE * 30 + 1e-4
        centres.add((round(float(y), 1), round(float(x), 1)))
    assert len(centres) > 20  # shifts in fractions of a pixel
    again = data.train_image(tf.constant(image), (20, 30), tf.constant([3, 1]), crop="translate", flip=False)
    first = data.train_image(tf.constant(image), (20, 30), tf.constant([3, 1]), crop="translate", flip=False)
    np.testing.assert_array_equal(again.numpy(), first.numpy())


def _write_folder(root, per_class, seed):
    """Three classes a small ViT can tell apart: a bright square top-left, bottom-right, or a bright bar."""
    rng = np.random.default_rng(seed)
    for split, count in (("train", per_class), ("test", 20)):
        for label in ("top_left", "bottom_right", "bar"):
            folder = os.path.join(root, split, label)
            os.makedirs(folder, exist_ok=True)
            for i in range(count):
                image = rng.integers(0, 60, (16, 16, 3)).astype(np.uint8)
                y, x = rng.integers(0, 3, size=2)
                if label == "top_left":
                    image[y:y + 6, x:x + 6] = 230
                elif label == "bottom_right":
                    image[10 - y:16 - y, 10 - x:16 - x] = 230
                else:
                    image[6 + y:9 + y, :] = 230
                tf.io.write_file(os.path.join(folder, f"{i}.png"), tf.io.encode_png(image))


def _run(cfg):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        metrics = loop.run(cfg)
    return metrics, out.getvalue()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("three"))
    _write_folder(root, per_class=40, seed=0)
    return root


@pytest.fixture(scope="module")
def scratch_run(folder, tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("scratch"))
    cfg = config.make_config(None, dataset=f"folder:{folder}", image_size=16, steps=80, global_batch_size=16,
                             workdir=workdir, **SMALL)
    return workdir, *_run(cfg)


@pytest.mark.e2e
def test_a_short_scratch_run_learns_and_says_its_recipe(scratch_run):
    workdir, metrics, printed = scratch_run
    assert metrics["eval_accuracy"] >= 0.8  # chance: 1/3
    first = printed.splitlines()[0]
    assert first.startswith("recipe: scratch, chosen for training from scratch on folder:")
    assert "warm-up of 200 steps is over 25% of this 80-step run: clamped to 8 steps" in printed
    assert "step 5/80 (6%)" in printed and "ETA" in printed
    with open(os.path.join(workdir, "model.labels.txt"), encoding="utf-8") as file:
        assert file.read().split() == ["bar", "bottom_right", "top_left"]


@pytest.mark.e2e
def test_a_short_finetune_from_the_scratch_run_learns(scratch_run, folder, tmp_path):
    workdir, _, _ = scratch_run
    cfg = config.make_config(None, dataset=f"folder:{folder}", image_size=16, steps=30, global_batch_size=16,
                             model="tiny", weights=os.path.join(workdir, "model.weights.h5"), workdir=str(tmp_path),
                             export=False, **SMALL)
    metrics, printed = _run(cfg)
    assert printed.startswith("recipe: scratch, chosen for fine-tuning your own model from --weights=")
    assert metrics["eval_accuracy"] >= 0.8


@pytest.mark.e2e
def test_a_short_demo_run_learns(tmp_path):
    cfg = config.make_config(None, steps=300, workdir=str(tmp_path), export=False, **SMALL)
    metrics, printed = _run(cfg)
    assert printed.startswith("recipe: demo, chosen for the embedded digits demo")
    assert metrics["eval_accuracy"] >= 0.5  # chance: 0.1
