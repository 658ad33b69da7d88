"""The runs of `training.experiments`: one compiled model per architecture, reinitialised for each run and trained
with `model.fit` for its family's budget; each run scored (test and few-shot accuracy, the training FLOPs
actually spent) and, for the Figure 7 runs, measured at initialisation and trained (`training.experiments.probes`).

A `setup` here is a `training.experiments.app.Setup`.

Example:
    >>> from training.experiments.app import Setup
    >>> steps_for(Setup(), "bit"), steps_for(Setup(steps=5), "bit")
    (600, 5)
"""

from __future__ import annotations

import json
import time

import numpy as np

from training.experiments.models import PATCH, models_of

HEADLINE_SHOTS = 5  # the few-shot accuracy of the figures (paper Figure 4: linear 5-shot)
EVAL_BATCH_SIZE = 256  # images per forward pass of the evaluations (accuracy, few-shot features)


def steps_for(setup, name: str) -> int:
    """Training steps of `name`'s runs: `setup.steps` when given, else the model's budget in its preset."""
    return setup.steps or models_of(setup.preset)[name].steps


def recipe(setup, steps: int):
    """The training app's recipe for the dataset (`training.config.make_config` without `--recipe`: the digits
    demo's for `digits`, the small-data one otherwise), for `steps` steps."""
    from training.config import make_config

    return make_config(None, dataset=setup.dataset, data_dir=setup.data_dir, image_size=setup.image_size,
                       steps=steps, global_batch_size=setup.global_batch_size, strategy=setup.strategy,
                       jit_compile=setup.jit_compile)


def warmup_text(warmup_steps: int, budgets: dict) -> str:
    """The warm-up the runs get, for the header: `warmup_steps` as the recipe sets it, and where a run is too
    short for it the value `training.optim.fitted_warmup` clamps it to, per budget (`budgets`: model -> steps).

    Example:
        >>> print(warmup_text(100, {"vit_small": 2000, "bit": 600}))
        warm-up 100
        >>> print(warmup_text(100, {"vit_small": 40, "bit": 40}))
        warm-up 4 (the recipe's 100 clamped to 10% of the 40-step runs)
        >>> print(warmup_text(100, {"vit_small": 2000, "bit": 200}))
        warm-up 100; 20 for the 200-step runs (the recipe's 100 clamped to 10% of them)
    """
    from training.optim import CLAMPED_WARMUP_SHARE, fitted_warmup

    clamped = {steps: fitted_warmup(warmup_steps, steps)[0] for steps in sorted(set(budgets.values()))}
    short = {steps: value for steps, value in clamped.items() if value != warmup_steps}
    if not short:
        return f"warm-up {warmup_steps}"
    share = f"{CLAMPED_WARMUP_SHARE:.0%}"
    if len(short) == len(clamped) == 1:
        ((steps, value),) = short.items()
        return f"warm-up {value} (the recipe's {warmup_steps} clamped to {share} of the {steps}-step runs)"
    parts = "; ".join(f"{value} for the {steps}-step runs" for steps, value in short.items())
    whole = f"warm-up {warmup_steps}; " if len(short) < len(clamped) else "warm-up "
    return f"{whole}{parts} (the recipe's {warmup_steps} clamped to {share} of them)"


def model_from_spec(spec, image_size: int, classes: int, name: str):
    """A model of a `ModelSpec` for (image_size, image_size, 3) images in [-1, 1], returning logits."""
    import keras_vit

    builder = keras_vit.BiT if spec.family == "bit" else keras_vit.ViT
    return builder(**spec.arguments, input_shape=(image_size, image_size, 3), classes=classes,
                   classifier_activation=None, name=name)


