"""A keras_vit file is untrusted input: what it declares (its model config, its tensors' shapes and dtypes, its zip
members' sizes) is checked against what a model can be before anything is read whole, allocated or built.

- `check_archive(path)`: a `.keras` zip's members, by their declared sizes and compression ratios.
- `read_json(data, label)`: a config or metadata member, bounded in size, with one error naming the file.
- `check_model_config(config, label)`: a serialized keras_vit model (`VisionTransformer`, `BiTResNet`): every size
  field against `FIELD_LIMITS`, then the parameter count its arguments imply (`estimated_parameters`, no build)
  against `max_parameters()` (the environment variable `KERAS_VIT_MAX_PARAMETERS` raises it knowingly).
- `check_datasets(file, label, expected=...)`: a `.weights.h5`'s datasets, by their HDF5 metadata alone: float
  dtypes, allocated storage, and their shapes against the model's weights (or a bound on their total size).

Each refusal names the file, the field or tensor and the received value, and costs no more than reading metadata.

Example:
    >>> check_model_config({"registered_name": "keras_vit>VisionTransformer",
    ...                     "config": {"num_layers": 10**6, "hidden_size": 768}}, "x.keras")
    Traceback (most recent call last):
    ...
    ValueError: The model file 'x.keras' declares num_layers=1000000, beyond keras_vit's limit of 256 for it ...
"""

import json
import math
import os
import stat

import numpy as np

OPTIMIZER_GROUP = "optimizer/"
"""Where Keras' `save_weights` of a compiled model puts the optimizer's state: never read by keras_vit's loads."""

DEFAULT_MAX_PARAMETERS = 2_000_000_000
"""Twice ViT-G/14's 1.8 billion: 8 GB of float32. `KERAS_VIT_MAX_PARAMETERS=N` raises (or lowers) it."""

MAX_PARAMETERS_VARIABLE = "KERAS_VIT_MAX_PARAMETERS"

FIELD_LIMITS = dict(
    num_layers=256, hidden_size=16384, mlp_dim=131072, num_heads=1024, patch_size=1024, classes=10_000_000,
    representation_size=131072, image_side=16384, channels=64, stem_units=64, stem_stages=8, stem_width=4096,
)
"""The largest value of each size field a file may declare: far beyond every published model (ViT-H/14: 32 layers,
D=1280, MLP 5120; ViT-22B: 48 layers, D=6144), small enough that none alone reaches the memory of a machine."""

MAX_JSON_BYTES = 16 * 2**20
"""A `.keras` file's config.json or metadata.json (a ViT's is under 2 KB)."""

MAX_MEMBERS = 64
MAX_COMPRESSION_RATIO = 200
"""Keras stores `.keras` members uncompressed (ratio 1); deflated float weights reach 1.1-1.5, zeros far more."""


def max_parameters() -> int:
    """The largest parameter count a file may declare: `KERAS_VIT_MAX_PARAMETERS`, else `DEFAULT_MAX_PARAMETERS`.

    Raises:
        ValueError: a variable that is not a positive integer.
    """
    value = os.environ.get(MAX_PARAMETERS_VARIABLE)
    if value is None:
        return DEFAULT_MAX_PARAMETERS
    if not value.strip().isdigit() or int(value) < 1:
        raise ValueError(f"{MAX_PARAMETERS_VARIABLE} must be a positive integer. Received: {value!r}")
    return int(value)


def check_regular_file(path: str) -> str:
    """`path` when it is a regular file (or a link to one); a folder, a FIFO, a device or a dangling link is
    refused before anything opens it (reading a FIFO would wait forever).

    Raises:
        ValueError: naming the path and what it is.
    """
    if not os.path.exists(path):
        raise ValueError(f"The weights file {path!r} is a link to nothing ({os.readlink(path)!r}). Received: {path!r}")
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        kind = ("a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else
                "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode)
                else "not a regular file")
        raise ValueError(f"The weights file {path!r} is {kind}, not a regular file. Pass the model file itself. "
                         f"Received: {path!r}")
    return path


def _refuse(label, what: str) -> ValueError:
    return ValueError(f"The model file {os.fspath(label)!r} {what}. It is damaged or crafted: use a file saved by "
                      "keras_vit (`model.save`, `save_weights`, the training app).")


# ----------------------------------------------------------------------------------------------------------
# .keras archives and their JSON members


