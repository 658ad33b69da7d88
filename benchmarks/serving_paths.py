"""Every serving path of one keras_vit model side by side: speed against the CPU's GEMM ceilings, and accuracy.

The same weights go through each path keras_vit exports (SavedModel float32 / bfloat16, TFLite float32 / dynamic
int8, ONNX Runtime float32 / dynamic int8, OpenVINO float32 / bf16 / int8), made once in a setup step into
`--workdir`; each timed case then loads its file in a fresh process (`child.py` + `runner_serving.py`), the
repeats interleaved, 2 threads everywhere. Batch 1 latency and batch 16 throughput, the 4096x4096 GEMM ceilings
of the same run (TensorFlow float32 / bf16, PyTorch bf16, int8 in ONNX Runtime and OpenVINO), timm ViT-B/16
(float32, bf16 autocast; its own random weights) from `--peers-python` as the PyTorch anchor, and with
`--accuracy-model` each path's top-1 and agreement with the float32 Keras model on a real test set.

Usage:
    python benchmarks/serving_paths.py --quick                      # tiny ViT at 32x32: validates the script
    python benchmarks/serving_paths.py --repeats 3 --peers-python ../peers-venv/bin/python \
        --workdir /tmp/serving_paths --accuracy-model runs/fashion/model.keras --accuracy-data /tmp/fashion \
        --json benchmarks/serving_paths.json --markdown benchmarks/SERVING_PATHS.md

The accuracy model (Fashion-MNIST, `apt-get install dataset-fashion-mnist`; ViT-B/16 fine-tuning does not fit
2 CPU cores, so the paths' accuracy is that of the training app's small model):
    python benchmarks/quality_data.py fashion_mnist /tmp/fashion --full
    python -m training.train --dataset=folder:/tmp/fashion --model=tiny --image_size=28 --epochs=10 \
        --workdir=runs/fashion                                      # writes runs/fashion/model.keras
"""

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import cases  # noqa: E402
import flops  # noqa: E402
import run as harness  # noqa: E402  (run_child, the /proc/stat steal share, the machine's description)
from runner_serving import PATHS  # noqa: E402

THREADS = 2
B16 = dict(image_size=224, patch_size=16, hidden_size=768, num_layers=12, num_heads=12, mlp_dim=3072, classes=1000)
FLAGS = ("amx_bf16", "amx_int8", "avx512_bf16", "avx512_vnni", "avx_vnni")
REFERENCE = "openvino/bfloat16"  # the ratio column's denominator
# (label, runner, precision, extra spec): the GEMM ceilings; the int8 ones in this module's runner.
CEILINGS = (
    ("TensorFlow float32", "matmul", "float32", {"task": "matmul", "jit": False}),
    ("TensorFlow bf16", "matmul", "bfloat16", {"task": "matmul", "jit": False}),
    ("PyTorch bf16", "torch_matmul", "bfloat16", {"task": "matmul"}),
    ("ONNX Runtime int8", "serving", "int8", {"task": "int8_matmul", "engine": "onnxruntime"}),
    ("OpenVINO int8", "serving", "int8", {"task": "int8_matmul", "engine": "openvino"}),
)
FLOOR = "tensorflow/matmul-floor/bfloat16"
"""The row of the model's matrix products alone in TensorFlow bf16 (`runner_matmul.py` task "floor"): no model
on TensorFlow's kernels, a SavedModel included, runs faster, so it bounds what a SavedModel goal can reach."""
CEILING_OF = {"float32": "float32", "bfloat16": "bfloat16", "dynamic int8": "int8", "int8": "int8"}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny ViT at 32x32, one repeat, few calls")
    parser.add_argument("--repeats", type=int, default=None, help="interleaved repeats (default 3; 1 with --quick)")
    parser.add_argument("--peers-python", default=None, help="python with torch + timm: timm and the PyTorch ceiling")
    parser.add_argument("--workdir", default=None, help="where the model and its exports are written (kept); "
                                                        "default: a temporary folder, removed at the end")
    parser.add_argument("--accuracy-model", default=None, help="a trained .keras (the training app's model.keras)")
    parser.add_argument("--accuracy-data", default=None, help="its ImageFolder ROOT: ROOT/test evaluated, "
                                                              "calibration from ROOT/train")
    parser.add_argument("--only", default="", help="comma-separated substrings of path names to run")
    parser.add_argument("--json", default=None, help="write the full results here")
    parser.add_argument("--markdown", default=None, help="write the tables, host and command here")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds allowed to one child process")
    args = parser.parse_args(argv)
    args.repeats = args.repeats or (1 if args.quick else 3)
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1. Received: --repeats={args.repeats}")
    if bool(args.accuracy_model) != bool(args.accuracy_data):
        parser.error("--accuracy-model and --accuracy-data go together. Received: "
                     f"--accuracy-model={args.accuracy_model!r}, --accuracy-data={args.accuracy_data!r}")
    if args.accuracy_data and not os.path.isdir(os.path.join(args.accuracy_data, "test")):
        parser.error(f"--accuracy-data must hold test/<class>/ and train/<class>/. Received: {args.accuracy_data!r}")
    return args


