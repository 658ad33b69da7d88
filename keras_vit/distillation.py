"""Knowledge distillation through attention (DeiT, Touvron et al. 2021, arXiv 2012.12877): the losses, and
`Distiller`, a Keras model that trains a student against a frozen teacher in plain `model.fit` on any backend.

A student with a distillation token (`keras_vit.ViT(..., distillation_token=True)`) has two heads: the class head
learns the labels, the distillation head the teacher; a student with one head (a plain ViT, BiT) takes both losses
on it. `hard` (DeiT's default): `(CE(labels, class) + CE(argmax teacher, distillation)) / 2`; `soft`:
`(1 - alpha) CE(labels, class) + alpha tau^2 KL(softmax(teacher / tau) || softmax(distillation / tau))`.

Example:
    >>> import numpy as np, keras
    >>> labels = np.eye(3, dtype="float32")[[0]]
    >>> student = np.array([[2.0, 0.0, 0.0]], "float32")
    >>> teacher = np.array([[0.0, 5.0, 0.0]], "float32")
    >>> hard = distillation_loss(labels, student, student, teacher, "hard")
    >>> round(float(keras.ops.convert_to_numpy(hard)[0]), 4)  # (CE to class 0 + CE to the teacher's class 1) / 2
    1.2395
"""

import keras
from keras import ops

from keras_vit import model_parts

KINDS = ("hard", "soft")
DEFAULT_ALPHA = 0.5
DEFAULT_TEMPERATURE = 1.0  # DeiT's --distillation-tau


def check_arguments(kind, alpha, temperature) -> None:
    """Raises ValueError naming the argument for a kind not in `KINDS`, alpha outside [0, 1], tau <= 0."""
    if kind not in KINDS:
        raise ValueError(f"`distillation` must be one of {KINDS}. Received: distillation={kind!r}")
    if not 0.0 <= float(alpha) <= 1.0:
        raise ValueError(f"`alpha` (the soft distillation's weight) must be in [0, 1]. Received: alpha={alpha!r}")
    if not float(temperature) > 0.0:
        raise ValueError(f"`temperature` must be positive. Received: temperature={temperature!r}")


def distillation_loss(labels, class_logits, distillation_logits, teacher_logits, kind="hard",
                      alpha=DEFAULT_ALPHA, temperature=DEFAULT_TEMPERATURE):
    """The per-example DeiT loss (see the module docstring).

    Args:
        labels: (B, C) one-hot or soft labels (mixup, label smoothing).
        class_logits, distillation_logits: (B, C) the student's two heads (the same tensor for one head).
        teacher_logits: (B, C) the teacher's logits (no gradient flows into them).
        kind: `"hard"` or `"soft"`; alpha, temperature: the soft loss's weight and tau.
    """
    teacher_logits = ops.stop_gradient(ops.cast(teacher_logits, "float32"))
    class_logits = ops.cast(class_logits, "float32")
    distillation_logits = ops.cast(distillation_logits, "float32")
    label_loss = keras.losses.categorical_crossentropy(labels, class_logits, from_logits=True)
    if kind == "hard":
        teacher_labels = ops.one_hot(ops.argmax(teacher_logits, axis=-1), ops.shape(teacher_logits)[-1])
        teacher_loss = keras.losses.categorical_crossentropy(teacher_labels, distillation_logits, from_logits=True)
        return 0.5 * label_loss + 0.5 * teacher_loss
    tau = float(temperature)
    target = ops.softmax(teacher_logits / tau, axis=-1)
    log_student = ops.log_softmax(distillation_logits / tau, axis=-1)
    kl = ops.sum(target * (ops.log(ops.maximum(target, 1e-12)) - log_student), axis=-1)
    return (1.0 - alpha) * label_loss + alpha * tau * tau * kl


