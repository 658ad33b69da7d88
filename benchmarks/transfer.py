"""Fine-tuning against training from scratch: pre-train on one generated folder, fine-tune on another.

Pre-trains the app's small ViT on `digits28` (MNIST-like digits, `quality_data.py`, 10 classes, 28x28) with
the app's defaults, then trains on a small `letters28` set (few images per class; `--finetune_classes` of its
letters, so another number of classes than the digits, at `--finetune_image_size`) twice with the same
budget: from scratch, and from the pre-training run (`--weights=RUN_FOLDER`, or its `model.weights.h5` or
`model.keras` with `--source`; every other value the app's default for that situation: a new head, the
position embedding resampled). Also reports few-shot linear accuracy (`training.fewshot`) of the pre-trained
and of a random model on the letters. Prints one table and optionally writes JSON (each run with its
peak resident memory and seconds per step; `lora.py` reuses these functions).

    python benchmarks/transfer.py --json benchmarks/transfer.json
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import quality_data  # noqa: E402

MODEL = ["--model=tiny"]


def run_child(command, env):
    """Runs `command` in the repository; returns (exit status, stdout, stderr, peak resident MiB of that process).

    The peak is the child's own `ru_maxrss` (`os.wait4` on its pid), not this process's nor other children's.
    """
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen(command, cwd=REPO, stdout=out, stderr=err, text=True, env=env)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
        out.seek(0)
        err.seek(0)
        return child.returncode, out.read(), err.read(), usage.ru_maxrss / 1024.0


def train(dataset_root, workdir, env, *flags):
    """One app run; its accuracy, steps, wall seconds, seconds per step (training only: the first step, which
    compiles, and the evaluation left out; from the app's `train_images_per_sec`) and peak resident MiB."""
    command = [sys.executable, "-m", "training.train", f"--dataset=folder:{dataset_root}", f"--workdir={workdir}",
               *MODEL, "--export=false", "--show_predictions=0", *flags]
    start = time.perf_counter()
    returncode, stdout, stderr, peak_mb = run_child(command, env)
    if returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{stderr[-3000:]}")
    with open(os.path.join(workdir, "metrics.json"), encoding="utf-8") as file:
        metrics = json.load(file)
    first = stdout.splitlines()[0] if stdout else ""
    batch = next((int(f.split("=")[1]) for f in flags if f.startswith("--global_batch_size=")), None)
    rate = metrics.get("train_images_per_sec")
    return {"accuracy": metrics["eval_accuracy"], "steps": metrics["steps"], "wall_s": time.perf_counter() - start,
            "step_s": batch / rate if batch and rate else None, "peak_rss_mb": peak_mb, "first_line": first}


def make_folders(scratch, args):
    """The digits28 pre-training folder and the letters28 fine-tuning folder (its first `finetune_classes`
    letters) under `scratch`, as `(source, target)`."""
    source, target = os.path.join(scratch, "digits28"), os.path.join(scratch, "letters28")
    quality_data.make("digits28", source, args.pretrain_per_class, 50)
    quality_data.make("letters28", target, args.finetune_per_class, 50, seed=1)
    for split in ("train", "test"):  # keep the first --finetune_classes letters
        for letter in sorted(os.listdir(os.path.join(target, split)))[args.finetune_classes:]:
            shutil.rmtree(os.path.join(target, split, letter))
    return source, target


def pretrain(source, workdir, env, args):
    """The app's run on digits28 at 28x28 (`args.pretrain_epochs`) in `workdir`; its `train` record."""
    pre = train(source, workdir, env, f"--epochs={args.pretrain_epochs}", "--image_size=28")
    print(f"pre-trained on digits28: {pre['accuracy']:.4f} ({pre['steps']} steps)", flush=True)
    return pre


def finetune_budget(args):
    """The flags every letters28 run shares: the same budget."""
    return [f"--epochs={args.finetune_epochs}", "--global_batch_size=32", f"--image_size={args.finetune_image_size}"]


def save_random_model(path):
    """The pre-trained model's architecture with random weights, as a `.keras` file (the few-shot baseline)."""
    sys.path.insert(0, REPO)
    import keras_vit
    from training.config import TINY_MODEL

    keras_vit.ViT(image_size=28, classes=10, classifier_activation=None, **TINY_MODEL).save(path)


def add_task_arguments(parser):
    """The flags of the task: the pre-training and fine-tuning data and budgets."""
    parser.add_argument("--pretrain_per_class", type=int, default=400)
    parser.add_argument("--pretrain_epochs", type=float, default=10)
    parser.add_argument("--finetune_per_class", type=int, default=20)
    parser.add_argument("--finetune_epochs", type=float, default=30)
    parser.add_argument("--finetune_classes", type=int, default=5, help="letters kept (A, B, ...): other classes")
    parser.add_argument("--finetune_image_size", type=int, default=32, help="pre-training is at 28")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_task_arguments(parser)
    parser.add_argument("--source", choices=("run", "weights.h5", "keras"), default="run",
                        help="what --weights names: the run's folder, its model.weights.h5 or its model.keras")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    results = {"scratch": [], "finetuned": []}
    with tempfile.TemporaryDirectory() as scratch:
        source, target = make_folders(scratch, args)
        pre = pretrain(source, os.path.join(scratch, "pre"), env, args)
        run = os.path.join(scratch, "pre")
        weights = {"run": run, "weights.h5": os.path.join(run, "model.weights.h5"),
                   "keras": os.path.join(run, "model.keras")}[args.source]
        budget = finetune_budget(args)
        for seed in range(args.seeds):
            for kind, extra in (("scratch", []), ("finetuned", [f"--weights={weights}"])):
                run = train(target, os.path.join(scratch, f"{kind}{seed}"), env, *budget, f"--seed={seed}", *extra)
                results[kind].append(run)
                print(f"letters28 seed {seed} {kind}: {run['accuracy']:.4f} ({run['steps']} steps) "
                      f"[{run['first_line'][:100]}]", flush=True)
        random_model = os.path.join(scratch, "random.keras")
        save_random_model(random_model)
        fewshot = {}
        for kind, model in (("pre-trained", os.path.join(scratch, "pre", "model.keras")), ("random", random_model)):
            command = [sys.executable, "-m", "training.fewshot", f"--model={model}", f"--dataset=folder:{target}",
                       "--shots=5,10", "--seeds=2"]
            done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, env=env, check=False)
            fewshot[kind] = done.stdout.strip().splitlines()[-3:] if done.returncode == 0 else done.stderr[-500:]
            print(f"few-shot, {kind}: {fewshot[kind]}", flush=True)
    mean = {k: sum(r["accuracy"] for r in v) / len(v) for k, v in results.items()}
    print(f"| letters28 ({args.finetune_classes} classes, {args.finetune_per_class}/class, "
          f"{args.finetune_image_size}px) | accuracy (mean of {args.seeds} seeds) |\n|---|---|")
    for kind in results:
        print(f"| {kind} | {mean[kind]:.4f} |")
    print(f"fine-tuned - scratch: {(mean['finetuned'] - mean['scratch']) * 100:+.1f} points")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as file:
            json.dump({"pretrain": pre, "results": results, "mean": mean, "fewshot": fewshot, "args": vars(args)},
                      file, indent=2)


if __name__ == "__main__":
    main()
