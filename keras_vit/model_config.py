"""`ConfigModel`: the base of keras_vit's models (`VisionTransformer`, `BiTResNet`), a Functional `keras.Model`
whose config is its constructor's arguments, as keras-hub's backbones. A `.keras` file then says exactly what
the model is, and `from_config` rebuilds it; `save_weights` writes the same config into the `.weights.h5` file
(the HDF5 attribute `MODEL_ATTRIBUTE`), so either file can seed the next model (`keras_vit.checkpoints.own`).

Example:
    >>> import keras_vit
    >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=2,
    ...                       mlp_dim=64, classes=3)
    >>> isinstance(model, ConfigModel), model.get_config()["classes"]
    (True, 3)
"""

import contextlib
import json

import keras

from keras_vit import quantization

MODEL_ATTRIBUTE = "keras_vit_model"
"""The `.weights.h5` attribute holding the model's serialized config (JSON, as a `.keras` file's config.json)."""


@contextlib.contextmanager
def dtype_policy(dtype):
    """Builds layers under `dtype` (a policy or its name, or a quantized model's `DTypePolicyMap`, whose layers
    are then built quantized; None: the global policy), then restores the global one.

    Yields:
        The policy's name (a map's default policy), which `ConfigModel` records so that `from_config` builds
        under the same one.
    """
    previous = keras.config.dtype_policy()
    policy = previous if dtype is None else keras.dtype_policies.get(dtype)
    keras.config.set_dtype_policy(policy)
    try:
        yield getattr(policy, "default_policy", policy).name
    finally:
        keras.config.set_dtype_policy(previous)


def head_dtype():
    """The dtype of a classification head: logits in float32 under a mixed precision policy (as the Keras
    mixed-precision guide asks), else the global policy."""
    policy = keras.config.dtype_policy()
    return "float32" if policy.compute_dtype in ("float16", "bfloat16") else policy


def require_channels_last() -> None:
    """keras_vit's models are channels-last (the checkpoints' layout); refuse a global channels-first setting.

    Raises:
        ValueError: naming the setting and the way out.
    """
    if keras.config.image_data_format() != "channels_last":
        raise ValueError(
            "keras_vit's models take channels-last images (B, H, W, C), as every ViT checkpoint. Received: "
            f"keras.config.image_data_format()={keras.config.image_data_format()!r}. Call "
            "keras.config.set_image_data_format('channels_last') before building, and transpose (B, C, H, W) "
            "batches with np.transpose(images, (0, 2, 3, 1)).")


def check_distributed_batch(x, batch_size) -> None:
    """Under a `keras.distribution` whose batch axis spans several devices, each batch `fit` makes from arrays is
    split into equal shares, one a device of this process: refuse a `batch_size` (Keras' default 32 when None), or a
    last partial batch, that does not split, before any step runs. Batches a `tf.data.Dataset` or a generator
    makes are the caller's and not checked here.

    Raises:
        ValueError: naming the batch, the device count and the way out.
    """
    distribution = keras.distribution.distribution()
    axis = getattr(distribution, "batch_dim_name", None)
    if distribution is None or axis not in distribution.device_mesh.axis_names:
        return
    mesh = distribution.device_mesh
    shares = mesh.shape[list(mesh.axis_names).index(axis)] // max(1, distribution.num_processes)
    first = keras.tree.flatten(x)[0] if x is not None else None
    if shares <= 1 or getattr(first, "shape", None) is None or not first.shape:
        return
    samples, batch = int(first.shape[0]), int(batch_size or 32)
    last = samples % batch
    for size, received in ((batch, f"batch_size={batch}"),
                           (last, f"{samples} samples in batches of {batch}, a last batch of {last}")):
        if size % shares:
            raise ValueError(
                f"Under {type(distribution).__name__}, each batch is split over the {shares} devices of this "
                f"process on the mesh's {axis!r} axis, so its size must be a multiple of {shares}. Received: "
                f"{received}. Use a batch size and a sample count that are multiples of {shares} (or drop the "
                "remainder).")