class Trainer:
    """One compiled model per architecture, reinitialised for each run: the training step is traced (and
    XLA-compiled) once per architecture, not once per run."""

    def __init__(self, name, setup, cfg, strategy, num_classes):
        import keras

        from keras_vit.flops import forward_flops
        from training import fewshot, optim

        self.spec = models_of(setup.preset)[name]
        self.name, self.setup, self.cfg, self.strategy, self.num_classes = name, setup, cfg, strategy, num_classes
        with strategy.scope():
            self.model = model_from_spec(self.spec, setup.image_size, num_classes, name)
            self.optimizer = optim.make_optimizer(cfg, cfg.steps, self.model)
            if cfg.grad_clip_norm:
                self.optimizer.global_clipnorm = cfg.grad_clip_norm  # the app's global-norm clipping
            self.model.compile(
                optimizer=self.optimizer,
                loss=keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=cfg.label_smoothing),
                jit_compile=cfg.jit_compile,
            )
        self.representation = fewshot.representation_model(self.model)
        self.forward_flops = forward_flops(self.model)
        self.parameters = self.model.count_params()

    def reinitialise(self, seed):
        """The weights of a model built with `seed`, and a new optimizer state (step 0 of the schedule)."""
        import keras

        keras.utils.set_random_seed(seed)
        with self.strategy.scope():
            weights = model_from_spec(self.spec, self.setup.image_size, self.num_classes, self.name).get_weights()
        self.model.set_weights(weights)
        for variable in self.optimizer.variables:
            variable.assign(np.zeros(variable.shape, variable.dtype))
        keras.utils.set_random_seed(seed)

    def fit(self, dataset, callback) -> int:
        """Trains for the recipe's steps; returns the steps actually run."""
        self.model.fit(dataset, epochs=1, steps_per_epoch=self.cfg.steps, verbose=0, callbacks=[callback],
                       shuffle=False)
        return int(self.optimizer.iterations.numpy())


def predict(model, dataset):
    """(outputs, labels) of a finite dataset of (images, labels) batches."""
    outputs, labels = [], []
    for images, batch_labels in dataset:
        outputs.append(np.asarray(model.predict_on_batch(images), dtype=np.float32))
        labels.append(np.asarray(batch_labels))
    return np.concatenate(outputs), np.concatenate(labels)


