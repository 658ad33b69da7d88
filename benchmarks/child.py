"""Entry point of one benchmark child process: `python benchmarks/child.py '<spec json>'`.

Runs one case in this fresh process (so nothing is shared with other cases: no warm caches, no
compiled functions, a clean peak-memory counter) and prints one result line. The runner module is
imported lazily, so a peer environment needs only its own framework (torch + timm, or
TensorFlow + keras-hub), not keras_vit.
"""

import importlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import measure  # noqa: E402

RUNNERS = {
    "keras_vit": "runner_keras_vit",
    "keras_hub": "runner_keras_hub",
    "timm": "runner_timm",
    "matmul": "runner_matmul",
    "torch_matmul": "runner_torch_matmul",
    "serving": "runner_serving",
    "accelerator": "runner_accelerator",
}


def main(argv):
    spec = json.loads(argv[1])
    runner = spec["runner"]
    if runner not in RUNNERS:
        raise ValueError(f"Unknown runner. Expected one of {sorted(RUNNERS)}. Received: runner={runner!r}")
    module = importlib.import_module(RUNNERS[runner])
    result = module.run(spec)
    result.setdefault("name", spec["name"])
    measure.emit(result)


if __name__ == "__main__":
    main(sys.argv)
