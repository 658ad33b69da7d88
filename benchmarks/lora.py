"""LoRA against full fine-tuning and a linear probe: accuracy on transfer.py's task, memory on a ViT-B/16 step.

1. The transfer task of `transfer.py` (the app's tiny ViT pre-trained on generated digits28 at 28x28, then trained
   on `--finetune_classes` letters28 classes at `--finetune_image_size` with one budget): full fine-tuning from the
   pre-training run (`--weights=RUN`, what transfer.py does), LoRA of each `--ranks` (`--lora_rank=N`, query and
   value, the same flags otherwise), and a linear probe: `training.fewshot`'s closed-form regularised least squares
   (big_vision's, l2 2^10) on the frozen pre-trained model's representation (the input of its head), fit on every
   letters28 training image (all shots, no augmentation) at the pre-training's 28x28. Per variant and seed:
   trainable parameters (of the run's reloaded `model.keras`; the probe: its weights, representation + bias by
   classes), the process's peak resident memory (`os.wait4`'s `ru_maxrss` of that one child), seconds per training
   step (the app's `train_images_per_sec`: the first step, which compiles, left out; the probe has no steps: the
   wall time of its whole process instead, `step_s` null) and test accuracy.
2. One training step of ViT-B/16 (`keras_vit.ViT_B16(weights=None, classes=10, classifier_activation=None)`,
   224x224, batch 8, AdamW, sparse cross-entropy from logits, `train_on_batch` of a model compiled with XLA,
   TensorFlow, float32, the default rematerialization): full fine-tuning, LoRA rank 8 (query, value) and a linear
   probe (every variable but the head's `trainable=False`), each in its own fresh process: trainable parameters,
   peak resident memory after the warm-up steps (compilation included) and after the timed steps, the median
   step time.

The issue's goal: LoRA rank 8 within 1 point of full fine-tuning on the transfer task (mean over the seeds) with at
most 60% of full fine-tuning's peak training memory on ViT-B/16. Prints the tables and optionally writes JSON.

    python benchmarks/lora.py --json benchmarks/lora.json
    python benchmarks/lora.py --quick --json /tmp/lora.json     # tiny sizes, one seed: a check of the script
"""

import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import transfer  # noqa: E402

RESULT_PREFIX = "LORA_STEP_RESULT "
STEP_VARIANTS = ("full", "lora8", "linear_probe")
QUICK = dict(pretrain_per_class=20, pretrain_epochs=1, finetune_per_class=4, finetune_epochs=2, seeds=1,
             warmup=1, steps=1)
TINY_STEP_MODEL = dict(image_size=32, patch_size=8, hidden_size=64, num_layers=2, num_heads=4, mlp_dim=128)


def trainable_parameters(model_path):
    """The trainable parameters of a saved model (a LoRA run's `.keras` reloads with its adapters and freezing)."""
    sys.path.insert(0, REPO)
    import keras
    import numpy as np

    import keras_vit  # noqa: F401  (registers the layers)

    model = keras.saving.load_model(model_path)
    return int(sum(np.prod(v.shape) for v in model.trainable_weights))


def linear_probe(target, model_path, env, args):
    """`training.fewshot` on every training image of `target`: the closed-form linear probe's record."""
    command = [sys.executable, "-m", "training.fewshot", f"--model={model_path}", f"--dataset=folder:{target}",
               f"--shots={args.finetune_per_class}", "--seeds=1"]
    start = time.perf_counter()
    returncode, stdout, stderr, peak_mb = transfer.run_child(command, env)
    if returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{stderr[-3000:]}")
    lines = stdout.strip().splitlines()
    header, line = lines[-2], lines[-1]  # "...: 64-d representations, ... 5 classes, ...", " 20-shot accuracy: ..."
    width = int(header.split("-d representations")[0].rsplit(" ", 1)[-1])
    classes = int(header.split(" classes")[0].rsplit(" ", 1)[-1])
    accuracy = float(line.split("accuracy:")[1].split("%")[0]) / 100
    return {"accuracy": accuracy, "trainable_params": (width + 1) * classes, "wall_s": time.perf_counter() - start,
            "step_s": None, "peak_rss_mb": peak_mb, "first_line": line.strip()}


