"""keras_vit's own architecture options (`keras_vit.variants.OWN_OPTIONS`) pass through checkpoints without code of
their own: `checkpoints.architecture` reads them from a keras_vit file's arguments (every other checkpoint has the
defaults), and `checkpoints.keras_names` keys their weights by Keras path. A made-up option proves the first."""

import numpy as np
import pytest
from numpy_reference import random_official_params

import keras_vit
from keras_vit import variants
from keras_vit.checkpoints import architecture, keras_names
from keras_vit.checkpoints.canonical import Checkpoint

TINY = dict(image_size=16, patch_size=4, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32, classes=3)


def _official_params(prefix_tokens=1, grid=4, width=16):
    """The few arrays `architecture.infer` reads, in the official layout (a 4x4 grid, a [class] token)."""
    block = "Transformer/encoderblock_0/"
    return {"embedding/kernel": np.zeros((4, 4, 3, width)), "cls": np.zeros((1, 1, width)),
            "Transformer/posembed_input/pos_embedding": np.zeros((1, prefix_tokens + grid * grid, width)),
            block + "MultiHeadDotProductAttention_1/query/kernel": np.zeros((width, 2, width // 2)),
            block + "MlpBlock_3/Dense_0/kernel": np.zeros((width, 32))}


def test_a_new_option_is_read_from_the_file_that_carries_it_and_defaults_elsewhere(monkeypatch):
    monkeypatch.setitem(variants.OWN_OPTIONS, "made_up_option", "off")  # what declaring an option does, alone
    published = architecture.infer(Checkpoint(_official_params(), "official", "x.npz", True, 1e-6))
    assert published.options["made_up_option"] == "off" and published.model_arguments()["made_up_option"] == "off"
    carried = dict(variants.OWN_OPTIONS, made_up_option="on", patch_size=4, input_shape=(16, 16, 3), hybrid=None,
                   gelu_approximate=True, layer_norm_epsilon=1e-6)
    own_file = Checkpoint(_official_params(), "keras_vit", "own.keras", True, 1e-6, arguments=carried)
    own = architecture.infer(own_file)
    assert own.options["made_up_option"] == "on"
    assert "made_up_option='on'" in own.describe() and "made_up_option" not in published.describe()
    resolved = architecture.resolve_arguments({"made_up_option": None}, own_file)
    assert resolved["made_up_option"] == "on"  # left at None: the file's
    with pytest.raises(ValueError, match=r"made_up_option='on' \(checkpoint: 'off'\).*Received: weights='x.npz'"):
        architecture.resolve_arguments({"made_up_option": "on"},
                                       Checkpoint(_official_params(), "official", "x.npz", True, 1e-6))


def test_weights_of_own_options_are_keyed_by_their_keras_path_and_a_clash_is_refused():
    model = keras_vit.ViT(**TINY, tokenizer="conv", locality_attention=True)
    targets = keras_names.targets(model)
    assert targets["conv_stem/conv_0/kernel"] is model.get_layer("conv_stem").convs[0].kernel
    assert "encoder_block_0/attention/temperature" in targets
    assert len({id(v) for v in targets.values()}) == len(targets) == len(model.weights)  # each weight once
    plain = keras_names.targets(keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=2,
                                              num_heads=4, mlp_dim=64, classes=5))
    assert sorted(plain) == sorted(random_official_params(np.random.default_rng(0)))  # the official layout, no more
    official = {"conv_stem/conv_0/kernel": model.get_layer("head").kernel}  # a made-up clash
    with pytest.raises(ValueError, match=r"paths that are official keys: \['conv_stem/conv_0/kernel'\]"):
        keras_names.own_option_targets(model, official)


def test_a_keras_vit_file_says_its_patch_size_and_channels_where_its_tokenizer_reshapes_the_kernel():
    model = keras_vit.ViT(**{**TINY, "image_size": None}, input_shape=(16, 16, 1), tokenizer="conv")
    arch = architecture.infer(keras_names.to_checkpoint(model, "conv.keras"))  # its embedding kernel is (1, 1, 8, 16)
    assert (arch.stride, arch.channels, arch.grid, arch.options["tokenizer"]) == (4, 1, (4, 4), "conv")
