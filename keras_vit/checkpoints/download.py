"""Downloads a published weights file (`keras_vit.weights.WeightsEntry`) once into the Keras cache.

A file already at `cache_path(entry)` is used without a download (a file downloaded by hand can be placed there);
a failed download raises `WeightsDownloadError` (an `OSError`) naming that path, a checksum mismatch
`WeightsChecksumError`.

Example:
    >>> import os
    >>> from keras_vit.weights import get_entry
    >>> os.path.basename(cache_path(get_entry("B16", "imagenet21k")))
    'imagenet21k__ViT-B_16.npz'
"""

import hashlib
import os
import tempfile
import urllib.error

CACHE_SUBDIR = "keras_vit"


class WeightsDownloadError(ConnectionError):
    """A published weights file could not be downloaded (no network, DNS failure, HTTP error, ...).

    Its message names the weights, the URL, the cache file where a file downloaded by hand can be placed,
    and the alternatives `weights=None` and `weights="/path/to/file.npz"`. Attributes: `entry` (the
    `WeightsEntry`), `path` (that cache file) and `reason` (the network error, as text).
    """

    def __init__(self, message: str, entry=None, path: str | None = None, reason: str | None = None):
        super().__init__(message)
        self.entry, self.path, self.reason = entry, path, reason


class WeightsChecksumError(ValueError):
    """A downloaded weights file does not have the sha256 of the weights table (damaged or altered download)."""



def default_cache_dir() -> str | None:
    """`$KERAS_HOME` when set (read at call time), else None: the Keras default (~/.keras)."""
    return os.environ.get("KERAS_HOME") or None


def _cache_root(cache_dir: str | None) -> str:
    """The folder `keras.utils.get_file` is given: `cache_dir`, else `$KERAS_HOME`, else Keras' own home
    (`~/.keras`, or `/tmp/.keras` when the home folder is not writable, as Keras decides at import)."""
    root = cache_dir if cache_dir is not None else default_cache_dir()
    if root is None:
        home = os.path.expanduser("~")
        root = os.path.join(home if os.access(home, os.W_OK) else "/tmp", ".keras")
    return os.path.expanduser(root)


def cache_path(entry, cache_dir: str | None = None) -> str:
    """The file `fetch` downloads `entry` to, and uses without any download when it is already there.

    `<cache>/keras_vit/<entry.file_name>`, `<cache>` being `cache_dir`, else `$KERAS_HOME`, else `~/.keras`;
    as `keras.utils.get_file` does, a cache folder that cannot be written falls back to `/tmp/.keras`.

    """
    root = _cache_root(cache_dir)
    if not os.access(root, os.W_OK):
        root = os.path.join("/tmp" if os.path.isdir("/tmp") else tempfile.gettempdir(), ".keras")
    return os.path.join(root, CACHE_SUBDIR, entry.file_name)


def _failure_reason(error: BaseException, url: str) -> str:
    """The network error behind a failed `get_file`, as short text without the URL (the message has it)."""
    for cause in (error, error.__context__):  # get_file wraps a URLError in a plain Exception with the URL
        if isinstance(cause, urllib.error.HTTPError):
            return f"HTTP {cause.code} {cause.msg}"
        if isinstance(cause, urllib.error.URLError):
            reason = cause.reason
            return reason.strerror if isinstance(reason, OSError) and reason.strerror else str(reason)
    text = str(error).replace(f"URL fetch failure on {url}: ", "").replace(url, "the URL")
    return text or type(error).__name__


def sha256(path: str) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fetch(entry, cache_dir: str | None = None) -> str:
    """Downloads `entry` to `cache_path(entry, cache_dir)` (once) with `keras.utils.get_file`; returns that path.

    A file already at that path is used without a download (a file downloaded by hand can be placed there).
    The file is verified against `entry.sha256` when the table has one.

    Raises:
        WeightsDownloadError: when the download fails (an `OSError`; the message names the URL, the cache
            path for a manual download, and `weights=None` or a local file as the alternatives).
        WeightsChecksumError: when the downloaded file does not match its sha256 (a `ValueError`).
    """
    import keras

    root = _cache_root(cache_dir)
    try:  # get_file falls back to /tmp/.keras when the folder does not exist yet
        os.makedirs(root, exist_ok=True)
    except OSError:
        pass  # not writable: get_file (and cache_path) fall back to /tmp/.keras
    path = cache_path(entry, cache_dir)
    try:
        return keras.utils.get_file(
            fname=entry.file_name,
            origin=entry.url,
            file_hash=entry.sha256,
            hash_algorithm="sha256",
            cache_subdir=CACHE_SUBDIR,
            cache_dir=root,
        )
    except Exception as error:  # network errors come in many types (URLError, HTTPError, socket errors...)
        checksum = isinstance(error, ValueError) and entry.sha256 is not None and "hash" in str(error)
        if not (checksum and os.path.exists(path)):
            reason = _failure_reason(error, entry.url)
            raise WeightsDownloadError(
                f"Could not download weights {entry.name!r} for ViT {entry.variant} ({reason}) from {entry.url}. "
                f"To use them offline, download that file elsewhere and place it at {path} (it is then used "
                f"without a download); or pass weights=None (random initialisation, no download) or "
                f"weights=\"/path/to/file.npz\" (a checkpoint on disk).",
                entry=entry, path=path, reason=reason,
            ) from None
        found = sha256(path)
        raise WeightsChecksumError(
            f"The file downloaded for weights {entry.name!r} of ViT {entry.variant} from {entry.url} failed its "
            f"sha256 check (expected {entry.sha256}, got {found}): the download is damaged or not the published "
            f"file. Delete {path} and try again, or pass weights=None or weights=\"/path/to/file.npz\"."
        ) from None
