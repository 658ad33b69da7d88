"""The benchmark harness (benchmarks/run.py): it runs, and its table and JSON carry every field.

No timing assertions: figures depend on the machine. The FLOP counts and the ratio/goal arithmetic are
checked against hand-computed values and the published GMAC counts of REFERENCE.md.
"""

import json
import math
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

import cases  # noqa: E402
import flops  # noqa: E402
import model_matmuls  # noqa: E402
import report  # noqa: E402

pytestmark = pytest.mark.e2e  # the end-to-end tier: `python -m pytest -m e2e` (.ci/run runs it)


@pytest.mark.parametrize(
    "width, gmacs",
    [((192, 768), 1.26), ((384, 1536), 4.61), ((768, 3072), 17.58)],  # Ti/16, S/16, B/16 at 224
)
def test_forward_flops_match_published_gmacs(width, gmacs):
    hidden, mlp = width
    assert flops.vit_forward_gflop(224, 16, hidden, 12, mlp, 1000) / 2 == pytest.approx(gmacs, rel=6e-3)


def test_matmul_flops():
    assert flops.matmul_gflop(4096) == pytest.approx(2 * 4096**3 / 1e9)


@pytest.mark.parametrize("arch", sorted(cases.ARCHS))
@pytest.mark.parametrize("batch", [1, 3])
def test_floor_products_are_the_counted_flops(arch, batch):
    """The floor cases time exactly the matrix products that flops.py counts (a separate formula)."""
    products = model_matmuls.vit_matmuls(cases.ARCHS[arch], batch)
    expected = flops.arch_forward_gflop(cases.ARCHS[arch]) * batch
    assert sum(p.gflop for p in products) == pytest.approx(expected, rel=1e-12)
    for p in products:  # the operands the runners build have the product's FLOPs
        left, right = model_matmuls.operand_shapes(p)
        assert 2 * math.prod(left) * right[-1] * p.count / 1e9 == pytest.approx(p.gflop, rel=1e-12)
    pairs = model_matmuls.operand_pairs(products, lambda shape: object())
    assert len(pairs) == sum(p.count for p in products)
    assert len({id(b) for _, b in pairs}) == len(pairs)  # every weight distinct
    assert len({id(a) for a, _ in pairs}) == len(products)  # one activation per kind of product


