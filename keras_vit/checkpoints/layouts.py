"""How each checkpoint format's files and tensor names look, as plain facts for the reader that tells them apart
(`keras_vit.checkpoints.detect`) and the readers themselves: the names that tell a timm file from a Hugging Face
one, and the files of a Hugging Face model folder. No reading of weights here.

Example:
    >>> looks_like_timm(["patch_embed.proj.weight", "cls_token"]), looks_like_huggingface(["cls_token"])
    (True, False)
"""

import json
import os

WEIGHTS_NAME = "model.safetensors"
INDEX_NAME = "model.safetensors.index.json"
CONFIG_NAME = "config.json"

HF_PATCH = "embeddings.patch_embeddings.projection.weight"
"""The patch embedding of a transformers ViT (with or without the `vit.` prefix): what tells its names."""


def looks_like_timm(names) -> bool:
    """True when tensor names follow timm's ViT naming (`patch_embed.proj.weight`, `blocks.{i}.`)."""
    names = set(names)
    return "patch_embed.proj.weight" in names or any(name.startswith("blocks.0.") for name in names)


def looks_like_huggingface(names) -> bool:
    """True when tensor names follow transformers' ViT naming, with or without the `vit.` (DeiT: `deit.`) prefix."""
    names = set(names)
    return HF_PATCH in names or f"vit.{HF_PATCH}" in names or f"deit.{HF_PATCH}" in names


def resolve_files(path) -> tuple[list[str], str]:
    """The weight file(s) and the config.json of a model folder or of a `model.safetensors` file.

    Raises:
        ValueError: a missing path, folder without weights, or no config.json beside the weights.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        folder = path
        if os.path.isfile(os.path.join(folder, WEIGHTS_NAME)):
            weights = [os.path.join(folder, WEIGHTS_NAME)]
        elif os.path.isfile(os.path.join(folder, INDEX_NAME)):
            weights = _shards(os.path.join(folder, INDEX_NAME))
        else:
            raise ValueError(
                f"The Hugging Face folder has no {WEIGHTS_NAME} (or {INDEX_NAME}); pickled pytorch_model.bin "
                f"files are not read for safety. Received: path={path!r}, containing {sorted(os.listdir(folder))[:10]}"
            )
    elif os.path.isfile(path):
        folder, weights = os.path.dirname(os.path.abspath(path)), [path]
    else:
        raise ValueError(f"The Hugging Face checkpoint does not exist. Received: path={path!r}")
    config = os.path.join(folder, CONFIG_NAME)
    if not os.path.isfile(config):
        raise ValueError(
            f"Hugging Face ViT weights need the model's {CONFIG_NAME} beside them (it holds the number of heads, "
            f"the LayerNorm epsilon and the GELU form); none found at {config!r}. Received: path={path!r}"
        )
    return weights, config


def _shards(index_path: str) -> list[str]:
    try:
        with open(index_path) as handle:
            weight_map = json.load(handle)["weight_map"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"Unreadable safetensors index {index_path!r}: {error}") from error
    folder = os.path.dirname(index_path)
    return [os.path.join(folder, name) for name in sorted(set(weight_map.values()))]
