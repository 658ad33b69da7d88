"""`--augment_library`: RandAugment / Mixup / CutMix from Keras core (the default) or from keras-cv (an extra)."""

import contextlib
import io
import json
import sys

import pytest
from absl import flags

from training import augment, config, loop, train, workdir

SMALL = ["--patch_size=4", "--hidden_size=32", "--num_layers=2", "--num_heads=2", "--mlp_dim=64",
         "--show_predictions=0", "--export=false", "--jit_compile=false"]


def config_of(*args):
    """The config `python -m training.train ARGS` would run, parsed by its own flags."""
    flags.FLAGS.unparse_flags()
    flags.FLAGS(["train", *args])
    try:
        return train.config_from_flags()
    finally:
        flags.FLAGS.unparse_flags()


def test_keras_core_is_the_default_and_the_libraries_are_the_configs():
    assert set(augment.LIBRARIES) == set(config.AUGMENT_LIBRARIES)
    cfg = config_of()
    assert cfg.augment_library == "keras" and json.loads(cfg.to_json())["augment_library"] == "keras"
    transform = augment.make_batch_transform(10, (2, 15), mixup=0.2, cutmix=1.0, library=cfg.augment_library)
    assert [type(layer).__module__.split(".")[0] for layer in transform.layers] == ["keras"] * 3
    with pytest.raises(ValueError, match="augment_library"):
        config.make_config("demo", augment_library="albumentations")
    with pytest.raises(flags.IllegalFlagValueError):
        config_of("--augment_library=albumentations")


def test_the_flag_takes_the_layers_from_keras_cv():
    pytest.importorskip("keras_cv")
    cfg = config_of("--augment_library=keras_cv", "--randaugment=2,15", "--mixup=0.2", "--cutmix=1.0")
    assert cfg.augment_library == "keras_cv" and json.loads(cfg.to_json())["augment_library"] == "keras_cv"
    assert config.Config.from_json(cfg.to_json()) == cfg
    transform = augment.make_batch_transform(10, cfg.randaugment, cfg.mixup, cfg.cutmix, library=cfg.augment_library)
    assert [type(layer).__name__ for layer in transform.layers] == ["RandAugment", "MixUp", "CutMix"]
    assert all(type(layer).__module__.startswith("keras_cv.") for layer in transform.layers)
    rand_augment, _, cutmix = transform.layers
    assert rand_augment.augmentations_per_image == 2 and rand_augment.magnitude == pytest.approx(0.5)  # 15 of 30
    assert cutmix.alpha == 1.0


@pytest.mark.e2e
def test_a_short_run_with_keras_cv_layers_in_tf_data_learns(tmp_path):
    pytest.importorskip("keras_cv")
    cfg = config_of("--augment_library=keras_cv", "--randaugment=2,10", "--mixup=0.2", "--steps=150",
                    f"--workdir={tmp_path}", *SMALL)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        metrics = loop.run(cfg)
    assert metrics["steps"] == 150 and metrics["eval_accuracy"] >= 0.2, out.getvalue()[-2000:]  # chance: 0.1
    assert json.loads((tmp_path / "config.json").read_text())["augment_library"] == "keras_cv"


def test_keras_cv_missing_is_one_usage_error_naming_the_extra(tmp_path, monkeypatch, capsys):
    from keras_vit import cli

    monkeypatch.setitem(sys.modules, "keras_cv", None)  # `import keras_cv` raises ImportError
    with pytest.raises(augment.MissingLibraryError, match=r'pip install "keras-vit-applications\[keras-cv\]"'):
        augment.make_batch_transform(10, mixup=0.2, library="keras_cv")
    try:
        status = cli.main(train.main, flags.FLAGS, ["--augment_library=keras_cv", f"--workdir={tmp_path / 'run'}"],
                          usage=train.__doc__, tensorflow=True)
    finally:
        flags.FLAGS.unparse_flags()
    lines = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and lines == [
        'error: --augment_library=keras_cv needs the keras-cv package, which is not installed: '
        'pip install "keras-vit-applications[keras-cv]"'
    ]
    assert not (tmp_path / "run").exists()  # refused before anything ran


def test_another_augment_library_is_refused_on_resume(tmp_path):
    cfg = config.make_config("demo", steps=4, workdir=str(tmp_path))
    (tmp_path / "config.json").write_text(cfg.to_json())
    assert workdir.RunWorkdir(cfg).check_config(resume_with_changes=False) == {}
    other = config.make_config("demo", steps=4, workdir=str(tmp_path), augment_library="keras_cv")
    with pytest.raises(workdir.WorkdirError, match="augment_library"):
        workdir.RunWorkdir(other).check_config(resume_with_changes=False)