@pytest.mark.parametrize("arch", ["S16", "tiny"])
def test_training_floor_is_a_step_of_products(arch):
    """A training step: each forward product, its gradient for the right operand, and for the left operand but
    the pixels: 3 forwards less the patch projection, as counted by hand from flops.py."""
    config = cases.ARCHS[arch]
    step = model_matmuls.training_matmuls(config, batch=2)
    forward = model_matmuls.vit_matmuls(config, batch=2)
    patches = (config["image_size"] // config["patch_size"]) ** 2
    pixel_gradient_gflop = 2 * 2 * patches * config["patch_size"] ** 2 * 3 * config["hidden_size"] / 1e9
    expected = 3 * 2 * flops.arch_forward_gflop(config) - pixel_gradient_gflop
    assert sum(p.gflop for p in step) == pytest.approx(expected, rel=1e-12)
    assert len(step) == 3 * len(forward) - 1
    by_name = {p.what: p for p in step}
    mlp_in = by_name["MLP in"]  # (2T, D) x (D, 4D): the gradients (2T, 4D) x (4D, D) and (D, 2T) x (2T, 4D)
    m, k, n = mlp_in.m, mlp_in.k, mlp_in.n
    assert model_matmuls.operand_shapes(by_name["MLP in: left gradient"]) == ((m, n), (n, k))
    assert model_matmuls.operand_shapes(by_name["MLP in: right gradient"]) == ((k, m), (m, n))
    assert "patch projection: left gradient" not in by_name
    assert model_matmuls.FLOOR_TASKS["train-floor"] is model_matmuls.training_matmuls


def test_b16_attention_products_have_the_head_layout():
    products = {p.what: p for p in model_matmuls.vit_matmuls(cases.ARCHS["B16"], batch=2)}
    logits = products["attention logits q k^T"]
    assert model_matmuls.operand_shapes(logits) == ((24, 197, 64), (24, 64, 197)) and logits.count == 12
    assert products["MLP in"].m == 2 * 197 and products["q/k/v projections"].count == 36


def test_floor_shares_and_bounds_arithmetic():
    def floor(runner, dtype, batch, seconds):
        return dict(_row(runner, "floor", dtype, batch, seconds), mode="graph")

    rows = [
        _row("keras_vit", "infer", "bfloat16", 16, 2.0),
        _row("timm", "infer", "bfloat16", 16, 1.5),
        _row("keras_hub", "infer", "bfloat16", 16, 3.0),
        dict(_row("keras_vit", "infer", "bfloat16", 16, 9.0), mode="XLA-alt", name="keras_vit/alt"),
        _row("keras_vit", "infer", "float32", 16, 4.0),
        _row("timm", "infer", "float32", 1, 0.5),
        floor("matmul", "bfloat16", 16, 1.2), floor("torch_matmul", "bfloat16", 16, 1.0),
        floor("matmul", "float32", 16, 3.0), floor("matmul", "float32", 1, 0.3),
        floor("torch_matmul", "float32", 1, 0.25),
    ]
    shares = {(f["name"], f["batch"], f["floor"]): f["share"] for f in report.floor_shares(rows)}
    assert shares == {
        ("keras_vit/infer/bfloat16", 16, "matmul/floor/bfloat16"): pytest.approx(0.6),
        ("timm/infer/bfloat16", 16, "torch_matmul/floor/bfloat16"): pytest.approx(1.0 / 1.5),
        ("keras_hub/infer/bfloat16", 16, "matmul/floor/bfloat16"): pytest.approx(0.4),
        ("keras_vit/infer/float32", 16, "matmul/floor/float32"): pytest.approx(0.75),
        ("timm/infer/float32", 1, "torch_matmul/floor/float32"): pytest.approx(0.5),
    }  # no row for the -alt mode; each row only against its own dtype, batch and framework
    found = {b["what"]: b["ratio"] for b in report.bounds(rows, big_batch=16)}
    assert found == {"bfloat16 batch 16: TensorFlow matmul floor / timm/infer/bfloat16": pytest.approx(1.25),
                     "bfloat16 batch 16: TensorFlow matmul floor / keras_hub/infer/bfloat16": pytest.approx(2.5)}
    assert report.bounds(rows[:6], big_batch=16) == []  # no floor measured: no bound claimed


def test_training_floor_shares_and_bounds_arithmetic():
    def floor(runner, dtype, seconds):
        return dict(_row(runner, "train-floor", dtype, 16, seconds), mode="graph")

    rows = [
        dict(_row("keras_vit", "train", "bfloat16", 16, 2.0, mode="graph"), arch="S16"),
        dict(_row("keras_vit", "train", "bfloat16", 16, 1.6, mode="torch"), arch="S16"),
        _row("timm", "train", "bfloat16", 16, 1.0, mode="eager"),
        floor("matmul", "bfloat16", 0.5), floor("torch_matmul", "bfloat16", 0.4),
        floor("matmul", "float32", 1.6),  # no float32 training rows: no share, no bound
    ]
    shares = {(f["name"], f["floor"]): f["share"] for f in report.floor_shares(rows)}
    assert shares == {  # each row against the floor of the kernels it runs on (the torch backend: PyTorch's)
        ("keras_vit/train/bfloat16/graph", "matmul/train-floor/bfloat16"): pytest.approx(0.25),
        ("keras_vit/train/bfloat16/torch", "torch_matmul/train-floor/bfloat16"): pytest.approx(0.25),
        ("timm/train/bfloat16/eager", "torch_matmul/train-floor/bfloat16"): pytest.approx(0.4),
    }
    found = {b["what"]: b["ratio"] for b in report.bounds(rows, big_batch=16)}
    assert found == {
        "bfloat16 training batch 16: TensorFlow matmul floor / timm/train/bfloat16/eager": pytest.approx(2.0),
        # timm spends 1.0 - 0.4 = 0.6 s outside its products: 1.0 / (0.5 + 0.6)
        "bfloat16 training batch 16: (TensorFlow matmul floor + timm's time outside its products) / "
        "timm/train/bfloat16/eager": pytest.approx(1.0 / 1.1),
    }


def test_torch_floor_cases_run_in_the_peers_environment():
    built = cases.build_cases(peers=("torch_matmul",))
    names = [c.name for c in built]
    assert len(names) == len(set(names))
    torch_floor = [c for c in built if c.runner == "torch_matmul" and c.task == "floor"]
    assert {c.dtype for c in torch_floor} == {"float32", "bfloat16"}
    assert all(c.is_peer and c.task == "floor" and c.batches == (1, 16) for c in torch_floor)
    tf_floor = [c for c in built if c.task == "floor" and c.runner == "matmul"]
    assert len(tf_floor) == 2 and not any(c.is_peer for c in tf_floor)
    train_floors = [c for c in built if c.task == "train-floor"]
    assert {(c.runner, c.dtype, c.arch, c.batches) for c in train_floors} == {
        (runner, dtype, "S16", (16,)) for runner in ("matmul", "torch_matmul") for dtype in ("float32", "bfloat16")}
    assert not any(c.runner == "torch_matmul" for c in cases.build_cases(peers=("timm",)))


def test_benchmark_architectures_are_the_variant_table():
    from keras_vit.variants import get_variant

    for name in ("B16", "S16"):
        variant, arch = get_variant(name), cases.ARCHS[name]
        assert (arch["patch_size"], arch["hidden_size"], arch["num_layers"], arch["num_heads"], arch["mlp_dim"]) == (
            variant.patch_size, variant.hidden_size, variant.num_layers, variant.num_heads, variant.mlp_dim)


def _row(runner, task, dtype, batch, seconds, rss=1000.0, extra=None, arch="B16", mode="", cpu=None):
    return {"name": f"{runner}/{task}/{dtype}" + (f"/{mode}" if mode else ""), "runner": runner, "task": task,
            "dtype": dtype, "arch": arch, "mode": mode, "batch": batch, "median_s": seconds,
            "items_per_s": batch / seconds, "peak_rss_mb": rss, "gflop_per_item": 35.1, "extra": extra or {},
            "median_cpu_s": 2 * seconds if cpu is None else cpu, "spread": 0.0, "gflops": 35.1 * batch / seconds}


def test_ratios_and_goals_arithmetic():
    bf16_extra = {"logits_rel_l2_vs_float32": 0.01, "top1_agreement_vs_float32": 0.985, "agreement_images": 200}
    rows = [
        _row("keras_vit", "infer", "float32", 16, 1.0, rss=900.0),   # 16 img/s
        _row("keras_hub", "infer", "float32", 16, 2.0, rss=1200.0),  # 8 img/s
        _row("timm", "infer", "float32", 16, 4.0, rss=800.0),        # 4 img/s
        _row("keras_vit", "infer", "float32", 1, 0.1),
        _row("keras_vit", "infer", "bfloat16", 16, 0.5, extra=bf16_extra, mode="graph"),
        _row("keras_vit", "infer", "bfloat16", 16, 0.4, extra={"logits_rel_l2_vs_float32": 0.03},
             mode="graph-bf16weights"),
        _row("keras_vit", "infer", "bfloat16", 1, 0.05, mode="graph"),
        _row("timm", "infer", "bfloat16", 16, 0.5, cpu=0.8),
        _row("timm", "infer", "bfloat16", 1, 0.04),
        _row("keras_vit", "serve", "bfloat16", 16, 0.41, mode="SavedModel"),
        _row("keras_vit", "serve", "float32", 16, 1.0, mode="SavedModel"),
        _row("keras_vit", "train", "float32", 16, 2.0, rss=2400.0, arch="S16"),
        _row("timm", "train", "float32", 16, 2.2, rss=1800.0, arch="S16"),
        _row("keras_vit", "train", "bfloat16", 16, 1.0, rss=2000.0, arch="S16"),
        _row("timm", "train", "bfloat16", 16, 0.9, rss=1800.0, arch="S16"),
    ]
    ratios = {(r["a"], r["b"], r["batch"]): r for r in report.peer_ratios(rows)}
    assert ratios[("keras_vit/infer/float32", "keras_hub/infer/float32", 16)]["ratio"] == pytest.approx(2.0)
    timm16 = ratios[("keras_vit/infer/bfloat16/graph-bf16weights", "timm/infer/bfloat16", 16)]
    assert timm16["ratio"] == pytest.approx(1.25) and timm16["cpu_ratio"] == pytest.approx((0.8 / 16) / (0.8 / 16))
    served = ratios[("keras_vit/serve/bfloat16/SavedModel", "keras_vit/infer/bfloat16/graph", 16)]
    assert served["what"] == "SavedModel serving_default / keras_vit[graph]"
    assert served["ratio"] == pytest.approx(0.5 / 0.41)
    goals = {g["goal"]: g for g in report.goals(rows, {"float32": 351.0}, big_batch=16)}
    assert goals["float32 batch 16: >= 1.0x fastest peer (no regression)"]["value"] == pytest.approx(2.0)
    best = goals["bfloat16 batch 16: >= 1.0x timm bf16 [graph-bf16weights]"]  # the faster keras_vit bf16 call
    assert best["value"] == pytest.approx(1.25) and best["met"] is True and best["cpu_value"] == pytest.approx(1.0)
    assert goals["bfloat16 batch 16: >= 1.1x timm bf16 (stretch)"]["met"] is True
    assert goals["bfloat16 batch 1: >= 1.0x timm bf16 [graph]"]["value"] == pytest.approx(0.8)
    assert goals["bfloat16 logits within 2e-2 relative (L2) of float32 [graph]"]["met"] is True
    assert goals["bfloat16 logits within 2e-2 relative (L2) of float32 [graph-bf16weights]"]["met"] is False
    agreement = goals["bfloat16 top-1 agreement with float32 >= 99% (200 images) [graph]"]
    assert agreement["value"] == 0.985 and agreement["met"] is False
    serving = goals["bf16 SavedModel serving_default batch 16: >= 0.95x Keras bf16 call [graph-bf16weights]"]
    assert serving["value"] == pytest.approx(0.4 / 0.41) and serving["met"] is True
    versus_float32 = goals["bf16 SavedModel serving_default batch 16: >= 2x float32 SavedModel"]
    assert versus_float32["value"] == pytest.approx(1 / 0.41)
    assert not any("batch 1: >= 0.95x" in g for g in goals)  # no batch-1 serving row: no goal claimed
    assert goals["float32 training: >= 1.0x timm"]["value"] == pytest.approx(1.1)
    assert goals["float32 training peak RSS <= 1.2x timm's (ratio)"]["met"] is False
    assert goals["bfloat16 training: >= 1.0x timm"]["met"] is False
    assert goals["bfloat16 training peak RSS <= 1.2x timm's (ratio)"]["value"] == pytest.approx(2000 / 1800)
    text = report.table(rows, {"float32": 351.0}, report.peer_ratios(rows), list(goals.values()))
    assert "goals (issue 15):" in text and "(CPU time: 1.00x)" in text and "by CPU time 1.000" in text


def test_memory_stages_and_extra_formatting():
    import measure

    record = measure.memory_stages()
    record("start")
    stages = record("end")
    assert list(stages) == ["start", "end"] and all(0 < v["rss_mb"] <= v["peak_mb"] + 1 for v in stages.values())
    assert report._fmt_extra(stages).endswith("(MiB now/peak)") and report._fmt_extra(0.5) == "0.5"


def test_bf16_cases_are_built():
    names = {c.name for c in cases.build_cases(peers=("timm",))}
    assert {"keras_vit/serve/B16/bfloat16/SavedModel", "keras_vit/serve/B16/float32/SavedModel",
            "keras_vit/train/S16/bfloat16/graph", "timm/train/S16/bfloat16/eager"} <= names
    serve = [c for c in cases.build_cases() if c.task == "serve"]
    assert all(c.batches == (1, 16) for c in serve)


def _run_quick(tmp_path, *extra):
    out, md = tmp_path / "results.json", tmp_path / "RESULTS.md"
    done = subprocess.run(
        [sys.executable, os.path.join(REPO, "benchmarks", "run.py"), "--quick", "--json", str(out),
         "--markdown", str(md), *extra],
        capture_output=True, text=True, timeout=600, cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    markdown = md.read_text()
    assert "- command: `benchmarks/run.py --quick" in markdown and "- machine: " in markdown
    assert done.stdout.strip() in markdown  # the printed table, verbatim
    return done.stdout, json.loads(out.read_text())


def _check_document(stdout, document, names):
    assert "ms/iter" in stdout and "peakMiB" in stdout and "ceilings (GFLOP/s)" in stdout
    assert document["quick"] is True and document["repeats"] == 1
    assert {"cpu_model", "cores"} <= set(document["machine"])
    rows = {(r["name"], r["batch"]): r for r in document["rows"]}
    for name in names:
        matching = [r for (n, _), r in rows.items() if n == name]
        assert matching, f"no row for {name}: {sorted(rows)}"
        for row in matching:
            assert name in stdout
            assert row["median_s"] > 0 and row["items_per_s"] > 0 and row["gflops"] > 0
            assert row["peak_rss_mb"] > 10 and len(row["per_repeat_s"]) == 1
    assert document["ceilings_gflops"]["float32"] > 0
    assert document["pythons"]["keras_vit"] == sys.executable and document["pythons"]["peers"] is None


def test_steal_share_is_stolen_over_busy_plus_stolen():
    import run

    assert run.steal_share((100, 10), (400, 110)) == pytest.approx(100 / 400)
    assert run.steal_share((5, 0), (5, 0)) == 0.0
    assert run.steal_share(None, (1, 1)) is None
    busy, steal = run.cpu_jiffies()
    assert busy > 0 and steal >= 0


def test_quick_run_emits_table_and_json(tmp_path):
    stdout, document = _run_quick(
        tmp_path, "--no-serving", "--only",
        "matmul/matmul/float32/graph,keras_vit/infer/tiny/float32,matmul/floor/tiny/float32")
    ours = "keras_vit/infer/tiny/float32/" + cases._mode(cases.KERAS_VIT_JIT["float32"])
    _check_document(stdout, document, ["matmul/matmul/float32/graph", "matmul/floor/tiny/float32/graph", ours])
    assert {(f["name"], f["batch"]) for f in document["floor_shares"]} == {(ours, 1), (ours, 4)}
    assert all(f["share"] > 0 for f in document["floor_shares"]) and "matmul floor" in stdout
    infer = [r for r in document["rows"] if r["task"] == "infer"]
    assert sorted(r["batch"] for r in infer) == [1, 4]
    assert all(0 < r["ceiling_share"] for r in infer)


@pytest.mark.e2e
def test_full_quick_run(tmp_path):
    """Every keras_vit case (inference in both dtypes, training, SavedModel export and serving)."""
    stdout, document = _run_quick(tmp_path)
    names = [c.name for c in cases.build_cases(quick=True)]
    _check_document(stdout, document, names)
    bf16 = next(r for r in document["rows"] if r["runner"] == "keras_vit" and r["dtype"] == "bfloat16" and r["batch"] == 4)
    assert bf16["extra"]["logits_rel_l2_vs_float32"] < 2e-2
    assert any(q["what"].startswith("SavedModel") for q in document["ratios"])


@pytest.mark.parametrize(
    "args, message",
    [
        (["--repeats", "0"], "--repeats must be at least 1. Received: --repeats=0"),
        (["--only", "no-such-case"], "No case matches --only='no-such-case'"),
        (["--peers-python", "/no/such/python"], "Received: --peers-python='/no/such/python'"),
    ],
)
def test_bad_arguments_are_refused_before_running_anything(args, message):
    done = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "run.py"), "--quick", *args],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode != 0 and message in done.stderr


