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
    pairs = model_matmuls.operand_pairs(cases.ARCHS[arch], batch, lambda shape: object())
    assert len(pairs) == sum(p.count for p in products)
    assert len({id(b) for _, b in pairs}) == len(pairs)  # every weight distinct
    assert len({id(a) for a, _ in pairs}) == len(products)  # one activation per kind of product


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


def test_torch_floor_cases_run_in_the_peers_environment():
    built = cases.build_cases(peers=("torch_matmul",))
    names = [c.name for c in built]
    assert len(names) == len(set(names))
    torch_floor = [c for c in built if c.runner == "torch_matmul"]
    assert {c.dtype for c in torch_floor} == {"float32", "bfloat16"}
    assert all(c.is_peer and c.task == "floor" and c.batches == (1, 16) for c in torch_floor)
    tf_floor = [c for c in built if c.task == "floor" and c.runner == "matmul"]
    assert len(tf_floor) == 2 and not any(c.is_peer for c in tf_floor)
    assert not any(c.runner == "torch_matmul" for c in cases.build_cases(peers=("timm",)))


def test_benchmark_architectures_are_the_variant_table():
    from keras_vit.variants import get_variant

    for name in ("B16", "S16"):
        variant, arch = get_variant(name), cases.ARCHS[name]
        assert (arch["patch_size"], arch["hidden_size"], arch["num_layers"], arch["num_heads"], arch["mlp_dim"]) == (
            variant.patch_size, variant.hidden_size, variant.num_layers, variant.num_heads, variant.mlp_dim)


def _row(runner, task, dtype, batch, seconds, rss=1000.0, extra=None, arch="B16"):
    return {"name": f"{runner}/{task}/{dtype}", "runner": runner, "task": task, "dtype": dtype, "arch": arch,
            "batch": batch, "median_s": seconds, "items_per_s": batch / seconds, "peak_rss_mb": rss,
            "gflop_per_item": 35.1, "extra": extra or {}}


def test_ratios_and_goals_arithmetic():
    rows = [
        _row("keras_vit", "infer", "float32", 16, 1.0, rss=900.0),   # 16 img/s
        _row("keras_hub", "infer", "float32", 16, 2.0, rss=1200.0),  # 8 img/s
        _row("timm", "infer", "float32", 16, 4.0, rss=800.0),        # 4 img/s
        _row("keras_vit", "infer", "float32", 1, 0.1),
        _row("keras_vit", "infer", "bfloat16", 16, 0.5, extra={"logits_rel_l2_vs_float32": 0.01}),
        _row("timm", "infer", "bfloat16", 16, 1.0),
    ]
    rows[0]["ceiling_share"] = 0.95
    rows[4]["ceiling_share"] = 0.7
    ratios = {(r["b"], r["batch"]): r["ratio"] for r in report.peer_ratios(rows)}
    assert ratios[("keras_hub/infer/float32", 16)] == pytest.approx(2.0)
    assert ratios[("timm/infer/float32", 16)] == pytest.approx(4.0)
    assert ratios[("timm/infer/bfloat16", 16)] == pytest.approx(2.0)
    goals = {g["goal"]: g for g in report.goals(rows, {"float32": 351.0}, big_batch=16)}
    fastest = goals["float32 batch 16: >= 1.1x fastest peer"]
    assert fastest["value"] == pytest.approx(2.0) and fastest["met"] is True
    memory = goals["float32 batch 16 peak RSS <= leanest peer's (ratio)"]
    assert memory["value"] == pytest.approx(900 / 800) and memory["met"] is False
    latency = goals["float32 batch 1 latency <= 1.1x ceiling time (ratio)"]
    assert latency["value"] == pytest.approx(0.1 / (35.1 / 351.0)) and latency["met"] is True
    assert goals["bfloat16 batch 16: >= 80% of bf16 matmul ceiling"]["met"] is False
    assert goals["bfloat16 logits within 2e-2 relative (L2) of float32"]["met"] is True
    assert "training: >= 1.1x best peer" not in goals  # no training row: no goal claimed


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


@pytest.mark.slow
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


@pytest.mark.parametrize("module", [flops, model_matmuls])
def test_benchmark_docstring_examples(module):
    import doctest

    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
