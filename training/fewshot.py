"""Few-shot linear evaluation of frozen ViT representations (paper section 4.1, as big_vision does it).

For k shots, k training images per class are drawn; their frozen representations (the pooled, normalised
[class] token or patch-token mean, or `pre_logits` when the model has one) are whitened with the
statistics of those k*C examples, a constant bias feature is appended, and a regularised least-squares
map to {-1, 1} one-hot targets is solved in closed form. Accuracy is measured on the full test split and
averaged over a few random draws. big_vision's defaults are used: l2 = 2^10, bias feature 100 (so the
bias is almost unregularised), 3 seeds, shots 1, 5, 10, 25.

    python -m training.fewshot --model=workdir/model.keras --dataset=digits --shots=1,5,10,25
    python -m training.fewshot --model=vit_b16 --weights=w.weights.h5 --dataset=cifar100 --data_dir=DIR

Datasets come from `training.data`: `digits` (embedded), `folder:PATH` and prepared tensorflow-datasets names;
a folder's images are checked first as the training app checks them (a bad file is named, or left out with
`--skip_bad_images`).
With a variant name `--weights` is required (`--weights=none` for random weights, whose few-shot accuracy
means nothing); a `.keras` model has its own. The flags are spelled as `training.train`'s: `--eval_split` and
`--global_batch_size`.
"""

from __future__ import annotations

import numpy as np
from absl import flags

from keras_vit import cli, variants
from keras_vit.cli import model as cli_model

L2_REG = 2.0**10
BIAS_FEATURE = 100.0
SHOTS = (1, 5, 10, 25)


def least_squares_weights(x, targets, l2_reg):
    """Solves min_W ||x W - targets||^2 + l2_reg ||W||^2 in closed form.

    Uses the primal form (x^T x + l2 I)^-1 x^T y when there are at least as many examples as features,
    else the equal dual form x^T (x x^T + l2 I)^-1 y, which is cheaper for few shots and wide features.

    Args:
        x: array (N, D).
        targets: array (N, C).
        l2_reg: regularisation strength, > 0.

    Returns:
        float64 array (D, C).

    Example:
        >>> least_squares_weights(np.eye(2), np.eye(2), 1.0)
        array([[0.5, 0. ],
               [0. , 0.5]])
    """
    x = np.asarray(x, dtype=np.float64)
    targets = np.asarray(targets, dtype=np.float64)
    num_points, dim = x.shape
    if num_points >= dim:
        return np.linalg.solve(x.T @ x + l2_reg * np.eye(dim), x.T @ targets)
    return x.T @ np.linalg.solve(x @ x.T + l2_reg * np.eye(num_points), targets)


def fewshot_accuracy(train_x, train_y, test_x, test_y, l2_reg=L2_REG):
    """Accuracy of a regularised least-squares linear classifier fit on (train_x, train_y).

    Features are standardised with the training mean and standard deviation (+1e-5), a constant feature
    `BIAS_FEATURE` is appended as an almost unregularised bias, and the targets are one-hot rows scaled
    to {-1, 1}; the predicted class is the argmax of the linear scores.

    Args:
        train_x: array (N, D) of training representations.
        train_y: int array (N,) of labels in [0, C).
        test_x: array (M, D).
        test_y: int array (M,).
        l2_reg: regularisation strength (big_vision: 2^10).

    Returns:
        float, the fraction of test examples classified correctly.

    Example:
        >>> x = np.array([[0.0, 1.0], [1.0, 0.0]])
        >>> fewshot_accuracy(x, np.array([0, 1]), x, np.array([0, 1]), l2_reg=1.0)
        1.0
    """
    train_x = np.asarray(train_x, dtype=np.float64)
    test_x = np.asarray(test_x, dtype=np.float64)
    train_y = np.asarray(train_y).astype(np.int64)
    test_y = np.asarray(test_y).astype(np.int64)
    if train_x.ndim != 2 or test_x.ndim != 2 or train_x.shape[1] != test_x.shape[1]:
        raise ValueError(
            "`train_x` and `test_x` must be (N, D) and (M, D) arrays of the same width. "
            f"Received: shapes {train_x.shape} and {test_x.shape}"
        )
    if len(train_y) != len(train_x) or len(test_y) != len(test_x):
        raise ValueError(
            f"Each feature row needs one label. Received: {len(train_x)} rows and {len(train_y)} labels for train, "
            f"{len(test_x)} rows and {len(test_y)} labels for test"
        )
    if not l2_reg > 0:
        raise ValueError(f"`l2_reg` must be positive. Received: l2_reg={l2_reg}")
    num_classes = int(max(train_y.max(), test_y.max())) + 1
    mean = train_x.mean(axis=0, keepdims=True)
    std = train_x.std(axis=0, keepdims=True) + 1e-5

    def features(x):
        x = (x - mean) / std
        return np.concatenate([x, np.full((len(x), 1), BIAS_FEATURE)], axis=1)

    targets = 2.0 * np.eye(num_classes)[train_y] - 1.0
    weights = least_squares_weights(features(train_x), targets, l2_reg)
    predictions = (features(test_x) @ weights).argmax(axis=1)
    return float(np.mean(predictions == test_y))


