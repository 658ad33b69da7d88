"""Builds the model of a training config: a ViT (variant or tiny model, overrides, weights, recipe head init)
or the paper's BiT ResNet baseline (`bit_r50x1`, or its miniature `bit_tiny`), trained from scratch.

Example:
    >>> from training.config import make_config
    >>> model = model_from_config(make_config("demo"), num_classes=10)
    >>> model.output_shape
    (None, 10)
    >>> model_from_config(make_config("demo", model="bit_tiny"), num_classes=10).count_params()
    128666
"""

from __future__ import annotations

import os

from keras_vit import variants
from training.recipes import APP_BIT_MODELS, BIT_MODELS, is_bit
from training.weights_source import SOURCE_KEY, recorded_source, source_change

TINY_BIT = APP_BIT_MODELS["bit_tiny"]
"""The miniature BiT ResNet v2 of `--model=bit_tiny`: that of `training.experiments` ("BiT-R11")."""

class ModelBuildError(ValueError):
    """The run's model cannot be built: weights that do not fit it, or arguments it refuses (exit status 2)."""


def check_model(cfg, recipe: dict | None = None) -> None:
    """Raises ValueError for a `model` the app cannot build, or a BiT `model` with a ViT-only setting.

    A ViT `model` is "tiny" or a `keras_vit.variants` name; a BiT one trains from scratch (or from a Keras
    weights file of the same architecture), so the ViT fields (`training.config.VIT_ONLY_FIELDS`) must keep their defaults
    and `weights` must not be a published (ViT) checkpoint.

    Args:
        cfg: a `training.config.Config`.
        recipe: the values of the recipe `cfg` came from (`training.config.RECIPES[cfg.recipe]`), to say when
            a refused value is the recipe's; None: not said.
    """
    import dataclasses

    if not is_bit(cfg.model):
        if cfg.model != "tiny":
            from keras_vit.variants import get_variant

            try:
                get_variant(cfg.model)
            except ValueError as error:
                raise ValueError(f"{error} Or 'tiny', or a BiT ResNet: {', '.join(BIT_MODELS)}.") from None
        if cfg.lora_rank is not None:
            from keras_vit import lora

            try:
                lora.check_arguments(cfg.lora_rank, cfg.lora_targets.split(","), cfg.model_kwargs()["hidden_size"])
            except ValueError as error:
                raise ValueError(f"{error} (--lora_rank={cfg.lora_rank} --lora_targets={cfg.lora_targets})") from None
        return
    defaults = {f.name: f.default for f in dataclasses.fields(cfg)}
    for name in (f.name for f in dataclasses.fields(cfg) if f.metadata.get("vit_only")):  # config.VIT_ONLY_FIELDS
        if getattr(cfg, name) == defaults[name]:
            continue
        value = getattr(cfg, name)
        source = (f" (set by --recipe={cfg.recipe}: choose another recipe)"
                  if (recipe or {}).get(name, defaults[name]) == value else "")
        raise ValueError(f"--{name}={value} applies to ViT models only{source}. Received: --model={cfg.model}")
    if cfg.weights is not None:
        from keras_vit.weights import is_name

        if is_name(cfg.weights):
            raise ValueError(
                f"--weights={cfg.weights} is a published ViT checkpoint; a BiT ResNet trains from scratch or from a "
                f"Keras .weights.h5 / .keras file of the same architecture. Received: --model={cfg.model}"
            )


def fetch_weights(cfg) -> str | None:
    """Downloads the published checkpoint that `cfg.weights` names into the Keras cache (once; `model_from_config` then
    reads it there) and returns its path; None for other weights. The app calls it before any dataset download, so
    that weights that cannot be fetched show on the first try, not after the data.

    Raises:
        ModelBuildError: a name that is not published for the model.
        keras_vit.WeightsDownloadError: the download failed (the message in the app's flag spelling).
    """
    from keras_vit import weights as weights_table

    if is_bit(cfg.model) or not weights_table.is_name(cfg.weights):
        return None
    from keras_vit.checkpoints import download, weights_files

    variant = variants.find_variant(cfg.model_kwargs())  # as keras_vit.ViT finds it
    try:
        return weights_files.resolve(cfg.weights, None if variant is None else variant.name).path
    except ValueError as error:
        raise ModelBuildError(f"cannot build --model={cfg.model} with --weights={cfg.weights}: {error}") from None
    except download.WeightsDownloadError as error:
        entry = error.entry
        raise download.WeightsDownloadError(
            f"Could not download --weights={cfg.weights} for --model={cfg.model} ({error.reason}) from "
            f"{entry.url}. Check the network (and a proxy, if any), or download that file elsewhere and place it at "
            f"{error.path} (it is then used without a download); or pass --weights=/path/to/file.npz (a checkpoint "
            f"on disk), or leave out --weights to train from scratch.",
            entry=entry, path=error.path, reason=error.reason,
        ) from None