def _run_script(name, *args):
    done = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", name), *args],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_profile_ops_lists_kernel_times():
    out = _run_script("profile_ops.py", "--arch", "tiny", "--batch", "2")
    ops = {}
    for line in out.splitlines():
        match = re.match(r"^  (.+?)\s+([0-9.]+) ms", line)
        if match:
            ops[match.group(1)] = float(match.group(2))
    assert any("MatMul" in op for op in ops), out
    assert "(all ops)" in ops and "Run" not in ops and "Process" not in ops
    kernels = sum(ms for op, ms in ops.items() if op != "(all ops)")
    assert 0 < kernels <= ops["(all ops)"] + 0.05 * len(ops)  # printed rounded to 0.1 ms


def test_attention_core_benchmark_compares_both_implementations():
    out = _run_script("attention_core.py", "--batch", "1", "--tokens", "5", "--heads", "2", "--head-dim", "8",
                      "--repeats", "1", "--iters", "1")
    assert out.count("speed-up") == 2 and "ops.dot_product_attention" in out and "heads_first_attention" in out
    differences = [float(line.split("max |difference| ")[1].split()[0]) for line in out.splitlines()
                   if "max |difference|" in line]
    assert max(differences) < 5e-2, out


def test_bf16_loss_curve_runs_both_precisions(tmp_path):
    pytest.importorskip("sklearn")
    out = _run_script("bf16_loss_curve.py", "--steps", "4", "--every", "2", "--batch", "8",
                      "--json", str(tmp_path / "curves.json"))
    assert "largest windowed difference" in out
    document = json.loads((tmp_path / "curves.json").read_text())
    assert {k: len(v) for k, v in document["curves"].items()} == {"float32": 4, "mixed_bfloat16": 4}
    assert all(math.isfinite(v) for curve in document["curves"].values() for v in curve)


