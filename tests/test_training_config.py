"""training.config, training.optim: recipes as data, flag precedence, validation, the learning-rate schedule."""

import dataclasses
import json
import math

import numpy as np
import pytest

from training import config as config_lib


def test_finetune_recipe_has_the_papers_values():
    # Appendix B.1.1: SGD momentum 0.9, cosine, 500 warm-up steps, no weight decay, clip 1, 384, zero head.
    cfg = config_lib.make_config("finetune", dataset="cifar10")
    assert (cfg.optimizer, cfg.momentum, cfg.schedule, cfg.warmup_steps) == ("sgd", 0.9, "cosine", 500)
    assert (cfg.weight_decay, cfg.grad_clip_norm, cfg.image_size, cfg.zero_head) == (0.0, 1.0, 384, True)
    assert cfg.global_batch_size == 512


def test_pretrain_recipe_has_the_papers_values():
    # Table 3 / section 4.1 (ImageNet-21k): Adam(0.9, 0.999), batch 4096, 10k warm-up, linear decay,
    # weight decay 0.03, clip 1, dropout 0.1, representation_size = D, head bias -10.
    cfg = config_lib.make_config("pretrain_i21k", dataset="imagenet2012", model="vit_b16")
    assert (cfg.optimizer, cfg.beta_1, cfg.beta_2, cfg.global_batch_size) == ("adam", 0.9, 0.999, 4096)
    assert (cfg.warmup_steps, cfg.schedule, cfg.weight_decay, cfg.grad_clip_norm) == (10_000, "linear", 0.03, 1.0)
    assert (cfg.dropout_rate, cfg.representation_size, cfg.head_bias_init) == (0.1, 768, -10.0)


def test_augreg_recipe_uses_randaugment_and_mixup():
    cfg = config_lib.make_config("augreg", dataset="imagenet2012")
    assert cfg.randaugment == (2, 15) and cfg.mixup == 0.2 and cfg.optimizer == "adamw" and cfg.weight_decay == 0.1


# Every recipe's resolved values where they differ from the Config defaults, typed from the code before the recipes
# shared their common values (issue 16): a refactor of RECIPES must keep them (the paper's values are facts).
RESOLVED = {  # make_config(recipe, dataset="cifar10") (the demo: its digits), where it differs from DEFAULTS
    "scratch": dict(recipe="scratch", dataset="cifar10", image_size=32, crop="translate", flip=False, epochs=30,
                    optimizer="adamw", learning_rate=2e-3, warmup_steps=200, weight_decay=0.05, label_smoothing=0.1,
                    jit_compile=True),
    "demo": dict(crop_min_area=0.7, flip=False, steps=2000, global_batch_size=64, warmup_steps=100, jit_compile=True),
    "pretrain_i21k": dict(recipe="pretrain_i21k", model="vit_b16", representation_size=768, head_bias_init=-10.0,
                          dropout_rate=0.1, dataset="cifar10", image_size=224, epochs=90, global_batch_size=4096,
                          schedule="linear", warmup_steps=10_000, weight_decay=0.03, checkpoint_every=1000,
                          initialization="official"),
    "finetune": dict(recipe="finetune", model="vit_b16", zero_head=True, dataset="cifar10", image_size=384,
                     steps=10_000, global_batch_size=512, optimizer="sgd", learning_rate=0.01, warmup_steps=500,
                     checkpoint_every=1000, initialization="official"),
    "augreg": dict(recipe="augreg", model="vit_b16", dataset="cifar10", image_size=224, randaugment=(2, 15),
                   mixup=0.2, epochs=300, global_batch_size=4096, optimizer="adamw", warmup_steps=10_000,
                   weight_decay=0.1, checkpoint_every=1000, initialization="official"),
}


def test_every_recipe_survives_config_json():
    for recipe in config_lib.RECIPES:
        cfg = config_lib.make_config(recipe, **({} if recipe == "demo" else {"dataset": "cifar10"}))
        assert config_lib.Config.from_json(cfg.to_json()) == cfg


