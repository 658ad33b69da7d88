"""The serving signatures of an exported ViT, as a `tf.Module` that `tf.saved_model.save` writes.

- `serving_default`: `images` (tf.string [None], encoded JPEG/PNG/GIF/BMP) -> `scores` float32 [None, k],
  `classes` int32 [None, k], `labels` string [None, k]; decoding, resizing and preprocessing in the graph.
- `predict_images`: `images` (float32 [None, H, W, 3] in 0..255) -> `probabilities` (or `logits` when the
  head has no activation).
- Models without a head (`include_top=False` with `pooling`): `serving_default` maps encoded images and
  `features` maps float images to `features` float32 [None, D], the pooled representation.

Everything a request can get wrong (bad bytes, too many pixels, too much decoding work, too many images, a
float batch of the wrong size or with pixels outside 0..255) fails with `InvalidArgumentError`, which TF
Serving returns as INVALID_ARGUMENT. The limits (`keras_vit.export.limits.Limits`) are constants of the
graphs, so the SavedModel enforces them as it is; `serving_limits()` on the loaded object returns them.
"""

import dataclasses

import keras
import tensorflow as tf

from keras_vit import model_parts, preprocessing as vit_preprocessing
from keras_vit.export import decode
from keras_vit.export import frozen as frozen_module
from keras_vit.export.limits import Limits

PREPROCESSING = ("auto", "vit", "none")
"""`auto`: [-1, 1] scaling unless the model has its own `preprocessing` layer; `vit`: always x/127.5 - 1;
`none`: the model takes 0..255 pixels as they are."""


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """What the export needs to know about a model, read from its structure (layer names, not positions)."""

    height: int
    width: int
    classes: int | None  # None: no head
    activation: str | None  # the head's activation name ("softmax", "linear", ...); None without a head
    scale_inputs: bool  # apply x / 127.5 - 1 in the graph

    @property
    def output_name(self) -> str:
        if self.classes is None:
            return "features"
        return "logits" if self.activation == "linear" else "probabilities"


def inspect_model(model: keras.Model, preprocessing: str = "auto") -> ModelSpec:
    """Reads the image size, head and preprocessing of `model`, or raises ValueError when it cannot serve."""
    if preprocessing not in PREPROCESSING:
        raise ValueError(f"`preprocessing` must be one of {PREPROCESSING}. Received: preprocessing={preprocessing!r}")
    input_shape = tuple(model.input_shape)
    if len(input_shape) != 4 or input_shape[3] != 3 or not all(isinstance(d, int) for d in input_shape[1:3]):
        raise ValueError(
            "The model must take images of a fixed size, (batch, height, width, 3): the export resizes every "
            "request to it. Received a model with input_shape="
            f"{input_shape}. For a model of any input size, export the size to serve: "
            "`keras_vit.ViT(weights=<its file>, input_shape=(height, width, 3))` (its position table resampled "
            "as the model does at run time)."
        )
    outputs = getattr(model, "outputs", None) or []  # a subclassed model has none listed: its output_shape decides
    if len(outputs) > 1:
        raise ValueError("The model must have one output, one vector per image: class scores, or a pooled "
                         f"representation. Received a model with {len(outputs)} outputs: {model.output_shape}")
    output_shape = tuple(model.output_shape)
    if len(output_shape) != 2:
        raise ValueError(
            "The model must output one vector per image: class scores, or a pooled representation "
            "(build it with `include_top=False, pooling='token'` or 'avg'). "
            f"Received a model with output_shape={output_shape}"
        )
    head = model_parts.head(model)
    has_head = head is not None
    activation = keras.activations.serialize(head.activation) if has_head else None
    if isinstance(activation, dict):
        activation = activation.get("config", {}).get("name", str(activation))
    if model_parts.distillation_head(model) is not None:  # DeiT: linear heads, the activation after their mean
        activation = model_parts.output_activation(model)
    scale = preprocessing == "vit" or (preprocessing == "auto" and not vit_preprocessing.scales_own_input(model))
    return ModelSpec(
        height=input_shape[1],
        width=input_shape[2],
        classes=output_shape[1] if has_head else None,
        activation=activation,
        scale_inputs=scale,
    )