@pytest.mark.parametrize("module", [flops, model_matmuls])
def test_benchmark_docstring_examples(module):
    import doctest

    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


def test_train_memory_reports_stages_trace_and_xla_temp(tmp_path):
    dump = tmp_path / "xla"
    done = subprocess.run(
        [sys.executable, os.path.join(REPO, "benchmarks", "train_memory.py"), "--arch", "tiny", "--batch", "4",
         "--steps", "1", "--trace", "--xla-dump", str(dump)],
        capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert re.search(r"tiny batch 4, rematerialize=True, XLA: imported \d+ MiB, built \d+, peak after the first "
                     r"step \d+, peak \d+; \d+ CPU ms", done.stdout)
    assert re.search(r"resident MiB over the first step \(s:MiB\): [0-9.]+:\d+", done.stdout)
    temp = re.search(r"XLA preallocated temporary buffer of the step: (\d+) MiB", done.stdout)
    assert temp and list(dump.glob("*buffer-assignment.txt"))


@pytest.mark.e2e
def test_file_bombs_benchmark_refuses_its_cases(tmp_path):
    """benchmarks/file_bombs.py runs and every case it makes is refused within its bounds (two cases here)."""
    out = tmp_path / "bombs.json"
    result = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "file_bombs.py"), "--json", str(out),
                             "--cases", "config 10**6 layers", "--cases", "int64 class token 2**62"],
                            capture_output=True, text=True, timeout=300, cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    results = json.loads(out.read_text())["results"]
    assert results["baseline (good file)"]["outcome"] == "loaded"
    assert results["config 10**6 layers"]["outcome"].startswith("refused: ")
    assert "int64" in results["int64 class token 2**62"]["outcome"]


