"""Crafted model files against keras_vit's loader: the time and the resident memory each refusal costs.

Each case is a small file that declares far more than it holds (the cases of the "Reliability round 4" report):
a `.weights.h5` dataset declared (1, 2**24, 48) or (2**30,) with no data, a config of 10**6 layers, a hybrid stem
of 100000 units, widths beyond any ViT, an int64 tensor, a `.keras` whose config.json inflates to 400 MB, a run
folder whose model.keras is a FIFO. Every case runs `keras_vit.ViT(weights=FILE)` in a fresh process, next to a
baseline process that loads the same tiny model's good file; the figures are the call's wall time and the
process's peak resident memory beyond the baseline's (`ru_maxrss`). A case is handled well when it is refused
(a ValueError naming the file) in under 1 s and under 200 MB beyond the baseline.

    python benchmarks/file_bombs.py                      # every case; a Markdown table on stdout
    python benchmarks/file_bombs.py --json out.json --cases "config 10**6 layers"
"""

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import zipfile

TINY = dict(image_size=16, patch_size=8, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32, classes=3)

ATTEMPT = r"""
import json, resource, sys, time
import keras_vit
from keras_vit import vit  # Keras and TensorFlow imported before the clock starts
from keras_vit.checkpoints import loading, own, untrusted
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
try:
    keras_vit.ViT(weights=sys.argv[1])
    outcome = "loaded"
except ValueError as error:
    outcome = "refused: " + str(error).splitlines()[0][:160]
seconds = time.perf_counter() - start
print(json.dumps(dict(outcome=outcome, seconds=seconds, rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                      / 1024, rss_before_mb=before / 1024)))
"""


def _good_files(folder: str) -> tuple[str, str]:
    import keras_vit

    model = keras_vit.ViT(**TINY)
    weights, keras_file = os.path.join(folder, "good.weights.h5"), os.path.join(folder, "good.keras")
    model.save_weights(weights)
    model.save(keras_file)
    return weights, keras_file


def _edited_weights(folder, good, name, edit) -> str:
    import h5py

    path = os.path.join(folder, name + ".weights.h5")
    shutil.copy(good, path)
    with h5py.File(path, "a") as file:
        edit(file)
    return path


def _declare(shape, dtype="float32"):
    def edit(file):
        del file["layers/patch_encoder/vars/1"]
        file.create_dataset("layers/patch_encoder/vars/1", shape=shape, dtype=dtype)
    return edit


def _config(**changes):
    from keras_vit import model_config

    def edit(file):
        config = json.loads(file.attrs[model_config.MODEL_ATTRIBUTE])
        config["config"].update(changes)
        file.attrs[model_config.MODEL_ATTRIBUTE] = json.dumps(config)
    return edit


def _int64(file):
    import numpy as np

    del file["layers/patch_encoder/vars/0"]
    file["layers/patch_encoder/vars/0"] = np.full((1, 1, 16), 2**62, "int64")


def _zip_bomb(folder, good_keras) -> str:
    path = os.path.join(folder, "bomb.keras")
    with zipfile.ZipFile(good_keras) as source, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as bomb:
        for name in source.namelist():
            data = source.read(name)
            if name == "config.json":
                data = data[:-1] + b', "pad": "' + b" " * (400 * 2**20) + b'"}'
            bomb.writestr(name, data)
    return path


def _fifo_run(folder) -> str:
    run = os.path.join(folder, "fifo_run")
    os.makedirs(run)
    with open(os.path.join(run, "config.json"), "w") as file:
        file.write("{}")
    os.mkfifo(os.path.join(run, "model.keras"))
    return run


def make_cases(folder: str) -> dict:
    good, good_keras = _good_files(folder)
    edited = lambda name, edit: _edited_weights(folder, good, name, edit)  # noqa: E731
    return {
        "baseline (good file)": good,
        "dataset (1, 2**24, 48) declared, no data": edited("declared", _declare((1, 2**24, 48))),
        "dataset (2**30,) declared, no data": edited("declared_flat", _declare((2**30,))),
        "config 10**6 layers": edited("layers", _config(num_layers=10**6)),
        "hybrid block_units (100000,)": edited("units", _config(hybrid=dict(block_units=[100000], width=64))),
        "widths 16384 / MLP 131072, 256 layers": edited("widths", _config(hidden_size=16384, mlp_dim=131072,
                                                                          num_layers=256)),
        "int64 class token 2**62": edited("int64", _int64),
        "config.json zip bomb (400 MB)": _zip_bomb(folder, good_keras),
        "run whose model.keras is a FIFO": _fifo_run(folder),
    }


def run_case(path: str, timeout: float) -> dict:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    try:
        result = subprocess.run([sys.executable, "-c", ATTEMPT, path], capture_output=True, text=True,
                                timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return dict(outcome=f"timed out after {timeout} s", seconds=timeout, rss_mb=float("nan"))
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode != 0 or not lines:
        return dict(outcome=f"crashed (exit {result.returncode}): {result.stderr.strip()[-160:]}",
                    seconds=float("nan"), rss_mb=float("nan"))
    return json.loads(lines[-1])


def host() -> dict:
    with open("/proc/loadavg") as file:
        load = file.read().split()[:3]
    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
                 platform.processor())
    return dict(cpu=model, cores=os.cpu_count(), load=load, python=sys.version.split()[0])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", action="append", help="run only these cases (repeat); default: all")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds a case may take (default 120)")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        cases = make_cases(folder)
        unknown = set(args.cases or ()) - set(cases)
        if unknown:
            parser.error(f"unknown cases {sorted(unknown)}; known: {list(cases)}")
        names = ["baseline (good file)", *[n for n in cases if n != "baseline (good file)" and
                                           (not args.cases or n in args.cases)]]
        sizes = {name: (os.path.getsize(cases[name]) if os.path.isfile(cases[name]) else 0) for name in names}
        results = {name: run_case(cases[name], args.timeout) for name in names}
    baseline = results["baseline (good file)"]["rss_mb"]
    print(f"host: {host()}")
    print("| case | file | outcome | wall s | peak RSS beyond the baseline (MB) |")
    print("|---|---:|---|---:|---:|")
    for name in names:
        result = results[name]
        result["file_bytes"] = sizes[name]
        result["rss_beyond_baseline_mb"] = result["rss_mb"] - baseline
        print(f"| {name} | {sizes[name] / 1024:,.0f} KB | {result['outcome'][:90]} | {result['seconds']:.2f} | "
              f"{result['rss_beyond_baseline_mb']:+.0f} |")
    if args.json:
        with open(args.json, "w") as file:
            json.dump(dict(host=host(), results=results), file, indent=1)
    bad = [n for n in names[1:] if not results[n]["outcome"].startswith("refused")
           or results[n]["seconds"] > 1.0 or results[n]["rss_beyond_baseline_mb"] > 200]
    print("every case refused within 1 s and 200 MB" if not bad else f"over the bounds: {bad}")
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