def student_heads(student):
    """The student's head logits as a Keras model: `[class, distillation]` for a distillation-token ViT, else
    `[class]` (a BiT, a plain ViT).

    Raises:
        ValueError: a student without a head, or whose heads apply an activation (distillation needs logits).
    """
    heads = [model_parts.head(student), model_parts.distillation_head(student)]
    heads = [head for head in heads if head is not None]
    if not heads:
        raise ValueError(f"The student {student.name!r} has no classification head (include_top=False): "
                         f"distillation trains its head against the teacher's.")
    for head in heads:
        activation = getattr(head.activation, "__name__", str(head.activation))
        if activation != "linear":
            raise ValueError(f"The student's {head.name!r} applies {activation}: build the student with "
                             f"classifier_activation=None (distillation works on logits).")
    activation = model_parts.output_activation(student)  # a distilled ViT: after the mean of its linear heads
    if activation != "linear":
        raise ValueError(f"The student {student.name!r} applies {activation} to its heads' mean: build the student "
                         f"with classifier_activation=None (distillation works on logits).")
    return keras.Model(student.input, [head.output for head in heads], name=f"{student.name}_heads")


class Distiller(keras.Model):
    """`student` trained against a frozen `teacher` with `model.fit`: the labels' loss on the class head, the
    teacher's on the distillation head (DeiT); `predict` / `evaluate` run the student alone (the average of its
    heads). Compile it with an optimizer and metrics only (the loss is the distillation loss).

    Args:
        student: a keras_vit model with logits (`classifier_activation=None`).
        teacher: any Keras model of the same classes with logits (run in inference mode, never trained); a
            teacher of another input size gets the batch resized to its size.
        distillation: `"hard"` or `"soft"`; alpha, temperature: the soft loss's (DeiT's defaults).

    Example:
        >>> import keras, keras_vit, numpy as np
        >>> tiny = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64,
        ...             classes=3, classifier_activation=None)
        >>> distiller = Distiller(keras_vit.ViT(**tiny), keras_vit.ViT(**tiny))
        >>> distiller.compile(optimizer="adam", metrics=["accuracy"])
        >>> x, y = np.zeros((4, 32, 32, 3), "float32"), np.array([0, 1, 2, 0])
        >>> history = distiller.fit(x, y, epochs=1, verbose=0)
    """

    def __init__(self, student, teacher, distillation="hard", alpha=DEFAULT_ALPHA, temperature=DEFAULT_TEMPERATURE,
                 **kwargs):
        super().__init__(**kwargs)
        check_arguments(distillation, alpha, temperature)
        self.student = student
        self.teacher = teacher
        self.teacher.trainable = False
        self.heads = student_heads(student)
        classes, taught = student.output_shape[-1], teacher.output_shape[-1]
        if classes != taught:
            raise ValueError(f"The teacher {teacher.name!r} has {taught} classes, the student {student.name!r} "
                             f"{classes}: distil from a teacher of the student's classes.")
        self.distillation = distillation
        self.alpha = float(alpha)
        self.temperature = float(temperature)
        self._teacher_size = tuple(teacher.input_shape[1:3])
        self._student_size = tuple(student.input_shape[1:3])

    def call(self, images, training=False):
        if training:
            return self.heads(images, training=True)
        return self.student(images, training=False)

    def teacher_logits(self, images):
        """The teacher's logits on `images`, resized to the teacher's size when it differs from the student's."""
        if self._teacher_size != self._student_size and None not in self._teacher_size:
            images = ops.image.resize(images, self._teacher_size, interpolation="bilinear")
        return self.teacher(images, training=False)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        classes = self.student.output_shape[-1]
        labels = ops.one_hot(ops.cast(ops.reshape(y, (-1,)), "int32"), classes) if len(y.shape) < 2 or (
            y.shape[-1] == 1 and classes != 1) else ops.cast(y, "float32")
        if not isinstance(y_pred, (list, tuple)):  # evaluate: the student's averaged output, the labels' loss
            return ops.mean(keras.losses.categorical_crossentropy(labels, ops.cast(y_pred, "float32"),
                                                                  from_logits=True))
        class_logits, distillation_logits = y_pred[0], y_pred[-1]
        loss = distillation_loss(labels, class_logits, distillation_logits, self.teacher_logits(x),
                                 self.distillation, self.alpha, self.temperature)
        return ops.mean(loss)

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        if isinstance(y_pred, (list, tuple)):
            y_pred = (y_pred[0] + y_pred[-1]) / 2.0  # the student's inference output
        return super().compute_metrics(x, y, y_pred, sample_weight)
