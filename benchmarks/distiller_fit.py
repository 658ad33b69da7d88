"""`keras_vit.Distiller` in plain `model.fit`, beside the training app's distilled run (issue "Data-efficient ViTs").

The student is the app student's architecture built afresh (from its `model.keras` config, new weights), taught by
the app's teacher run (its `model.keras`, logits) with the app's distillation settings and recipe values read from
the student run's `config.json`: epochs, global batch, AdamW (learning rate, weight decay, betas), linear warm-up
then cosine decay, global gradient clipping, label smoothing. What differs from the app: the augmentation is
`keras.layers.RandomTranslation` (the app's `translate` crop is its own), and the data are numpy arrays in [-1, 1]
(the app's tf.data pipeline scales the same way). Prints `test accuracy X` as `cnn_baseline.py` does, which
`train_quality.py --distiller` reads.

    python benchmarks/distiller_fit.py --folder ROOT --teacher TEACHER_RUN --student_run STUDENT_RUN --seed 0
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cnn_baseline import folder_split  # noqa: E402

SHIFT = 0.08
"""RandomTranslation's height and width factor: `cnn_baseline.py`'s for 28x28 folders."""


def smoothed(labels, classes: int, smoothing: float):
    """One-hot labels with label smoothing, as the app's loss sees them."""
    one_hot = np.eye(classes, dtype="float32")[labels]
    return one_hot * (1.0 - smoothing) + smoothing / classes


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", required=True, help="a folder with train/<class>/ and test/<class>/ images")
    parser.add_argument("--teacher", required=True, help="the app's teacher run (its workdir)")
    parser.add_argument("--student_run", required=True, help="the app's distilled run: architecture and recipe")
    parser.add_argument("--image_size", type=int, default=28)
    parser.add_argument("--epochs", type=int, default=None, help="default: the student run's")
    parser.add_argument("--batch", type=int, default=None, help="default: the student run's global batch")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    import keras_vit

    with open(os.path.join(args.student_run, "config.json"), encoding="utf-8") as file:
        config = json.load(file)
    keras.utils.set_random_seed(args.seed)
    names = sorted(os.listdir(os.path.join(args.folder, "train")))
    x_train, y_train = folder_split(args.folder, "train", names, args.image_size)
    x_test, y_test = folder_split(args.folder, "test", names, args.image_size)
    x_train, x_test = x_train * 2.0 - 1.0, x_test * 2.0 - 1.0  # [0, 1] -> [-1, 1]
    trained = keras.saving.load_model(os.path.join(args.student_run, "model.keras"), compile=False)
    student = type(trained).from_config(trained.get_config())  # the same architecture, new weights
    teacher = keras.saving.load_model(os.path.join(args.teacher, "model.keras"), compile=False)
    distiller = keras_vit.Distiller(student, teacher, distillation=config["distillation"],
                                    alpha=config["distillation_alpha"], temperature=config["distillation_tau"])
    epochs, batch = args.epochs or int(config["epochs"]), args.batch or config["global_batch_size"]
    steps = epochs * (len(x_train) // batch)
    schedule = keras.optimizers.schedules.CosineDecay(0.0, steps, warmup_target=config["learning_rate"],
                                                      warmup_steps=min(config["warmup_steps"], steps // 10))
    distiller.compile(keras.optimizers.AdamW(schedule, weight_decay=config["weight_decay"], beta_1=config["beta_1"],
                                             beta_2=config["beta_2"], global_clipnorm=config["grad_clip_norm"]))
    augment = keras.layers.RandomTranslation(SHIFT, SHIFT, seed=args.seed)
    labels = smoothed(y_train, len(names), config["label_smoothing"])
    rng = np.random.default_rng(args.seed)
    start = time.time()
    for _ in range(epochs):  # one augmented copy an epoch, shuffled, the last partial batch dropped
        order = rng.permutation(len(x_train))[: (len(x_train) // batch) * batch]
        images = np.concatenate([keras.ops.convert_to_numpy(augment(x_train[order[i:i + 1024]], training=True))
                                 for i in range(0, len(order), 1024)])
        distiller.fit(images, labels[order], batch_size=batch, epochs=1, shuffle=False, verbose=0)
    predicted = np.argmax(keras.ops.convert_to_numpy(student.predict(x_test, batch_size=256, verbose=0)), axis=-1)
    accuracy = float(np.mean(predicted == y_test))
    print(f"Distiller model.fit: test accuracy {accuracy:.4f} in {time.time() - start:.0f} s "
          f"({config['distillation']} distillation, {steps} steps of {batch})")


if __name__ == "__main__":
    main()
