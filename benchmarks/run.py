"""Benchmarks keras_vit against its peers on this machine and prints one table (and writes JSON).

Every case runs in a fresh child process, and the repeats are interleaved (A B C A B C ...) so that
slow drift of a shared machine lands on every case alike; each figure is the median over repeats of
each process's median call time. Peers (timm, keras-hub) run from another Python environment given
by `--peers-python`, in the same run, and the report prints keras_vit's throughput ratios against them.

Usage:
    python benchmarks/run.py --quick                     # tiny sizes, seconds: validates the harness
    python benchmarks/run.py --repeats 3 --peers-python /path/to/peers-venv/bin/python \
        --json benchmarks/results.json

See benchmarks/README.md for what each case measures and benchmarks/RESULTS.md for the last results.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import cases as cases_lib  # noqa: E402
import measure  # noqa: E402
import report  # noqa: E402

REPO = os.path.dirname(HERE)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes and one repeat, for validation")
    parser.add_argument("--repeats", type=int, default=None, help="interleaved repeats (default 3; 1 with --quick)")
    parser.add_argument("--peers-python", default=None,
                        help="python of an environment with timm and/or keras-hub; peers are skipped without it")
    parser.add_argument("--keras-vit-python", default=sys.executable,
                        help="python that runs keras_vit and the matmul (default: this one); use a lean environment "
                             "with only keras_vit's runtime dependencies for memory figures (benchmarks/README.md)")
    parser.add_argument("--keras-torch-python", default=None,
                        help="python of an environment with PyTorch and Keras (keras_vit's other dependencies need not "
                             "be there): adds keras_vit's training on Keras' torch backend")
    parser.add_argument("--only", default="", help="comma-separated substrings; run only cases whose name has one")
    parser.add_argument("--no-serving", action="store_true", help="skip the SavedModel export and serving case")
    parser.add_argument("--alt-modes", action="store_true",
                        help="also run keras_vit inference in its other mode (graph vs XLA) to check the choice")
    parser.add_argument("--json", default=None, help="write the full results here")
    parser.add_argument("--markdown", default=None,
                        help="write the table with date, machine and command here (benchmarks/RESULTS.md)")
    parser.add_argument("--note", action="append", default=[],
                        help="a line for RESULTS.md about this run (e.g. what else loaded the machine); repeatable")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds allowed to one child process")
    args = parser.parse_args(argv)
    if args.repeats is None:
        args.repeats = 1 if args.quick else 3
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1. Received: --repeats={args.repeats}")
    return args


def available_peers(peers_python):
    """The peer runners importable in `peers_python` (none when it is not given)."""
    if not peers_python:
        return ()
    if not os.path.isfile(peers_python):
        raise SystemExit(f"--peers-python must be a Python executable. Received: --peers-python={peers_python!r}")
    found = []
    for runner, module in (("timm", "timm"), ("keras_hub", "keras_hub"), ("torch_matmul", "torch")):
        probe = subprocess.run([peers_python, "-c", f"import {module}"], capture_output=True,
                               env=_child_env(), timeout=300)
        if probe.returncode == 0:
            found.append(runner)
        else:
            print(f"[peers] {module} not importable in {peers_python}; skipping it", file=sys.stderr)
    return tuple(found)


def _child_env(backend="tensorflow"):
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["KERAS_BACKEND"] = backend
    # keras_vit is imported from this checkout, whether or not it is installed.
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def spec_for(case, quick, saved_model=None):
    """The JSON spec a child receives."""
    iters, warmup = {}, 0
    for batch in case.batches:
        warmup, iters[str(batch)] = cases_lib.iterations(case, batch, quick)
    return {
        "name": case.name, "runner": case.runner, "task": case.task, "dtype": case.dtype,
        "arch": cases_lib.ARCHS.get(case.arch), "batches": list(case.batches), "jit": case.jit,
        "warmup": warmup, "iters": iters, "n": cases_lib.MATMUL_N["quick" if quick else "full"],
        "saved_model": saved_model, "policy": case.policy, "rematerialize": case.rematerialize,
        "backend": case.backend,
    }


def run_child(spec, python, timeout):
    """Runs one case in a fresh process; returns its result dict, or None (with the reason printed)."""
    command = [python, os.path.join(HERE, "child.py"), json.dumps(spec)]
    start = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              env=_child_env(spec.get("backend", "tensorflow")), cwd=REPO)
    except subprocess.TimeoutExpired:
        print(f"[{spec['name']}] timed out after {timeout:.0f} s", file=sys.stderr)
        return None
    for line in done.stdout.splitlines():
        if line.startswith(measure.RESULT_PREFIX):
            result = json.loads(line[len(measure.RESULT_PREFIX):])
            result["wall_s"] = time.perf_counter() - start
            return result
    tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
    print(f"[{spec['name']}] failed (exit {done.returncode}):\n{tail}", file=sys.stderr)
    return None


def cpu_jiffies():
    """(busy, steal) jiffies of all CPUs from /proc/stat, or None off Linux; steal is time the hypervisor
    gave this VM's vCPUs to someone else: the part of a shared machine's noise that the guest can see."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return user + nice + system + irq + softirq, steal