@pytest.mark.e2e
def test_serving_paths_quick_run(tmp_path):
    """benchmarks/serving_paths.py --quick: a timed row per keras_vit serving path, the GEMM ceilings, and (where
    Debian's Fashion-MNIST is installed) every path's accuracy on a small test folder, of an untrained tiny model."""
    import runner_serving

    command = [sys.executable, os.path.join(REPO, "benchmarks", "serving_paths.py"), "--quick",
               "--workdir", str(tmp_path / "work"), "--json", str(tmp_path / "serving.json"),
               "--markdown", str(tmp_path / "SERVING.md")]
    fashion = os.path.isdir(os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist"))
    if fashion:
        import keras_vit
        import quality_data

        quality_data.make("fashion_mnist", str(tmp_path / "fashion"), train_per_class=7, test_per_class=3)
        keras_vit.ViT(image_size=28, patch_size=7, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32,
                      classes=10).save(str(tmp_path / "tiny.keras"))
        command += ["--accuracy-model", str(tmp_path / "tiny.keras"), "--accuracy-data", str(tmp_path / "fashion")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads((tmp_path / "serving.json").read_text())
    rows = {row["name"]: row for row in document["rows"]}
    for path in runner_serving.PATHS:
        assert rows[path]["b1"]["median_s"] > 0 and rows[path]["b16"]["items_per_s"] > 0, rows.get(path)
        assert rows[path]["gflops"] > 0 and rows[path]["ceiling_share"] > 0 and path in done.stdout
    assert {"float32", "bfloat16", "int8"} <= set(document["ceilings_gflops"])
    floor = rows["tensorflow/matmul-floor/bfloat16"]  # the model's products alone: what bounds a SavedModel
    assert floor["b1"]["median_s"] > 0 and floor["b16"]["items_per_s"] > 0 and floor["ceiling_share"] > 0
    assert document["host"]["cpu_model"] and "steal_share" in document["host"] and not document["peers"]
    assert "- command: `benchmarks/serving_paths.py --quick" in (tmp_path / "SERVING.md").read_text()
    if fashion:
        assert set(document["accuracy"]) == {"keras/float32", *runner_serving.PATHS}
        for name, result in document["accuracy"].items():
            assert result["images"] == 30 and 0 <= result["top1_accuracy"] <= 1, name
            assert result["agreement"] >= 0.5, name  # the float paths agree on (almost) every image


@pytest.mark.e2e
def test_lora_benchmark_reports_every_variant(tmp_path):
    """benchmarks/lora.py --quick: full fine-tuning, LoRA ranks and the linear probe on the transfer task, and the
    three step variants, each with positive figures; LoRA and the probe train fewer parameters than full."""
    out = tmp_path / "lora.json"
    done = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "lora.py"), "--quick", "--json", str(out)],
                          capture_output=True, text=True, timeout=1200, check=False, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads(out.read_text())
    assert set(document["transfer"]) == {"full", "lora4", "lora8", "lora16", "linear_probe"}
    for variant, records in document["transfer"].items():
        assert len(records) == 1, variant
        record = records[0]
        assert record["trainable_params"] > 0 and record["peak_rss_mb"] > 0 and record["wall_s"] > 0, variant
        assert 0 < record["accuracy"] <= 1, variant
        assert (record["step_s"] is None) == (variant == "linear_probe") and (record["step_s"] or 1) > 0, variant
    params = {variant: records[0]["trainable_params"] for variant, records in document["transfer"].items()}
    assert params["linear_probe"] < params["lora4"] < params["lora8"] < params["lora16"] < params["full"]
    assert set(document["step"]) == {"full", "lora8", "linear_probe"}
    for variant, record in document["step"].items():
        for key in ("trainable_params", "peak_rss_mb_after_warmup", "peak_rss_mb", "child_peak_rss_mb", "step_s"):
            assert record[key] > 0, (variant, key)
    step = document["step"]
    assert (step["linear_probe"]["trainable_params"] < step["lora8"]["trainable_params"]
            < step["full"]["trainable_params"] == step["full"]["total_params"])
    assert set(document["goal"]) == {"accuracy_points_lora8_minus_full", "step_memory_share_lora8_of_full", "met"}
    assert "| lora8 |" in done.stdout and "goal (LoRA rank 8" in done.stdout


