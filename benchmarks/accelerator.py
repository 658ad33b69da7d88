"""keras_vit on one accelerator against timm: ViT-S/16 and ViT-B/16 training steps and inference in bf16, img/s and MFU.

One run, at most `--budget-s` seconds (8 minutes by default): keras_vit on the JAX backend (and TensorFlow where
it is installed) with `mixed_bfloat16` and XLA, timm's same models on PyTorch (bf16 autocast, eager and
`torch.compile`), every case in its own process (`child.py` + `runner_accelerator.py`), cases interleaved across
frameworks and repeats. Training runs at the largest batch that fits, searching down from 256 on out-of-memory;
inference at batch 1 and 256. MFU = FLOPs per image (`keras_vit.forward_flops` where TensorFlow is installed,
else `flops.py`'s count, equal for a ViT; a training step = 3 forwards) x img/s / the device's dense bf16 peak
(H100 SXM and H200 989 TFLOP/s, A100 312; another device: MFU omitted, and said).

Usage:
    KERAS_BACKEND=jax python benchmarks/accelerator.py             # on the GPU: results_accelerator.{json,md}
    python benchmarks/accelerator.py --dry-run --json /tmp/a.json   # on a CPU: tiny ViT, batch 2, two steps

`--dry-run` runs every case at a tiny size on the CPU (the e2e tier runs it); without it, a device that is not a
GPU with bf16 is refused with one line. benchmarks/README.md ("Accelerator benchmark") has the recipe for a
machine without Keras (tools/accelerator_wheels.sh).
"""

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import flops as flops_lib  # noqa: E402
import measure  # noqa: E402
from cases import ARCHS  # noqa: E402
from runner_accelerator import ERROR_PREFIX  # noqa: E402

REPO = os.path.dirname(HERE)
RESULTS_JSON = os.path.join(HERE, "results_accelerator.json")
RESULTS_MARKDOWN = os.path.join(HERE, "RESULTS_ACCELERATOR.md")

PEAK_BF16_TFLOPS = (  # (what the device name contains, dense bf16 TFLOP/s without sparsity), first match wins
    (("H200",), 989.0),
    (("H100", "HBM3"), 989.0),  # H100 SXM5 names itself "NVIDIA H100 80GB HBM3"
    (("H100", "SXM"), 989.0),
    (("A100",), 312.0),
)
TRAIN_BATCHES = (256, 192, 128, 96, 64, 48, 32, 16, 8, 4, 2, 1)
"""Training batch sizes tried, largest first, until one fits in device memory."""
INFER_BATCHES = (1, 256)
SIZES = {  # per kind of call: (warmup, timed) calls
    "full": {"train": (3, 10), "infer_1": (5, 30), "infer": (2, 10)},
    "dry": {"train": (1, 2), "infer_1": (1, 2), "infer": (1, 2)},
}
MIN_CASE_S = 30.0
"""A case is started only with at least this many seconds (or its last wall time) left in the budget."""


class Case:
    def __init__(self, framework, mode, task, arch, backend="", rematerialize=False):
        self.framework, self.mode, self.task, self.arch = framework, mode, task, arch
        self.backend, self.rematerialize = backend, rematerialize

    @property
    def name(self):
        what = self.backend if self.framework == "keras_vit" else "torch"
        label = self.mode + ("-remat" if self.rematerialize else "")
        return f"{self.framework}/{what}/{self.task}/{self.arch}/{label}"

    @property
    def framework_label(self):
        return f"keras_vit ({self.backend})" if self.framework == "keras_vit" else "timm (torch)"


