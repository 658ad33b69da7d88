"""One architecture's model for the runs of `training.experiments`: built, reinitialised for each run, trained
with `model.fit`, and its predictions; a Keras callback that reports the steps of all the runs.
"""

from __future__ import annotations

import numpy as np

from training.experiments_models import MODELS


def build_model(name: str, image_size: int, classes: int):
    """A model of `MODELS` for (image_size, image_size, 3) images in [-1, 1], returning logits."""
    import keras_vit

    spec = MODELS[name]
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

        self.name, self.setup, self.cfg, self.strategy, self.num_classes = name, setup, cfg, strategy, num_classes
        with strategy.scope():
            self.model = build_model(name, setup.image_size, num_classes)
            self.optimizer = optim.make_optimizer(cfg, setup.steps, self.model)
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
        self.fresh = True

    def reinitialise(self, seed):
        """The weights of a model built with `seed`, and a new optimizer state (step 0 of the schedule)."""
        import keras

        keras.utils.set_random_seed(seed)
        with self.strategy.scope():
            weights = build_model(self.name, self.setup.image_size, self.num_classes).get_weights()
        self.model.set_weights(weights)
        for variable in self.optimizer.variables:
            variable.assign(np.zeros(variable.shape, variable.dtype))
        keras.utils.set_random_seed(seed)

    def fit(self, dataset, callback):
        self.model.fit(dataset, epochs=1, steps_per_epoch=self.setup.steps, verbose=0, callbacks=[callback],
                       shuffle=False)


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
