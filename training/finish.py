"""The end of a run: model.keras and its labels, the TF Serving export, a few eval images classified.

The chief saves a float32 single-device copy of the model (`model.keras`, `model.weights.h5`, the class names in
`model.labels.txt`, which `python -m keras_vit.export` reads) and exports it to `export/1/` (unless
`--export=false`); a run whose final evaluation failed still writes the model and its metrics.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import tensorflow as tf

from training import data
from training.sources import InvalidDatasetError, dataset_source
from training.workdir import disk_full, is_disk_full


class RunOutputs:
    """What a run leaves once it has trained, made by `training.loop`'s run at its end: `save_and_export`, or
    `keep_after_failed_evaluation` when its final evaluation failed.

    Args:
        cfg: the run's `training.config.Config`.
        chief: whether this task is the chief (it writes the workdir's files; a worker, its weights only).
        model: the trained model.
        class_names: the data's classes, in the order of the model's outputs.
        eval_split: the split a few images of which are classified with the exported model.
        skip_files: the image files of a folder dataset left out (`--skip_bad_images`).
        worker_dir: a worker's own folder in the workdir (`training.workdir.RunWorkdir.worker_dir`).
        log: prints a message (the run's: the chief only).
    """

    def __init__(self, cfg, chief: bool, model, class_names, eval_split: str, skip_files, worker_dir, log):
        self.cfg = cfg
        self.chief = chief
        self.model = model
        self.class_names = class_names
        self.eval_split = eval_split
        self.skip_files = skip_files
        self._worker_dir = worker_dir
        self._print = log

    def keep_after_failed_evaluation(self, trained, metrics_path, failure):
        """Writes what a run whose final evaluation failed has (metrics.json without the evaluation, model.keras,
        the export; its last checkpoint is on disk) and raises `failure` saying so."""
        metrics = dict(trained, eval_error=str(failure))
        if self.chief:
            with tf.io.gfile.GFile(metrics_path, "w") as f:
                f.write(json.dumps(metrics, indent=2, sort_keys=True))
        self.save_and_export(metrics, show_predictions=False)
        raise InvalidDatasetError(
            f"{failure} Training finished ({trained['steps']} steps): the model "
            f"({os.path.join(self.cfg.workdir, 'model.keras')}), "
            f"its checkpoint and metrics.json (without the evaluation) are written; the rerun only evaluates."
        ) from None

    def save_and_export(self, metrics, show_predictions=True):
        """Saves a float32 single-device copy (model.keras), exports it, classifies a few eval images; a full disk
        raises `training.workdir.DiskFull` (the last checkpoint is on disk: the rerun writes them again)."""
        try:
            self._write_model_and_export(metrics, show_predictions)
        except (OSError, tf.errors.OpError) as error:
            if is_disk_full(error):
                raise disk_full(error, "the trained model and its export", self.cfg.workdir,
                                "Training finished and its last checkpoint is written.") from error
            raise

    def _write_model_and_export(self, metrics, show_predictions):
        cfg = self.cfg
        model = _float32_copy(self.model)
        if not self.chief:
            os.makedirs(self._worker_dir(), exist_ok=True)
            model.save_weights(self._worker_dir("model.weights.h5"))
            shutil.rmtree(self._worker_dir("checkpoints"), ignore_errors=True)
            return
        model.save(os.path.join(cfg.workdir, "model.keras"))
        with tf.io.gfile.GFile(os.path.join(cfg.workdir, "model.labels.txt"), "w") as f:  # for later exports
            f.write("".join(f"{name}\n" for name in self.class_names))
        model.save_weights(os.path.join(cfg.workdir, "model.weights.h5"))
        classify = None
        if cfg.export:
            classify = self._export(model)
        if classify is None:
            def classify(images):
                logits = model.predict(data.to_model_range(images), verbose=0)
                return [self.class_names[i] for i in np.argmax(logits, -1)], _softmax(logits).max(-1)
        if cfg.show_predictions and show_predictions:
            self._show_predictions(classify)

    def _export(self, model):
        """Exports a TF Serving SavedModel to WORKDIR/export/1 and returns a classifier that uses it."""
        from keras_vit import export  # part of the package: a failing import is a bug to see, not to skip

        path = export.export_saved_model(model, os.path.join(self.cfg.workdir, "export"), version=1,
                                         labels=list(self.class_names), overwrite=True, model_name="vit")
        self._print(f"exported a SavedModel for TF Serving to {path}")
        serving = tf.saved_model.load(path).signatures["serving_default"]

        def classify(images):  # encoded PNGs in, as a TF Serving client sends them
            encoded = tf.stack([tf.io.encode_png(tf.cast(image, tf.uint8)) for image in images])
            outputs = serving(images=encoded)
            labels = [label.decode() for label in outputs["labels"].numpy()[:, 0]]
            return labels, outputs["scores"].numpy()[:, 0]

        return classify

    def _show_predictions(self, classify):
        cfg = self.cfg
        source = dataset_source(cfg.dataset, self.eval_split, cfg.data_dir, skip_files=self.skip_files)
        images, labels = [], []
        for image, label in source.elements.shuffle(1000, seed=0).take(cfg.show_predictions):
            image = data.eval_image(source.decode(image), (cfg.image_size, cfg.image_size))
            images.append(tf.cast(tf.round(image), tf.uint8).numpy())
            labels.append(int(label))
        predicted, scores = classify(np.stack(images))
        names = self.class_names
        lines = [f"  {i}: predicted {p} ({s:.2f}), label {names[t]}{'' if p == names[t] else '  <- wrong'}"
                 for i, (p, s, t) in enumerate(zip(predicted, scores, labels))]
        self._print(f"classified {len(lines)} {self.eval_split} images with the exported model:\n" + "\n".join(lines))


def _softmax(logits):
    logits = np.asarray(logits, np.float64)
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _float32_copy(model):
    """The same model (from its config, its constructor's arguments: numerics carry over) in float32, unreplicated."""
    copy = type(model).from_config({**model.get_config(), "dtype": "float32"})
    copy.set_weights([np.asarray(w, np.float32) for w in model.get_weights()])
    return copy