@pytest.mark.parametrize("recipe", sorted(RESOLVED))
def test_each_recipe_resolves_to_its_pinned_values(recipe):
    assert list(config_lib.RECIPES) == ["scratch", "demo", "pretrain_i21k", "finetune", "augreg"]  # --recipe's order
    overrides = {} if recipe == "demo" else {"dataset": "cifar10"}
    defaults = {f.name: f.default for f in dataclasses.fields(config_lib.Config)}
    resolved = dataclasses.asdict(config_lib.make_config(recipe, **overrides))
    assert {k: v for k, v in resolved.items() if v != defaults[k]} == RESOLVED[recipe]


def test_each_config_field_is_the_flag_of_its_name_type_and_help():
    """Every field with a help text is the flag of its name, whose type follows the field's annotation (`kind` or
    `enum_values` where the metadata says it), whose default is None (the recipe's) and whose help says a default."""
    import typing

    from absl import flags

    from training import train

    annotations = typing.get_type_hints(config_lib.Config)
    kinds = {str: "string", int: "int", float: "float", bool: "bool"}
    flagged = [f for f in dataclasses.fields(config_lib.Config) if f.metadata.get("help")]
    assert [field.name for field, _ in train._config_fields()] == [f.name for f in flagged]
    assert {f.name for f in dataclasses.fields(config_lib.Config)} - {f.name for f in flagged} == {
        "recipe", "recipe_reason", "teacher_sha256"}  # set by the app: why the recipe, the teacher's content
    for field in flagged:
        flag, meta = flags.FLAGS[field.name], field.metadata
        base = next(t for t in typing.get_args(annotations[field.name]) or (annotations[field.name],)
                    if t is not type(None))
        expected = "string enum" if "enum_values" in meta else meta.get("kind") or kinds[base]
        assert flag.flag_type() == expected, field.name
        assert meta["help"] in flag.help and flag.default is None and "default" in flag.help, field.name
        assert getattr(flag.parser, "enum_values", None) == meta.get("enum_values"), field.name
        assert getattr(flag.parser, "lower_bound", None) == meta.get("lower_bound"), field.name
    assert flags.FLAGS["recipe"].parser.enum_values == list(config_lib.RECIPES)


def test_the_lists_of_fields_by_role_are_computed_from_the_declarations():
    assert config_lib.OPTIMISATION_FIELDS == ("steps", "epochs", "learning_rate", "beta_1", "beta_2", "momentum",
                                              "schedule", "warmup_steps", "weight_decay", "grad_clip_norm",
                                              "label_smoothing", "teacher", "teacher_sha256", "distillation",
                                              "distillation_alpha", "distillation_tau")
    assert {"log_every", "workdir", "recipe_reason", "rematerialize"} <= set(config_lib.RESUMABLE_FIELDS)
    assert not set(config_lib.RESUMABLE_FIELDS) & set(config_lib.OPTIMISATION_FIELDS)
    assert "initialization" in config_lib.VIT_ARGUMENTS and "initialization" not in config_lib.VIT_ONLY_FIELDS
    import keras_vit

    # Every ViT argument of the config is a `keras_vit.ViT` argument of the same name.
    import inspect

    assert set(config_lib.VIT_ARGUMENTS) <= set(inspect.signature(keras_vit.ViT).parameters)


def test_explicit_values_override_the_recipe_and_steps_replace_epochs():
    cfg = config_lib.make_config("augreg", dataset="cifar10", learning_rate=0.5, steps=7)
    assert cfg.learning_rate == 0.5 and cfg.steps == 7 and cfg.epochs is None
    cfg = config_lib.make_config("demo", epochs=2.0)
    assert cfg.steps is None and cfg.train_steps(num_train_examples=1000) == math.ceil(2 * 1000 / 64)


def test_model_overrides_apply_on_top_of_the_variant():
    cfg = config_lib.make_config("demo", model="vit_ti16", num_layers=2, patch_size=4)
    assert cfg.model_kwargs() == dict(patch_size=4, hidden_size=192, num_layers=2, num_heads=3, mlp_dim=768,
                                      dropout_rate=0.0, drop_path_rate=0.0, rematerialize=True)


