"""Version directories under a TF Serving model base path: `export_base/<integer>/`.

TF Serving watches the base path and loads the highest integer directory it finds, so a version is written
under a hidden staging name and renamed into place only when complete: the server never sees half a model.
A staging directory is named after its host and process (`.staging-<version>-<host>-<pid>-<random>`); one
left by a process that was killed is removed by the next export to the same base path on that host.
"""

import contextlib
import logging
import os
import socket
import shutil
import tempfile


def existing_versions(export_base: str) -> list[int]:
    """The integer version directories under `export_base`, sorted."""
    if not os.path.isdir(export_base):
        return []
    return sorted(int(name) for name in os.listdir(export_base) if name.isdigit())


def next_version(export_base: str) -> int:
    """One more than the highest existing version, or 1."""
    versions = existing_versions(export_base)
    return versions[-1] + 1 if versions else 1


def resolve(export_base: str, version: int | None, overwrite: bool) -> tuple[int, str]:
    """-> (version, its directory); refuses an existing version unless `overwrite`.

    Raises:
        ValueError: `version` is not a non-negative integer, or it exists and `overwrite` is False.
    """
    if version is None:
        version = next_version(export_base)
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise ValueError(f"`version` must be a non-negative integer or None. Received: version={version!r}")
    path = os.path.join(export_base, str(version))
    if os.path.exists(path) and not overwrite:
        raise ValueError(
            f"Version {version} already exists at {path!r}; pass a new version, or overwrite=True "
            f"(`--overwrite`) to replace it. Received: export_base={export_base!r}, version={version}"
        )
    return version, path


logger = logging.getLogger(__name__)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def remove_stale_staging(parent: str) -> list[str]:
    """Removes the staging directories under `parent` left by dead processes of this host; returns them."""
    host = socket.gethostname()
    removed = []
    for name in sorted(os.listdir(parent)) if os.path.isdir(parent) else []:
        fields = name.split("-")
        if not name.startswith(".staging-") or len(fields) < 5 or not fields[-2].isdigit():
            continue
        if "-".join(fields[2:-2]) == host and not _process_alive(int(fields[-2])):
            shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
            removed.append(name)
    if removed:
        logger.warning("Removed %d staging director%s left by killed exports in %s: %s", len(removed),
                       "y" if len(removed) == 1 else "ies", parent, ", ".join(removed))
    return removed


def _umask() -> int:
    """The process's umask: from /proc where Linux shows it (no change to the process), else by setting it back."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def staged(path: str):
    """Yields a staging directory beside `path`; on success replaces `path` with it, else removes it."""
    parent = os.path.dirname(os.path.abspath(path))
    created = not os.path.isdir(parent)
    os.makedirs(parent, exist_ok=True)
    remove_stale_staging(parent)
    prefix = f".staging-{os.path.basename(path)}-{socket.gethostname()}-{os.getpid()}-"
    staging = tempfile.mkdtemp(prefix=prefix, dir=parent)
    try:
        yield staging
        os.chmod(staging, 0o777 & ~_umask())  # mkdtemp's 0700 would hide the version from a server of another user
        if os.path.exists(path):
            shutil.rmtree(path)
        os.replace(staging, path)
    finally:
        if os.path.exists(staging):
            shutil.rmtree(staging)
        if created and os.path.isdir(parent) and not os.listdir(parent):
            os.rmdir(parent)  # a failed first export leaves no empty base path behind