def check_archive(archive, label) -> None:
    """Refuses a `.keras` zip whose members declare more than a model file holds.

    Args:
        archive: an open `zipfile.ZipFile`.
        label: the file, for messages.

    Raises:
        ValueError: too many members, a JSON member over `MAX_JSON_BYTES`, a member whose declared size is over
            `MAX_COMPRESSION_RATIO` times its compressed size, or a weights member larger than the parameter bound.
    """
    members = archive.infolist()
    if len(members) > MAX_MEMBERS:
        raise _refuse(label, f"is a zip archive of {len(members)} members (a .keras file has 3)")
    for member in members:
        if member.filename.endswith(".json") and member.file_size > MAX_JSON_BYTES:
            raise _refuse(label, f"declares its member {member.filename} at {member.file_size:,} bytes (limit "
                                 f"{MAX_JSON_BYTES:,})")
        if member.file_size > MAX_COMPRESSION_RATIO * max(member.compress_size, 1) and member.file_size > 2**20:
            raise _refuse(label, f"declares its member {member.filename} at {member.file_size:,} bytes from "
                                 f"{member.compress_size:,} compressed (a ratio over {MAX_COMPRESSION_RATIO})")
        if member.filename.endswith(".h5") and member.file_size > 8 * max_parameters() + 2**24:
            raise _refuse(label, f"declares its weights member at {member.file_size:,} bytes, more than "
                                 f"{max_parameters():,} float64 parameters ({MAX_PARAMETERS_VARIABLE})")


def read_json(data: bytes | str, label, what: str = "config") -> dict:
    """A JSON object from a file's member or attribute, with one error naming the file.

    Raises:
        ValueError: text over `MAX_JSON_BYTES`, not JSON, or not an object.
    """
    if len(data) > MAX_JSON_BYTES:
        raise _refuse(label, f"has a {what} of {len(data):,} bytes (limit {MAX_JSON_BYTES:,})")
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError) as error:
        raise _refuse(label, f"has a {what} that is not JSON ({str(error)[:120]})") from None
    if not isinstance(value, dict):
        raise _refuse(label, f"has a {what} that is not a JSON object (a {type(value).__name__})")
    return value


# ----------------------------------------------------------------------------------------------------------
# A serialized keras_vit model's arguments


def _int_field(arguments: dict, field: str, label, limit_name: str | None = None, required: bool = True):
    value = arguments.get(field)
    if value is None and not required:
        return None
    limit = FIELD_LIMITS[limit_name or field]
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= limit:
        raise _refuse(label, f"declares {field}={value!r}, beyond keras_vit's limit of {limit} for it (a positive "
                             "integer)")
    return value


def _stem(arguments: dict, label, units_field: str = "block_units") -> tuple[tuple, int]:
    """(block units, width) of a declared ResNet stem or BiT body, each checked."""
    units = arguments.get(units_field) or ()
    if not isinstance(units, (list, tuple)) or len(units) > FIELD_LIMITS["stem_stages"]:
        raise _refuse(label, f"declares {units_field}={str(units)[:80]}, beyond keras_vit's limit of "
                             f"{FIELD_LIMITS['stem_stages']} stages")
    for count in units:
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= FIELD_LIMITS["stem_units"]:
            raise _refuse(label, f"declares {units_field}={str(tuple(units))[:80]}: each stage's unit count must be "
                                 f"a positive integer up to keras_vit's limit of {FIELD_LIMITS['stem_units']}")
    width = _int_field(arguments, "width", label, "stem_width") if "width" in arguments else 64
    return tuple(units), width


def _resnet_parameters(units: tuple, width: int, channels: int) -> int:
    """An upper bound of a ResNet v2 body's weights (bottleneck units of width 4 m, m = width * 2^stage)."""
    total = 49 * channels * width + 2 * width
    previous = width
    for stage, count in enumerate(units):
        middle = width * 2**stage
        out = 4 * middle
        total += previous * out + count * (previous * middle + 9 * middle * middle + middle * out + 6 * out)
        previous = out
    return total


def _image_shape(arguments: dict, label) -> tuple[int, int, int]:
    shape = arguments.get("input_shape")
    size = arguments.get("image_size") or 224
    pair = (size, size) if isinstance(size, int) else size
    if shape is None:
        shape = (*pair, 3)
    if not isinstance(shape, (list, tuple)) or len(shape) != 3:
        raise _refuse(label, f"declares input_shape={str(shape)[:80]} (height, width, channels)")
    if isinstance(pair, (list, tuple)) and len(pair) == 2:  # a model of any size: its table covers image_size
        shape = tuple(pair[axis] if shape[axis] is None else shape[axis] for axis in (0, 1)) + (shape[2],)
    height = _int_field({"height": shape[0]}, "height", label, "image_side")
    width = _int_field({"width": shape[1]}, "width", label, "image_side")
    channels = _int_field({"channels": shape[2]}, "channels", label, "channels")
    return height, width, channels


