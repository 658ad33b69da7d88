"""The weights a fine-tune starts from when they are one's own model (a run folder or a Keras file), recorded in the
run's `config.json` so that the same command resumes from the run's own checkpoints whatever happened to that
source since (`SOURCE_KEY`, `source_record`, `recorded_source`, `source_change`).

Example:
    >>> is_own_model("runs/digits/model.keras"), is_own_model("imagenet21k")
    (True, False)
"""

from __future__ import annotations

import os


def is_own_model(weights) -> bool:
    """Whether `--weights` names a model of one's own: a Keras `.keras` / `.weights.h5` file or a run's workdir."""
    from keras_vit.checkpoints import weights_files

    return bool(weights) and weights_files.is_own(str(weights))


SOURCE_KEY = "weights_source"
"""In a fine-tune's `config.json`: what its `--weights` of one's own model were when it started (`source_record`),
so that the same command resumes from the run's own checkpoints whatever happened to that source since."""


def _source_file(weights):
    """(path, size, mtime_ns) of the model file `weights` names now (a run's `model.keras`), or None: gone."""
    from keras_vit.checkpoints import own, untrusted

    try:
        path = untrusted.check_regular_file(own.model_file(weights))
        stat = os.stat(path)
    except (OSError, ValueError):
        return None
    return path, stat.st_size, stat.st_mtime_ns


def sha256(path) -> str:
    """The SHA-256 of a file's bytes (hex)."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def source_record(cfg, model) -> dict | None:
    """The record of a run's `--weights` of one's own model (a run folder or a Keras file) and of the model built
    from them: the file (path, size, mtime, SHA-256) and the model's serialized config (the architecture the file
    and the flags made). None for other weights (a published name: its file does not change)."""
    if not is_own_model(cfg.weights):
        return None
    found = _source_file(cfg.weights)
    if found is None:
        return None
    import keras

    path, size, mtime_ns = found
    return dict(weights=str(cfg.weights), file=path, size=size, mtime_ns=mtime_ns, sha256=sha256(path),
                model=keras.saving.serialize_keras_object(model))


def recorded_source(workdir, weights) -> dict | None:
    """The `SOURCE_KEY` record of `WORKDIR/config.json` when it is of these `weights` (else None; also for a
    workdir that is not a local folder)."""
    import json

    if not weights or "://" in str(workdir):
        return None
    try:
        with open(os.path.join(workdir, "config.json"), encoding="utf-8") as f:
            record = json.load(f).get(SOURCE_KEY)
    except (OSError, ValueError, AttributeError):
        return None
    return record if isinstance(record, dict) and record.get("weights") == str(weights) else None


def source_change(record) -> str | None:
    """How the source of `record` differs now ("is gone ...", "changed ..."), or None: the same file."""
    found = _source_file(record["weights"])
    if found is None:
        return f"is gone (no {record['file']})"
    path, size, mtime_ns = found
    if (path, size, mtime_ns) == (record["file"], record["size"], record["mtime_ns"]):
        return None
    if os.path.realpath(path) == os.path.realpath(record["file"]) and sha256(path) == record["sha256"]:
        return None  # touched or copied back, the same bytes
    return (f"changed since this run started from it ({path}: {size:,} bytes, modified "
            f"{_time(mtime_ns)}; then {record['size']:,} bytes, modified {_time(record['mtime_ns'])})")


def _time(ns) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(ns / 1e9, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
