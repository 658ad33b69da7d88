"""training.fewshot: closed-form regularised least squares few-shot evaluation (paper section 4.1)."""

import numpy as np
import pytest
from scipy.linalg import lstsq

import keras_vit
from keras_vit import model_parts
from training import fewshot


def _clusters(rng, classes, per_class, dim, noise):
    centres = rng.normal(size=(classes, dim)) * 3.0
    labels = np.repeat(np.arange(classes), per_class)
    return centres[labels] + rng.normal(size=(len(labels), dim)) * noise, labels


@pytest.mark.parametrize("shape", [(30, 5), (6, 20)])  # primal (N >= D) and dual (N < D) forms
def test_least_squares_weights_match_an_augmented_lstsq(shape):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=shape), rng.normal(size=(shape[0], 3))
    l2 = 0.7
    # min ||x W - y||^2 + l2 ||W||^2 is the plain least squares of [x; sqrt(l2) I] W = [y; 0].
    augmented_x = np.concatenate([x, np.sqrt(l2) * np.eye(shape[1])])
    augmented_y = np.concatenate([y, np.zeros((shape[1], 3))])
    expected = lstsq(augmented_x, augmented_y)[0]
    np.testing.assert_allclose(fewshot.least_squares_weights(x, y, l2), expected, atol=1e-10)


def test_accuracy_is_perfect_on_linearly_separable_features():
    rng = np.random.default_rng(1)
    train_x, train_y = _clusters(rng, classes=10, per_class=5, dim=64, noise=0.3)
    test_x, test_y = _clusters(np.random.default_rng(1), classes=10, per_class=50, dim=64, noise=0.3)
    assert fewshot.fewshot_accuracy(train_x, train_y, test_x, test_y) == 1.0
    assert fewshot.fewshot_accuracy(train_x, train_y, test_x, test_y, l2_reg=1e-3) == 1.0


def test_accuracy_is_near_chance_on_random_labels():
    rng = np.random.default_rng(2)
    train_x, test_x = rng.normal(size=(250, 64)), rng.normal(size=(4000, 64))
    train_y, test_y = rng.integers(0, 10, 250), rng.integers(0, 10, 4000)
    # Chance is 0.1; with 4000 test points its standard error is 0.005.
    assert abs(fewshot.fewshot_accuracy(train_x, train_y, test_x, test_y) - 0.1) < 0.03


def test_fewshot_accuracy_rejects_bad_input():
    x = np.zeros((4, 3))
    with pytest.raises(ValueError, match="same width"):
        fewshot.fewshot_accuracy(x, np.zeros(4), np.zeros((2, 5)), np.zeros(2))
    with pytest.raises(ValueError, match="l2_reg=0"):
        fewshot.fewshot_accuracy(x, np.zeros(4), x, np.zeros(4), l2_reg=0)


def test_sample_shots_takes_k_of_each_class():
    labels = np.array([0] * 10 + [1] * 3 + [2] * 7)
    index = fewshot.sample_shots(labels, 5, seed=3)
    assert np.bincount(labels[index]).tolist() == [5, 3, 5]
    assert len(set(index.tolist())) == len(index)
    np.testing.assert_array_equal(index, fewshot.sample_shots(labels, 5, seed=3))


@pytest.mark.parametrize("classifier", ["token", "gap"])
def test_representation_is_what_the_head_reads(tiny, images, classifier):
    model = keras_vit.ViT(**tiny, classifier=classifier, classifier_activation=None)
    rng = np.random.default_rng(5)
    for weight in model.weights:
        weight.assign(rng.normal(size=weight.shape).astype("float32") * 0.2)
    features = np.asarray(fewshot.representation_model(model)(images))
    head = model_parts.head(model)
    np.testing.assert_allclose(
        features @ np.asarray(head.kernel) + np.asarray(head.bias), model.predict(images, verbose=0), atol=1e-5
    )


def test_representation_pools_a_token_sequence_model(tiny, images):
    tokens_model = keras_vit.ViT(**tiny, include_top=False)
    tokens = np.asarray(tokens_model(images))
    np.testing.assert_allclose(fewshot.representation_model(tokens_model)(images), tokens[:, 0], atol=1e-6)
    gap = keras_vit.ViT(**tiny, include_top=False, classifier="gap")
    np.testing.assert_allclose(fewshot.representation_model(gap)(images), np.asarray(gap(images)).mean(1), atol=1e-6)


def test_cli_prints_accuracy_per_shot_count_on_digits(tiny, tmp_path, capsys):
    model_path = str(tmp_path / "tiny.keras")
    keras_vit.ViT(**{**tiny, "classes": 10}).save(model_path)
    assert fewshot.main(["--model", model_path, "--dataset", "digits", "--shots", "1,5", "--seeds", "2",
                         "--eval_split", "test", "--global_batch_size", "128"]) == 0
    out = capsys.readouterr().out
    assert "computing the representations of digits test" in out  # a progress line per split
    assert "1438 train" in out and "359 test" in out  # 1,797 digits, 80/20 and "10 classes" in out
    accuracies = [float(line.split(":")[1].split("%")[0]) for line in out.splitlines() if "-shot accuracy" in line]
    assert len(accuracies) == 2 and all(0 <= a <= 100 for a in accuracies)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--model", "vit_ti16"], "Pass --weights=none explicitly for random weights"),
        (["--model", "vit_ti16", "--weights", "none", "--shots", "1,x"], "--shots must be comma-separated"),
        (["--model", "vit_ti16", "--weights", "none", "--shots", "0"], "--shots must be positive"),
        (["--model", "vit_ti16", "--weights", "none", "--global_batch_size", "x"], "flag --global_batch_size=x"),
        (["--weights", "none"], "--model is required"),
    ],
)
def test_cli_usage_errors_exit_2(capsys, args, message):
    assert fewshot.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err, err


def test_the_shots_line_says_the_shots_used_when_classes_have_fewer_examples():
    """Was "1000000-shot accuracy" computed from 12 shots a class."""
    labels = np.array([0] * 12 + [1] * 12)
    assert fewshot.shots_line(5, labels, [0.5, 0.5]).startswith("  5-shot accuracy:  50.00% (std 0.00 over 2 seeds)")
    line = fewshot.shots_line(1000000, labels, [0.5, 0.7])
    assert line.startswith(" 12-shot accuracy:  60.00%") and "asked 1000000 shots, but every class has 12" in line
    uneven = fewshot.shots_line(10, np.array([0] * 4 + [1] * 30), [1.0])
    assert uneven.startswith(" 10-shot accuracy") and "the classes have 4 to 30 training examples: all of " \
        "those with fewer than 10 used" in uneven
