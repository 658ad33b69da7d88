"""The wheels a GPU machine without Keras needs to run keras_vit on the JAX backend, and their installation there.

The GPU machine (benchmarks/README.md, "Accelerator benchmark") has PyTorch, timm, JAX with CUDA, absl-py, numpy,
h5py and ml-dtypes, but not Keras, and cannot download. `build` (here, with network) fills a folder with Keras,
the dependencies of Keras it lacks (pure-python wheels, and optree's compiled wheel for CPython 3.10 to 3.14 on
x86-64 Linux) and a wheel of keras_vit itself; `install` (there, standard library only) unpacks the wheels that
fit the running interpreter into a folder for PYTHONPATH:

    python tools/accelerator_wheels.py build .accelerator_wheels          # here: about 7 MiB, limit 64 MiB
    python tools/accelerator_wheels.py install .accelerator_wheels /tmp/kv \\
        && PYTHONPATH=/tmp/kv KERAS_BACKEND=jax python benchmarks/accelerator.py   # there

Versions are those installed here (`pip show`), so the GPU runs the Keras the tests ran.
"""

import argparse
import glob
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import zipfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PURE = ("keras", "rich", "markdown-it-py", "mdurl", "pygments", "namex", "packaging")
"""Keras and the pure-python dependencies (its `Requires`, and theirs) the GPU machine lacks."""
COMPILED = ("optree",)
"""Dependencies with compiled wheels: one per CPython version."""
PYTHONS = ("3.10", "3.11", "3.12", "3.13", "3.14")
PLATFORM = "manylinux_2_28_x86_64"
LIMIT_MB = 64


def _pip(*args):
    subprocess.run([sys.executable, "-m", "pip", *args], check=True)


def build(folder):
    """Downloads the wheels and builds keras_vit's into `folder`; returns its size in MiB."""
    os.makedirs(folder, exist_ok=True)
    pins = [f"{name}=={importlib.metadata.version(name)}" for name in PURE]
    _pip("download", "--no-deps", "--only-binary=:all:", "-d", folder, *pins)
    for name in COMPILED:
        pin = f"{name}=={importlib.metadata.version(name)}"
        for version in PYTHONS:
            _pip("download", "--no-deps", "--only-binary=:all:", "--platform", PLATFORM, "--python-version",
                 version, "-d", folder, pin)
    leftovers = [os.path.join(REPO, name) for name in ("build", "keras_vit_applications.egg-info")]
    leftovers = [path for path in leftovers if not os.path.exists(path)]  # what the wheel build adds
    _pip("wheel", "--no-deps", "--no-build-isolation", "-w", folder, REPO)
    for path in leftovers:
        shutil.rmtree(path, ignore_errors=True)
    size = sum(os.path.getsize(p) for p in glob.glob(os.path.join(folder, "*.whl"))) / 2**20
    if size > LIMIT_MB:
        raise SystemExit(f"The wheels in {folder} take {size:.1f} MiB, more than the {LIMIT_MB} MiB a run carries.")
    return size


def fits(wheel_name, version=sys.version_info):
    """Whether a wheel file name's tags fit this interpreter: `py3-none-any`, or this CPython's `cpXY` on Linux
    x86-64 (the only compiled wheels `build` fetches)."""
    tags = wheel_name[:-len(".whl")].split("-")[-3:]
    python, abi, platform = tags
    if abi == "none" and platform == "any":
        return any(tag in ("py3", f"py{version[0]}{version[1]}") for tag in python.split("."))
    cp = f"cp{version[0]}{version[1]}"
    return cp in python.split(".") and abi in (cp, "abi3") and "x86_64" in platform and sys.platform == "linux"


def install(folder, target):
    """Unpacks every wheel of `folder` that fits this interpreter into `target` (one per project)."""
    os.makedirs(target, exist_ok=True)
    installed = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.whl"))):
        name = os.path.basename(path)
        project = re.split(r"-\d", name, maxsplit=1)[0].lower().replace("_", "-")
        if not fits(name) or project in installed:
            continue
        with zipfile.ZipFile(path) as wheel:
            wheel.extractall(target)
        installed[project] = name
    missing = [p for p in (*PURE, *COMPILED) if p not in installed]
    if missing:
        raise SystemExit(f"No wheel of {', '.join(missing)} in {folder} fits Python "
                         f"{sys.version_info[0]}.{sys.version_info[1]} on {sys.platform}.")
    return installed


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build", help="download and build the wheels (needs network)").add_argument("folder")
    unpack = sub.add_parser("install", help="unpack the wheels that fit this Python into TARGET")
    unpack.add_argument("folder")
    unpack.add_argument("target")
    args = parser.parse_args(argv)
    if args.command == "build":
        print(f"{args.folder}: {build(args.folder):.1f} MiB")
    else:
        installed = install(args.folder, args.target)
        print(f"{args.target}: " + ", ".join(sorted(installed.values())))


if __name__ == "__main__":
    main()