def transfer_task(args, env):
    """Every variant of the transfer task: {variant: [record per seed]} and the pre-training record."""
    results = {"full": [], **{f"lora{rank}": [] for rank in args.ranks}, "linear_probe": []}
    with tempfile.TemporaryDirectory() as scratch:
        source, target = transfer.make_folders(scratch, args)
        run = os.path.join(scratch, "pre")
        pre = transfer.pretrain(source, run, env, args)
        budget = transfer.finetune_budget(args)
        for seed in range(args.seeds):
            for variant in results:
                if variant == "linear_probe":
                    if seed == 0:  # closed form on every training image: no seed to vary
                        record = linear_probe(target, os.path.join(run, "model.keras"), env, args)
                    else:
                        record = dict(results[variant][0], repeated_from_seed=0)
                else:
                    extra = [] if variant == "full" else [f"--lora_rank={variant[len('lora'):]}", *args.lora_flags]
                    workdir = os.path.join(scratch, f"{variant}{seed}")
                    record = transfer.train(target, workdir, env, *budget, f"--seed={seed}", f"--weights={run}",
                                            *extra)
                    record["trainable_params"] = trainable_parameters(os.path.join(workdir, "model.keras"))
                results[variant].append(record)
                step = "n/a" if record["step_s"] is None else f"{record['step_s'] * 1000:.0f} ms/step"
                print(f"letters28 seed {seed} {variant}: {record['accuracy']:.4f}, {record['trainable_params']:,} "
                      f"trainable, peak {record['peak_rss_mb']:.0f} MiB, {step}", flush=True)
    return pre, results


def step_child(variant, quick, warmup, steps):
    """In this process: one model's training step timed and measured; prints one `RESULT_PREFIX` JSON line."""
    sys.path.insert(0, REPO)
    import keras
    import numpy as np
    import tensorflow as tf

    import keras_vit
    from keras_vit import model_parts
    from measure import peak_rss_mb

    keras.utils.set_random_seed(0)
    if quick:
        model = keras_vit.ViT(classes=10, classifier_activation=None, **TINY_STEP_MODEL)
    else:
        model = keras_vit.ViT_B16(weights=None, classes=10, classifier_activation=None)
    if variant == "lora8":
        model.enable_lora(8, ("query", "value"))
    elif variant == "linear_probe":
        head = {id(v) for v in model_parts.head(model).weights}
        for v in model.weights:
            v.trainable = id(v) in head
    elif variant != "full":
        raise ValueError(f"Unknown variant. Expected one of {STEP_VARIANTS}. Received: {variant!r}")
    trainable = int(sum(np.prod(v.shape) for v in model.trainable_weights))
    total = int(sum(np.prod(v.shape) for v in model.weights))
    model.compile(optimizer=keras.optimizers.AdamW(1e-4, weight_decay=0.05),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=True)
    batch, size = 8, model.input_shape[1]
    x = tf.constant(np.random.default_rng(1).uniform(-1, 1, (batch, size, size, 3)).astype("float32"))
    y = tf.constant(np.arange(batch) % 10, "int32")
    built = peak_rss_mb()
    for _ in range(warmup):
        model.train_on_batch(x, y)
    first = peak_rss_mb()
    seconds = []
    for _ in range(steps):
        start = time.perf_counter()
        loss = model.train_on_batch(x, y)  # a Python float: the step has finished
        seconds.append(time.perf_counter() - start)
    print(RESULT_PREFIX + json.dumps(dict(
        variant=variant, model="tiny" if quick else "ViT-B/16", image_size=size, batch=batch,
        trainable_params=trainable, total_params=total, peak_rss_mb_built=built, peak_rss_mb_after_warmup=first,
        peak_rss_mb=peak_rss_mb(), step_s=statistics.median(seconds), steps_s=seconds, warmup=warmup,
        loss=float(loss))), flush=True)


def step_task(args, env):
    """Each variant of the step in a fresh process: {variant: record}."""
    results = {}
    for variant in STEP_VARIANTS:
        command = [sys.executable, os.path.abspath(__file__), f"--step_child={variant}", f"--warmup={args.warmup}",
                   f"--steps={args.steps}", *(["--quick"] if args.quick else [])]
        returncode, stdout, stderr, peak_mb = transfer.run_child(command, env)
        lines = [line for line in stdout.splitlines() if line.startswith(RESULT_PREFIX)]
        if returncode or not lines:
            raise RuntimeError(f"{' '.join(command)} failed:\n{stderr[-3000:]}")
        record = dict(json.loads(lines[-1][len(RESULT_PREFIX):]), child_peak_rss_mb=peak_mb)
        results[variant] = record
        print(f"{record['model']} step, {variant}: {record['trainable_params']:,} trainable, peak "
              f"{record['peak_rss_mb_after_warmup']:.0f} MiB after {args.warmup} step(s), {record['peak_rss_mb']:.0f} "
              f"after {args.steps} more; {record['step_s'] * 1000:.0f} ms/step (median)", flush=True)
    return results


def mean(values):
    return sum(values) / len(values)


