"""The training loop: one `strategy.run` code path for every `tf.distribute` strategy.

Keras 3's `model.fit` does not run under `MultiWorkerMirroredStrategy` (keras-team/keras#20585), so the app
drives the model with a small custom loop that is the same under one_device, mirrored, multi_worker and
tpu: per-replica forward/backward, cross-replica gradient sum, global-norm clipping of the summed gradient,
optimizer update (the paper's recipes: Tables 3-4, Appendix B.1). User code can still call `model.fit`
under `MirroredStrategy` (see docs/TRAINING.md).

A run is one `_Run`; it owns the objects of its parts, each in its own module: the workdir (writable, locked,
config.json: `training.workdir.RunWorkdir`), the checkpoints of its state (written, rotated, resumed from, set
aside on divergence: `training.run_state.RunCheckpoints`) and its outputs (model.keras, the export:
`training.finish.RunOutputs`); the images that fail in the pipeline are handled by the steps of
`training.image_failures` (a mixin: they change the run's data state). Every step also checks that all weights
and optimizer variables are finite after its update (one reduction, returned with the loss), so a checkpoint on
disk is never NaN; a non-finite loss or state stops the run (`training.run_state.TrainingDiverged`). A folder
dataset's unusable images are found before training (`training.image_checks.check_images`: headers, a pixel
limit, a full decode) and refused, or skipped with `skip_bad_images`.

Outputs (in `cfg.workdir`, written by the chief): `config.json`, `checkpoints/`, `tensorboard/`,
`metrics.json`, `model.keras` (with its class names in `model.labels.txt`, which `python -m keras_vit.export`
reads), `export/1/` (the TF Serving SavedModel, unless `--export=false`).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time

import keras
import numpy as np
import tensorflow as tf
from tensorflow.core.framework import summary_pb2

from keras_vit import distillation

from training import augment, data, distribute, optim, progress
from training.config import Config
from training.finish import RunOutputs
from training.image_checks import DEFAULT_MAX_IMAGE_PIXELS, check_images
from training.image_failures import Batches, ImageFailuresMixin, listed_files
from training.model import model_from_config, fetch_weights
from training.optim import make_optimizer
from training.run_state import RunCheckpoints
from training.sources import InvalidDatasetError, dataset_source, default_splits, shown_path
from training.teacher import load_teacher
from training.workdir import RunWorkdir


EVAL_PROGRESS_FROM = 50  # evaluations of at least this many batches print progress


def run(cfg: Config, strategy: tf.distribute.Strategy | None = None, *, resume_with_changes: bool = False,
        overwrite_checkpoints: bool = False, skip_bad_images: bool = False,
        max_image_pixels: int | None = DEFAULT_MAX_IMAGE_PIXELS, image_check: str = "decode") -> dict:
    """Trains, evaluates and exports as `cfg` says; returns the metrics written to `metrics.json`.

    Args:
        cfg: the run's config.
        strategy: a `tf.distribute` strategy (default: the one `cfg.strategy` names).
        resume_with_changes: let the `training.workdir.OPTIMISATION_CHANGES` fields differ from the workdir's
            `config.json` (the change is recorded there).
        overwrite_checkpoints: delete the workdir's checkpoint files and start at step 0 when none of them
            can be restored (else `WorkdirError`).
        skip_bad_images: leave out the files of a folder dataset that cannot be used (else an error).
        max_image_pixels: a folder dataset's images with more pixels are bad (None or 0: no limit).
        image_check: `"decode"` (headers and a full decode of every image of a folder dataset before training)
            or `"headers"` (headers only; an image that then fails to decode is named when the pipeline hits it).

    Raises:
        TrainingDiverged: on a non-finite loss, weight or optimizer variable.
        WorkdirError: for an unwritable workdir, one another run holds (its lock), one holding a run with a
            different config, or checkpoint files none of which can be restored.
        InvalidDatasetError: for unusable images or an empty class folder of a folder dataset (also when
            an image fails to decode during training or the final evaluation: the state reached is saved first).
            An image that fails in the pipeline during training or a mid-training evaluation (deleted, changed,
            unreadable) is an `ImageFailedMidRunError` (its subclass; exit status 5 of `training.train`).
        ValueError: for a config that does not fit the data or the strategy.
    """
    previous_policy = keras.config.dtype_policy()
    try:
        if cfg.mixed_precision != "none":
            keras.config.set_dtype_policy(f"mixed_{cfg.mixed_precision}")
        with contextlib.ExitStack() as cleanup:  # releases the workdir lock however the run ends
            images = dict(skip=skip_bad_images, max_pixels=max_image_pixels, check=image_check)
            return _Run(cfg, strategy, resume_with_changes, overwrite_checkpoints, images, cleanup).train_and_evaluate()
    finally:
        keras.config.set_dtype_policy(previous_policy)


class _Run(ImageFailuresMixin):
    """One run: its state (model, optimizer, step), input pipelines, steps and loop. It owns its workdir
    (`self.workdir`, a `training.workdir.RunWorkdir`) and the checkpoints of its state (`self.checkpoints`, a
    `training.run_state.RunCheckpoints`), and makes its outputs at the end (`training.finish.RunOutputs`); the
    image-failure steps come from the mixin of `training.image_failures`."""

    def __init__(self, cfg: Config, strategy, resume_with_changes=False, overwrite_checkpoints=False, images=None,
                 cleanup=None):
        self.cfg = cfg
        self.images = dict(dict(skip=False, max_pixels=DEFAULT_MAX_IMAGE_PIXELS, check="decode"), **(images or {}))
        keras.utils.set_random_seed(cfg.seed)
        self.strategy = strategy or distribute.make_strategy(cfg.strategy, cfg.tpu)
        self.chief = distribute.is_chief(self.strategy)
        self.replicas = self.strategy.num_replicas_in_sync
        if cfg.global_batch_size % self.replicas:
            raise ValueError(
                f"`global_batch_size` must be a multiple of the {self.replicas} replicas. "
                f"Received: global_batch_size={cfg.global_batch_size}"
            )
        # The dataset's name and layout before the workdir: a missing folder is the error to show, not a config
        # that differs from the last run's in the (shared, default) workdir.
        default_train, default_eval = default_splits(cfg.dataset, cfg.data_dir, cfg.validation_split, cfg.seed)
        self.workdir = RunWorkdir(cfg, self.strategy, self.chief, log=self._print)
        self.workdir.prepare()
        self.workdir.lock(cleanup)
        config_changes = self.workdir.check_config(resume_with_changes)
        fetch_weights(cfg)  # published weights before any dataset download: both failures show on the first try
        self.train_split = cfg.train_split or default_train
        self.eval_split = cfg.eval_split or default_eval
        # Both splits before anything trains: a bad eval image would otherwise stop the run after training.
        self.skip_files = check_images(
            cfg.dataset, (self.train_split, self.eval_split), skip=self.images["skip"],
            max_pixels=self.images["max_pixels"], decode=self.images["check"] == "decode", log=self._print)
        self.listed = listed_files(cfg.dataset, (self.train_split, self.eval_split))  # to name one deleted mid-run
        if self.skip_files:
            self._print(f"skipping {len(self.skip_files)} image file(s) of {shown_path(cfg.dataset)} that cannot "
                        f"be used (--skip_bad_images), e.g. {shown_path(min(self.skip_files))}")
        train_source = dataset_source(cfg.dataset, self.train_split, cfg.data_dir, cfg.download, self.skip_files)
        self.num_classes = train_source.num_classes
        self.class_names = train_source.class_names
        self.num_train = train_source.num_examples
        self.num_eval = dataset_source(cfg.dataset, self.eval_split, cfg.data_dir,
                                       skip_files=self.skip_files).num_examples
        self.total_steps = cfg.train_steps(self.num_train)

        # Where this task saves (a worker: its own folder); rotated by `save`, which keeps the last good one.
        checkpoint_dir = os.path.join(cfg.workdir, "checkpoints")
        own_checkpoint_dir = checkpoint_dir if self.chief else self.workdir.worker_dir("checkpoints")
        self.checkpoints = RunCheckpoints(cfg, self.chief, self.num_classes, checkpoint_dir, own_checkpoint_dir,
                                          log=self._print)
        self.teacher, self.teacher_size = None, None
        if cfg.teacher is not None:  # read and checked before any step; never trained, not in the checkpoints
            with self.strategy.scope():
                self.teacher, self.teacher_size = load_teacher(cfg, self.num_classes, (cfg.image_size,) * 2,
                                                               log=self._print)
        self._build_state()
        self._evaluation = None  # (dataset, steps, eval_step), built by the first `evaluate`
        self.checkpoints.restore(overwrite_checkpoints, rebuild=self._build_state)
        self.workdir.write_config(config_changes, int(self.step.numpy()), self.model)
        tf.io.gfile.makedirs(own_checkpoint_dir)
        if self.chief:
            self.writers = {k: tf.summary.create_file_writer(os.path.join(cfg.workdir, "tensorboard", k))
                            for k in ("train", "eval")}
        else:
            self.writers = {k: tf.summary.create_noop_writer() for k in ("train", "eval")}

    # --- setup ---------------------------------------------------------------------------------------

    def _build_state(self):
        with self.strategy.scope():
            self.model = model_from_config(self.cfg, self.num_classes)
            self.optimizer = make_optimizer(self.cfg, self.total_steps, self.model)
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self.float_variables = [v for v in [*self.model.weights, *self.optimizer.variables]
                                if tf.as_dtype(v.dtype).is_floating]
        self.checkpoints.track(self.model, self.optimizer, self.step, self.float_variables)

    # --- data -------------------------------------------------------------------------------------

    def _train_dataset(self, start_step):
        cfg = self.cfg
        transform = augment.make_batch_transform(
            self.num_classes, cfg.randaugment, cfg.mixup, cfg.cutmix, seed=cfg.seed + 1_000_003 * start_step,
            library=cfg.augment_library,
        )

        def dataset_fn(context):
            ds, _ = data.make_dataset(
                cfg.dataset, self.train_split, cfg.data_dir, cfg.image_size,
                context.get_per_replica_batch_size(cfg.global_batch_size), training=True, seed=cfg.seed,
                crop=cfg.crop, crop_min_area=cfg.crop_min_area, flip=cfg.flip, shuffle_buffer=cfg.shuffle_buffer,
                start_index=start_step * cfg.global_batch_size // context.num_input_pipelines,
                input_context=context, batch_transform=transform, skip_files=self.skip_files,
            )
            return ds

        return self.strategy.distribute_datasets_from_function(dataset_fn)

    def _eval_dataset(self):
        cfg = self.cfg
        steps = []

        def dataset_fn(context):
            per_replica = context.get_per_replica_batch_size(cfg.global_batch_size)
            ds, _ = data.make_dataset(cfg.dataset, self.eval_split, cfg.data_dir, cfg.image_size, per_replica,
                                      training=False, input_context=context, skip_files=self.skip_files)
            pipelines = context.num_input_pipelines
            steps.append(data.eval_batches_per_pipeline(self.num_eval, cfg.global_batch_size, pipelines))
            return data.pad_eval_batches(ds, per_replica, steps[-1] * (context.num_replicas_in_sync // pipelines))

        dataset = self.strategy.distribute_datasets_from_function(dataset_fn)
        return dataset, steps[0]

    # --- steps ---------------------------------------------------------------------------------------

    def _make_train_step(self):
        cfg, model, optimizer, replicas = self.cfg, self.model, self.optimizer, self.replicas
        loss_scaled = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)

        heads = distillation.student_heads(model) if self.teacher is not None else None

        def replica_step(images, labels):
            if labels.shape.rank == 1:
                labels = tf.one_hot(labels, self.num_classes)
            with tf.GradientTape() as tape:
                if heads is None:
                    logits = model(images, training=True)
                    per_example = keras.losses.categorical_crossentropy(
                        labels, tf.cast(logits, tf.float32), from_logits=True, label_smoothing=cfg.label_smoothing
                    )
                else:
                    per_example = self._distillation_loss(heads, images, labels)
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
            # 1.0 when a weight or optimizer variable is no longer finite (this replica's copy, after the update).
            bad = 1.0 - tf.cast(tf.reduce_all(tf.stack([tf.reduce_all(tf.math.is_finite(v))
                                                         for v in self.float_variables])), tf.float32)
            return tf.stack([loss, bad])

        if cfg.jit_compile:
            replica_step = tf.function(replica_step, jit_compile=True)

        @tf.function
        def train_step(iterator):  # [loss, replicas whose state is not finite], one reduction
            images, labels = next(iterator)
            # No update before the batch is there (the optimizer's and the step's counters would not wait for it):
            # a batch that fails to load (a bad file, `_checked_step`) leaves the state of the previous step.
            with tf.control_dependencies(tf.nest.flatten((images, labels), expand_composites=True)):
                loss_and_bad = self.strategy.run(replica_step, args=(images, labels))
                self.step.assign_add(1)
            return self.strategy.reduce(tf.distribute.ReduceOp.SUM, loss_and_bad, axis=None)

        return train_step

    def _distillation_loss(self, heads, images, labels):
        """DeiT's per-example loss: the labels (smoothed as `--label_smoothing`) on the class head, the teacher's
        logits (on the batch resized to its size if it differs) on the distillation head or the one head."""
        cfg = self.cfg
        outputs = tf.nest.flatten(heads(images, training=True))
        teacher_images = images if self.teacher_size is None else tf.image.resize(images, self.teacher_size)
        teacher_logits = self.teacher(teacher_images, training=False)
        smoothed = labels * (1.0 - cfg.label_smoothing) + cfg.label_smoothing / self.num_classes
        return distillation.distillation_loss(smoothed, outputs[0], outputs[-1], teacher_logits, cfg.distillation,
                                              cfg.distillation_alpha, cfg.distillation_tau)

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
        # A line per tenth of a long evaluation (the batch size is per step, summed over replicas).
        shown = progress.Progress(steps, max(1, steps // 10), items_per_step=self.cfg.global_batch_size,
                                  enabled=self.chief and steps >= EVAL_PROGRESS_FROM, label="eval batch")
        for batch in range(1, steps + 1):
            totals += [float(x) for x in eval_step(iterator)]
            shown.update(batch)
        loss_sum, correct, count = totals
        return {"eval_loss": loss_sum / count, "eval_accuracy": correct / count, "eval_examples": int(count)}

    def _finished(self, start) -> dict | None:
        """The metrics of a run that has already trained, evaluated, saved and exported all it was asked to (its
        `metrics.json` without an `eval_error`, its `model.keras`, its export with `--export`), else None."""
        cfg = self.cfg
        path = os.path.join(cfg.workdir, "metrics.json")
        if start < self.total_steps or not tf.io.gfile.exists(path):
            return None
        with tf.io.gfile.GFile(path) as f:
            metrics = json.loads(f.read())
        outputs = [os.path.join(cfg.workdir, "model.keras")] + ([self._export_path()] if cfg.export else [])
        if "eval_error" in metrics or "eval_accuracy" not in metrics or metrics.get("steps") != start or not all(
                tf.io.gfile.exists(p) for p in outputs):
            return None
        return metrics

    def _export_path(self):
        return os.path.join(self.cfg.workdir, "export", "1")

    def train_and_evaluate(self) -> dict:
        cfg = self.cfg
        start = int(self.step.numpy())
        finished = self._finished(start)
        if finished is not None:  # nothing to do: no figures of a training that did not happen, no new export
            export = f" and its export {self._export_path()}" if cfg.export else ""
            self._print(
                f"already finished: {cfg.workdir} holds this run, trained for all its {start} steps and evaluated "
                f"(eval_accuracy={finished['eval_accuracy']:.4f} on {finished.get('eval_examples', '?')} "
                f"{self.eval_split} images, in {os.path.join(cfg.workdir, 'metrics.json')}); its model is "
                f"{os.path.join(cfg.workdir, 'model.keras')}{export}. To train it further, pass a larger --steps "
                f"(or --epochs) with --resume_with_changes; for a new run, another --workdir.")
            return finished
        if cfg.recipe_reason:
            self._print(f"recipe: {cfg.recipe}, chosen for {cfg.recipe_reason}; --recipe=NAME chooses another")
        else:
            self._print(f"recipe: {cfg.recipe} (--recipe)")
        _, warmup_note = optim.fitted_warmup(cfg.warmup_steps, self.total_steps)
        if warmup_note:
            self._print(warmup_note)
        self._print(
            f"training {self.model.name} ({self.model.count_params():,} parameters) on {cfg.dataset} "
            f"[{self.train_split}: {self.num_train} images, {self.num_classes} classes] for {self.total_steps} steps "
            f"of {cfg.global_batch_size} images, {self.replicas} replica(s), {type(self.strategy).__name__}"
        )
        if cfg.lora_rank:
            trainable = sum(int(np.prod(weight.shape)) for weight in self.model.trainable_weights)
            self._print(f"LoRA rank {cfg.lora_rank} on {cfg.lora_targets}: {trainable:,} of "
                        f"{self.model.count_params():,} parameters train (the adapters and the head)")
        if cfg.teacher:
            soft = (f", alpha {cfg.distillation_alpha:g}, tau {cfg.distillation_tau:g}"
                    if cfg.distillation == "soft" else "")
            self._print(f"distilling from {cfg.teacher} ({cfg.distillation} distillation{soft})")
        images_per_sec = None  # nothing left to train: a finished run restarted only evaluates
        if start < self.total_steps:
            images_per_sec = self._train(start)
        metrics_path = os.path.join(cfg.workdir, "metrics.json")
        if images_per_sec is None and tf.io.gfile.exists(metrics_path):
            with tf.io.gfile.GFile(metrics_path) as f:
                images_per_sec = json.loads(f.read()).get("train_images_per_sec")
        trained = dict(train_images_per_sec=images_per_sec, steps=int(self.step.numpy()),
                       total_steps=self.total_steps, dataset=cfg.dataset, model=self.model.name)
        try:
            eval_metrics = self._checked_evaluate(None)
        except InvalidDatasetError as failure:  # keep what training made: the model, its metrics
            self._outputs().keep_after_failed_evaluation(trained, metrics_path, failure)
        metrics = dict(eval_metrics, **trained)
        with self.writers["eval"].as_default():
            for key in ("eval_loss", "eval_accuracy"):
                _scalar(key, metrics[key], step=metrics["steps"])
        self.writers["eval"].flush()
        if self.chief:
            with tf.io.gfile.GFile(metrics_path, "w") as f:
                f.write(json.dumps(metrics, indent=2, sort_keys=True))
        self._outputs().save_and_export(metrics)
        self._print(
            f"final: eval_accuracy={metrics['eval_accuracy']:.4f} eval_loss={metrics['eval_loss']:.4f} "
            f"on {metrics['eval_examples']} {self.eval_split} images after {metrics['steps']} steps, "
            f"{'n/a' if images_per_sec is None else f'{images_per_sec:.0f}'} train images/s, workdir {cfg.workdir}"
        )
        return metrics

    def _train(self, start) -> float | None:
        cfg = self.cfg
        train_step = self._make_train_step()
        iterator = Batches(self._train_dataset, start)  # rebuilt without a file that fails (--skip_bad_images)
        every = cfg.log_every or progress.log_cadence(self.total_steps)
        shown = progress.Progress(self.total_steps, every, start=start, items_per_step=cfg.global_batch_size,
                                  enabled=self.chief)
        self._print("compiling the training step (the first step takes a while on CPU) ...")
        timed_from, timed_steps, window_start, window_step = None, 0, time.perf_counter(), start
        for step in range(start + 1, self.total_steps + 1):
            loss, bad = (float(x) for x in self._checked_step(train_step, iterator, step))
            if not math.isfinite(loss) or bad:
                raise self.checkpoints.diverged(step, loss)
            self.checkpoints.record_loss(step, loss)
            now = time.perf_counter()
            if timed_from is None:
                timed_from = now  # the first step includes tracing; throughput counts the rest
                self._print(f"compiled the training step: the first step took {now - window_start:.1f} s")
            else:
                timed_steps += 1
            if step % cfg.checkpoint_every == 0 or step == self.total_steps:
                self.checkpoints.save(step)  # the state was checked finite by this step
            if shown.due(step):
                rate = cfg.global_batch_size * (step - window_step) / max(now - window_start, 1e-9)
                window_start, window_step = now, step
                lr = float(self.optimizer.learning_rate)
                with self.writers["train"].as_default():
                    _scalar("loss", loss, step=step)
                    _scalar("learning_rate", lr, step=step)
                    _scalar("images_per_sec", rate, step=step)
                shown.update(step, now=now, loss=loss, lr=lr)
            else:
                shown.update(step, now=now)
            if cfg.eval_every and step % cfg.eval_every == 0 and step != self.total_steps:
                metrics = self._checked_evaluate(step)
                with self.writers["eval"].as_default():
                    for key in ("eval_loss", "eval_accuracy"):
                        _scalar(key, metrics[key], step=step)
                self._print(f"step {step}: eval_accuracy={metrics['eval_accuracy']:.4f} "
                            f"eval_loss={metrics['eval_loss']:.4f}")
        for writer in self.writers.values():
            writer.flush()
        elapsed = time.perf_counter() - timed_from if timed_from is not None else 0.0
        return cfg.global_batch_size * timed_steps / elapsed if timed_steps and elapsed > 0 else None

    def _outputs(self) -> RunOutputs:
        """The run's outputs, of its model as trained and the files it skips by now."""
        return RunOutputs(self.cfg, self.chief, self.model, self.class_names, self.eval_split, self.skip_files,
                          self.workdir.worker_dir, log=self._print)

    def _print(self, message):
        if self.chief:
            print(message, flush=True)


_SCALAR_METADATA = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
)


def _scalar(name, value, step):
    """`tf.summary.scalar` without the tensorboard package (tensorflow-cpu does not ship it)."""
    tf.summary.write(name, tf.constant(value, tf.float32), step=step, metadata=_SCALAR_METADATA)
