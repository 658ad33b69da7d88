"""DeiT's distillation losses against hand values, and `keras_vit.Distiller` in plain `model.fit`."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import distillation

TINY = dict(image_size=16, patch_size=8, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32, classes=3,
            classifier_activation=None)


def log_softmax(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def test_hard_and_soft_losses_against_hand_values():
    rng = np.random.default_rng(0)
    labels = np.eye(4, dtype="float32")[[1, 3]] * 0.9 + 0.025  # smoothed one-hot
    cls, dist, teacher = (rng.normal(0, 2, (2, 4)).astype("float32") for _ in range(3))
    ce = -(labels * log_softmax(cls)).sum(-1)
    hard = 0.5 * ce + 0.5 * -log_softmax(dist)[np.arange(2), teacher.argmax(-1)]
    got = keras.ops.convert_to_numpy(distillation.distillation_loss(labels, cls, dist, teacher, "hard"))
    np.testing.assert_allclose(got, hard, rtol=1e-5)
    tau, alpha = 3.0, 0.3
    p = np.exp(log_softmax(teacher / tau))
    kl = (p * (np.log(p) - log_softmax(dist / tau))).sum(-1)
    soft = (1 - alpha) * ce + alpha * tau * tau * kl
    got = keras.ops.convert_to_numpy(distillation.distillation_loss(labels, cls, dist, teacher, "soft", alpha, tau))
    np.testing.assert_allclose(got, soft, rtol=1e-5)


@pytest.mark.e2e  # the default tier's time budget (10 minutes on 2 cores)
def test_a_single_head_student_learns_from_the_teacher_in_fit():
    keras.utils.set_random_seed(0)
    teacher, student = keras_vit.ViT(**TINY), keras_vit.ViT(**TINY)
    teacher.get_layer("head").kernel.assign(np.random.default_rng(1).normal(0, 1, (16, 3)).astype("float32"))
    teacher_weights = [w.copy() for w in teacher.get_weights()]
    x = np.random.default_rng(2).uniform(-1, 1, (32, 16, 16, 3)).astype("float32")
    y = np.argmax(keras.ops.convert_to_numpy(teacher(x)), -1)  # labels the teacher agrees with
    distiller = keras_vit.Distiller(student, teacher, distillation="soft", alpha=1.0, temperature=2.0)
    distiller.compile(optimizer=keras.optimizers.Adam(3e-3), metrics=["accuracy"])
    before = distiller.evaluate(x, y, verbose=0, return_dict=True)
    distiller.fit(x, y, epochs=15, batch_size=16, verbose=0)
    after = distiller.evaluate(x, y, verbose=0, return_dict=True)
    assert after["loss"] < before["loss"] and after["accuracy"] > before["accuracy"]
    for kept, now in zip(teacher_weights, teacher.get_weights()):  # the teacher never trains
        np.testing.assert_array_equal(kept, now)


def test_refusals():
    student = keras_vit.ViT(**TINY)
    with pytest.raises(ValueError, match="has 5 classes, the student 'vit' 3"):
        keras_vit.Distiller(student, keras_vit.ViT(**{**TINY, "classes": 5}))
    with pytest.raises(ValueError, match="applies softmax: build the student with classifier_activation=None"):
        keras_vit.Distiller(keras_vit.ViT(**{**TINY, "classifier_activation": "softmax"}), student)
    with pytest.raises(ValueError, match=r"`distillation` must be one of \('hard', 'soft'\). Received"):
        keras_vit.Distiller(student, keras_vit.ViT(**TINY), distillation="kl")
    with pytest.raises(ValueError, match="alpha"):
        keras_vit.Distiller(student, keras_vit.ViT(**TINY), alpha=1.5)
    with pytest.raises(ValueError, match="no classification head"):
        keras_vit.Distiller(keras_vit.ViT(**{**TINY, "include_top": False, "pooling": "token"}), student)