def _stem_embedding(units: tuple, stem_width: int, patch: int, width: int) -> int:
    """The patch embedding of a hybrid: patches of patch / stride features of the stem's last map, to `width`."""
    stride = 4 * 2 ** max(len(units) - 1, 0)  # `keras_vit.variants.stem_stride`
    side = max(patch // stride, 1)
    return 4 * stem_width * 2 ** max(len(units) - 1, 0) * side * side * width


SIZE_KEYS = ("units", "filters", "output_dim", "input_dim", "num_heads", "key_dim", "value_dim")
"""The size fields of Keras' own layers, checked in any `.keras` config (a model that is not keras_vit's too)."""


def _check_nested(value, label, depth: int = 0) -> None:
    """Every keras_vit model nested in a config (a `build`-wrapped one, a layer of the user's model) and every
    Keras layer size field, checked; the JSON's depth is bounded."""
    if depth > 64:
        raise _refuse(label, "nests its config more than 64 levels deep")
    if isinstance(value, dict):
        registered = str(value.get("registered_name", ""))
        if registered.startswith("keras_vit>") and isinstance(value.get("config"), dict):
            check_model_config(value, label)
            return
        for key, item in value.items():
            if key in SIZE_KEYS and isinstance(item, int) and not isinstance(item, bool) \
                    and not 0 <= item <= FIELD_LIMITS["mlp_dim"]:
                raise _refuse(label, f"declares a layer with {key}={item}, beyond keras_vit's limit of "
                                     f"{FIELD_LIMITS['mlp_dim']} for a Keras layer size; if you trust the file, load "
                                     "it with keras.saving.load_model yourself")
            _check_nested(item, label, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _check_nested(item, label, depth + 1)


def estimated_parameters(arguments: dict, label="the file") -> int:
    """An upper bound of the weights a `keras_vit.ViT` of these (declared) arguments holds, from the arguments alone.

    Raises:
        ValueError: a size field beyond `FIELD_LIMITS`.

    Example:
        >>> estimated_parameters(dict(patch_size=16, hidden_size=768, num_layers=12, num_heads=12, mlp_dim=3072,
        ...                           classes=1000, input_shape=(224, 224, 3))) > 86_000_000
        True
    """
    layers = _int_field(arguments, "num_layers", label)
    width = _int_field(arguments, "hidden_size", label)
    mlp = _int_field(arguments, "mlp_dim", label)
    _int_field(arguments, "num_heads", label)
    patch = _int_field(arguments, "patch_size", label)
    height, image_width, channels = _image_shape(arguments, label)
    classes = _int_field(arguments, "classes", label, required=False) or 0
    representation = _int_field(arguments, "representation_size", label, required=False) or 0
    tokens = (height // patch) * (image_width // patch) + 1
    embedding = 5 * patch * patch * channels * width + 9 * width * width * max(int(math.log2(patch)), 1)
    stem = 0
    hybrid = arguments.get("hybrid")
    if isinstance(hybrid, dict):
        units, stem_width = _stem(hybrid, label)
        stem = _resnet_parameters(units, stem_width, channels)
        embedding += _stem_embedding(units, stem_width, patch, width)
    elif hybrid is not None:
        from keras_vit import variants

        if hybrid not in variants.RESNET_STEMS:
            raise _refuse(label, f"declares hybrid={str(hybrid)[:80]}, not a stem keras_vit knows")
        units, stem_width = variants.RESNET_STEMS[hybrid]["block_units"], variants.RESNET_STEMS[hybrid]["width"]
        stem = _resnet_parameters(units, stem_width, channels)
        embedding += _stem_embedding(units, stem_width, patch, width)
    block = 4 * width * width + 2 * width * mlp + 10 * width + mlp + 1
    head = (width + 1) * representation + (max(width, representation) + 1) * classes
    return embedding + stem + tokens * width + layers * block + head


def check_model_config(config: dict, label) -> None:
    """Refuses a serialized keras_vit model whose declared sizes would take more than `max_parameters()` (or a
    field beyond `FIELD_LIMITS`), before Keras builds it; in another model, the keras_vit models it holds and every
    Keras layer size field (`SIZE_KEYS`).

    Raises:
        ValueError: naming the file, the field and the value, or the estimate and the bound.
    """
    registered = str(config.get("registered_name", ""))
    arguments = config.get("config")
    if not registered.startswith("keras_vit>"):
        _check_nested(config, label)  # another model: the keras_vit models inside it, and Keras layers' sizes
        return
    if not isinstance(arguments, dict):
        raise _refuse(label, "declares a keras_vit model without its arguments")
    if registered == "keras_vit>BiTResNet":
        units, width = _stem(arguments, label)
        _, _, channels = _image_shape(arguments, label)
        classes = _int_field(arguments, "classes", label, required=False) or 0
        count = _resnet_parameters(units, width, channels) + 2 * width * 2 ** len(units) * 4 * (classes + 1)
    else:
        count = estimated_parameters(arguments, label)
    if count > max_parameters():
        raise _refuse(label, f"declares a model of about {count:,} parameters, more than keras_vit's bound of "
                             f"{max_parameters():,}; if you trust the file, raise the bound with "
                             f"{MAX_PARAMETERS_VARIABLE}={count}")


# ----------------------------------------------------------------------------------------------------------
# A .weights.h5's datasets, by their metadata


def declared_datasets(file) -> dict:
    """{name: h5py.Dataset} of an open HDF5 file, the optimizer's state left out (nothing is read)."""
    import h5py

    found = {}

    def visit(name, item):  # returns None: visititems stops at the first other value
        if isinstance(item, h5py.Dataset) and not name.startswith(OPTIMIZER_GROUP):
            found[name] = item

    file.visititems(visit)
    return found


def is_float_dtype(dtype) -> bool:
    """Whether `dtype` (numpy or HDF5's) holds floats: float16/32/64, or bfloat16 (a 2-byte opaque type)."""
    dtype = np.dtype(dtype)
    return dtype.kind == "f" or (dtype.kind == "V" and dtype.itemsize == 2)  # bfloat16 is stored as 2-byte opaque


def is_weight_dtype(dtype) -> bool:
    """Whether `dtype` holds a Keras weight: floats, or the one-byte values of a quantized kernel (int8, int4
    packed in int8, float8 stored as a one-byte opaque type)."""
    dtype = np.dtype(dtype)
    return is_float_dtype(dtype) or (dtype.kind in "iuV" and dtype.itemsize == 1)


def check_datasets(file, label, expected: list[tuple] | None = None, max_elements: int | None = None) -> None:
    """Refuses datasets that are not float, that declare data they do not hold, or whose shapes are not the
    model's (`expected`, the shapes of its weights) or add up to more than `max_elements`.

    Args:
        file: an open `h5py.File`.
        label: the file, for messages.
        expected: the shapes of the model's weights, in any order; None to check the total only.
        max_elements: the bound on the total element count when `expected` is None (default: `max_parameters()`).

    Raises:
        ValueError: naming the first offending tensor, its shape or dtype.
    """
    datasets = declared_datasets(file)
    total = 0
    for name, dataset in datasets.items():
        shape = tuple(int(d) for d in dataset.shape)
        if not is_weight_dtype(dataset.dtype):
            raise _refuse(label, f"holds {name} as {dataset.dtype} (shape {shape}): model weights are floats "
                                 f"(or one-byte quantized kernels)")
        size = math.prod(shape)
        if size and dataset.id.get_storage_size() == 0:
            raise _refuse(label, f"declares {name} with shape {shape} but holds no data for it")
        total += size
    if expected is not None:
        found = sorted(tuple(int(d) for d in dataset.shape) for dataset in datasets.values())
        wanted = sorted(tuple(int(d) for d in shape) for shape in expected)
        if found != wanted:
            extra = [shape for shape in found if shape not in wanted][:3]
            missing = [shape for shape in wanted if shape not in found][:3]
            raise ValueError(
                f"The weights file {os.fspath(label)!r} does not match the architecture it declares: it holds "
                f"{len(found)} tensors, the model has {len(wanted)} weights; shapes in the file only: {extra}, in the "
                "model only: " f"{missing}. Rebuild the model with the architecture the file was saved from, or "
                "save the file again.")
        return
    bound = max_parameters() if max_elements is None else max_elements
    if total > bound:
        raise _refuse(label, f"declares {total:,} weight values, more than the {bound:,} its model can hold")
