"""The teacher of a distilled run (`--teacher`, DeiT): its file, checked before any training step, and its logits
on the student's batches.

Example:
    >>> teacher_sha256(None) is None
    True
"""

from __future__ import annotations


class TeacherError(ValueError):
    """A `--teacher` the run cannot use: the message names the file and the problem (exit status 2)."""


def teacher_sha256(teacher) -> str | None:
    """The SHA-256 of the model file `--teacher` names (a run folder's `model.keras`), recorded in config.json so
    that a resume with another teacher is refused unless `--resume_with_changes`; None without a teacher.

    Raises:
        TeacherError: the path names no model file (missing, a run not finished, not a regular file).
    """
    if teacher is None:
        return None
    from keras_vit.checkpoints import own, untrusted

    from training.weights_source import sha256

    try:
        path = untrusted.check_regular_file(own.model_file(str(teacher)))
    except ValueError as error:
        raise TeacherError(f"--teacher={teacher}: {error}") from None
    return sha256(path)


def load_teacher(cfg, num_classes: int, image_size, log=print):
    """The teacher model of `cfg.teacher`, frozen, checked against the run: logits of `num_classes` classes.

    Returns:
        (model, its (height, width) when it differs from the run's `image_size`, else None: batches are resized).

    Raises:
        TeacherError: unreadable, not a keras_vit model, another number of classes, or probabilities, not logits.
    """
    from keras_vit import model_parts
    from keras_vit.checkpoints import own

    try:
        model = own.open_model(str(cfg.teacher))
    except (ValueError, OSError) as error:
        raise TeacherError(f"--teacher={cfg.teacher} cannot be read: {error}") from None
    if model is None:
        raise TeacherError(f"--teacher={cfg.teacher} holds no keras_vit model (a file saved by keras_vit or the app).")
    classes = int(model.output_shape[-1])
    if classes != num_classes:
        raise TeacherError(f"--teacher={cfg.teacher} has {classes} classes; the dataset has {num_classes}. Distil "
                           f"from a teacher trained on the same classes.")
    head = model_parts.head(model)
    activation = getattr(getattr(head, "activation", None), "__name__", "linear")
    if activation != "linear":
        raise TeacherError(f"--teacher={cfg.teacher} outputs {activation} probabilities; the distillation loss takes "
                           f"logits (the app's models have them: classifier_activation=None).")
    model.trainable = False
    size = tuple(int(n) for n in model.input_shape[1:3])
    resize = None if size == tuple(image_size) else size
    if resize is not None:
        log(f"note: the teacher takes {size[0]}x{size[1]} images; each batch is resized to that for it "
            f"(the student's are {image_size[0]}x{image_size[1]})")
    return model, resize