def iterations(quick, batch, kind="model"):
    """(warmup, timed calls) of one batch size (the warmup of a model case is that of its first batch)."""
    if quick:
        return 1, 3
    if kind == "matmul":
        return 2, 8
    return 2, (20 if batch == 1 else 6)


def host():
    """The CPU, its fast-int8/bf16 flags, cores and platform (`run.machine`), load average now."""
    info = harness.machine()
    try:
        with open("/proc/cpuinfo") as f:
            present = set(next(line for line in f if line.startswith("flags")).split(":", 1)[1].split())
    except (OSError, StopIteration):
        present = set()
    info["flags"] = [flag for flag in FLAGS if flag in present]
    return info


class Run:
    """The children of one benchmark run: specs, the Python each needs, results."""

    def __init__(self, args):
        self.args, self.arch = args, (cases.ARCHS["tiny"] if args.quick else B16)
        self.exports = {}  # model file -> {path: file, seconds (and what was quantized), or the error}

    def child(self, spec, python=None):
        spec = {"name": spec.get("name", spec["task"]), "threads": THREADS, "quick": self.args.quick, **spec}
        result = harness.run_child(spec, python or sys.executable, self.args.timeout)
        if result is not None:
            print(f"[{spec['name']}] {result['wall_s']:.0f} s", file=sys.stderr)
        return result

    def export_all(self, model, exports, calibration, paths):
        """Every path's file (one process); {path: file} of those written, the errors printed."""
        result = self.child({"name": "export", "runner": "serving", "task": "export", "model": model,
                             "exports": exports, "calibration": calibration, "paths": paths})
        written, outcomes = {}, (result or {}).get("extra", {}).get("exports", {})
        self.exports[model] = outcomes
        for path, outcome in outcomes.items():
            if "error" in outcome:
                print(f"[export {path}] failed: {outcome['error']}", file=sys.stderr)
            else:
                written[path] = outcome["file"]
        return written

    def timed_cases(self, files, peers):
        """(name, path label, precision, spec, python) of every timed case, in the order a repeat runs them."""
        n = cases.MATMUL_N["quick" if self.args.quick else "full"]
        warmup, iters = iterations(self.args.quick, 1, "matmul")
        timed = []
        for label, runner, precision, extra in CEILINGS:
            if runner == "torch_matmul" and "torch" not in peers:
                continue
            spec = {"runner": runner, "dtype": precision, "n": n, "warmup": warmup, "iters": {"1": iters}, **extra}
            timed.append((f"ceiling/{label}", label, precision, spec, self.args.peers_python if
                          runner == "torch_matmul" else None))
        model_batches = (1, 16)
        plan = {str(b): iterations(self.args.quick, b) for b in model_batches}
        common = {"batches": list(model_batches), "warmup": plan["1"][0], "iters": {b: i for b, (_, i) in plan.items()}}
        for path, file in files.items():
            spec = {"runner": "serving", "task": "serve", "path": path, "file": file,
                    "image_size": self.arch["image_size"], **common}
            timed.append((path, PATHS[path][0], PATHS[path][1], spec, None))
        if any(path.startswith("savedmodel/") for path in files):  # what TensorFlow's kernels allow a SavedModel
            spec = {"runner": "matmul", "task": "floor", "dtype": "bfloat16", "jit": False, "arch": self.arch, **common}
            timed.append((FLOOR, "TensorFlow", "bfloat16", spec, None))
        if "timm" in peers:
            for dtype in ("float32", "bfloat16"):
                spec = {"runner": "timm", "task": "infer", "dtype": dtype, "arch": self.arch, **common}
                timed.append((f"timm/{dtype}", "PyTorch eager", dtype, spec, self.args.peers_python))
        return timed


def peers_available(peers_python):
    """{"torch", "timm"}, those importable in `peers_python` (none without it)."""
    if not peers_python:
        return set()
    found = set()
    for module in ("torch", "timm"):
        probe = subprocess.run([peers_python, "-c", f"import {module}"], capture_output=True, timeout=300)
        found |= {module} if probe.returncode == 0 else set()
    return found


