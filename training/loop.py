"""The training loop: one `strategy.run` code path for every `tf.distribute` strategy.

Keras 3's `model.fit` does not run under `MultiWorkerMirroredStrategy` (keras-team/keras#20585), so the app
drives the model with a small custom loop that is the same under one_device, mirrored, multi_worker and
tpu: per-replica forward/backward, cross-replica gradient sum, global-norm clipping of the summed gradient,
optimizer update (the paper's recipes: Tables 3-4, Appendix B.1). User code can still call `model.fit`
under `MirroredStrategy` (see the README).

Robustness: a `tf.train.Checkpoint` of model, optimizer and step every `checkpoint_every` steps and at the
end; a restart with the same command restores the latest one and replays the data stream from that step
(`training.data`), so at most `checkpoint_every` steps are lost. A non-finite loss stops the run before
anything is saved, keeping the last good checkpoint.

Outputs (in `cfg.workdir`, written by the chief): `config.json`, `checkpoints/`, `tensorboard/`,
`metrics.json`, `model.keras`, `export/1/` (SavedModel, when `keras_vit.export` is available).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import time

import keras
import numpy as np
import tensorflow as tf
from tensorflow.core.framework import summary_pb2

from training import augment, data, distribute
from training.config import Config
from training.model import build_model
from training.optim import make_optimizer

# Fields that may change between a run and its resumption (they do not change what is computed).
RESUMABLE_CHANGES = {"log_every", "show_predictions", "export", "strategy", "tpu", "jit_compile", "eval_every",
                     "checkpoint_every", "keep_checkpoints", "data_dir", "download", "workdir"}


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the last good checkpoint is kept."""


def run(cfg: Config, strategy: tf.distribute.Strategy | None = None) -> dict:
    """Trains, evaluates and exports as `cfg` says; returns the metrics written to `metrics.json`.

    Raises:
        TrainingDiverged: on a non-finite loss.
        ValueError: for a config that does not fit the data or the strategy, or a workdir holding a run
            with a different config.
    """
    previous_policy = keras.config.dtype_policy()
    try:
        if cfg.mixed_precision != "none":
            keras.config.set_dtype_policy(f"mixed_{cfg.mixed_precision}")
        return _Run(cfg, strategy).train_and_evaluate()
    finally:
        keras.config.set_dtype_policy(previous_policy)