def test_qkv_bias_flag_reaches_the_built_model():
    from absl import flags

    from keras_vit import model_parts
    from training import train
    from training.model import model_from_config

    assert "qkv_bias" not in config_lib.make_config("demo").model_kwargs()  # None: the variant's (biases)
    flags.FLAGS.unparse_flags()
    flags.FLAGS(["train", "--recipe=demo", "--qkv_bias=false"])
    try:
        cfg = train.config_from_flags()
    finally:
        flags.FLAGS.unparse_flags()
    assert cfg == config_lib.make_config("demo", qkv_bias=False) and cfg.model_kwargs()["qkv_bias"] is False
    model = model_from_config(config_lib.make_config("demo", qkv_bias=False, num_layers=1), num_classes=3)
    assert model_parts.architecture(model)["qkv_bias"] is False
    attention = model_parts.encoder_blocks(model)[0].attention
    assert [p.bias for p in (attention.query, attention.key, attention.value)] == [None] * 3


def test_initialization_scratch_by_default_official_in_the_paper_recipes():
    from keras_vit import model_parts
    from training.model import model_from_config

    assert "initialization" not in config_lib.make_config("demo").model_kwargs()  # keras_vit's default: scratch
    for recipe in ("pretrain_i21k", "finetune", "augreg"):
        assert config_lib.RECIPES[recipe]["initialization"] == "official"
    official = model_from_config(config_lib.make_config("demo", initialization="official", num_layers=1), num_classes=3)
    scratch = model_from_config(config_lib.make_config("demo", num_layers=1), num_classes=3)
    assert not np.any(model_parts.head(official).kernel.numpy())  # the Flax code's zero head
    assert np.any(model_parts.head(scratch).kernel.numpy())


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(optimizer="rmsprop"), "optimizer='rmsprop'"),
        (dict(global_batch_size=0), "global_batch_size=0"),
        (dict(dropout_rate=1.5), "dropout_rate=1.5"),
        (dict(model="vit_q7"), "vit_q7"),
        (dict(randaugment=(2,)), "randaugment=(2,)"),
        (dict(steps=None), "steps=None"),
        (dict(colour="red"), "colour"),
        (dict(learning_rate=float("nan")), "learning_rate=nan"),
        (dict(weight_decay=float("inf")), "weight_decay=inf"),
    ],
)
def test_invalid_values_raise_naming_the_value(overrides, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        config_lib.make_config("demo", **overrides)


def test_recipes_without_a_dataset_ask_for_one():
    with pytest.raises(ValueError, match="--dataset"):
        config_lib.make_config("finetune")


def test_config_is_frozen_and_round_trips_through_json():
    cfg = config_lib.make_config("augreg", dataset="cifar10")
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'learning_rate'"):
        cfg.learning_rate = 1.0  # frozen dataclass
    assert config_lib.Config.from_json(cfg.to_json()) == cfg
    assert json.loads(cfg.to_json())["randaugment"] == [2, 15]


def test_a_config_json_from_before_a_field_existed_still_loads():
    cfg = config_lib.make_config("demo", qkv_bias=False)
    assert config_lib.Config.from_json(cfg.to_json()).qkv_bias is False
    old = json.loads(cfg.to_json())
    del old["qkv_bias"]  # a config.json written before the qkv_bias field
    assert config_lib.Config.from_json(json.dumps(old)) == config_lib.make_config("demo")


def test_warmup_schedule_matches_hand_computed_values():
    from training.optim import WarmupSchedule

    # Warm-up 0 -> 2 over 4 steps, then cosine to 0 at step 12: 2 * 0.5 * (1 + cos(pi * (s - 4) / 8)).
    cosine = WarmupSchedule(2.0, total_steps=12, warmup_steps=4, decay="cosine")
    expected = {0: 0.0, 2: 1.0, 4: 2.0, 6: 2 * 0.5 * (1 + math.cos(math.pi / 4)), 8: 1.0, 12: 0.0, 20: 0.0}
    for step, value in expected.items():
        assert float(cosine(step)) == pytest.approx(value, abs=1e-6), step
    linear = WarmupSchedule(1.0, total_steps=10, warmup_steps=0, decay="linear")
    assert [float(linear(s)) for s in (0, 5, 10)] == pytest.approx([1.0, 0.5, 0.0])
    restored = WarmupSchedule.from_config(cosine.get_config())
    assert float(restored(6)) == pytest.approx(expected[6], abs=1e-6)


def test_warmup_schedule_is_registered_under_the_app_and_round_trips(tmp_path):
    import keras
    import numpy as np

    from training.optim import WarmupSchedule

    schedule = WarmupSchedule(2.0, total_steps=12, warmup_steps=4)
    assert keras.saving.get_registered_name(WarmupSchedule) == "keras_vit_training>WarmupSchedule"
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer=keras.optimizers.SGD(schedule), loss="mse")
    model.fit(np.zeros((4, 3)), np.zeros((4, 2)), verbose=0)
    path = tmp_path / "new.keras"
    model.save(path)
    learning_rate = keras.saving.load_model(path).optimizer._learning_rate
    assert isinstance(learning_rate, WarmupSchedule) and learning_rate.get_config() == schedule.get_config()