def steal_share(start, end):
    """Stolen time as a share of busy + stolen time between two `cpu_jiffies()` readings."""
    if start is None or end is None:
        return None
    busy, steal = end[0] - start[0], end[1] - start[1]
    return steal / (busy + steal) if busy + steal > 0 else 0.0


def machine():
    model = platform.processor()
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        model = next(line.split(":", 1)[1].strip() for line in lscpu.splitlines() if line.startswith("Model name"))
    except (OSError, StopIteration):
        pass
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(next(line for line in f if line.startswith("flags")).split(":", 1)[1].split())
    except (OSError, StopIteration):
        flags = set()
    isa = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile") if f in flags]
    return {"cpu_model": model, "cores": os.cpu_count(), "isa": isa, "platform": platform.platform(),
            "load_average_at_start": os.getloadavg()}


def main(argv=None):
    args = parse_args(argv)
    peers = available_peers(args.peers_python)
    selected = [
        c for c in cases_lib.build_cases(quick=args.quick, peers=peers, serving=not args.no_serving,
                                  alt_modes=args.alt_modes, keras_torch=bool(args.keras_torch_python))
        if not args.only or any(s in c.name for s in args.only.split(","))
    ]
    if not selected:
        raise SystemExit(f"No case matches --only={args.only!r}.")
    workdir = tempfile.mkdtemp(prefix="keras_vit_bench_")
    started = datetime.datetime.now(datetime.timezone.utc)
    info = machine()
    jiffies_at_start = cpu_jiffies()
    try:
        saved_models = {}  # serve case name -> the SavedModel it times, exported once before the repeats
        for case in [c for c in selected if c.task == "serve"]:
            target = os.path.join(workdir, f"saved_model_{case.dtype}")
            export = run_child(dict(spec_for(case, args.quick, target), task="export",
                                    name=f"keras_vit/export/{case.dtype}"), args.keras_vit_python, args.timeout)
            if export is None:
                selected = [c for c in selected if c is not case]
            else:
                saved_models[case.name] = export["extra"]["path"]
                print(f"[export] {export['extra']['export']} ({export['wall_s']:.0f} s)", file=sys.stderr)
        results = {c.name: [] for c in selected}
        for repeat in range(args.repeats):
            for case in selected:
                python = (args.peers_python if case.is_peer else
                          args.keras_torch_python if case.backend == "torch" else args.keras_vit_python)
                result = run_child(spec_for(case, args.quick, saved_models.get(case.name)), python, args.timeout)
                if result is not None:
                    results[case.name].append(result)
                    print(f"[repeat {repeat + 1}/{args.repeats}] {case.name}: {result['wall_s']:.0f} s",
                          file=sys.stderr)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    rows, ceilings = report.build_rows(selected, results, args.quick)
    ratios = report.peer_ratios(rows)
    goal_rows = [] if args.quick else report.goals(rows, ceilings, big_batch=16)
    shares = report.floor_shares(rows)
    bound_rows = [] if args.quick else report.bounds(rows, big_batch=16)
    text = report.table(rows, ceilings, ratios, goal_rows, shares, bound_rows)
    print(text)
    info["load_average_at_end"] = os.getloadavg()
    info["steal_share"] = steal_share(jiffies_at_start, cpu_jiffies())
    document = {
        "date": started.isoformat(timespec="seconds"),
        "elapsed_s": (datetime.datetime.now(datetime.timezone.utc) - started).total_seconds(),
        "machine": info,
        "command": " ".join([os.path.relpath(sys.argv[0], REPO) if argv is None else "benchmarks/run.py"]
                            + (sys.argv[1:] if argv is None else list(argv))),
        "quick": args.quick, "repeats": args.repeats, "peers": list(peers),
        "pythons": {"keras_vit": args.keras_vit_python, "peers": args.peers_python,
                    "keras_torch": args.keras_torch_python},
        "rows": rows, "ceilings_gflops": ceilings, "ratios": ratios, "goals": goal_rows,
        "floor_shares": shares, "bounds": bound_rows, "notes": args.note,
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(document, f, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(report.markdown(document, text))
    return document


if __name__ == "__main__":
    main()