def label_table(labels_asset: tf.saved_model.Asset) -> tf.lookup.StaticHashTable:
    """class index (int64) -> label, initialised from the label file (one label a line) when the model loads."""
    initializer = tf.lookup.TextFileInitializer(
        labels_asset,
        key_dtype=tf.int64,
        key_index=tf.lookup.TextFileIndex.LINE_NUMBER,
        value_dtype=tf.string,
        value_index=tf.lookup.TextFileIndex.WHOLE_LINE,
    )
    return tf.lookup.StaticHashTable(initializer, default_value="")


def pixels_to_outputs(model, spec: ModelSpec, jit_compile: bool = False, frozen: bool = False):
    """A function float32 [B, H, W, 3] in 0..255 -> the model's float32 output, preprocessing included.

    With `frozen`, the model's weights are constants of its graph (`keras_vit.export.frozen`). With
    `jit_compile`, the model's forward pass is an XLA-compiled inner `tf.function`; on the CPUs measured it
    was slower than the plain graph (benchmarks/README.md), hence off by default.
    """
    forward = lambda images: model(images, training=False)  # noqa: E731
    if frozen:
        forward = frozen_module.frozen_forward(forward, spec.height, spec.width)
    if jit_compile:
        forward = tf.function(forward, jit_compile=True)

    def outputs(pixels):
        if spec.scale_inputs:
            pixels = vit_preprocessing.to_model_range(pixels)
        return tf.cast(forward(pixels), tf.float32)  # a no-op unless the policy is mixed precision

    return outputs


def check_pixels(images, spec: ModelSpec, limits: Limits) -> list:
    """The checks of a float signature's `images`: shape (batch, H, W, 3), batch size, pixel range (run them as
    control dependencies)."""
    shape = tf.shape(images)
    expected = tf.constant([spec.height, spec.width, 3])
    # The declared rank (4) lets graph optimisation fold a rank test away, but a server may still feed
    # another rank: the shape padded to 4 entries then differs from (batch, H, W, 3) in its last ones.
    rank_four = tf.equal(tf.size(shape), 4)
    padded = tf.concat([shape, tf.zeros([4], tf.int32)], 0)[:4]
    right_size = tf.logical_and(rank_four, tf.reduce_all(tf.equal(padded[1:], expected)))
    size_check = tf.debugging.Assert(
        right_size,
        [f"`images` must be float32 (batch, {spec.height}, {spec.width}, 3) in 0..255; received shape:", shape],
    )
    with tf.control_dependencies([size_check]):
        batch_check = decode.check_batch_size(padded[0], limits.max_batch_size)
    with tf.control_dependencies([batch_check]):
        return [Signatures._check_range(images)]


