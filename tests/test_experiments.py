"""`python -m training.experiments`: the nested subsets, the FLOP counter against the analytic ViT count, the
runs each study needs, the reading, the command line, and a tiny end-to-end study writing every output."""

import dataclasses
import html
import json
import os
import sys

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.flops import forward_flops
from keras_vit.layers.resnet import StdConv2D
from training.experiments import app as experiments
from training.experiments import data as experiments_data
from training.experiments import figure7 as experiments_figure7
from training.experiments import models as experiments_models
from training.experiments import report as experiments_report
from training.experiments import trainer as experiments_trainer

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


def _probe(distance, entropy, correlation, variance):
    return dict(attention_distance=distance, attention_entropy=entropy, filter_source="patch embedding",
                position_structure=dict(neighbours=0.5, far=-0.1, distance_correlation=correlation),
                filter_variance=variance, filters=np.zeros((2, 4, 4, 3)).tolist(),
                position_similarity=np.eye(4).reshape(2, 2, 2, 2).tolist())


def _synthetic_results(bit_small, bit_large, vit_small, vit_large):
    runs = []
    for model, (small, large) in {"bit": (bit_small, bit_large), "vit_base": (vit_small, vit_large),
                                  "vit_small": (vit_small - 0.05, vit_large - 0.05),
                                  "hybrid": (vit_small + 0.02, vit_large)}.items():
        for fraction, accuracy, size in ((0.1, small, 100), (1.0, large, 1000)):
            for seed, noise in enumerate((-0.002, 0.002)):
                runs.append(dict(model=model, label=experiments_models.MODELS[model].label, fraction=fraction,
                                 train_examples=size, seed=seed, accuracy=accuracy + noise,
                                 fewshot_accuracy=accuracy - 0.1 + noise, parameters=20_000, steps=10,
                                 train_flops={"bit": 3e9, "vit_base": 2e9, "vit_small": 5e8, "hybrid": 9e8}[model],
                                 forward_flops=1e5, wall_time_s=1.0))
    models = {m: dict(label=s.label, family=s.family, steps=s.steps, kind="hybrid" if "hybrid" in s.arguments
                      else s.family) for m, s in experiments_models.MODELS.items()}
    flat = [[0.9, 0.9], [0.9, 0.9]]
    figure7 = {"vit_base": dict(init=_probe([[8.1, 8.0], [8.0, 8.0]], [[1.0, 1.0], [1.0, 1.0]], 0.0, [0.05] * 4),
                                trained=_probe([[9.0, 3.0], [8.0, 8.5]], [[0.99, 0.5], [1.0, 0.995]], -0.6,
                                               [0.2] * 4)),
               "hybrid": dict(init=_probe([[8.0, 8.0], [8.0, 8.0]], flat, 0.1, [0.1] * 4),
                              trained=_probe([[4.0, 5.0], [8.0, 8.0]], flat, -0.2, [0.2] * 4))}
    return dict(runs=runs, models=models,
                dataset=dict(name="digits", train_split="train", eval_split="test", train_examples=1000),
                setup=dict(seeds=2, steps=None, global_batch_size=8, image_size=16, attention_images=4),
                fewshot_shots=5, recipe=dict(recipe="demo"), wall_time_s=60.0, uniform_attention_distance=8.0,
                figure7=figure7)


def test_reading_is_computed_from_the_numbers():
    text = experiments_report.reading(_synthetic_results(0.60, 0.80, 0.40, 0.85))
    assert "20.0 points ahead" in text and "5.0 points behind" in text and "overtakes" in text
    assert "more locally than" in text and "10^7-10^8 images" in text
    assert "ViT-B/4 layer 1 3.0-9.0 px (mean 6.0; at initialisation 8.1)" in text
    assert "1 of 4 heads moved" in text and "correlation with grid distance -0.60; init 0.00" in text
    assert "ViT-B/4 (patch embedding) 80% (init 20%)" in text
    text = experiments_report.reading(_synthetic_results(0.60, 0.90, 0.40, 0.70))
    assert "shrinks" not in text and "no trend" in text  # a 20-point lead at both ends
    assert "| BiT-R11 | 10% | 100 | 2 | 60.0 ± 0.2 |" in experiments_report.markdown_table(
        _synthetic_results(0.60, 0.90, 0.40, 0.70))


