"""A training run's folder as a source of weights: how it is recognised, its model file, and whether a run trains
there now (its lock). Light on purpose (no Keras): the training app asks before it imports anything heavy.

Example:
    >>> import tempfile
    >>> is_run(tempfile.mkdtemp()), lock_holder(tempfile.mkdtemp())
    (False, None)
"""

import errno
import fcntl
import os

RUN_MODEL = "model.keras"
"""The model file a finished run of the training app leaves in its workdir."""

RUN_LOCK = ".lock"
"""The file a running training app holds an exclusive `flock` on, in its workdir."""


def lock_holder(folder) -> str | None:
    """The text of `folder`'s run lock while a process holds it (a training run trains there now), else None. Takes
    no lock and writes nothing: a shared, non-blocking `flock`, released at once, fails only while it is held."""
    path = os.path.join(os.fspath(folder), RUN_LOCK)
    if "://" in path or not os.path.isfile(path):
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as error:
        if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return None
        return os.pread(fd, 4096, 0).decode("utf-8", "backslashreplace").strip() or "another process"
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def is_run(weights) -> bool:
    """Whether `weights` is a training run's workdir (a folder with `config.json` and `model.keras` or
    `checkpoints/`), as opposed to a Hugging Face folder."""
    if weights is None or not isinstance(weights, (str, os.PathLike)) or not os.path.isdir(weights):
        return False
    folder = os.fspath(weights)
    return os.path.isfile(os.path.join(folder, "config.json")) and (
        os.path.lexists(os.path.join(folder, RUN_MODEL)) or os.path.isdir(os.path.join(folder, "checkpoints")))


def model_file(weights) -> str:
    """The file `weights` names: itself, or a run's `model.keras`. A name, not a check of what the path is: the
    opener refuses a FIFO, a device or a dangling link (`keras_vit.checkpoints.untrusted.check_regular_file`).

    Raises:
        ValueError: a missing file, or a run that has not finished (no `model.keras` yet).
    """
    path = os.fspath(weights)
    if is_run(path):
        model = os.path.join(path, RUN_MODEL)
        holder = lock_holder(path)
        if holder is not None:
            raise ValueError(
                f"The training run {path!r} is being trained now ({holder.splitlines()[0][:200]} holds its "
                f"{RUN_LOCK}), so its {RUN_MODEL} is not final. Wait for that run to end (or stop it), or pass a "
                f"model file explicitly. Received: weights={path!r}")
        if not os.path.lexists(model):
            raise ValueError(
                f"The training run {path!r} has not finished: it holds no {RUN_MODEL} yet (only checkpoints). "
                f"Resume it with the same command to finish it, then pass its folder. Received: weights={path!r}")
        return model
    if not os.path.lexists(path):
        raise ValueError(f"The weights file does not exist. Received: weights={path!r}")
    return path