class _Run:
    def __init__(self, cfg: Config, strategy):
        self.cfg = cfg
        keras.utils.set_random_seed(cfg.seed)
        self.strategy = strategy or distribute.make_strategy(cfg.strategy, cfg.tpu)
        self.chief = distribute.is_chief(self.strategy)
        self.replicas = self.strategy.num_replicas_in_sync
        if cfg.global_batch_size % self.replicas:
            raise ValueError(
                f"`global_batch_size` must be a multiple of the {self.replicas} replicas. "
                f"Received: global_batch_size={cfg.global_batch_size}"
            )
        os.makedirs(cfg.workdir, exist_ok=True)
        self._check_and_write_config()
        default_train, default_eval = data.default_splits(cfg.dataset, cfg.data_dir)
        self.train_split = cfg.train_split or default_train
        self.eval_split = cfg.eval_split or default_eval
        train_source = data.dataset_source(cfg.dataset, self.train_split, cfg.data_dir, cfg.download)
        self.num_classes = train_source.num_classes
        self.class_names = train_source.class_names
        self.num_train = train_source.num_examples
        self.num_eval = data.dataset_source(cfg.dataset, self.eval_split, cfg.data_dir).num_examples
        self.total_steps = cfg.train_steps(self.num_train)

        with self.strategy.scope():
            self.model = build_model(cfg, self.num_classes)
            self.optimizer = make_optimizer(cfg, self.total_steps, self.model)
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self._evaluation = None  # (dataset, steps, eval_step), built by the first `evaluate`
        self.checkpoint = tf.train.Checkpoint(model=self.model, optimizer=self.optimizer, step=self.step)
        self.checkpoint_dir = os.path.join(cfg.workdir, "checkpoints")
        own_dir = self.checkpoint_dir if self.chief else self._worker_dir("checkpoints")
        self.manager = tf.train.CheckpointManager(self.checkpoint, own_dir, max_to_keep=cfg.keep_checkpoints)
        latest = tf.train.latest_checkpoint(self.checkpoint_dir)
        if latest:
            self.checkpoint.restore(latest).assert_existing_objects_matched()
            self._print(f"resumed from {latest} at step {int(self.step.numpy())}")
        if self.chief:
            self.writers = {k: tf.summary.create_file_writer(os.path.join(cfg.workdir, "tensorboard", k))
                            for k in ("train", "eval")}
        else:
            self.writers = {k: tf.summary.create_noop_writer() for k in ("train", "eval")}

    # --- setup ---------------------------------------------------------------------------------------

    def _worker_dir(self, *parts):
        return os.path.join(self.cfg.workdir, "workers", str(distribute.task_id(self.strategy)), *parts)

    def _check_and_write_config(self):
        path = os.path.join(self.cfg.workdir, "config.json")
        if tf.io.gfile.exists(path):
            with tf.io.gfile.GFile(path) as f:
                old = json.loads(f.read())
            new = json.loads(self.cfg.to_json())
            changed = {k: (old.get(k), new[k]) for k in new if old.get(k) != new[k] and k not in RESUMABLE_CHANGES}
            if changed:
                raise ValueError(
                    f"{self.cfg.workdir!r} holds a run with a different config; use another --workdir or the same "
                    f"flags. Changed (old, new): {changed}"
                )
        if self.chief:  # written whole, then renamed: other workers may be reading it
            with tf.io.gfile.GFile(path + ".tmp", "w") as f:
                f.write(self.cfg.to_json())
            tf.io.gfile.rename(path + ".tmp", path, overwrite=True)

    def _train_dataset(self, start_step):
        cfg = self.cfg
        transform = augment.make_batch_transform(
            self.num_classes, cfg.randaugment, cfg.mixup, cfg.cutmix, seed=cfg.seed + 1_000_003 * start_step
        )

        def dataset_fn(context):
            ds, _ = data.make_dataset(
                cfg.dataset, self.train_split, cfg.data_dir, cfg.image_size,
                context.get_per_replica_batch_size(cfg.global_batch_size), training=True, seed=cfg.seed,
                crop=cfg.crop, crop_min_area=cfg.crop_min_area, flip=cfg.flip, shuffle_buffer=cfg.shuffle_buffer,
                start_index=start_step * cfg.global_batch_size // context.num_input_pipelines,
                input_context=context, batch_transform=transform,
            )
            return ds

        return self.strategy.distribute_datasets_from_function(dataset_fn)

    def _eval_dataset(self):
        cfg = self.cfg
        steps = []

        def dataset_fn(context):
            per_replica = context.get_per_replica_batch_size(cfg.global_batch_size)
            ds, _ = data.make_dataset(cfg.dataset, self.eval_split, cfg.data_dir, cfg.image_size, per_replica,
                                      training=False, input_context=context)
            pipelines = context.num_input_pipelines
            steps.append(data.eval_batches_per_pipeline(self.num_eval, cfg.global_batch_size, pipelines))
            return data.pad_eval_batches(ds, per_replica, steps[-1] * (context.num_replicas_in_sync // pipelines))

        dataset = self.strategy.distribute_datasets_from_function(dataset_fn)
        return dataset, steps[0]

    # --- steps ---------------------------------------------------------------------------------------

    def _make_train_step(self):
        cfg, model, optimizer, replicas = self.cfg, self.model, self.optimizer, self.replicas
        loss_scaled = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)

        def replica_step(images, labels):
            if labels.shape.rank == 1:
                labels = tf.one_hot(labels, self.num_classes)
            with tf.GradientTape() as tape:
                logits = model(images, training=True)
                per_example = keras.losses.categorical_crossentropy(
                    labels, tf.cast(logits, tf.float32), from_logits=True, label_smoothing=cfg.label_smoothing
                )
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=cfg.global_batch_size)
                if model.losses:
                    loss += tf.nn.scale_regularization_loss(tf.add_n(model.losses))
                scaled_loss = optimizer.scale_loss(loss)
            variables = model.trainable_variables
            grads = tape.gradient(scaled_loss, variables)
            # Sum over replicas first, then clip the global gradient (clipping is scale-equivariant, so the
            # loss scale just multiplies the limit). Keras' optimizer sums the replicas again: divide first.
            grads = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, grads)
            if cfg.grad_clip_norm:
                limit = cfg.grad_clip_norm * (tf.cast(optimizer.dynamic_scale, tf.float32) if loss_scaled else 1.0)
                grads, _ = tf.clip_by_global_norm(grads, limit)
            if replicas > 1:
                grads = [g / replicas for g in grads]
            optimizer.apply(grads, variables)
            return loss

        if cfg.jit_compile:
            replica_step = tf.function(replica_step, jit_compile=True)

        @tf.function
        def train_step(iterator):
            images, labels = next(iterator)
            loss = self.strategy.run(replica_step, args=(images, labels))
            self.step.assign_add(1)
            return self.strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None)

        return train_step

    def _make_eval_step(self):
        model = self.model

        def replica_step(images, labels, mask):
            logits = tf.cast(model(images, training=False), tf.float32)
            loss = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
            correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels), tf.float32)
            return tf.reduce_sum(loss * mask), tf.reduce_sum(correct * mask), tf.reduce_sum(mask)

        @tf.function
        def eval_step(iterator):
            results = self.strategy.run(replica_step, args=next(iterator))
            return [self.strategy.reduce(tf.distribute.ReduceOp.SUM, r, axis=None) for r in results]

        return eval_step

    # --- loop ----------------------------------------------------------------------------------------

    def evaluate(self) -> dict:
        if self._evaluation is None:  # built once: mid-training evaluations reuse the dataset and its tf.function
            dataset, steps = self._eval_dataset()
            self._evaluation = dataset, steps, self._make_eval_step()
        dataset, steps, eval_step = self._evaluation
        iterator = iter(dataset)
        totals = np.zeros(3)
        for _ in range(steps):
            totals += [float(x) for x in eval_step(iterator)]
        loss_sum, correct, count = totals
        return {"eval_loss": loss_sum / count, "eval_accuracy": correct / count, "eval_examples": int(count)}

    def train_and_evaluate(self) -> dict:
        cfg = self.cfg
        start = int(self.step.numpy())
        self._print(
            f"training {self.model.name} ({self.model.count_params():,} parameters) on {cfg.dataset} "
            f"[{self.train_split}: {self.num_train} images, {self.num_classes} classes] for {self.total_steps} steps "
            f"of {cfg.global_batch_size} images, {self.replicas} replica(s), {type(self.strategy).__name__}"
        )
        images_per_sec = None  # nothing left to train: a finished run restarted only evaluates
        if start < self.total_steps:
            images_per_sec = self._train(start)
        metrics_path = os.path.join(cfg.workdir, "metrics.json")
        if images_per_sec is None and tf.io.gfile.exists(metrics_path):
            with tf.io.gfile.GFile(metrics_path) as f:
                images_per_sec = json.loads(f.read()).get("train_images_per_sec")
        eval_metrics = self.evaluate()
        metrics = dict(eval_metrics, train_images_per_sec=images_per_sec, steps=int(self.step.numpy()),
                       total_steps=self.total_steps, dataset=cfg.dataset, model=self.model.name)
        with self.writers["eval"].as_default():
            for key in ("eval_loss", "eval_accuracy"):
                _scalar(key, metrics[key], step=metrics["steps"])
        self.writers["eval"].flush()
        if self.chief:
            with tf.io.gfile.GFile(metrics_path, "w") as f:
                f.write(json.dumps(metrics, indent=2, sort_keys=True))
        self._save_and_export(metrics)
        self._print(
            f"final: eval_accuracy={metrics['eval_accuracy']:.4f} eval_loss={metrics['eval_loss']:.4f} "
            f"on {metrics['eval_examples']} {self.eval_split} images after {metrics['steps']} steps, "
            f"{'n/a' if images_per_sec is None else f'{images_per_sec:.0f}'} train images/s, workdir {cfg.workdir}"
        )
        return metrics

    def _train(self, start) -> float | None:
        cfg = self.cfg
        train_step = self._make_train_step()
        iterator = iter(self._train_dataset(start))
        progress = _Progress(self.total_steps, enabled=self.chief)
        timed_from, timed_steps, window_start, window_step = None, 0, time.perf_counter(), start
        for step in range(start + 1, self.total_steps + 1):
            loss = float(train_step(iterator))
            if not math.isfinite(loss):
                last = tf.train.latest_checkpoint(self.checkpoint_dir)
                raise TrainingDiverged(
                    f"Loss became {loss} at step {step}; stopped without saving. The last good checkpoint is "
                    f"{last or 'none (no checkpoint was written yet)'}. Lower --learning_rate, add warm-up "
                    f"(--warmup_steps) or gradient clipping (--grad_clip_norm), then rerun the same command to "
                    f"resume from it (or use a new --workdir)."
                )
            now = time.perf_counter()
            if timed_from is None:
                timed_from = now  # the first step includes tracing; throughput counts the rest
            else:
                timed_steps += 1
            if step % cfg.checkpoint_every == 0 or step == self.total_steps:
                self.manager.save(checkpoint_number=step)
            if step % cfg.log_every == 0 or step == self.total_steps:
                rate = cfg.global_batch_size * (step - window_step) / max(now - window_start, 1e-9)
                window_start, window_step = now, step
                lr = float(self.optimizer.learning_rate)
                with self.writers["train"].as_default():
                    _scalar("loss", loss, step=step)
                    _scalar("learning_rate", lr, step=step)
                    _scalar("images_per_sec", rate, step=step)
                progress.update(step, loss=loss, lr=lr, images_per_sec=rate)
            if cfg.eval_every and step % cfg.eval_every == 0 and step != self.total_steps:
                metrics = self.evaluate()
                with self.writers["eval"].as_default():
                    for key in ("eval_loss", "eval_accuracy"):
                        _scalar(key, metrics[key], step=step)
                self._print(f"step {step}: eval_accuracy={metrics['eval_accuracy']:.4f} "
                            f"eval_loss={metrics['eval_loss']:.4f}")
        for writer in self.writers.values():
            writer.flush()
        elapsed = time.perf_counter() - timed_from if timed_from is not None else 0.0
        return cfg.global_batch_size * timed_steps / elapsed if timed_steps and elapsed > 0 else None

    def _save_and_export(self, metrics):
        """Saves a float32 single-device copy (model.keras), exports it, classifies a few eval images."""
        cfg = self.cfg
        model = _float32_copy(self.model)
        if not self.chief:
            os.makedirs(self._worker_dir(), exist_ok=True)
            model.save_weights(self._worker_dir("model.weights.h5"))
            shutil.rmtree(self._worker_dir("checkpoints"), ignore_errors=True)
            return
        model.save(os.path.join(cfg.workdir, "model.keras"))
        model.save_weights(os.path.join(cfg.workdir, "model.weights.h5"))
        classify = None
        if cfg.export:
            classify = self._export(model)
        if classify is None:
            def classify(images):
                logits = model.predict(data.to_model_range(images), verbose=0)
                return [self.class_names[i] for i in np.argmax(logits, -1)], _softmax(logits).max(-1)
        if cfg.show_predictions:
            self._show_predictions(classify)

    def _export(self, model):
        """Exports a TF Serving SavedModel to WORKDIR/export/1 and returns a classifier that uses it."""
        try:
            from keras_vit import export
        except ImportError:
            self._print(f"keras_vit.export is not available; saved {self.cfg.workdir}/model.keras only")
            return None
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
        source = data.dataset_source(cfg.dataset, self.eval_split, cfg.data_dir)
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

    def _print(self, message):
        if self.chief:
            print(message, flush=True)


