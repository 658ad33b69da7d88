"""`python -m training.experiments`: the nested subsets, the FLOP counter against the analytic ViT count, the
runs each study needs, the reading, the command line, and a tiny end-to-end study writing every output."""

import json
import os
import sys

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.flops import forward_flops
from keras_vit.layers.resnet import StdConv2D
from training import experiments, experiments_data, experiments_models, experiments_report

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

import flops as analytic  # noqa: E402  benchmarks/flops.py


# --- subsets -----------------------------------------------------------------------------------------------


def test_subsets_are_nested_deterministic_and_stratified():
    labels = np.random.default_rng(0).integers(0, 10, 1438)
    fractions = (0.05, 0.1, 0.25, 0.5, 1.0)
    subsets = experiments_data.nested_subsets(labels, fractions, seed=0)
    again = experiments_data.nested_subsets(labels, fractions, seed=0)
    for f in fractions:
        np.testing.assert_array_equal(subsets[f], again[f])
        assert len(subsets[f]) == round(f * len(labels))
        assert len(np.unique(subsets[f])) == len(subsets[f])
    for small, large in zip(fractions, fractions[1:]):
        assert set(subsets[small]) <= set(subsets[large])
    np.testing.assert_array_equal(subsets[1.0], np.arange(len(labels)))
    counts, totals = np.bincount(labels[subsets[0.05]], minlength=10), np.bincount(labels, minlength=10)
    np.testing.assert_allclose(counts, 0.05 * totals, atol=1.0)  # every class in proportion
    other = experiments_data.nested_subsets(labels, fractions, seed=1)
    assert set(other[0.05]) != set(subsets[0.05])


def test_a_tiny_fraction_keeps_one_example():
    assert len(experiments_data.nested_subsets(np.zeros(10, int), (0.01,))[0.01]) == 1


# --- FLOPs -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", [
    dict(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, classes=5),
    dict(image_size=16, patch_size=4, hidden_size=64, num_layers=4, num_heads=4, mlp_dim=128, classes=10),
    dict(image_size=48, patch_size=16, hidden_size=48, num_layers=1, num_heads=3, mlp_dim=96, classes=7,
         classifier="gap"),
])
def test_flop_counter_equals_the_analytic_vit_count(arch):
    model = keras_vit.ViT(**arch)
    expected = analytic.vit_forward_gflop(arch["image_size"], arch["patch_size"], arch["hidden_size"],
                                          arch["num_layers"], arch["mlp_dim"], arch["classes"],
                                          class_token=arch.get("classifier", "token") == "token") * 1e9
    assert forward_flops(model) == pytest.approx(expected, rel=1e-9)
    assert forward_flops(model, batch_size=3) == pytest.approx(3 * expected, rel=1e-9)


def test_flop_counter_counts_convolutions():
    inputs = keras.Input((15, 15, 3))
    model = keras.Model(inputs, StdConv2D(8, 3, strides=2)(inputs))
    flops, by_op = forward_flops(model, by_op=True)
    assert flops == 2 * 8 * 8 * 3 * 3 * 3 * 8 and set(by_op) == {"Conv2D"}
    hybrid = keras_vit.ViT(**experiments_models.MODELS["hybrid"].arguments, image_size=16, classes=10)
    assert set(forward_flops(hybrid, by_op=True)[1]) >= {"Conv2D", "MatMul"}


# --- planning and reading -------------------------------------------------------------------------------


def test_each_study_plans_the_runs_it_needs():
    setup = experiments.Setup(fractions=(0.1, 1.0), seeds=2)
    assert len(experiments.planned_runs(setup)) == 4 * 2 * 2
    compute = experiments.planned_runs(setup, ("compute",))
    assert {f for _, f, _ in compute} == {1.0} and len(compute) == 4 * 2
    attention = experiments.planned_runs(setup, ("attention_distance",))
    assert attention == [("vit_small", 1.0, 0), ("vit_base", 1.0, 0), ("hybrid", 1.0, 0)]


@pytest.mark.parametrize("kwargs", [dict(fractions=(0.0, 1.0)), dict(fractions=(0.5, 0.5)), dict(models=("vgg",)),
                                    dict(image_size=18), dict(shots=(0,)), dict(steps=0)])
def test_bad_setups_are_refused(kwargs):
    with pytest.raises(ValueError):
        experiments.Setup(**kwargs)