def sample_shots(labels, shots, seed):
    """Indices of `shots` random examples of every class (all of a class's examples if it has fewer).

    Example:
        >>> len(sample_shots(np.array([0, 0, 1, 1, 1]), 2, seed=0))
        4
    """
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    per_class = [rng.permutation(np.flatnonzero(labels == c))[:shots] for c in np.unique(labels)]
    return np.concatenate(per_class)


def shots_line(shots, train_labels, accuracies) -> str:
    """The line of one shot count: the shots actually used when a class has fewer training examples than asked
    (`sample_shots` then takes all of them), not the number asked.

    Example:
        >>> line = shots_line(1000000, np.array([0] * 12 + [1] * 12), [0.5, 0.7])
        >>> line.split("; ")
        [' 12-shot accuracy:  60.00% (std 10.00 over 2 seeds', 'asked 1000000 shots, but every class has 12 training examples: all of them used)']
    """
    counts = np.unique(np.asarray(train_labels), return_counts=True)[1]
    low, high = int(counts.min()), int(counts.max())
    used = min(shots, high)
    note = ""
    if shots > low:
        have = f"every class has {high}" if low == high else f"the classes have {low} to {high}"
        few = "all of them" if shots >= high else f"all of those with fewer than {shots}"
        note = f"; asked {shots} shots, but {have} training examples: {few} used"
    return (f"{used:3d}-shot accuracy: {100 * np.mean(accuracies):6.2f}% (std {100 * np.std(accuracies):.2f} "
            f"over {len(accuracies)} seeds{note})")


def evaluate(train_x, train_y, test_x, test_y, shots=SHOTS, seeds=3, l2_reg=L2_REG):
    """Few-shot accuracies: {shots: [accuracy for each seed]} from precomputed representations."""
    results = {}
    for k in shots:
        results[k] = []
        for seed in range(seeds):
            index = sample_shots(train_y, k, seed)
            results[k].append(fewshot_accuracy(train_x[index], train_y[index], test_x, test_y, l2_reg))
    return results


# --- models and representations ---------------------------------------------------------------------


def representation_model(model):
    """The frozen representation of a keras_vit model: `pre_logits` if present, else the pooled tokens.

    A model with a head gives the input of its head's last stage (`pre_logits`, or `pooling`: the [class]
    token or the patch-token mean per its classifier); a model built with `include_top=False` and a
    `pooling` gives its output; a token-sequence model is pooled by its classifier here.
    """
    import keras

    from keras_vit.layers import TokenPooling

    from keras_vit import model_parts

    for layer in (model_parts.pre_logits(model), model_parts.pooling(model)):
        if layer is not None:
            return keras.Model(model.input, layer.output, name=f"{model.name}_representation")
    if len(model.output.shape) == 2:
        return model
    prefix = model_parts.patch_encoder(model).num_prefix_tokens
    pooled = TokenPooling("token" if prefix else "avg", prefix, name="pooling")(model.output)
    return keras.Model(model.input, pooled, name=f"{model.name}_representation")


def load_representation_model(model, weights=None, image_size=None, classifier=None):
    """A representation model from a constructor name (`vit_b16`) or a `.keras` file (`cli_model.model_from_flag_values`)."""
    kwargs = {} if classifier is None else {"classifier": classifier}
    if model.endswith(".keras") or str(weights).endswith(".keras"):
        built = cli_model.model_from_flag_values(model, weights, **kwargs)
    else:
        pooling = "avg" if classifier == "gap" or variants.bit_name(model) else "token"  # a BiT ResNet: mean features
        built = cli_model.model_from_flag_values(model, weights, image_size=image_size, pooling=pooling, **kwargs)
    return representation_model(built)


def representations(model, dataset):
    """(features (N, D) float32, labels (N,)) of a finite dataset of ([-1, 1] images, labels) batches."""
    from keras_vit import preprocessing

    raw_pixels = preprocessing.scales_own_input(model)
    features, labels = [], []
    for images, batch_labels in dataset:
        if raw_pixels:  # the model scales [0, 255] itself
            images = preprocessing.from_model_range(images)
        features.append(np.asarray(model.predict_on_batch(images), dtype=np.float32))
        labels.append(np.asarray(batch_labels))
    return np.concatenate(features), np.concatenate(labels)