_SCALAR_METADATA = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
)


def _scalar(name, value, step):
    """`tf.summary.scalar` without the tensorboard package (tensorflow-cpu does not ship it)."""
    tf.summary.write(name, tf.constant(value, tf.float32), step=step, metadata=_SCALAR_METADATA)


def _softmax(logits):
    logits = np.asarray(logits, np.float64)
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _float32_copy(model):
    """The same architecture (from its config, so checkpoint-given numerics carry over) in float32, unreplicated."""

    def to_float32(obj):
        if isinstance(obj, dict):
            if obj.get("class_name") == "DTypePolicy":
                return "float32"
            return {key: to_float32(value) for key, value in obj.items()}
        if isinstance(obj, list):
            return [to_float32(value) for value in obj]
        return obj

    copy = keras.saving.deserialize_keras_object(to_float32(keras.saving.serialize_keras_object(model)))
    copy.set_weights([np.asarray(w, np.float32) for w in model.get_weights()])
    return copy


class _Progress:
    """A Keras progress bar on a terminal; one log line per `log_every` steps otherwise."""

    def __init__(self, total, enabled):
        self.enabled = enabled
        self.interactive = enabled and sys.stdout.isatty()
        self.bar = keras.utils.Progbar(total, stateful_metrics=["loss", "lr", "images_per_sec"]) \
            if self.interactive else None
        self.total = total

    def update(self, step, **values):
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(step, values=list(values.items()))
        else:
            text = " ".join(f"{k}={v:.4g}" for k, v in values.items())
            print(f"step {step}/{self.total} {text}", flush=True)