class ProgressCallback:
    """A Keras callback feeding `training.progress.Progress` with the steps of all the runs."""

    def __new__(cls, shown, done):
        import keras

        class Callback(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                loss = (logs or {}).get("loss")
                values = {} if loss is None else {"loss": float(loss)}
                shown.update(done + batch + 1, **values)

        return Callback()


def headline_shots(shots) -> int:
    return HEADLINE_SHOTS if HEADLINE_SHOTS in shots else max(shots)


def train_flops(forward_flops: float, images_seen: int) -> float:
    """Training FLOPs: forward + backward (3 forwards, `keras_vit.flops.TRAIN_FORWARD_MULTIPLE`) per image seen."""
    from keras_vit.flops import TRAIN_FORWARD_MULTIPLE

    return TRAIN_FORWARD_MULTIPLE * forward_flops * images_seen


def train_runs(setup, plan, probed, log=print) -> dict:
    """Trains and scores the runs `plan` ((model, fraction, seed), ordered by model), measuring Figure 7 at
    initialisation and trained for the runs in `probed`.

    Returns:
        {"runs": [one dict per run], "figure7": {model: {"init": ..., "trained": ...}}, "setup": ...,
         "dataset": {...}, "models": {...}, "recipe": ...}.
    """
    from training import data, distribute, fewshot, progress
    from training.optim import fitted_warmup
    from training.experiments.data import check_images, nested_subsets, split_labels, splits, train_dataset
    from training.experiments.probes import figure7, uniform_distance
    from training.sources import dataset_source

    models = models_of(setup.preset)
    cfg = recipe(setup, max(steps_for(setup, name) for name, _, _ in plan))
    strategy = distribute.make_strategy(setup.strategy)
    train_split, eval_split = splits(setup)
    skip = check_images(setup, train_split, eval_split, log)
    source = dataset_source(setup.dataset, train_split, setup.data_dir, skip_files=skip)
    subsets = nested_subsets(split_labels(source), setup.fractions, setup.subset_seed)
    batch, eval_batch = setup.global_batch_size, max(setup.global_batch_size, EVAL_BATCH_SIZE)
    eval_ds, num_classes = data.make_dataset(setup.dataset, eval_split, setup.data_dir, setup.image_size, eval_batch,
                                             skip_files=skip)
    pool_ds, _ = data.make_dataset(setup.dataset, train_split, setup.data_dir, setup.image_size, eval_batch,
                                   skip_files=skip)
    probe_images = np.concatenate([images.numpy() for images, _ in eval_ds])[: setup.attention_images]
    budgets = {name: steps_for(setup, name) for name in dict.fromkeys(name for name, _, _ in plan)}
    total_steps = sum(budgets[name] for name, _, _ in plan)
    log(f"{len(plan)} runs ({', '.join(f'{models[n].label} {s} steps' for n, s in budgets.items())} of {batch} "
        f"images) on {setup.dataset} [{train_split}: {source.num_examples} images, {num_classes} classes; "
        f"{eval_split} for accuracy], recipe {cfg.recipe} ({cfg.optimizer} lr {cfg.learning_rate:g}, "
        f"{cfg.schedule}, {warmup_text(cfg.warmup_steps, budgets)}, crop {cfg.crop}), {type(strategy).__name__}")
    shown = progress.Progress(total_steps, progress.log_cadence(total_steps), items_per_step=batch)
    trainer, runs, probes, done = None, [], {}, 0
    for number, (name, fraction, seed) in enumerate(plan):
        started = time.perf_counter()
        if trainer is None or trainer.name != name:  # one architecture at a time: the runs are ordered by model
            trainer = None
            trainer = Trainer(name, setup, recipe(setup, budgets[name]), strategy, num_classes)
        trainer.reinitialise(seed)
        if (name, fraction, seed) in probed:
            probes[name] = dict(init=figure7(trainer.model, probe_images))
        indices = subsets[fraction]
        steps = trainer.fit(train_dataset(source, indices, trainer.cfg, seed), ProgressCallback(shown, done))
        done += budgets[name]
        logits, test_labels = predict(trainer.model, eval_ds)
        accuracy = float(np.mean(logits.argmax(-1) == test_labels))
        train_x, train_y = fewshot.representations(trainer.representation, pool_ds)
        test_x, test_y = fewshot.representations(trainer.representation, eval_ds)
        shots = fewshot.evaluate(train_x, train_y, test_x, test_y, setup.shots, setup.fewshot_seeds)
        if (name, fraction, seed) in probed:
            probes[name]["trained"] = figure7(trainer.model, probe_images)
        run = dict(
            model=name, label=models[name].label, family=models[name].family, fraction=fraction,
            train_examples=int(len(indices)), seed=seed, steps=steps, images_seen=steps * batch,
            epochs=steps * batch / len(indices), parameters=int(trainer.parameters), accuracy=accuracy,
            fewshot={str(k): v for k, v in shots.items()},
            fewshot_accuracy=float(np.mean(shots[headline_shots(setup.shots)])),
            forward_flops=int(trainer.forward_flops), train_flops=train_flops(trainer.forward_flops, steps * batch),
            wall_time_s=time.perf_counter() - started,
        )
        runs.append(run)
        log(f"run {number + 1}/{len(plan)}: {run['label']} on {run['train_examples']} images ({fraction:.0%}), "
            f"seed {seed}, {steps} steps: accuracy {accuracy:.3f}, {headline_shots(setup.shots)}-shot "
            f"{run['fewshot_accuracy']:.3f} ({progress.format_duration(run['wall_time_s'])})")
    recipe_values = json.loads(cfg.to_json())
    recipe_values.pop("steps")  # per model: `models`
    return {
        "dataset": dict(name=setup.dataset, train_split=train_split, eval_split=eval_split,
                        train_examples=int(source.num_examples), classes=int(num_classes),
                        subset_sizes={str(f): int(len(i)) for f, i in subsets.items()}),
        "models": {n: dict(label=models[n].label, family=models[n].family, steps=s, kind=_kind(models[n]),
                           budget=models[n].steps, warmup=fitted_warmup(cfg.warmup_steps, s)[0])
                   for n, s in budgets.items()},
        "recipe": recipe_values,
        "fewshot_shots": headline_shots(setup.shots),
        "runs": runs,
        "figure7": probes,
        "uniform_attention_distance": uniform_distance(setup.image_size, PATCH),
    }


def _kind(spec) -> str:
    return "hybrid" if spec.arguments.get("hybrid") else spec.family
