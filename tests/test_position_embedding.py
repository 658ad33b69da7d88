"""Position-embedding resampling (paper section 3.2) against independent references: scipy.ndimage.zoom
(order=1, the official method) and TensorFlow's bicubic resize."""

import numpy as np
import pytest
import scipy.ndimage

from keras_vit.checkpoints.position_embedding import resample_position_embedding, resize_grid


def _posemb(rng, grid, prefix=1, width=6):
    return rng.standard_normal((1, prefix + grid[0] * grid[1], width)).astype("float32")


@pytest.mark.parametrize("old, new", [((4, 4), (6, 6)), ((4, 4), (6, 5)), ((7, 7), (3, 3)), ((5, 3), (9, 4)),
                                      ((4, 4), (1, 3)), ((14, 14), (24, 24))])
@pytest.mark.parametrize("prefix", [1, 0])
def test_bilinear_equals_scipy_zoom_order_1(old, new, prefix):
    rng = np.random.default_rng(0)
    posemb = _posemb(rng, old, prefix)
    out = resample_position_embedding(posemb, new, num_prefix_tokens=prefix, old_grid=old)
    grid = posemb[0, prefix:].reshape(old[0], old[1], -1).astype("float64")
    expected = scipy.ndimage.zoom(grid, (new[0] / old[0], new[1] / old[1], 1), order=1)
    assert expected.shape[:2] == new
    assert out.shape == (1, prefix + new[0] * new[1], posemb.shape[-1])
    assert out.dtype == posemb.dtype
    np.testing.assert_array_equal(out[:, :prefix], posemb[:, :prefix])  # class token kept as is
    np.testing.assert_allclose(out[0, prefix:], expected.reshape(-1, posemb.shape[-1]), rtol=1e-5, atol=1e-6)


def test_bilinear_is_corner_aligned_not_half_pixel():
    # A 1-D ramp 0..3 resampled to 7 points: corner alignment samples i * 3 / 6 exactly.
    grid = np.arange(4, dtype="float64")[:, None, None] * np.ones((1, 1, 2))
    out = resize_grid(grid, (7, 1))
    np.testing.assert_allclose(out[:, 0, 0], [0, 0.5, 1, 1.5, 2, 2.5, 3])


def test_same_grid_is_identity_for_both_methods():
    posemb = _posemb(np.random.default_rng(1), (5, 5))
    for method in ("bilinear", "bicubic"):
        np.testing.assert_allclose(resample_position_embedding(posemb, 5, method=method), posemb, atol=1e-6)


@pytest.mark.parametrize("new", [(12, 9), (4, 3), (24, 24)])
def test_bicubic_matches_tensorflow_resize(new):
    import tensorflow as tf

    grid = np.random.default_rng(2).standard_normal((7, 5, 3))
    expected = tf.image.resize(grid[None], new, method="bicubic", antialias=False).numpy()[0]
    # TensorFlow tabulates the cubic kernel in 1024 steps, hence the tolerance.
    np.testing.assert_allclose(resize_grid(grid, new, "bicubic"), expected, atol=3e-3)
    assert not np.allclose(resize_grid(grid, new, "bicubic"), resize_grid(grid, new, "bilinear"), atol=1e-2)


def test_two_dimensional_input_and_inferred_square_grid():
    posemb = _posemb(np.random.default_rng(3), (3, 3))[0]
    assert resample_position_embedding(posemb, (4, 2)).shape == (1 + 8, 6)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(posemb=np.zeros((1, 1 + 6, 4)), new_grid=4), r"not a perfect square.*num_patches=6"),
        (dict(posemb=np.zeros((1, 17, 4)), new_grid=4, method="nearest"), r"method='nearest'"),
        (dict(posemb=np.zeros((1, 17, 4)), new_grid=(4, 0)), r"new_grid=\(4, 0\)"),
        (dict(posemb=np.zeros((1, 17, 4)), new_grid=4, old_grid=(3, 5)), r"does not cover the 16"),
        (dict(posemb=np.zeros((2, 17, 4)), new_grid=4), r"shape=\(2, 17, 4\)"),
        (dict(posemb=np.zeros((1, 17, 4)), new_grid=4, num_prefix_tokens=17), r"num_prefix_tokens=17"),
    ],
)
def test_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        resample_position_embedding(**kwargs)
