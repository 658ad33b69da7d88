"""Attention rollout (Abnar & Zuidema, 2020), as used for the paper's Figure 6 and Appendix D.8.

Pure numpy: the functions take the per-layer attention probabilities that
`keras_vit.inspect.attention_probabilities` returns and know nothing about Keras.
"""

import numpy as np


def _stack_layers(attentions):
    """A sequence of L arrays (B, heads, T, T), or one (L, B, heads, T, T) array, as float64 (L, B, h, T, T)."""
    stacked = np.asarray([np.asarray(a, dtype=np.float64) for a in attentions])
    if stacked.ndim != 5 or stacked.shape[-1] != stacked.shape[-2]:
        raise ValueError(
            "`attentions` must be a sequence of per-layer attention probabilities, each of shape "
            f"(batch, heads, tokens, tokens). Received: shape={stacked.shape}"
        )
    return stacked


def attention_rollout(attentions):
    """Rolls attention out through the layers: how much each input token flows into each output token.

    For each layer the heads are averaged, the identity is added for the residual connection and the rows
    are renormalised to sum to 1 (A = (mean_heads(W) + I) / row sums); the layers are then multiplied,
    R = A_L ... A_2 A_1, so R[t, s] is the share of token s in output token t (paper Appendix D.8).

    Args:
        attentions: the attention probabilities of layers 1..L, a sequence of arrays (B, heads, T, T) or
            one array (L, B, heads, T, T).

    Returns:
        float64 array (B, T, T) whose rows sum to 1.

    Example:
        >>> import numpy as np
        >>> eye = np.broadcast_to(np.eye(5), (1, 2, 5, 5))
        >>> attention_rollout([eye, eye]).shape
        (1, 5, 5)
    """
    stacked = _stack_layers(attentions)
    tokens = stacked.shape[-1]
    rollout = np.broadcast_to(np.eye(tokens), stacked.shape[1:2] + (tokens, tokens)).copy()
    for layer in stacked:
        mixed = layer.mean(axis=1) + np.eye(tokens)
        mixed /= mixed.sum(axis=-1, keepdims=True)
        rollout = mixed @ rollout
    return rollout


def resize_bilinear(maps, size):
    """Bilinear resize of (B, h, w) maps to (B, H, W) with half-pixel centres (cell centres stay aligned).

    Output pixel i samples input coordinate (i + 0.5) * h / H - 0.5, clamped at the borders (the
    convention of `tf.image.resize` and OpenCV), so each patch's value lands at the centre of its pixels.

    Args:
        maps: array (B, h, w).
        size: (H, W).

    Returns:
        float64 array (B, H, W).

    Example:
        >>> resize_bilinear(np.ones((1, 2, 2)), (4, 4)).shape
        (1, 4, 4)
    """
    maps = np.asarray(maps, dtype=np.float64)
    if maps.ndim != 3:
        raise ValueError(f"`maps` must have shape (batch, height, width). Received: shape={maps.shape}")
    for axis, out in ((1, int(size[0])), (2, int(size[1]))):
        n = maps.shape[axis]
        position = np.clip((np.arange(out) + 0.5) * n / out - 0.5, 0, n - 1)
        low = np.floor(position).astype(int)
        high = np.minimum(low + 1, n - 1)
        shape = [1, 1, 1]
        shape[axis] = out
        weight = (position - low).reshape(shape)
        maps = np.take(maps, low, axis=axis) * (1 - weight) + np.take(maps, high, axis=axis) * weight
    return maps


def rollout_maps(rollout, grid_shape, num_prefix_tokens, image_shape=None):
    """Per-image attention maps over the patch grid from a rollout, scaled to a maximum of 1.

    With a [class] token (`num_prefix_tokens >= 1`) the map is the class token's row over the patch
    tokens; for GAP models (no class token) it is the mean over all output tokens, since the classifier
    reads their mean.

    Args:
        rollout: array (B, T, T) from `attention_rollout`.
        grid_shape: (rows, columns) of the patch grid; rows * columns = T - num_prefix_tokens.
        num_prefix_tokens: tokens before the patch tokens (1 for token models, 2 with DeiT's distillation
            token, 0 for GAP models).
        image_shape: optional (H, W); the maps are then bilinearly upsampled to the image.

    Returns:
        float64 array (B, rows, columns), or (B, H, W) with `image_shape`.

    Example:
        >>> import numpy as np
        >>> rollout_maps(np.broadcast_to(np.eye(5), (1, 5, 5)), (2, 2), 1).shape
        (1, 2, 2)
    """
    rollout = np.asarray(rollout, dtype=np.float64)
    rows, cols = grid_shape
    if rollout.ndim != 3 or rollout.shape[-1] != rows * cols + num_prefix_tokens:
        raise ValueError(
            f"`rollout` must have shape (batch, T, T) with T = {rows}*{cols} + {num_prefix_tokens}. "
            f"Received: shape={rollout.shape}"
        )
    if num_prefix_tokens:
        weights = rollout[:, 0, num_prefix_tokens:]
    else:
        weights = rollout.mean(axis=1)
    maps = weights.reshape(-1, rows, cols)
    maps = maps / np.maximum(maps.max(axis=(1, 2), keepdims=True), 1e-12)
    if image_shape is not None:
        maps = resize_bilinear(maps, image_shape)
    return maps