class Signatures:
    """The signature functions of one model; `module()` puts them on a `tf.Module` with what they use.

    The module holds the model's variables (none when `frozen`), the label table and its asset, and the
    `tf.function`s, not the Keras model itself: what is saved is plain TensorFlow, loadable without Keras.

    Args:
        model: a built Keras model (TensorFlow backend).
        spec: its `ModelSpec`.
        labels_asset: `tf.saved_model.Asset` of the label file (models with a head), else None.
        top_k: classes returned by `serving_default`.
        limits: the request limits (`Limits`): pixels, decoding work and images per request.
        jit_compile: compile the model's forward pass with XLA.
        frozen: put the model's weights into the graphs as constants (`keras_vit.export.frozen`).
    """

    def __init__(self, model, spec, labels_asset, top_k, limits: Limits, jit_compile=False, frozen=False):
        self._spec = spec
        self._top_k = min(top_k, spec.classes) if spec.classes else None
        self._limits = limits
        self._labels_asset = labels_asset
        self._table = label_table(labels_asset) if spec.classes is not None else None
        self._model_outputs = pixels_to_outputs(model, spec, jit_compile, frozen)

    def _check_pixels(self, images):
        return check_pixels(images, self._spec, self._limits)

    @staticmethod
    def _check_range(images):
        """Pixels must be in 0..255: NaN, infinities and values out of range (1e30, -1e6) are refused, not
        clipped (a client sending [-1, 1] or 0..1 floats, or garbage, learns it instead of a wrong answer)."""
        flat = tf.reshape(images, [tf.shape(images)[0], -1])
        in_range = tf.reduce_all(tf.logical_and(flat >= 0.0, flat <= 255.0), axis=1)  # NaN fails both
        first_bad = tf.reduce_min(tf.concat([tf.where(~in_range)[:, 0], [tf.size(in_range, tf.int64)]], 0))
        return tf.debugging.Assert(
            tf.reduce_all(in_range),
            ["`images` holds NaN, infinite or out-of-range pixels (the signature takes 0..255: clip or rescale "
             "before sending); first image index with them, smallest and largest value in the request:", first_bad,
             tf.reduce_min(flat), tf.reduce_max(flat)],
        )

    def predict_images(self, images):
        """float32 [B, H, W, 3] in 0..255 -> {`probabilities` | `logits` | `features`: [B, n]}."""
        with tf.control_dependencies(self._check_pixels(images)):
            images = tf.identity(images)
        images = tf.ensure_shape(images, [None, self._spec.height, self._spec.width, 3])
        return {self._spec.output_name: self._model_outputs(images)}

    @staticmethod
    def _check_encoded(images):
        """An op refusing a request that is not a 1-D batch of strings (a scalar, a 2-D batch: TF Serving feeds
        them whatever the signature declares). The declared rank (1) lets graph optimisation fold a rank test
        away, so the shape is padded with -1 to 2 entries: [batch, -1] only for rank 1."""
        shape = tf.shape(images)
        padded = tf.concat([shape, tf.constant([-1, -1])], 0)[:2]
        return tf.debugging.Assert(
            tf.logical_and(padded[0] >= 0, tf.equal(padded[1], -1)),
            ["`images` must be a 1-D batch of encoded images (tf.string [batch], e.g. [jpeg_bytes] for one image); "
             "received shape:", shape],
        )

    def serve_encoded(self, images):
        """tf.string [B] of encoded images -> {`scores`, `classes`, `labels`} (or {`features`})."""
        spec = self._spec
        with tf.control_dependencies([self._check_encoded(images)]):
            images = tf.identity(images)
        pixels = decode.decode_images(images, spec.height, spec.width, self._limits)
        outputs = self._model_outputs(pixels)
        if spec.classes is None:
            return {"features": outputs}
        scores = tf.nn.softmax(outputs) if spec.activation == "linear" else outputs
        top = tf.math.top_k(scores, k=self._top_k)
        return {
            "scores": top.values,
            "classes": top.indices,
            "labels": self._table.lookup(tf.cast(top.indices, tf.int64)),
        }

    def serving_limits(self):
        """{limit name: value} as the graphs enforce them (int64, and `max_png_idat_ratio` float64)."""
        return {name: tf.constant(value, tf.float64 if isinstance(value, float) else tf.int64)
                for name, value in self._limits.as_dict().items()}

    def module(self):
        """-> (tf.Module to save, {signature name: concrete function})."""
        root = tf.Module(name="keras_vit_serving")
        if self._table is not None:
            root.labels_asset = self._labels_asset
            root.label_table = self._table
        encoded = tf.TensorSpec([None], tf.string, name="images")
        pixels = tf.TensorSpec([None, self._spec.height, self._spec.width, 3], tf.float32, name="images")
        float_name = "features" if self._spec.classes is None else "predict_images"
        root.serving_default = tf.function(self.serve_encoded, input_signature=[encoded])
        # Not a signature (TF Serving lists only those): what the graphs enforce, for `tf.saved_model.load` users.
        root.serving_limits = tf.function(self.serving_limits, input_signature=[])
        setattr(root, float_name, tf.function(self.predict_images, input_signature=[pixels]))
        signatures = {name: getattr(root, name).get_concrete_function() for name in ("serving_default", float_name)}
        # Track the tf.Variables the graphs captured (not only their Keras wrappers): the TF1-style loader of
        # TF Serving and `saved_model_cli run` restores exactly these (as `keras.export.ExportArchive` does).
        captured = {id(v): v for concrete in signatures.values() for v in concrete.variables}
        root.model_variables = list(captured.values())
        return root, signatures