def plain(value):
    """A config value read back from JSON as the constructor takes it (lists were tuples)."""
    if isinstance(value, list):
        return tuple(plain(v) for v in value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


class ConfigModel(keras.Model):
    """A Functional model built from `arguments`, whose `get_config()` is those arguments (plus `name`,
    `trainable` and `dtype`). Subclasses build the graph in `__init__` and call `_finish(...)`."""

    def _finish(self, inputs, outputs, *, name, trainable, arguments: dict, policy_name: str):
        super().__init__(inputs, outputs, name=name, trainable=trainable)
        self._arguments = dict(arguments)
        self._policy_name = policy_name

    @property
    def arguments(self) -> dict:
        """The resolved constructor arguments that rebuild this model (without weights, input tensor, name)."""
        return dict(self._arguments)

    def get_config(self):
        # a quantized model records its layers' policies over the one it was built under, as keras-hub
        policies = quantization.policy_map(self, self._policy_name)
        dtype = self._policy_name if policies is None else keras.saving.serialize_keras_object(policies)
        return {"name": self.name, "trainable": self.trainable, "dtype": dtype, **self.arguments}

    @classmethod
    def from_config(cls, config):
        dtype, policies = quantization.read_policy(config.get("dtype"))
        if policies is None:
            return cls(**{**config, "dtype": dtype})
        model = cls(**{**config, "dtype": policies})  # each layer built in its own policy: int8 from the start
        quantization.settle_policy_map(model, policies)
        return model


    def quantize(self, mode=None, config=None, filters=None, **kwargs):
        """`keras.Model.quantize` on the layers that have a quantized form (Dense and EinsumDense: the patch
        embedding, attention, MLP and head), once; the model's config then records each layer's policy, so
        `.keras` files and `from_config` keep the quantized model.

        Raises:
            ValueError: a model already quantized, or a mode keras_vit cannot rebuild from its config.
        """
        quantization.check_not_quantized(self)
        if config is None:
            quantization.check_mode(mode)
        super().quantize(mode, config=config, filters=quantization.quantizable if filters is None else filters,
                         **kwargs)

    def fit(self, x=None, y=None, batch_size=None, **kwargs):
        """`keras.Model.fit`, after `check_distributed_batch` under a `keras.distribution` and the channels of an
        array `x` checked."""
        self._check_channels(x)
        check_distributed_batch(x, batch_size)
        return super().fit(x, y, batch_size=batch_size, **kwargs)

    def predict(self, x, *args, **kwargs):
        """`keras.Model.predict`, after the channels of an array `x` are checked (a predict function Keras traced
        for RGB would fail on a grayscale batch with a shape TypeError)."""
        self._check_channels(x)
        return super().predict(x, *args, **kwargs)

    def evaluate(self, x=None, *args, **kwargs):
        """`keras.Model.evaluate`, after the channels of an array `x` are checked."""
        self._check_channels(x)
        return super().evaluate(x, *args, **kwargs)

    def _check_channels(self, x) -> None:
        """For an array `x` of other channels than the model's input, the model's own error (its first layer's:
        `Patches` names both counts and the ways out), raised by calling it on zeros of `x`'s shape (the first
        layer refuses them before any work; `x` itself may be a NumPy array Keras would convert)."""
        shape = getattr(x, "shape", None)
        if shape is None or len(shape) != 4 or len(self.inputs) != 1 or len(self.input_shape) != 4:
            return
        if self.input_shape[-1] is not None and shape[-1] != self.input_shape[-1]:
            self(keras.ops.zeros(tuple(shape)), training=False)

    def save_weights(self, filepath, overwrite=True, **kwargs):
        """`keras.Model.save_weights`, then the model's config written into the `.weights.h5` file."""
        super().save_weights(filepath, overwrite=overwrite, **kwargs)
        if str(filepath).endswith(".weights.h5"):
            import h5py

            with h5py.File(filepath, "a") as file:
                file.attrs[MODEL_ATTRIBUTE] = json.dumps(keras.saving.serialize_keras_object(self))