def test_flags_give_the_same_config_as_make_config():
    from absl import flags

    from training import train

    argv = ["train", "--recipe=finetune", "--dataset=cifar10", "--steps=9", "--randaugment=2,10",
            "--grad_clip_norm=0", "--num_layers=3"]
    flags.FLAGS.unparse_flags()
    flags.FLAGS(argv)
    try:
        cfg = train.config_from_flags()
    finally:
        flags.FLAGS.unparse_flags()
    assert cfg == config_lib.make_config(
        "finetune", dataset="cifar10", steps=9, randaugment=(2, 10), grad_clip_norm=None, num_layers=3
    )


def test_weight_decay_applies_to_kernels_only():
    import keras
    import numpy as np

    from training.model import model_from_config
    from training.optim import make_optimizer

    cfg = config_lib.make_config("demo", optimizer="adamw", weight_decay=0.1, learning_rate=0.5, warmup_steps=0,
                                 schedule="constant", num_layers=1, hidden_size=8, num_heads=2, mlp_dim=16)
    model = model_from_config(cfg, num_classes=3)
    for v in model.trainable_variables:  # non-zero everywhere, so decay would show on every variable
        v.assign(keras.ops.ones_like(v))
    optimizer = make_optimizer(cfg, total_steps=10, model=model)
    optimizer.apply([keras.ops.zeros_like(v) for v in model.trainable_variables], model.trainable_variables)
    # Zero gradients: Adam's step is 0, so only the decoupled decay moves a weight: w * (1 - lr * wd).
    for v in model.trainable_variables:
        expected = 1 - 0.5 * 0.1 if v.path.endswith("kernel") else 1.0
        np.testing.assert_allclose(keras.ops.convert_to_numpy(v), expected, rtol=1e-6, err_msg=v.path)
    assert any(v.path.endswith("kernel") for v in model.trainable_variables)
    assert any(v.path.endswith("position_embedding") for v in model.trainable_variables)


def test_decayed_variables_are_the_matmul_and_conv_kernels_found_by_layer():
    import keras_vit
    from training.optim import decayed_variables

    model = keras_vit.ViT(image_size=16, patch_size=4, hidden_size=8, num_layers=2, num_heads=2, mlp_dim=16,
                          classes=3, hybrid=dict(block_units=(1,), width=8, groups=2))
    decayed = decayed_variables(model)
    # Hand count: stem conv_root + one unit's conv1..3 and conv_proj (4); per block query, key, value, out,
    # mlp_dense_1, mlp_dense_2 (6 x 2); patch projection; head.
    assert len(decayed) == 1 + 4 + 12 + 1 + 1 == len({id(v) for v in decayed})
    assert all(v.path.endswith("kernel") for v in decayed)
    kernels = [v for v in model.trainable_variables if v.path.endswith("kernel")]
    assert {id(v) for v in kernels} == {id(v) for v in decayed}


