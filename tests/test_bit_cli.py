"""The BiT ResNet baseline by name: its rows of `keras_vit.applications.CONSTRUCTORS`, the CLIs' `--model`
(built, or refused with one clear line where a tool needs a ViT), and the training app's `--model=bit_r50x1` /
`--model=bit_tiny` (trained from scratch; ViT-only flags refused)."""

import os

import keras
import numpy as np
import pytest
from absl import flags

import keras_vit
from keras_vit import applications, cli, model_parts, variants
from keras_vit.cli import model as cli_model
from training import config as config_lib


def test_the_table_resolves_the_bit_names():
    assert applications.CONSTRUCTORS["bit_r50x1"] is keras_vit.BiT_R50x1
    assert set(applications.BIT_CONSTRUCTORS) == set(variants.BIT_MODELS) == {"bit_r50x1"}  # cli's keras-free copy
    for spelling in ("bit_r50x1", "BiT-R50x1", "BiT_R50x1", "bitr50x1"):
        assert variants.bit_name(spelling) == "bit_r50x1" and applications.is_bit(spelling)
    for other in ("vit_b16", "tiny", "x.keras", None):
        assert variants.bit_name(other) is None
    model = applications.model_from_name("BiT-R50x1", input_shape=(32, 32, 3), classes=3, classifier_activation=None)
    assert model.name == "bit_r50x1" and model.output_shape == (None, 3)
    assert model.count_params() == 23_500_352 + 2048 * 3 + 3  # ResNet-50 v2 body + a 3-class head


@pytest.mark.e2e  # a full-size ResNet-50 built three times
def test_a_bit_built_by_name_round_trips_through_keras_in_safe_mode(tmp_path):
    model = cli_model.model_from_flag_values("bit_r50x1", "none", image_size=32, classes=4)
    head = model_parts.head(model)
    head.kernel.assign(np.random.default_rng(0).normal(0, 0.05, head.kernel.shape))  # else a uniform output
    images = np.random.default_rng(1).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    expected = keras.ops.convert_to_numpy(model(images))
    path = str(tmp_path / "bit.keras")
    model.save(path)
    restored = keras.saving.load_model(path)  # safe mode: no safe_mode=False needed
    np.testing.assert_allclose(keras.ops.convert_to_numpy(restored(images)), expected, atol=1e-5)
    again = cli_model.model_from_flag_values(path)  # the CLIs' `--model=bit.keras`
    np.testing.assert_allclose(keras.ops.convert_to_numpy(again(images)), expected, atol=1e-5)


def test_vit_arguments_and_checkpoints_are_refused_by_the_bit_constructor():
    with pytest.raises(ValueError, match=r"'patch_size' is not an argument of the BiT ResNet 'bit_r50x1'"):
        keras_vit.BiT_R50x1(patch_size=16)
    with pytest.raises(ValueError, match=r"--pooling=token applies to ViT models only.*--model='BiT-R50x1'"):
        cli_model.model_from_flag_values("BiT-R50x1", "none", pooling="token")
    with pytest.raises(ValueError, match=r"--weights='imagenet21k' is a published ViT checkpoint"):
        cli_model.model_from_flag_values("bit_r50x1", "imagenet21k")


def test_fewshot_takes_the_mean_features_of_a_bit():
    from training import fewshot

    model = fewshot.load_representation_model("bit_r50x1", image_size=32)
    assert model.output_shape == (None, 2048)


@pytest.mark.parametrize(
    "tool, args, message",
    [
        ("keras_vit.inspect.__main__", ["--model=bit_r50x1", "--weights=none", "--out=OUT", "--images=IMAGE"],
         "keras_vit.inspect draws a ViT's attention maps"),
        ("keras_vit.convert", ["--model=bit_r50x1", "--weights=imagenet21k", "--out=OUT/x.weights.h5"],
         "BiT checkpoints are not supported"),
        ("keras_vit.export.__main__", ["--model=bit_r50x1", "--weights=imagenet", "--out=OUT"],
         "--weights='imagenet' is a published ViT checkpoint"),
        ("keras_vit.export.__main__", ["--model=BiT-R50x1", "--weights=none", "--pooling=token", "--out=OUT"],
         "--pooling=token applies to ViT models only"),
        ("training.fewshot", ["--model=bit_r50x1", "--weights=none", "--classifier=gap"],
         "--classifier=gap applies to ViT models only"),
        ("keras_vit.__main__", ["--model=bit_zz"], "bit_r50x1"),  # listed among the known models
    ],
)
def test_the_clis_refuse_what_a_bit_cannot_do_with_one_line(tool, args, message, tmp_path, capsys):
    import importlib

    image = tmp_path / "a.png"
    image.write_bytes(b"")
    args = [a.replace("OUT", str(tmp_path / "out")).replace("IMAGE", str(image)) for a in args]
    assert importlib.import_module(tool).main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "out").exists()