def median_rows(timed, results, gflop_per_image):
    """One row per timed case: the medians over repeats of each process's median time per batch."""
    rows = []
    for name, label, precision, spec, _ in timed:
        runs = results.get(name, [])
        row = {"name": name, "engine": label, "precision": precision, "repeats": len(runs),
               "extra": runs[-1].get("extra", {}) if runs else {}}
        for batch in (1, 16):
            times = [b["median_s"] for r in runs for b in r["batches"] if b["batch"] == batch]
            if times:
                median = statistics.median(times)
                row[f"b{batch}"] = {"median_s": median, "per_repeat_s": times, "items_per_s": batch / median,
                                    "spread": (max(times) - min(times)) / median,
                                    "median_cpu_s": statistics.median(
                                        b.get("median_cpu_s") or 0.0 for r in runs for b in r["batches"]
                                        if b["batch"] == batch)}
        if name.startswith("ceiling/") and "b1" in row:
            row["gflops"] = flops.matmul_gflop(spec["n"]) / row["b1"]["median_s"]
        elif "b16" in row:
            row["gflops"] = gflop_per_image * row["b16"]["items_per_s"]
        rows.append(row)
    ceilings = {}
    for row in rows:
        if row["name"].startswith("ceiling/") and "gflops" in row and row["extra"].get("int8", True):
            ceilings[row["precision"]] = max(ceilings.get(row["precision"], 0.0), row["gflops"])
    reference = next((r for r in rows if r["name"] == REFERENCE), {})
    for row in rows:
        if row["name"].startswith("ceiling/"):
            continue
        ceiling = ceilings.get(CEILING_OF[row["precision"]])
        if ceiling and "gflops" in row:
            row["ceiling_share"] = row["gflops"] / ceiling
        for batch in (1, 16):
            if f"b{batch}" in row and f"b{batch}" in reference:  # > 1: faster than OpenVINO bf16
                ours, theirs = row[f"b{batch}"]["median_s"], reference[f"b{batch}"]["median_s"]
                row[f"speed_vs_{REFERENCE}_b{batch}"] = theirs / ours
    return rows, ceilings


def _cell(value, fmt):
    return "-" if value is None else format(value, fmt)