# One row per numeric flag of training.train and training.experiments (and keras_vit.export's --version): a
# value it must refuse. `test_every_numeric_flag_has_a_row_and_a_range` keeps the table complete.
_BAD_TRAIN_FLAGS = [
    ("patch_size", "0"), ("hidden_size", "100000000"), ("num_layers", "0"), ("num_heads", "5000"), ("mlp_dim", "0"),
    ("representation_size", "-1"), ("head_bias_init", "nan"), ("dropout_rate", "1"), ("drop_path_rate", "-0.1"),
    ("validation_split", "1"), ("image_size", "100000"), ("crop_min_area", "0"), ("mixup", "inf"),
    ("cutmix", "-1"), ("shuffle_buffer", "100000000000"), ("steps", "0"), ("epochs", "nan"),
    ("global_batch_size", "100000000"), ("learning_rate", "nan"), ("learning_rate", "inf"), ("learning_rate", "0"),
    ("beta_1", "1"), ("beta_2", "nan"), ("momentum", "-inf"), ("warmup_steps", "-1"), ("weight_decay", "inf"),
    ("weight_decay", "nan"), ("grad_clip_norm", "nan"), ("label_smoothing", "1.5"), ("seed", "-1"),
    ("checkpoint_every", "0"), ("keep_checkpoints", "0"), ("log_every", "0"), ("eval_every", "10000000000"),
    ("show_predictions", "-1"), ("randaugment", "2,99"), ("max_image_pixels", "10000000000000"),
    ("lora_rank", "0"), ("distillation_alpha", "1.5"), ("distillation_tau", "0"),
]
_BAD_EXPERIMENT_FLAGS = [("image_size", "0"), ("global_batch_size", "100000000"), ("seeds", "1000"), ("steps", "0"),
                         ("attention_images", "0"), ("subset_seed", "-1"), ("max_image_pixels", "-1")]


def _usage_error(flag_values, args, capsys):
    from keras_vit import cli

    with pytest.raises(cli._Exit) as exited:
        cli.parse(flag_values, args)
    flag_values.unparse_flags()
    return exited.value.code, capsys.readouterr().err


_BAD_TRAIN_FLAGS_DEFAULT_TIER = {"patch_size", "learning_rate", "epochs", "global_batch_size", "randaugment",
                                 "distillation_tau", "lora_rank", "max_image_pixels"}
"""The rows the default tier runs (every kind of range); all run in e2e (the default tier's time budget)."""


@pytest.mark.parametrize("name, value", [
    (name, value) if name in _BAD_TRAIN_FLAGS_DEFAULT_TIER else pytest.param(name, value, marks=pytest.mark.e2e)
    for name, value in _BAD_TRAIN_FLAGS])
def test_a_bad_numeric_flag_of_the_app_is_one_usage_error_naming_it(name, value, capsys):
    from absl import flags

    from training import train  # noqa: F401  defines the flags

    code, err = _usage_error(flags.FLAGS, [f"--{name}={value}"], capsys)
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: ") and f"--{name}={value}" in err, err


@pytest.mark.parametrize("name, value", _BAD_EXPERIMENT_FLAGS)
def test_a_bad_numeric_flag_of_the_experiments_is_one_usage_error_naming_it(name, value, capsys):
    from training.experiments import app as experiments

    code, err = _usage_error(experiments.FLAGS, [f"--{name}={value}"], capsys)
    assert code == 2 and err.count("\n") == 1 and f"--{name}={value}" in err, err


@pytest.mark.parametrize("value", ["0", "-1", str(2**63), str(2**70)])
def test_an_export_version_beyond_int64_or_below_1_is_a_usage_error(value, tmp_path, capsys):
    from keras_vit.export.__main__ import FLAGS

    code, err = _usage_error(FLAGS, ["--model=vit_ti16", "--weights=none", f"--out={tmp_path}", f"--version={value}"],
                             capsys)
    assert code == 2 and err.count("\n") == 1 and f"--version={value}" in err and "2**63-1" in err, err


def test_every_numeric_flag_has_a_row_and_a_range():
    """A numeric flag added later without a range (or without a row in the table above) fails here."""
    from absl import flags

    from training import train  # noqa: F401
    from training.experiments import app as experiments

    numeric = {name for name, flag in flags.FLAGS._flags().items()
               if flag.flag_type() in ("int", "float") and flag.__module__ != "absl.flags._flag"
               and name in {f.name for f in dataclasses.fields(config_lib.Config)}}
    assert numeric <= set(config_lib.RANGES)
    assert set(config_lib.RANGES) | {"randaugment", "max_image_pixels"} == {n for n, _ in _BAD_TRAIN_FLAGS}
    assert {n for n, _ in _BAD_EXPERIMENT_FLAGS} == {
        name for name, flag in experiments.FLAGS._flags().items() if flag.flag_type() in ("int", "float")}
    for name, valid in config_lib.RANGES.items():
        assert f"Range: {valid}." in flags.FLAGS[name].help, name
    good = config_lib.make_config("scratch", dataset="digits", steps=3)
    assert all(config_lib.range_problem(n, getattr(good, n)) is None for n in config_lib.RANGES)