def _cut_to_one_seed_of_40_steps(results):
    """The synthetic results as `--steps=40 --seeds=1` leaves them: every model cut to 40 steps of its budget."""
    results["runs"] = [dict(run, steps=40) for run in results["runs"] if run["seed"] == 0]
    results["models"] = {m: dict(v, steps=40, budget=experiments_models.MODELS[m].steps)
                         for m, v in results["models"].items()}
    results["setup"] = dict(results["setup"], seeds=1, steps=40)
    return results


def test_the_header_says_the_warm_up_the_runs_get():
    assert experiments_trainer.warmup_text(100, {"vit_small": 2000, "bit": 600}) == "warm-up 100"
    assert experiments_trainer.warmup_text(100, {"vit_small": 40, "bit": 40}) == (
        "warm-up 4 (the recipe's 100 clamped to 10% of the 40-step runs)")
    assert experiments_trainer.warmup_text(100, {"vit_small": 2000, "bit": 300, "hybrid": 200}) == (
        "warm-up 100; 20 for the 200-step runs; 30 for the 300-step runs (the recipe's 100 clamped to 10% of them)")


def test_the_reading_says_runs_were_cut_short_of_their_budgets():
    results = _cut_to_one_seed_of_40_steps(_synthetic_results(0.60, 0.80, 0.40, 0.85))
    text = experiments_report.reading(results)
    assert text.startswith(
        "These runs were cut to 40 steps (ViT-S/4 40 of 2,000, ViT-B/4 40 of 1,500, BiT-R11 40 of 600, R5+ViT-S/4 40 "
        "of 1,000 steps: 2%-7% of the budget), so the models are far from trained: every comparison and trend below "
        "is indicative only. On digits, "), text[:400]
    assert "overtakes the ResNet as the data grows, the crossing of the paper's Figures 3 and 4, here at a toy " \
        "scale (indicative only: the runs were cut short)." in text
    assert "40 steps a run" in text and "40-40" not in text
    assert "with one seed per point there is no seed spread to judge differences by" in text and "seed(s)" not in text
    full = experiments_report.reading(_synthetic_results(0.60, 0.80, 0.40, 0.85))  # the budgets run: no word
    assert "cut" not in full and "indicative" not in full and "with 2 seeds per point" in full


def test_the_reading_is_short_paragraphs():
    paragraphs = experiments_report.reading(_synthetic_results(0.60, 0.80, 0.40, 0.85)).split("\n\n")
    assert len(paragraphs) == 6 and all(p and "\n" not in p for p in paragraphs)
    assert max(len(p.split()) for p in paragraphs) <= 130, [len(p.split()) for p in paragraphs]
    assert paragraphs[1].startswith("Against the training compute spent") and paragraphs[-1].startswith("At this scale")


def test_one_seed_has_no_spread_and_figures_have_titles(tmp_path):
    results = _cut_to_one_seed_of_40_steps(_synthetic_results(0.60, 0.80, 0.40, 0.85))
    assert "| BiT-R11 | 10% | 100 | 1 | 59.8 | 49.8 | 20,000 | 40 |" in experiments_report.markdown_table(results)
    results["reading"] = experiments_report.reading(results)
    page = open(experiments_report.write_html(results, str(tmp_path / "index.html"), experiments_models.STUDIES)).read()
    assert "±" not in page and "<h2>Runs (one seed each)</h2>" in page
    assert '<h2>Accuracy against training-set size (Figures 3 and 4)</h2><img src="data_size.png"' in page
    assert '<h2>Principal components of the embedding filters (Figure 7, left)</h2><img src="embedding_filters.png"' \
        in page
    assert "<h2>data_size.png</h2>" not in page and page.count("<h2>") == 8
    assert page.count("<p>These runs were cut to 40 steps") == 1 and "</p>\n<p>At this scale" in page


def test_figure7_summary_and_head_table():
    results = _synthetic_results(0.6, 0.8, 0.4, 0.85)
    summary = experiments_figure7.summary(results)
    assert summary["vit_base"]["first_trained"] == (6.0, 3.0, 9.0)
    assert summary["vit_base"]["first_init"] == (8.05, 8.0, 8.1)
    assert (summary["vit_base"]["heads_moved"], summary["hybrid"]["heads_moved"]) == (1, 0)
    table = experiments_figure7.markdown_heads(results)
    assert "| ViT-B/4 | 1 | 2 | 8.00 | 3.00 | 1.000 | 0.500 |" in table and table.count("\n") == 2 + 8 - 1
    assert results["figure7"]["vit_base"]["trained"]["attention_distance"] == [[9.0, 3.0], [8.0, 8.5]]  # unchanged