def summary(transfer_results, step_results):
    """Means per variant of the transfer task, the ratios to full fine-tuning, and the goal."""
    rows = {}
    for variant, records in transfer_results.items():
        steps = [r["step_s"] for r in records if r["step_s"] is not None]
        rows[variant] = {"accuracy": mean([r["accuracy"] for r in records]),
                         "accuracies": [r["accuracy"] for r in records],
                         "trainable_params": records[0]["trainable_params"],
                         "peak_rss_mb": mean([r["peak_rss_mb"] for r in records]),
                         "step_s": mean(steps) if steps else None,
                         "wall_s": mean([r["wall_s"] for r in records])}
    full, lora = rows["full"], rows.get("lora8")
    step_full, step_lora = step_results["full"], step_results["lora8"]
    memory_share = step_lora["peak_rss_mb"] / step_full["peak_rss_mb"]
    goal = {"accuracy_points_lora8_minus_full": None if lora is None else (lora["accuracy"] - full["accuracy"]) * 100,
            "step_memory_share_lora8_of_full": memory_share}
    goal["met"] = (lora is not None and goal["accuracy_points_lora8_minus_full"] >= -1.0 and memory_share <= 0.6)
    return rows, goal


def print_tables(args, rows, step_results, goal):
    print(f"\n| letters28 ({args.finetune_classes} classes, {args.finetune_per_class}/class, "
          f"{args.finetune_image_size}px), {args.seeds} seed(s) | trainable params | peak RSS MiB | s/step | "
          f"accuracy (mean) | per seed |\n|---|---|---|---|---|---|")
    for variant, row in rows.items():
        step = "n/a" if row["step_s"] is None else f"{row['step_s']:.3f}"
        print(f"| {variant} | {row['trainable_params']:,} | {row['peak_rss_mb']:.0f} | {step} | "
              f"{row['accuracy']:.4f} | {', '.join(f'{a:.3f}' for a in row['accuracies'])} |")
    model = step_results["full"]["model"]
    print(f"\n| {model} step, batch 8 | trainable params | peak RSS MiB after warm-up | peak RSS MiB | "
          f"median s/step |\n|---|---|---|---|---|")
    for variant, record in step_results.items():
        print(f"| {variant} | {record['trainable_params']:,} | {record['peak_rss_mb_after_warmup']:.0f} | "
              f"{record['peak_rss_mb']:.0f} | {record['step_s']:.3f} |")
    points = goal["accuracy_points_lora8_minus_full"]
    print(f"\ngoal (LoRA rank 8 within 1 point of full fine-tuning, at most 60% of its peak memory): "
          f"{'n/a' if points is None else f'{points:+.1f}'} points, "
          f"{goal['step_memory_share_lora8_of_full'] * 100:.0f}% of the memory: {'met' if goal['met'] else 'not met'}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    transfer.add_task_arguments(parser)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--ranks", default="4,8,16", help="LoRA ranks of the transfer task, comma-separated")
    parser.add_argument("--lora_flags", type=str.split, default=[],
                        help="more app flags of every LoRA run of the transfer task, space-separated (a diagnostic: "
                             "e.g. '--lora_targets=query,key,value,out,mlp_dense_1,mlp_dense_2')")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps of the step benchmark")
    parser.add_argument("--steps", type=int, default=5, help="timed steps of the step benchmark")
    parser.add_argument("--quick", action="store_true",
                        help="a check of the script: tiny data and budgets, one seed, a tiny model instead of "
                             "ViT-B/16, one warm-up and one timed step")
    parser.add_argument("--only", choices=("transfer", "step"), help="run one part (the goal needs both)")
    parser.add_argument("--step_child", choices=STEP_VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    if args.step_child:
        return step_child(args.step_child, args.quick, args.warmup, args.steps)
    if args.quick:
        for key, value in QUICK.items():
            setattr(args, key, value)
    args.ranks = tuple(int(r) for r in args.ranks.split(","))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=os.pathsep.join(
        p for p in (REPO, os.environ.get("PYTHONPATH")) if p))
    started = time.time()
    load_start = os.getloadavg()
    pre, transfer_results = transfer_task(args, env) if args.only != "step" else (None, None)
    step_results = step_task(args, env) if args.only != "transfer" else None
    output = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "command": " ".join(["benchmarks/lora.py", *(sys.argv[1:] if argv is None else argv)]),
              "load_average_at_start": load_start, "load_average_at_end": os.getloadavg(),
              "elapsed_s": time.time() - started, "args": {k: v for k, v in vars(args).items() if k != "step_child"},
              "pretrain": pre, "transfer": transfer_results, "step": step_results}
    if transfer_results is not None and step_results is not None:
        rows, goal = summary(transfer_results, step_results)
        output.update(transfer_mean=rows, goal=goal)
        print_tables(args, rows, step_results, goal)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as file:
            json.dump(output, file, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