def _synthetic_results(bit_small, bit_large, vit_small, vit_large):
    runs = []
    for model, (small, large) in {"bit": (bit_small, bit_large), "vit_base": (vit_small, vit_large),
                                  "vit_small": (vit_small - 0.05, vit_large - 0.05),
                                  "hybrid": (vit_small + 0.02, vit_large)}.items():
        for fraction, accuracy, size in ((0.1, small, 100), (1.0, large, 1000)):
            for seed, noise in enumerate((-0.002, 0.002)):
                runs.append(dict(model=model, label=experiments_models.MODELS[model].label, fraction=fraction,
                                 train_examples=size, seed=seed, accuracy=accuracy + noise,
                                 fewshot_accuracy=accuracy - 0.1 + noise, parameters=20_000,
                                 train_flops={"bit": 3e9, "vit_base": 2e9, "vit_small": 5e8, "hybrid": 9e8}[model],
                                 forward_flops=1e5, wall_time_s=1.0))
    return dict(runs=runs, dataset=dict(name="digits", train_split="train", eval_split="test", train_examples=1000),
                setup=dict(seeds=2, steps=10, global_batch_size=8, image_size=16, attention_images=4),
                fewshot_shots=5, recipe=dict(recipe="demo"), wall_time_s=60.0, uniform_attention_distance=8.0,
                attention_distance={"vit_base": [[9.0, 3.0], [8.0, 8.5]], "hybrid": [[4.0, 5.0], [8.0, 8.0]]})


def test_reading_is_computed_from_the_numbers():
    text = experiments_report.reading(_synthetic_results(0.60, 0.80, 0.40, 0.85))
    assert "20.0 points ahead" in text and "5.0 points behind" in text and "overtakes" in text
    assert "more locally than" in text and "10^7-10^8 images" in text
    text = experiments_report.reading(_synthetic_results(0.60, 0.90, 0.40, 0.70))
    assert "shrinks" not in text and "no trend" in text  # a 20-point lead at both ends
    assert "| BiT-R11 | 10% | 100 | 2 | 60.0 ± 0.2 |" in experiments_report.markdown_table(
        _synthetic_results(0.60, 0.90, 0.40, 0.70))


# --- the command line and a tiny study -------------------------------------------------------------------


@pytest.mark.parametrize("args, message", [
    (["--fractions=0,1"], "--fractions"),
    (["--fractions=a"], "--fractions"),
    (["--studies=size"], "--studies"),
    (["--models=vgg"], "models"),
    (["--image_size=18"], "--image_size"),
])
def test_usage_errors(args, message, tmp_path, capsys):
    assert experiments.main([f"--out={tmp_path}", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_help_and_missing_out(capsys):
    assert experiments.main(["--help"]) == 0
    assert "--fractions" in capsys.readouterr().out
    assert experiments.main([]) == 2
    assert "--out is required" in capsys.readouterr().err


@pytest.mark.e2e
def test_tiny_study_writes_every_output(tmp_path, capsys):
    out = tmp_path / "out"
    status = experiments.main([
        f"--out={out}", "--models=vit_small,bit", "--fractions=0.5,1", "--seeds=1", "--steps=3",
        "--global_batch_size=16", "--shots=1", "--attention_images=4", "--nojit_compile",
    ])
    assert status == 0, capsys.readouterr().err
    assert sorted(os.listdir(out)) == sorted(experiments_report.outputs(experiments_models.STUDIES))
    results = json.loads((out / "results.json").read_text())
    assert len(results["runs"]) == 2 * 2
    run = results["runs"][0]
    for key in ("model", "fraction", "train_examples", "seed", "accuracy", "fewshot_accuracy", "forward_flops",
                "train_flops", "wall_time_s"):
        assert key in run
    assert run["train_flops"] == 3 * run["forward_flops"] * 3 * 16
    assert results["dataset"]["subset_sizes"] == {"0.5": 719, "1.0": 1438}
    assert np.asarray(results["attention_distance"]["vit_small"]).shape == (2, 2)  # (layers, heads)
    assert results["reading"] and results["reading"] in (out / "index.html").read_text()
    for figure in experiments_report.FIGURES.values():
        assert (out / figure).read_bytes()[:4] == b"\x89PNG"
    printed = capsys.readouterr().out
    assert "run 4/4" in printed and "ETA" in printed


def test_docstring_examples():
    import doctest

    result = doctest.testmod(experiments_data, optionflags=doctest.ELLIPSIS)  # nested_subsets' example
    assert result.attempted > 0 and result.failed == 0