def _model_of_record(cfg, num_classes):
    """The model a fine-tune's own checkpoints are of, rebuilt from the architecture its `config.json` records when
    its `--weights` source is gone or changed (None: the source is as it was, or there is nothing to resume)."""
    record = recorded_source(cfg.workdir, cfg.weights)
    if record is None:
        return None
    from training import checkpoint_files  # TensorFlow: imported when a model is built

    checkpoints = os.path.join(cfg.workdir, "checkpoints")
    if not checkpoint_files.on_disk(checkpoints):
        return None
    change = source_change(record)
    if change is None:
        return None
    import keras

    from keras_vit import model_config

    model = keras.saving.deserialize_keras_object(model_config.plain(record["model"]))
    if model.output_shape[-1] != num_classes:
        raise ValueError(f"this run's checkpoints are of {model.output_shape[-1]} classes, the data has "
                         f"{num_classes}")
    print(f"note: --weights={cfg.weights} {change}: not used; this run resumes from its own checkpoints in "
          f"{checkpoints}, with the architecture {os.path.join(cfg.workdir, 'config.json')} recorded "
          f"({SOURCE_KEY})", flush=True)
    return model


def model_from_config(cfg, num_classes: int):
    """The `keras.Model` for `cfg` (a `training.config.Config`), returning logits (no softmax).

    Raises:
        ModelBuildError: the one-line reason when the model cannot be built (e.g. `--weights` of another depth).

    A ViT (`keras_vit.ViT`): `cfg.weights` goes to `ViT(weights=...)` (a published name, a checkpoint file,
    or one's own `.keras`, `.weights.h5` or run folder: the loader resamples position embeddings to
    `cfg.image_size`, paper section 3.2, and gives other classes a new head). A BiT (the library's constructor,
    `keras_vit.BiT_R50x1` for `bit_r50x1`; a `keras_vit.BiT` of the app's `APP_BIT_MODELS` arguments, `TINY_BIT`
    for `bit_tiny`): from scratch, or `cfg.weights` as a Keras weights file.
    `cfg.zero_head` zero-initialises the head (fine-tuning, Appendix B.1.1; a BiT head starts at zero
    anyway); `cfg.head_bias_init` sets the head bias (-10 in the imagenet21k pre-training).

    `cfg.lora_rank` enables LoRA on `cfg.lora_targets` (`keras_vit.lora`) after the weights are loaded.

    `cfg.weights` naming a run another process is training is refused (`training.workdir_lock.check_not_training`).
    A fine-tune whose workdir records its source (`SOURCE_KEY`) and holds checkpoints, when that source is gone or
    changed since, is rebuilt from the recorded architecture (its checkpoints then restore every weight), said in
    one line.
    """
    from training import workdir_lock

    try:
        if cfg.weights is not None and os.path.realpath(str(cfg.weights)) != os.path.realpath(cfg.workdir):
            workdir_lock.check_not_training(cfg.weights)  # (its own workdir is held by this very run)
        model = _model_of_record(cfg, num_classes) or _build(cfg, num_classes)
        if cfg.lora_rank is not None:
            model.enable_lora(cfg.lora_rank, tuple(cfg.lora_targets.split(",")))
    except workdir_lock.WorkdirLocked as error:
        raise ModelBuildError(str(error)) from None
    except ValueError as error:
        raise ModelBuildError(f"cannot build --model={cfg.model} with --weights={cfg.weights}: {error}") from None
    return model


def _build(cfg, num_classes: int):
    import keras

    import keras_vit
    from keras_vit import model_parts

    if is_bit(cfg.model):
        check_model(cfg)
        shape = dict(input_shape=(cfg.image_size, cfg.image_size, 3), classes=num_classes,
                     classifier_activation=None, weights=cfg.weights)
        if cfg.model in APP_BIT_MODELS:
            model = keras_vit.BiT(**APP_BIT_MODELS[cfg.model], **shape, name=cfg.model)
        else:
            from keras_vit import applications

            name = variants.bit_name(cfg.model)
            model = applications.CONSTRUCTORS[name](**shape, name=name)
    else:
        name = cfg.model if cfg.model != "tiny" else "vit_tiny"
        model = keras_vit.ViT(image_size=cfg.image_size, classes=num_classes, weights=cfg.weights,
                              classifier_activation=None, name=name, **cfg.model_kwargs())
    head = model_parts.head(model)
    if cfg.zero_head:
        head.kernel.assign(keras.ops.zeros_like(head.kernel))
        head.bias.assign(keras.ops.zeros_like(head.bias))
    if cfg.head_bias_init:
        head.bias.assign(keras.ops.full_like(head.bias, cfg.head_bias_init))
    return model