def test_inspect_refuses_a_bit_keras_file(tmp_path, capsys):
    from keras_vit.inspect.__main__ import main

    path = str(tmp_path / "bit.keras")
    keras_vit.BiT(block_units=(1,), width=8, groups=4, input_shape=(16, 16, 3), classes=2).save(path)
    image = tmp_path / "a.png"
    from PIL import Image

    Image.new("RGB", (16, 16)).save(image)
    assert main([f"--model={path}", f"--out={tmp_path / 'out'}", f"--images={image}"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: keras_vit.inspect draws a ViT's attention maps") and err.count("\n") == 1, err


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(patch_size=16), "--patch_size=16 applies to ViT models only. Received: --model=bit_r50x1"),
        (dict(num_heads=4), "--num_heads=4 applies to ViT models only. Received: --model=bit_r50x1"),
        (dict(qkv_bias=False), "--qkv_bias=False applies to ViT models only"),
        (dict(classifier="gap"), "--classifier=gap applies to ViT models only"),
        (dict(dropout_rate=0.1), "--dropout_rate=0.1 applies to ViT models only"),
        (dict(weights="imagenet21k"), "--weights=imagenet21k is a published ViT checkpoint"),
    ],
)
def test_the_training_config_refuses_vit_only_fields_with_a_bit(overrides, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
        config_lib.make_config("demo", model="bit_r50x1", **overrides)


def test_a_bit_recipe_conflict_names_the_recipe():
    with pytest.raises(ValueError, match=r"--dropout_rate=0.1 .* \(set by --recipe=pretrain_i21k"):
        config_lib.make_config("pretrain_i21k", model="bit_r50x1", dataset="cifar10")


def test_the_training_app_builds_bit_models_from_scratch():
    from training.experiments.models import MODELS
    from training.model import TINY_BIT, model_from_config

    assert MODELS["bit"].arguments == TINY_BIT  # --model=bit_tiny is the experiments' BiT
    model = model_from_config(config_lib.make_config("demo", model="bit_r50x1", image_size=32), num_classes=3)
    assert model.name == "bit_r50x1" and model.output_shape == (None, 3)
    assert model_parts.head(model).activation is keras.activations.linear  # logits
    tiny = model_from_config(config_lib.make_config("demo", model="bit_tiny", head_bias_init=-10.0), num_classes=10)
    assert tiny.name == "bit_tiny" and np.all(keras.ops.convert_to_numpy(model_parts.head(tiny).bias) == -10)


def test_a_vit_only_flag_with_a_bit_is_one_error_line_of_the_app(tmp_path, capsys):
    from training import train

    try:
        status = cli.main(train.main, flags.FLAGS, ["--model=bit_r50x1", "--patch_size=16",
                                                    f"--workdir={tmp_path / 'run'}"],
                          usage=train.__doc__, tensorflow=True)
    finally:
        flags.FLAGS.unparse_flags()
    lines = capsys.readouterr().err.strip().splitlines()
    assert status != 0 and lines == ["error: --patch_size=16 applies to ViT models only. Received: --model=bit_r50x1"]
    assert not (tmp_path / "run").exists()


@pytest.mark.e2e  # moved from the default tier (its time budget)
def test_a_tiny_bit_trains_through_the_app_and_writes_checkpoints_and_exports(tmp_path, capsys):
    """The default tier's one end-to-end run: train -> checkpoint -> export -> classify with the SavedModel."""
    from training import train

    args = [f"--workdir={tmp_path}", "--model=bit_tiny", "--image_size=16", "--steps=3", "--checkpoint_every=3",
            "--global_batch_size=8", "--log_every=1", "--show_predictions=2", "--jit_compile=false"]
    try:  # the app in this process (python -m training.train would import TensorFlow again: seconds)
        status = cli.main(train.main, flags.FLAGS, args, usage=train.__doc__, tensorflow=True)
    finally:
        flags.FLAGS.unparse_flags()
    out, err = capsys.readouterr()
    assert status == 0, err[-3000:]
    assert "training bit_tiny (128,666 parameters)" in out
    assert "classified 2 test images with the exported model" in out  # served by the SavedModel it wrote
    assert any(line.startswith("final: eval_accuracy=") for line in out.splitlines())
    assert os.path.exists(tmp_path / "checkpoints" / "ckpt-3.index")
    assert os.path.exists(tmp_path / "export" / "1" / "saved_model.pb")
    assert os.path.exists(tmp_path / "model.weights.h5")
    assert config_lib.Config.from_json((tmp_path / "config.json").read_text()).model == "bit_tiny"
    model = keras.saving.load_model(tmp_path / "model.keras")  # safe mode
    assert model.name == "bit_tiny" and model.output_shape == (None, 10)
    assert "root_conv" in [layer.name for layer in model.layers]
