"""How long a quantized `.keras` takes to load against the float file of the same model, side by side.

Writes ViT-B/16 (224x224, 1000 classes, random weights) as a float32 `.keras` and as `model.quantize(mode)`'s
`.keras`, then loads each with `keras.saving.load_model` in a fresh process (TensorFlow backend), float and
quantized interleaved, `--repeats` times each, and prints the median seconds and their ratio with the host's CPU
model, load average and steal. The goal of the issue "The flagship as users run it": an int8 file within about 1.5x
the float file's time (it was 5-10x when the layers were quantized after the build).

    python benchmarks/quantized_load.py                       # int8, 3 loads each
    python benchmarks/quantized_load.py --mode=int4 --repeats=5
    python benchmarks/quantized_load.py --quick               # a tiny ViT: a check of the script
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

LOAD = """
import sys, time
import keras, keras_vit  # noqa: F401  registers keras_vit's layers
start = time.perf_counter()
keras.saving.load_model(sys.argv[1])
print(time.perf_counter() - start)
"""

WRITE = """
import sys, keras_vit
quick, mode, folder = sys.argv[1] == "1", sys.argv[2], sys.argv[3]
model = (keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=2, mlp_dim=64, classes=3)
         if quick else keras_vit.ViT_B16(weights=None))
model.save(f"{folder}/float32.keras")
model.quantize(mode)
model.save(f"{folder}/{mode}.keras")
"""


def host() -> dict:
    """CPU model, load average and the steal share over one second (from /proc/stat)."""
    def steal_and_total():
        fields = [int(v) for v in open("/proc/stat").readline().split()[1:]]
        return fields[7], sum(fields)

    import time

    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
                 "unknown")
    steal0, total0 = steal_and_total()
    time.sleep(1)
    steal1, total1 = steal_and_total()
    return {"cpu": model, "cores": os.cpu_count(), "load": os.getloadavg()[0],
            "steal_percent": round(100 * (steal1 - steal0) / max(total1 - total0, 1), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", default="int8", choices=["int8", "int4", "float8"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2"}
    with tempfile.TemporaryDirectory() as folder:
        subprocess.run([sys.executable, "-c", WRITE, "1" if args.quick else "0", args.mode, folder], env=env,
                       check=True)
        seconds = {"float32": [], args.mode: []}
        for _ in range(args.repeats):
            for name in seconds:  # interleaved: a slower moment of a shared host hits both
                done = subprocess.run([sys.executable, "-c", LOAD, os.path.join(folder, f"{name}.keras")], env=env,
                                      check=True, capture_output=True, text=True)
                seconds[name].append(float(done.stdout.strip().splitlines()[-1]))
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    result = {"model": "tiny" if args.quick else "ViT-B/16", "mode": args.mode, "seconds": seconds,
              "median_s": medians, "ratio": medians[args.mode] / medians["float32"], "host": host()}
    print(f"{result['model']}: float32 {medians['float32']:.2f} s, {args.mode} {medians[args.mode]:.2f} s "
          f"(median of {args.repeats}), ratio {result['ratio']:.2f}x; host {result['host']}")
    if args.json:
        with open(args.json, "w") as file:
            json.dump(result, file, indent=1)


if __name__ == "__main__":
    main()
