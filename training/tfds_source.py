"""A prepared tensorflow-datasets dataset as a `Source` (`tfds_source`), never downloaded unless asked, and the
download's preconditions: the `train` extra installed, its host reachable (an offline download fails at once).
"""

from __future__ import annotations

import tensorflow as tf

from training.dataset_types import DatasetNotFoundError, Source, identity_decode


def _tfds():
    """`tensorflow_datasets`, or a DatasetNotFoundError saying how to install it (it is the `train` extra)."""
    try:
        import tensorflow_datasets as tfds
    except ModuleNotFoundError as error:
        if error.name != "tensorflow_datasets":
            raise
        raise DatasetNotFoundError(
            "tensorflow-datasets datasets need the package tensorflow-datasets, which is not installed: "
            "`pip install -e \".[train]\"` in the repository (or `pip install tensorflow-datasets "
            "importlib_resources`). 'digits' and 'folder:PATH' need no tensorflow-datasets."
        ) from None
    return tfds


def tfds_builder(name: str, data_dir: str | None):
    tfds = _tfds()
    try:
        return tfds.builder(name, data_dir=data_dir)
    except Exception as error:  # tfds raises several types for unknown names
        raise DatasetNotFoundError(
            f"Unknown tensorflow-datasets name. Received: dataset={name!r}. Use a name from "
            "https://www.tensorflow.org/datasets/catalog, 'folder:PATH' or 'digits'."
        ) from error


CONNECT_TIMEOUT_S = 10.0
"""How long `_check_reachable` waits for a dataset's download host (name lookup and TCP connection) before
`--download` gives up: tensorflow-datasets itself retries a refused connection 10 times, about 210 s."""


def _download_failed(name: str, reason: str) -> DatasetNotFoundError:
    return DatasetNotFoundError(
        f"Could not download dataset {name!r} with tensorflow-datasets (network error: {reason}). Check the "
        f"network (and a proxy, if any), or prepare it on a machine with internet access: `python -m "
        f"training.train --dataset={name} --download --data_dir=DIR` there, then copy DIR here and pass "
        f"--data_dir=DIR without --download."
    )


def _connect_error(host: str, port: int, timeout: float) -> str | None:
    """Why a TCP connection to `host:port` fails within `timeout` seconds (the name lookup included), or None."""
    import socket
    import threading

    outcome = []

    def connect():
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            outcome.append(None)
        except OSError as error:
            outcome.append(error.strerror or str(error) or type(error).__name__)

    thread = threading.Thread(target=connect, daemon=True)  # getaddrinfo has no timeout of its own
    thread.start()
    thread.join(timeout)
    return outcome[0] if outcome else f"no answer within {timeout:g} s"


def _check_reachable(name: str, builder, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Raises DatasetNotFoundError at once when the host of the dataset's first download (or the proxy for it)
    cannot be reached: offline, tensorflow-datasets would retry for minutes. Datasets without a list of their
    files (no checksums) and other schemes than http(s) are not checked."""
    import urllib.parse
    import urllib.request

    urls = [url for url in (builder.url_infos or {}) if url.startswith(("http://", "https://"))]
    if not urls:
        return
    url = urllib.parse.urlsplit(sorted(urls)[0])
    proxy = urllib.request.getproxies().get(url.scheme)
    if proxy and not urllib.request.proxy_bypass(url.hostname or ""):
        target = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        host, port, what = target.hostname, target.port or 80, f"the proxy {target.hostname}"
    else:
        host, port, what = url.hostname, url.port or (443 if url.scheme == "https" else 80), url.hostname
    reason = _connect_error(host, port, timeout)
    if reason is not None:
        raise _download_failed(name, f"{what} cannot be reached: {reason}") from ConnectionError(reason)


def tfds_source(name: str, split: str, data_dir: str | None, download: bool) -> Source:
    tfds = _tfds()
    builder = tfds_builder(name, data_dir)
    if download and not builder.is_prepared():
        _check_reachable(name, builder)
        try:
            builder.download_and_prepare()
        except OSError as error:  # no network, DNS, HTTP (requests' errors are OSErrors); not missing modules
            raise _download_failed(name, str(error)) from error
    try:
        elements = builder.as_dataset(
            split=split,
            as_supervised=True,
            shuffle_files=False,
            decoders={"image": tfds.decode.SkipDecoding()},
        )
    except (AssertionError, FileNotFoundError, tf.errors.NotFoundError) as error:  # tfds: "not prepared"
        raise DatasetNotFoundError(
            f"Dataset {name!r} is not prepared in data_dir={str(builder.data_dir_root)!r}. Prepare it once on a "
            f"machine with internet access: `python -c \"import tensorflow_datasets as tfds; "
            f"tfds.builder('{name}', data_dir='DIR').download_and_prepare()\"` (or `tfds build {name} "
            f"--data_dir=DIR`), then pass --data_dir=DIR; or add --download to let this run fetch it. "
            f"Some datasets (e.g. imagenet2012) need manual downloads first; see their catalog page."
        ) from error
    image_feature = builder.info.features[builder.info.supervised_keys[0]]
    decode = image_feature.decode_example if isinstance(elements.element_spec[0], tf.TensorSpec) and \
        elements.element_spec[0].dtype == tf.string else identity_decode

    def decode_rgb(image):
        image = decode(image)
        if image.shape.rank == 3 and image.shape[-1] == 1:
            image = tf.image.grayscale_to_rgb(image)
        image.set_shape((None, None, 3))
        return image

    cardinality = int(elements.cardinality())
    num_examples = cardinality if cardinality >= 0 else int(builder.info.splits[split].num_examples)
    label_feature = builder.info.features[builder.info.supervised_keys[1]]
    elements = elements.map(lambda image, label: (image, tf.cast(label, tf.int32)))
    return Source(elements, decode_rgb, num_examples, label_feature.num_classes, tuple(label_feature.names))
