"""training.config, training.optim: recipes as data, flag precedence, validation, the learning-rate schedule."""

import json
import math

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


def test_explicit_values_override_the_recipe_and_steps_replace_epochs():
    cfg = config_lib.make_config("augreg", dataset="cifar10", learning_rate=0.5, steps=7)
    assert cfg.learning_rate == 0.5 and cfg.steps == 7 and cfg.epochs is None
    cfg = config_lib.make_config("demo", epochs=2.0)
    assert cfg.steps is None and cfg.train_steps(num_train_examples=1000) == math.ceil(2 * 1000 / 64)


def test_model_overrides_apply_on_top_of_the_variant():
    cfg = config_lib.make_config("demo", model="vit_ti16", num_layers=2, patch_size=4)
    assert cfg.model_kwargs() == dict(patch_size=4, hidden_size=192, num_layers=2, num_heads=3, mlp_dim=768)


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
    with pytest.raises(Exception):
        cfg.learning_rate = 1.0  # frozen dataclass
    assert config_lib.Config.from_json(cfg.to_json()) == cfg
    assert json.loads(cfg.to_json())["randaugment"] == [2, 15]


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

    from training.model import build_model
    from training.optim import make_optimizer

    cfg = config_lib.make_config("demo", optimizer="adamw", weight_decay=0.1, learning_rate=0.5, warmup_steps=0,
                                 schedule="constant", num_layers=1, hidden_size=8, num_heads=2, mlp_dim=16)
    model = build_model(cfg, num_classes=3)
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