def tables(rows, ceilings, accuracy, gflop_per_image):
    """The speed table (with accuracy columns when measured), the ceilings, and the accuracy reference line."""
    ratio = f"speed_vs_{REFERENCE}"
    lines = ["| path | precision | batch-1 ms | batch-16 img/s | x OV bf16 (b1 / b16) | % GEMM ceiling (b16) "
             "| top-1 | agreement |", "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in rows:
        if row["name"].startswith("ceiling/"):
            continue
        b1, b16, acc = row.get("b1", {}), row.get("b16", {}), accuracy.get(row["name"], {})
        lines.append(
            f"| {row['name']} | {row['precision']} | {_cell(b1.get('median_s', 0) * 1e3 or None, '.2f')} "
            f"| {_cell(b16.get('items_per_s'), '.1f')} | {_cell(row.get(ratio + '_b1'), '.2f')} / "
            f"{_cell(row.get(ratio + '_b16'), '.2f')} | {_cell(row.get('ceiling_share', 0) * 100 or None, '.0f')}% "
            f"| {_cell(acc.get('top1_accuracy'), '.4f')} | {_cell(acc.get('agreement'), '.4f')} |")
    for name, acc in accuracy.items():
        if name not in {r["name"] for r in rows}:  # the Keras reference, and paths not timed
            lines.append(f"| {name} | {acc.get('precision', '')} | | | | | {_cell(acc.get('top1_accuracy'), '.4f')} "
                         f"| {_cell(acc.get('agreement'), '.4f')} |")
    lines += ["", "| GEMM ceiling (n x n) | precision | GFLOP/s (int8: GOP/s) | note |", "| --- | --- | ---: | --- |"]
    for row in rows:
        if row["name"].startswith("ceiling/"):
            extra = row["extra"]
            note = extra.get("kernel", "")
            if extra.get("int8") is False:
                note += f"; ran as {extra.get('matmul_runtime_precision')}, not int8: not a ceiling"
            lines.append(f"| {row['engine']} | {row['precision']} | {_cell(row.get('gflops'), '.0f')} | {note} |")
    if "int8" not in ceilings:
        lines.append("| int8 | int8 | - | no int8 matmul measured cleanly in this run |")
    lines.append(f"\n{gflop_per_image:.3g} GFLOP per image (matrix products, flops.py). `x OV bf16`: OpenVINO bf16's "
                 "time over the row's (> 1: faster). `% GEMM ceiling`: batch-16 GFLOP/s over the best n x n matmul of "
                 f"the row's precision in this run (dynamic int8 against int8). `{FLOOR}`: ViT's matrix products "
                 "alone (no LayerNorm, softmax, GELU, casts), the most a SavedModel can reach on TensorFlow's bf16 "
                 "kernels. timm: its own random weights, bf16 by CPU autocast. Agreement: share of test images whose "
                 "top-1 is the float32 Keras model's.")
    return "\n".join(lines)


def host_line(info):
    steal = info.get("steal_share")
    flags = " ".join(info["flags"]) or "none of " + ", ".join(FLAGS)
    return (f"{info['cpu_model']}, {info['cores']} cores, flags: {flags}"
            f"; load average {info['load_average_at_start'][0]:.2f} at start, {info['load_average_at_end'][0]:.2f} "
            f"at end; CPU steal {'-' if steal is None else f'{steal * 100:.1f}%'} over the run")


def accuracy_run(run, args, workdir, only):
    """{name: top-1, agreement}: the Keras float32 reference, then each path's export of the trained model."""
    folder = os.path.join(workdir, "accuracy")
    calibration, test_set = os.path.join(folder, "calibration"), os.path.join(folder, "test_set.npz")
    prepared = run.child({"name": "accuracy/prepare", "runner": "serving", "task": "prepare_accuracy",
                          "model": os.path.abspath(args.accuracy_model), "data": os.path.abspath(args.accuracy_data),
                          "calibration": calibration, "test_set": test_set})
    if prepared is None:
        return {}
    accuracy = {"keras/float32": dict(prepared["extra"], precision="float32")}
    files = run.export_all(os.path.abspath(args.accuracy_model), os.path.join(folder, "exports"), calibration, only)
    for path, file in files.items():
        result = run.child({"name": f"accuracy/{path}", "runner": "serving", "task": "accuracy", "path": path,
                            "file": file, "test_set": test_set})
        if result is not None:
            accuracy[path] = dict(result["extra"], precision=PATHS[path][1])
    return accuracy


def main(argv=None):
    args = parse_args(argv)
    only = [p for p in PATHS if not args.only or any(s in p for s in args.only.split(","))]
    if not only:
        raise SystemExit(f"No path matches --only={args.only!r}. Paths: {', '.join(PATHS)}")
    peers = peers_available(args.peers_python)
    workdir = os.path.abspath(args.workdir or tempfile.mkdtemp(prefix="keras_vit_serving_"))
    os.makedirs(workdir, exist_ok=True)
    run, started, info = Run(args), datetime.datetime.now(datetime.timezone.utc), host()
    jiffies = harness.cpu_jiffies()
    gflop_per_image = flops.arch_forward_gflop(run.arch)
    try:
        model, calibration = os.path.join(workdir, "model.keras"), os.path.join(workdir, "calibration")
        if run.child({"name": "prepare", "runner": "serving", "task": "prepare", "model": model,
                      "calibration": calibration, "arch": run.arch}) is None:
            raise SystemExit("The timing model could not be made (see above).")
        files = run.export_all(model, os.path.join(workdir, "exports"), calibration, only)
        timed = run.timed_cases(files, peers)
        results = {name: [] for name, *_ in timed}
        for repeat in range(args.repeats):
            for name, _, _, spec, python in timed:
                result = run.child(dict(spec, name=f"{name} (repeat {repeat + 1}/{args.repeats})"), python)
                if result is not None:
                    results[name].append(result)
        accuracy = accuracy_run(run, args, workdir, only) if args.accuracy_model else {}
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    rows, ceilings = median_rows(timed, results, gflop_per_image)
    info["load_average_at_end"] = os.getloadavg()
    info["steal_share"] = harness.steal_share(jiffies, harness.cpu_jiffies())
    command = " ".join(["benchmarks/serving_paths.py"] + (sys.argv[1:] if argv is None else list(argv)))
    text = tables(rows, ceilings, accuracy, gflop_per_image)
    print(f"host: {host_line(info)}\n\n{text}")
    document = {"date": started.isoformat(timespec="seconds"), "command": command, "quick": args.quick,
                "repeats": args.repeats, "threads": THREADS, "arch": run.arch, "gflop_per_image": gflop_per_image,
                "elapsed_s": (datetime.datetime.now(datetime.timezone.utc) - started).total_seconds(),
                "host": info, "peers": sorted(peers),
                "pythons": {"keras_vit": sys.executable, "peers": args.peers_python},
                "rows": rows, "ceilings_gflops": ceilings, "accuracy": accuracy, "exports": run.exports,
                "accuracy_model": args.accuracy_model, "accuracy_data": args.accuracy_data}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(document, f, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(f"# keras_vit serving paths\n\n- date: {document['date']}\n- host: {host_line(info)}\n"
                    f"- command: `{command}`\n- {THREADS} threads per engine; {args.repeats} interleaved repeat(s), "
                    f"one process per case; medians over repeats of each process's median call\n\n{text}\n")
    return document


if __name__ == "__main__":
    main()