def test_the_figures_draw_from_synthetic_results(tmp_path):
    results = _synthetic_results(0.6, 0.8, 0.4, 0.85)
    results["reading"] = experiments_report.reading(results)
    paths = experiments_report.write(results, str(tmp_path))
    assert sorted(os.path.basename(p) for p in paths) == sorted(experiments_report.outputs(experiments_models.STUDIES))
    assert all((tmp_path / name).read_bytes()[:4] == b"\x89PNG" for name in experiments_figure7.PLOTS)


def test_presets_and_config_flags():
    large = experiments.make_setup("large", seeds=1)
    assert (large.dataset, large.image_size, large.seeds, large.global_batch_size) == ("cifar10", 32, 1, 128)
    assert experiments_trainer.steps_for(large, "vit_base") == 10_000
    assert experiments_trainer.steps_for(experiments.Setup(steps=7), "bit") == 7
    assert experiments_trainer.steps_for(experiments.Setup(), "bit") == experiments_models.MODELS["bit"].steps
    with pytest.raises(ValueError, match="preset='huge'"):
        experiments.make_setup("huge")
    from training.config import Config

    helps = {f.name: f.metadata.get("help") for f in dataclasses.fields(Config)}
    for name in experiments.CONFIG_FLAGS:  # declared once, in training.config
        assert experiments.FLAGS[name].help.startswith(helps[name])


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
        "--global_batch_size=16", "--shots=1", "--attention_images=4", "--nojit_compile", "--image_size=16",
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
    assert run["steps"] == 3 and results["models"]["vit_small"]["steps"] == 3
    for when in ("init", "trained"):
        probe = results["figure7"]["vit_small"][when]
        assert np.asarray(probe["attention_distance"]).shape == np.asarray(probe["attention_entropy"]).shape == (2, 2)
        assert np.asarray(probe["position_similarity"]).shape == (4, 4, 4, 4)
    page = (out / "index.html").read_text()
    paragraphs = results["reading"].split("\n\n")
    assert results["reading"] and all(f"<p>{html.escape(p, quote=False)}</p>" in page for p in paragraphs)
    for figure in experiments_figure7.PLOTS:
        assert (out / figure).read_bytes()[:4] == b"\x89PNG"
    printed = capsys.readouterr().out
    assert "run 4/4" in printed and "ETA" in printed


def _write_folder(root, classes=3, per_class=(6, 2), size=32):
    import tensorflow as tf

    rng = np.random.default_rng(0)
    for split, count in zip(("train", "test"), per_class):
        for label in range(classes):
            folder = root / split / f"class{label}"
            folder.mkdir(parents=True)
            for i in range(count):
                image = rng.integers(0, 255, (size, size, 3), dtype=np.uint8)
                image[:, label * 8:(label + 1) * 8] = 255
                (folder / f"{i}.png").write_bytes(tf.io.encode_png(image).numpy())


@pytest.mark.e2e
def test_large_preset_at_a_tiny_size(tmp_path, capsys):
    # The large preset's models and recipe on a tiny folder in place of CIFAR-10 (nothing is downloaded).
    _write_folder(tmp_path / "data")
    status = experiments.main([
        f"--out={tmp_path / 'out'}", "--preset=large", f"--dataset=folder:{tmp_path / 'data'}", "--steps=2",
        "--global_batch_size=4", "--fractions=1", "--seeds=1", "--shots=1", "--attention_images=2",
        "--nojit_compile",
    ])
    assert status == 0, capsys.readouterr().err
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["setup"]["preset"] == "large" and results["setup"]["image_size"] == 32
    assert {r["model"]: r["parameters"] > 1_000_000 for r in results["runs"]} == {
        "vit_small": True, "vit_base": True, "bit": True, "hybrid": True}
    assert np.asarray(results["figure7"]["vit_base"]["trained"]["attention_distance"]).shape == (8, 6)
    assert results["recipe"]["recipe"] == "scratch" and results["uniform_attention_distance"] > 0


def test_docstring_examples():
    import doctest

    for module in (experiments_data, experiments_models, experiments):  # nested_subsets', the presets
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.attempted > 0 and result.failed == 0
