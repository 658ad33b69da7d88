"""An exclusive lock on a training workdir: one run at a time writes into it.

`WorkdirLock(path)` takes `fcntl.flock(LOCK_EX | LOCK_NB)` on `path` (the app uses `WORKDIR/.lock`, and a
worker of a multi-worker run its own `WORKDIR/workers/<task>/.lock`) and writes the holder into it: one line
`pid=<pid> host=<host> started=<UTC time> command=<argv>`. A second run on the same workdir cannot take the
lock and is refused (`WorkdirLocked`, naming the holder). The lock is released when the run ends, whatever
the way: `release()` empties the file and unlocks it, and the kernel drops a `flock` when its process dies
(a crash, `kill -9`, a lost machine), so a lock is never left held by a process that is gone. A lock file
that is not empty when it is taken was left by a run that did not release it (crashed or killed): `acquire`
returns that holder line, and the app says so (a "stale lock", taken over).

`flock` works on local filesystems and on NFS (Linux emulates it with NFS byte-range locks); a workdir that is
not a local path (`gs://...`) is not locked (`is_lockable`). The file is never deleted: deleting a lock file
that another process has opened but not yet locked would let two runs hold "the" lock on two files.

No TensorFlow here: the module is imported by tests that hold a lock from a plain Python process.
"""

from __future__ import annotations

import datetime
import errno
import fcntl
import os
import re
import shlex
import socket
import sys

from keras_vit.checkpoints import runs
from keras_vit.checkpoints.runs import RUN_LOCK as LOCK_NAME  # declared once, where keras_vit reads it


class WorkdirLocked(RuntimeError):
    """Another live process holds the lock; the message names it."""


def is_lockable(workdir: str) -> bool:
    """Whether `workdir` is a local path that `flock` can lock (not `gs://`, `s3://`, `hdfs://`, ...)."""
    return "://" not in str(workdir)


def holder_line() -> str:
    """The line that names this process in a lock file."""
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    command = " ".join(shlex.quote(a) for a in sys.argv).replace("\n", " ") or "python"  # one line
    return f"pid={os.getpid()} host={socket.gethostname()} started={started} command={command[:300]}"


def describe(line: str) -> str:
    """`pid 123 on host h, started 2026-01-02 03:04:05 UTC (python -m training.train ...)` from a holder line."""
    match = re.fullmatch(r"pid=(\S+) host=(\S*) started=(.*?) command=(.*)", line.strip(), re.DOTALL)
    if not match:
        return repr(line[:200]) if line else "a process that has not written its name into it yet"
    pid, host, started, command = match.groups()
    return f"pid {pid} on host {host}, started {started} ({command})"


class WorkdirLock:
    """An exclusive, non-blocking `flock` on `path`, holding this process's `holder_line()`."""

    def __init__(self, path: str):
        self.path = str(path)
        self._fd = None

    def acquire(self) -> str | None:
        """Takes the lock; returns the holder line of a stale lock taken over (None: the file was free).

        Raises:
            WorkdirLocked: another process holds it (the message names it from the file).
            OSError: the lock file cannot be created or opened.
        """
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            os.close(fd)
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            raise WorkdirLocked(describe(_read(self.path))) from None
        previous = _read_fd(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, (holder_line() + "\n").encode("utf-8", "backslashreplace"), 0)
        os.fsync(fd)
        self._fd = fd
        return previous or None

    def release(self) -> None:
        """Empties the file (a clean end: the next run finds no stale lock) and unlocks it."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)
        except OSError:
            pass
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()


def training_holder(workdir) -> str | None:
    """Who trains the run in `workdir` now (`describe` of its lock's holder), or None: no process holds its lock
    (it ended, or it is no run; a remote path is not checked). Takes no lock and writes nothing: a shared,
    non-blocking `flock` on `WORKDIR/.lock`, released at once, fails only while a run holds it."""
    held = runs.lock_holder(workdir) if is_lockable(workdir) else None
    return None if held is None else describe(held)


def check_not_training(weights, flag: str = "--weights") -> None:
    """Refuses `weights` that name a run folder another process is training (or resuming) now: its `model.keras`,
    if any, is an earlier run's or not written yet, not the model that run is making.

    The one check for every tool that takes a run folder as weights: `python -m training.train` calls it before
    anything is imported (a usage error, exit status 2) and `training.model.model_from_config` before loading; other
    tools (`python -m keras_vit.export --weights=RUN`, ...) can call it the same way.

    Raises:
        WorkdirLocked: the one-line message: who holds the run, and how to go on.
    """
    if weights is None or not os.path.isdir(os.fspath(weights)):
        return
    holder = training_holder(weights)
    if holder is not None:
        model = os.path.join(os.fspath(weights), "model.keras")
        raise WorkdirLocked(
            f"{flag}={weights} is a run that is being trained now: {holder} holds "
            f"{os.path.join(os.fspath(weights), LOCK_NAME)}, so its model is not final. Wait for that run to end "
            f"(or stop it), or pass a finished model file explicitly (e.g. {flag}={model} as it is now).")


def _read_fd(fd) -> str:
    data = os.pread(fd, 4096, 0)
    return data.decode("utf-8", "backslashreplace").strip()


def _read(path) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(4096).decode("utf-8", "backslashreplace").strip()
    except OSError:
        return ""


def hold_forever(path: str) -> None:  # pragma: no cover - run in a child process by the tests
    """Takes the lock, prints `locked`, and sleeps until killed (tests: another run holds the workdir)."""
    import time

    WorkdirLock(path).acquire()
    print("locked", flush=True)
    while True:
        time.sleep(60)


if __name__ == "__main__":  # pragma: no cover
    hold_forever(sys.argv[1])