def peak_tflops(device_name):
    """The dense bf16 peak of a device named `device_name`, or None when it is not in `PEAK_BF16_TFLOPS`."""
    name = (device_name or "").upper()
    for parts, peak in PEAK_BF16_TFLOPS:
        if all(part in name for part in parts):
            return peak
    return None


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true", help="tiny ViT, batch 2, two steps, on the CPU")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="seconds for the whole run (default 480; 900 with --dry-run); cases that would not "
                             "fit are skipped and listed")
    parser.add_argument("--repeats", type=int, default=None,
                        help="interleaved repeats, budget permitting (default 2; 1 with --dry-run)")
    parser.add_argument("--backends", default="jax,tensorflow",
                        help="Keras backends for keras_vit, each used where it imports (default jax,tensorflow)")
    parser.add_argument("--peers-python", default=None,
                        help="python with torch and timm (default: this one, if it has them)")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile cases")
    parser.add_argument("--only", default="", help="comma-separated substrings of the case names to run")
    parser.add_argument("--json", default=None, help="default benchmarks/results_accelerator.json (none with --dry-run)")
    parser.add_argument("--markdown", default=None,
                        help="default benchmarks/RESULTS_ACCELERATOR.md (none with --dry-run)")
    args = parser.parse_args(argv)
    if args.budget_s is None:
        args.budget_s = 900.0 if args.dry_run else 480.0
    if args.repeats is None:
        args.repeats = 1 if args.dry_run else 2
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1. Received: --repeats={args.repeats}")
    if not args.dry_run:
        args.json = args.json or RESULTS_JSON
        args.markdown = args.markdown or RESULTS_MARKDOWN
    return args


def _env(workdir, backend=None):
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if backend:
        env["KERAS_BACKEND"] = backend
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    # Compiled programs are kept across this run's processes: a repeat does not pay for compilation again.
    env.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(workdir, "jax_cache"))
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(workdir, "inductor_cache"))
    return env


def _imports(python, module, workdir):
    try:
        return subprocess.run([python, "-c", f"import {module}"], capture_output=True, env=_env(workdir),
                              timeout=300).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def run_child(spec, python, env, timeout):
    """(result or None, the reason when None). A child's ERROR_PREFIX line ends the whole run (SystemExit)."""
    start = time.perf_counter()
    try:
        done = subprocess.run([python, os.path.join(HERE, "child.py"), json.dumps(spec)], capture_output=True,
                              text=True, timeout=max(1.0, timeout), env=env, cwd=REPO)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout:.0f} s"
    for line in done.stdout.splitlines():
        if line.startswith(ERROR_PREFIX):
            raise SystemExit(line[len(ERROR_PREFIX):])
        if line.startswith(measure.RESULT_PREFIX):
            result = json.loads(line[len(measure.RESULT_PREFIX):])
            result["wall_s"] = time.perf_counter() - start
            return result, None
    tail = "\n".join((done.stdout + done.stderr).splitlines()[-12:])
    return None, f"failed (exit {done.returncode}):\n{tail}"


def build_cases(arch_names, backends, timm, compile_):
    """Every case, in the order a repeat runs them: frameworks interleaved within each (task, model)."""
    cases = []
    for task in ("train", "infer"):
        for arch in arch_names:
            for index, backend in enumerate(backends):
                cases.append(Case("keras_vit", "XLA", task, arch, backend))
                if index == 0 and timm:  # timm once per (task, model), after the first backend's keras_vit
                    cases.append(Case("timm", "eager", task, arch))
                    if compile_:
                        cases.append(Case("timm", "compile", task, arch))
    # The model's default (activations recomputed in the backward pass) last: run when the budget allows.
    for backend in backends[:1]:
        cases.append(Case("keras_vit", "XLA", "train", arch_names[0], backend, rematerialize=True))
    return cases


def spec_for(case, arch, dry_run, batches):
    sizes = SIZES["dry" if dry_run else "full"]
    iters, warmup = {}, 0
    for batch in batches:
        kind = case.task if case.task == "train" else ("infer_1" if batch == 1 else "infer")
        warmup, iters[str(batch)] = sizes[kind]
    return {"name": case.name, "runner": "accelerator", "framework": case.framework, "backend": case.backend,
            "mode": case.mode, "task": case.task, "arch": arch, "batches": list(batches), "warmup": warmup,
            "iters": iters, "dry_run": dry_run, "rematerialize": case.rematerialize}


