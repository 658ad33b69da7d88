"""Version directories under a TF Serving model base path: `export_base/<integer>/`.

TF Serving watches the base path and loads the highest integer directory it finds, so a version is written
under a hidden staging name and renamed into place only when complete: the server never sees half a model.
"""

import contextlib
import os
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


@contextlib.contextmanager
def staged(path: str):
    """Yields a staging directory beside `path`; on success replaces `path` with it, else removes it."""
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f".staging-{os.path.basename(path)}-", dir=parent)
    try:
        yield staging
        if os.path.exists(path):
            shutil.rmtree(path)
        os.replace(staging, path)
    finally:
        if os.path.exists(staging):
            shutil.rmtree(staging)
