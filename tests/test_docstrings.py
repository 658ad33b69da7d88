"""The runnable examples in the model code's docstrings run and print what they say."""

import doctest
import importlib

import pytest

MODULES = [
    "keras_vit.layers.patches",
    "keras_vit.layers.patch_encoder",
    "keras_vit.layers.transformer_block",
    "keras_vit.layers.attention",
    "keras_vit.layers.drop_path",
    "keras_vit.layers.pooling",
    "keras_vit.variants",
    "keras_vit.vit",
    "keras_vit.checkpoints.canonical",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no runnable example"
    assert result.failed == 0