def _median(values):
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])


def build_rows(cases, results, flops_per_image, peak):
    """One row per (case, batch): median over repeats of each process's median step time."""
    rows = []
    for case in cases:
        by_batch = {}
        for result in results.get(case.name, []):
            for entry in result["batches"]:
                by_batch.setdefault(entry["batch"], []).append(entry["median_s"])
        for batch, medians in sorted(by_batch.items()):
            seconds = _median(medians)
            img_per_s = batch / seconds
            multiple = flops_lib.TRAIN_FORWARD_MULTIPLE if case.task == "train" else 1.0
            achieved = flops_per_image[case.arch] * multiple * img_per_s
            extras = [r.get("extra", {}) for r in results[case.name]]
            rows.append({
                "case": case.name, "framework": case.framework_label, "mode": case.mode, "task": case.task,
                "model": case.arch, "batch": batch, "img_per_s": round(img_per_s, 2),
                "step_ms": round(1e3 * seconds, 3), "repeats": len(medians),
                "tflop_per_s": float(f"{achieved / 1e12:.4g}"),
                "mfu": None if peak is None else round(achieved / (peak * 1e12), 4),
                "oom_batches": sorted({b for e in extras for b in e.get("oom", [])}, reverse=True),
                "flash_attention": next((e["flash_attention"] for e in extras if "flash_attention" in e), None),
                "rematerialize": case.rematerialize if case.framework == "keras_vit" else None,
            })
    return rows


def ratios(rows):
    """keras_vit img/s over timm's best (eager or compiled) for the same task, model and batch (training: at
    each one's own largest batch)."""
    out = []
    for row in rows:
        if not row["framework"].startswith("keras_vit"):
            continue
        peers = [r for r in rows if r["framework"].startswith("timm") and r["task"] == row["task"]
                 and r["model"] == row["model"] and (row["task"] == "train" or r["batch"] == row["batch"])]
        if peers:
            best = max(peers, key=lambda r: r["img_per_s"])
            out.append({"case": row["case"], "batch": row["batch"], "vs": best["case"],
                        "ratio": round(row["img_per_s"] / best["img_per_s"], 3)})
    return out


def goals(rows, ratio_rows, big_model):
    """The issue's goals: keras_vit training >= 1.0x timm's best for every size; >= 40% MFU for B/16 training."""
    out = []
    for entry in ratio_rows:
        if "/train/" in entry["case"] and "-remat" not in entry["case"]:
            out.append({"goal": f"{entry['case']} >= 1.0x {entry['vs']}", "value": entry["ratio"],
                        "met": entry["ratio"] >= 1.0})
    for row in rows:
        if row["framework"].startswith("keras_vit") and row["task"] == "train" and row["model"] == big_model \
                and row["mfu"] is not None and not row["rematerialize"]:
            out.append({"goal": f"{row['case']} MFU >= 40%", "value": row["mfu"], "met": row["mfu"] >= 0.40})
    return out