def _peers_python():
    """$KERAS_VIT_PEERS_PYTHON, or ../peers-venv (benchmarks/README.md's environment) where it exists."""
    default = os.path.join(os.path.dirname(REPO), "peers-venv", "bin", "python")
    return os.environ.get("KERAS_VIT_PEERS_PYTHON") or (default if os.path.isfile(default) else None)


def test_accelerator_peaks_and_goals():
    import accelerator

    assert accelerator.peak_tflops("NVIDIA H100 80GB HBM3") == accelerator.peak_tflops("NVIDIA H200") == 989.0
    assert accelerator.peak_tflops("NVIDIA A100-SXM4-80GB") == 312.0
    assert accelerator.peak_tflops("NVIDIA H100 PCIe") is None and accelerator.peak_tflops("cpu") is None
    rows = [{"case": "keras_vit/jax/train/B16/XLA", "framework": "keras_vit (jax)", "task": "train", "model": "B16",
             "batch": 256, "img_per_s": 1100.0, "mfu": 0.45, "rematerialize": False},
            {"case": "timm/torch/train/B16/eager", "framework": "timm (torch)", "task": "train", "model": "B16",
             "batch": 192, "img_per_s": 1000.0, "mfu": 0.4, "rematerialize": None},
            {"case": "timm/torch/train/B16/compile", "framework": "timm (torch)", "task": "train", "model": "B16",
             "batch": 256, "img_per_s": 1200.0, "mfu": 0.5, "rematerialize": None}]
    ratios = accelerator.ratios(rows)
    assert ratios == [{"case": "keras_vit/jax/train/B16/XLA", "batch": 256, "vs": "timm/torch/train/B16/compile",
                       "ratio": pytest.approx(1100 / 1200, abs=1e-3)}]
    assert [g["met"] for g in accelerator.goals(rows, ratios, "B16")] == [False, True]