FLAGS = flags.FlagValues()
cli_model.define_model(FLAGS, required=True)
cli_model.define_weights(FLAGS, required=True, purpose="the few-shot accuracies")
flags.DEFINE_enum("classifier", None, ["token", "gap"], "For a variant name: token ([class] token) or gap (mean "
                  "of the patch tokens) representations (default: the variant's, token).", flag_values=FLAGS)
cli_model.define_image_size(FLAGS)
flags.DEFINE_string("dataset", "digits", "digits (embedded), folder:PATH (ImageFolder) or a tensorflow-datasets "
                    "name.", flag_values=FLAGS)
flags.DEFINE_string("data_dir", None, "tensorflow-datasets data directory (default: tensorflow-datasets' own, "
                    "~/tensorflow_datasets).", flag_values=FLAGS)
flags.DEFINE_string("train_split", None, "Split the shots are drawn from (default: train).", flag_values=FLAGS)
flags.DEFINE_string("eval_split", None, "Split the accuracy is measured on (default: the dataset's test or "
                    "validation split).", flag_values=FLAGS)
flags.DEFINE_list("shots", [str(k) for k in SHOTS], "Comma-separated shots per class.", flag_values=FLAGS)
flags.DEFINE_bool("skip_bad_images", False, "Leave out the files of a folder dataset that cannot be used (the "
                  "training app's check of both splits: headers, the pixel limit, a full decode) instead of "
                  "stopping.", flag_values=FLAGS)
flags.DEFINE_integer("seeds", 3, "Random draws per shot count.", lower_bound=1, flag_values=FLAGS)
flags.DEFINE_float("l2_reg", L2_REG, "Regularisation of the least-squares classifier.", lower_bound=0.0,
                   flag_values=FLAGS)
flags.DEFINE_integer("global_batch_size", 64, "Batch size of the representation pass.", lower_bound=1,
                     flag_values=FLAGS)
cli.define_verbose(FLAGS)



def _shots():
    return tuple(int(s) for s in FLAGS.shots)


def _check(fv, argv):
    try:
        shots = _shots()
    except ValueError:
        raise cli.UsageError(f"--shots must be comma-separated integers. Received: --shots={','.join(fv.shots)!r}")
    if not shots or min(shots) < 1:
        raise cli.UsageError(f"--shots must be positive. Received: --shots={','.join(fv.shots)!r}")
    if fv.l2_reg <= 0:
        raise cli.UsageError(f"--l2_reg must be positive. Received: --l2_reg={fv.l2_reg}")


cli.add_check(FLAGS, _check)


def run(argv):
    from training import data
    from training.image_checks import check_images
    from training.sources import default_splits, shown_path

    shots = _shots()
    model = load_representation_model(FLAGS.model, FLAGS.weights, FLAGS.image_size, FLAGS.classifier)
    image_size = model.input_shape[1]
    default_train, default_test = default_splits(FLAGS.dataset, FLAGS.data_dir)
    splits = {"train": FLAGS.train_split or default_train, "test": FLAGS.eval_split or default_test}
    skip = check_images(FLAGS.dataset, tuple(splits.values()), skip=FLAGS.skip_bad_images, log=print)
    if skip:
        print(f"skipping {len(skip)} image file(s) that cannot be used (--skip_bad_images), e.g. "
              f"{shown_path(min(skip))}")
    arrays = {}
    for role, split in splits.items():
        cli.progress(f"computing the representations of {FLAGS.dataset} {split} ...")
        dataset, _ = data.make_dataset(FLAGS.dataset, split, FLAGS.data_dir, image_size=image_size,
                                       batch_size=FLAGS.global_batch_size, skip_files=skip)
        arrays[role] = representations(model, dataset)
    (train_x, train_y), (test_x, test_y) = arrays["train"], arrays["test"]
    num_classes = int(max(train_y.max(), test_y.max())) + 1
    print(f"{FLAGS.model} on {FLAGS.dataset}: {train_x.shape[1]}-d representations, {len(train_x)} train "
          f"({splits['train']}), {len(test_x)} test ({splits['test']}) examples, {num_classes} classes, "
          f"l2_reg={FLAGS.l2_reg:g}, {FLAGS.seeds} seeds")
    for k, accuracies in evaluate(train_x, train_y, test_x, test_y, shots, FLAGS.seeds, FLAGS.l2_reg).items():
        print(shots_line(k, train_y, accuracies))
    return 0


def main(argv=None) -> int:
    """The exit status of `python -m training.fewshot` with `argv` (default: `sys.argv[1:]`)."""
    return cli.main(run, FLAGS, argv, usage=__doc__, tensorflow=True)


if __name__ == "__main__":
    cli.run(run, FLAGS, usage=__doc__, tensorflow=True)