def table(document):
    peak = document["peak_bf16_tflops"]
    lines = ["| case | framework | batch | img/s | step ms | TFLOP/s | MFU | vs timm best |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    ratio_of = {(r["case"], r["batch"]): r for r in document["ratios"]}
    for row in document["rows"]:
        ratio = ratio_of.get((row["case"], row["batch"]))
        mfu = "n/a" if row["mfu"] is None else f"{100 * row['mfu']:.1f}%"
        versus = "" if ratio is None else f"{ratio['ratio']:.2f}x"
        oom = f" (OOM at {', '.join(map(str, row['oom_batches']))})" if row["oom_batches"] else ""
        lines.append(f"| {row['case']} | {row['framework']} | {row['batch']}{oom} | {row['img_per_s']:.1f} | "
                     f"{row['step_ms']:.2f} | {row['tflop_per_s']:.3g} | {mfu} | "
                     f"{versus} |")
    notes = [f"Device: {document['device']['name']} ({document['device']['framework']} "
             f"{document['device']['version']}); "
             + (f"dense bf16 peak {peak:g} TFLOP/s." if peak else
                "MFU omitted: no dense bf16 peak is known for this device (benchmarks/accelerator.py "
                "PEAK_BF16_TFLOPS).")]
    notes.append(f"FLOPs per image from {document['flops_source']}: "
                 + ", ".join(f"{k} {v / 1e9:.4g} GFLOP" for k, v in document["flops_per_image"].items())
                 + "; a training step counts 3 forwards.")
    flash = {r["case"]: r["flash_attention"] for r in document["rows"] if r["flash_attention"] is not None}
    if flash:
        notes.append("cuDNN fused (flash) attention in keras_vit's compiled JAX inference: "
                     + ", ".join(f"{k}: {'yes' if v else 'no'}" for k, v in flash.items()) + ".")
    for goal in document["goals"]:
        notes.append(f"Goal {goal['goal']}: {goal['value']} ({'met' if goal['met'] else 'NOT met'}).")
    for skipped in document["skipped"]:
        notes.append(f"Not measured: {skipped}.")
    return "\n".join(lines) + "\n\n" + "\n".join(f"- {note}" for note in notes) + "\n"


def markdown(document, text):
    return (f"# Accelerator benchmark\n\n{document['date']}, `{document['command']}`, "
            f"{document['elapsed_s']:.0f} s{' (dry run: tiny ViT on the CPU)' if document['dry_run'] else ''}.\n\n"
            + text)


def main(argv=None):
    args = parse_args(argv)
    started = time.monotonic()
    started_at = datetime.datetime.now(datetime.timezone.utc)
    deadline = started + args.budget_s
    workdir = tempfile.mkdtemp(prefix="keras_vit_accel_")
    skipped = []
    try:
        backends = [b for b in args.backends.split(",") if b]
        modules = {"jax": "jax", "tensorflow": "tensorflow"}  # the backends runner_accelerator runs
        for backend in list(backends):
            if backend not in modules or not _imports(sys.executable, f"{modules[backend]}, keras", workdir):
                backends.remove(backend)
                skipped.append(f"keras_vit on the {backend} backend ({backend} or keras does not import)")
        if not backends:
            raise SystemExit(f"No Keras backend of --backends={args.backends!r} imports with keras in {sys.executable}.")
        peers_python = args.peers_python or sys.executable
        timm = _imports(peers_python, "torch, timm", workdir)
        if not timm:
            skipped.append(f"timm (torch and timm do not import in {peers_python})")
        if args.no_compile:
            skipped.append("torch.compile (--no-compile)")
        arch_names = ["tiny"] if args.dry_run else ["B16", "S16"]  # B/16 first: the goals' model

        # The device, refused at once without a GPU with bf16 (one line from the child).
        probe, reason = run_child(spec_for(Case("keras_vit", "XLA", "probe", arch_names[0], backends[0]),
                                           ARCHS[arch_names[0]], args.dry_run, ()), sys.executable,
                                  _env(workdir, backends[0]), deadline - time.monotonic())
        if probe is None:
            raise SystemExit(f"The device probe ({backends[0]}) {reason}")
        device = probe["extra"]["device"]
        from runner_accelerator import AcceleratorError, check_device
        try:
            check_device(device, args.dry_run)
        except AcceleratorError as error:
            raise SystemExit(str(error)) from None
        peak = peak_tflops(device["name"]) if device["platform"] == "gpu" else None
        print(f"[device] {device['name']} ({device['framework']} {device['version']}), "
              f"peak {peak or 'unknown: MFU omitted'}", file=sys.stderr)

        # FLOPs per image: keras_vit.forward_flops (TensorFlow) where it is installed, else the analytic count.
        flops_per_image = {name: flops_lib.arch_forward_gflop(ARCHS[name]) * 1e9 for name in arch_names}
        flops_source = "benchmarks/flops.py (TensorFlow missing: keras_vit.forward_flops needs it)"
        if _imports(sys.executable, "tensorflow, keras", workdir):
            counted = {}
            for name in arch_names:
                spec = spec_for(Case("keras_vit", "XLA", "flops", name, "tensorflow"), ARCHS[name], True, ())
                result, reason = run_child(spec, sys.executable, _env(workdir, "tensorflow"),
                                           min(300.0, deadline - time.monotonic()))
                if result is None:
                    print(f"[flops] {name}: {reason}; using flops.py", file=sys.stderr)
                    break
                counted[name] = result["extra"]["flops"]
            if len(counted) == len(arch_names):
                analytic = dict(flops_per_image)
                flops_per_image, flops_source = counted, "keras_vit.forward_flops"
                print(f"[flops] keras_vit.forward_flops {counted}; flops.py {analytic}", file=sys.stderr)

        cases = [c for c in build_cases(arch_names, backends, timm, not args.no_compile)
                 if not args.only or any(s in c.name for s in args.only.split(","))]
        if not cases:
            raise SystemExit(f"No case matches --only={args.only!r}.")
        results = {c.name: [] for c in cases}
        train_batch = {}  # case -> the batch that fitted in its first run
        last_wall = {}
        for repeat in range(args.repeats):
            for case in cases:
                left = deadline - time.monotonic()
                needed = max(MIN_CASE_S, last_wall.get(case.name, 0.0)) if not args.dry_run else 1.0
                if left < needed:
                    skipped.append(f"{case.name} repeat {repeat + 1} ({left:.0f} s of the budget left)")
                    continue
                if case.task == "train":
                    start = 2 if args.dry_run else TRAIN_BATCHES[0]
                    batches = train_batch.get(case.name) or [b for b in TRAIN_BATCHES if b <= start]
                else:
                    batches = (1, 2) if args.dry_run else INFER_BATCHES
                python = peers_python if case.framework == "timm" else sys.executable
                spec = spec_for(case, ARCHS[case.arch], args.dry_run, batches)
                result, reason = run_child(spec, python, _env(workdir, case.backend or None), left)
                if result is None:
                    print(f"[{case.name}] {reason}", file=sys.stderr)
                    skipped.append(f"{case.name} repeat {repeat + 1} ({reason.splitlines()[0]})")
                    continue
                last_wall[case.name] = result["wall_s"]
                results[case.name].append(result)
                if case.task == "train":
                    train_batch[case.name] = [result["batches"][0]["batch"]]
                print(f"[repeat {repeat + 1}/{args.repeats}] {case.name}: {result['wall_s']:.0f} s, "
                      + ", ".join(f"batch {b['batch']}: {b['median_s'] * 1e3:.2f} ms" for b in result["batches"]),
                      file=sys.stderr)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    rows = build_rows(cases, results, flops_per_image, peak)
    ratio_rows = ratios(rows)
    document = {
        "date": started_at.isoformat(timespec="seconds"),
        "elapsed_s": round(time.monotonic() - started, 1),
        "command": " ".join(["benchmarks/accelerator.py"] + (sys.argv[1:] if argv is None else list(argv))),
        "dry_run": args.dry_run, "budget_s": args.budget_s, "repeats": args.repeats,
        "device": device, "peak_bf16_tflops": peak,
        "flops_per_image": flops_per_image, "flops_source": flops_source,
        "rows": rows, "ratios": ratio_rows, "goals": goals(rows, ratio_rows, arch_names[0]), "skipped": skipped,
    }
    text = table(document)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(document, f, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(document, text))
    return document


if __name__ == "__main__":
    main()