@pytest.mark.e2e
def test_accelerator_dry_run(tmp_path):
    """benchmarks/accelerator.py --dry-run: every case of a GPU run at a tiny size on the CPU (timm where a peers
    environment has it), the JSON and the table; without --dry-run this CPU is refused with one line."""
    command = [sys.executable, os.path.join(REPO, "benchmarks", "accelerator.py"), "--dry-run",
               "--json", str(tmp_path / "a.json"), "--markdown", str(tmp_path / "A.md")]
    peers = _peers_python()
    if peers:
        command += ["--peers-python", peers]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1200, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads((tmp_path / "a.json").read_text())
    assert document["device"]["platform"] == "cpu" and document["peak_bf16_tflops"] is None
    assert document["flops_source"] == "keras_vit.forward_flops"  # TensorFlow is installed here
    assert document["flops_per_image"]["tiny"] == pytest.approx(flops.arch_forward_gflop(cases.ARCHS["tiny"]) * 1e9)
    rows = {(r["case"], r["batch"]): r for r in document["rows"]}
    expected = {("keras_vit/jax/train/tiny/XLA", 2), ("keras_vit/jax/infer/tiny/XLA", 1),
                ("keras_vit/jax/infer/tiny/XLA", 2), ("keras_vit/tensorflow/train/tiny/XLA", 2),
                ("keras_vit/tensorflow/infer/tiny/XLA", 2), ("keras_vit/jax/train/tiny/XLA-remat", 2)}
    if peers:
        expected |= {(f"timm/torch/{task}/tiny/{mode}", 2) for task in ("train", "infer") for mode in ("eager", "compile")}
    assert expected <= set(rows), sorted(rows)
    for row in document["rows"]:
        assert row["img_per_s"] > 0 and row["mfu"] is None and {"case", "framework", "batch"} <= set(row)
    assert rows[("keras_vit/jax/infer/tiny/XLA", 2)]["flash_attention"] is False  # no cuDNN on a CPU
    table = (tmp_path / "A.md").read_text()
    assert "MFU omitted" in table and "| keras_vit/jax/train/tiny/XLA |" in table
    refused = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "accelerator.py"), "--backends", "jax",
                              "--json", str(tmp_path / "no.json"), "--markdown", str(tmp_path / "no.md")],
                             capture_output=True, text=True, timeout=300, cwd=REPO)
    assert refused.returncode != 0 and refused.stderr.strip().splitlines()[-1].startswith("jax sees no GPU")
    assert not (tmp_path / "no.json").exists()


def test_accelerator_wheels_fit_the_interpreter_and_out_of_memory_is_recognised():
    sys.path.insert(0, os.path.join(REPO, "tools"))
    import accelerator_wheels
    import runner_accelerator

    here = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    assert accelerator_wheels.fits("keras-3.15.1-py3-none-any.whl")
    assert accelerator_wheels.fits(f"optree-0.20.0-{here}-{here}-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl")
    assert not accelerator_wheels.fits("optree-0.20.0-cp39-cp39-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl")
    assert runner_accelerator.is_oom(RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate"))
    assert not runner_accelerator.is_oom(ValueError("shapes do not match"))


def test_quantized_load_benchmark_runs_quick(tmp_path):
    out = tmp_path / "load.json"
    subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "quantized_load.py"), "--quick", "--repeats=1",
                    f"--json={out}"], check=True, capture_output=True, text=True, timeout=600)
    result = json.loads(out.read_text())
    assert set(result["median_s"]) == {"float32", "int8"} and result["ratio"] == pytest.approx(
        result["median_s"]["int8"] / result["median_s"]["float32"])
