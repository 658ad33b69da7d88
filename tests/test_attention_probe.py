"""The attention-distance and entropy probes (`keras_vit.inspect`) against values worked out by hand: attention
of known locality built as matrices, and a real ViT whose attention is forced to be uniform."""

import math

import numpy as np
import pytest

import keras_vit
from keras_vit import inspect


def _grid_neighbours(rows, cols, king=False):
    """(rows*cols, rows*cols) attention: each patch attends evenly to its 4 (or, `king`, 8) grid neighbours."""
    n = rows * cols
    attention = np.zeros((n, n))
    for r in range(rows):
        for c in range(cols):
            for dr in (-1, 0, 1):
                for dc in (-1, 0, 1):
                    near = (dr or dc) and (king or not (dr and dc))
                    if near and 0 <= r + dr < rows and 0 <= c + dc < cols:
                        attention[r * cols + c, (r + dr) * cols + c + dc] = 1.0
    return attention / attention.sum(axis=1, keepdims=True)


def test_four_neighbour_attention_on_a_7x7_grid():
    # Every 4-neighbour is one patch (4 px) away: the mean distance is 4 px whatever the weights. Each query
    # spreads evenly over its k neighbours (corners k=2: 4 of them, edges k=3: 20, interior k=4: 25), so its
    # entropy is log k, against log 49 for uniform attention.
    attention = _grid_neighbours(7, 7)[None, None]
    assert inspect.mean_attention_distance(attention, (7, 7), 4)[0] == pytest.approx(4.0)
    expected_entropy = (4 * math.log(2) + 20 * math.log(3) + 25 * math.log(4)) / (49 * math.log(49))
    assert inspect.attention_entropy(attention)[0] == pytest.approx(expected_entropy)  # 0.3115...
    assert expected_entropy == pytest.approx(0.3115, abs=1e-4)


def test_eight_neighbour_attention_on_a_3x3_grid_with_a_class_token():
    # 1-px patches; corners see 2 neighbours at 1 and 1 at sqrt 2, edge centres 3 at 1 and 2 at sqrt 2, the
    # centre 4 at 1 and 4 at sqrt 2. Half of every query's weight goes to the [class] token, which the
    # probe drops and renormalises away; the [class] token's own row is ignored.
    s2 = math.sqrt(2)
    expected = (4 * (2 + s2) / 3 + 4 * (3 + 2 * s2) / 5 + (4 + 4 * s2) / 8) / 9  # 1.1580...
    patches = _grid_neighbours(3, 3, king=True)
    attention = np.zeros((10, 10))
    attention[0, 0] = 1.0
    attention[1:, 0] = 0.5
    attention[1:, 1:] = 0.5 * patches
    measured = inspect.mean_attention_distance(attention[None, None], (3, 3), 1, num_prefix_tokens=1)
    assert measured[0] == pytest.approx(expected) and expected == pytest.approx(1.1580, abs=1e-4)
    entropy = inspect.attention_entropy(attention[None, None], num_prefix_tokens=1)[0]
    assert entropy == pytest.approx((4 * math.log(3) + 4 * math.log(5) + math.log(8)) / (9 * math.log(9)))


def test_a_vit_with_zero_query_and_key_attends_uniformly():
    # Zero query and key projections: every logit is 0, the attention is uniform over the 10 tokens, and over
    # the 3x3 grid of 4-px patches once the [class] token is dropped. The ordered pairs of a 1-D grid of 3
    # are 3 at offset 0, 4 at 1, 2 at 2, so the 81 pairs of the 2-D grid have mean distance
    # 4 * (2*12*1 + 16*sqrt2 + 2*6*2 + 2*8*sqrt5 + 4*sqrt8) / 81 = 4 * (48 + 24 sqrt2 + 16 sqrt5) / 81.
    expected = 4 * (48 + 24 * math.sqrt(2) + 16 * math.sqrt(5)) / 81  # 5.8132...
    model = keras_vit.ViT(image_size=12, patch_size=4, hidden_size=8, num_layers=2, num_heads=2, mlp_dim=8,
                          classes=3)
    for block in [model.get_layer(f"encoder_block_{i}") for i in range(2)]:
        for projection in (block.attention.query, block.attention.key):
            for weight in projection.weights:
                weight.assign(np.zeros(weight.shape))
    images = np.random.default_rng(0).uniform(-1, 1, (2, 12, 12, 3)).astype("float32")
    probabilities = inspect.attention_probabilities(model, images)
    distance = inspect.mean_attention_distance(probabilities, (3, 3), 4, num_prefix_tokens=1)
    np.testing.assert_allclose(distance, np.full((2, 2), expected), rtol=1e-5)
    assert expected == pytest.approx(5.813, abs=1e-3)
    np.testing.assert_allclose(inspect.attention_entropy(probabilities, num_prefix_tokens=1), 1.0, rtol=1e-5)
    assert inspect.uniform_attention_distance((3, 3), 4) == pytest.approx(expected)


def test_self_attention_is_at_distance_zero_and_entropy_zero():
    attention = np.eye(49)[None, None]
    assert inspect.mean_attention_distance(attention, (7, 7), 4)[0] == 0.0
    assert inspect.attention_entropy(attention)[0] == 0.0


def test_a_bad_shape_is_refused():
    with pytest.raises(ValueError, match="Received: shape=\\(1, 1, 2, 2\\)"):
        inspect.attention_entropy(np.ones((1, 1, 2, 2)) / 2, num_prefix_tokens=1)
