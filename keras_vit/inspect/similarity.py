"""Cosine similarity between position embeddings, a grid of grids (paper section 4.5, Figure 7 centre)."""

import numpy as np


def position_embedding_similarity(position_embedding, grid_shape, num_prefix_tokens=0):
    """Cosine similarity of each patch's position embedding with those of all other patches.

    The [class] token's embedding (the first `num_prefix_tokens` rows) has no grid position and is left
    out. `similarity[i, j]` is the (rows, columns) map of patch (i, j)'s similarity to every patch, so
    its own cell holds 1.

    Args:
        position_embedding: array (1, T, D) or (T, D), e.g. the `patch_encoder`'s `position_embedding`.
        grid_shape: (rows, columns) of the patch grid; rows * columns = T - num_prefix_tokens.
        num_prefix_tokens: leading non-patch rows (1 for token models, 0 for GAP models).

    Returns:
        float64 array (rows, columns, rows, columns) with values in [-1, 1].

    Example:
        >>> import numpy as np
        >>> position_embedding_similarity(np.eye(5)[None], (2, 2), 1).shape
        (2, 2, 2, 2)
    """
    embedding = np.asarray(position_embedding, dtype=np.float64)
    if embedding.ndim == 3 and embedding.shape[0] == 1:
        embedding = embedding[0]
    rows, cols = grid_shape
    if embedding.ndim != 2 or embedding.shape[0] != rows * cols + num_prefix_tokens:
        raise ValueError(
            f"`position_embedding` must have shape (1, T, D) or (T, D) with T = {rows}*{cols} + "
            f"{num_prefix_tokens}. Received: shape={np.shape(position_embedding)}"
        )
    patches = embedding[num_prefix_tokens:]
    unit = patches / np.maximum(np.linalg.norm(patches, axis=-1, keepdims=True), 1e-12)
    return (unit @ unit.T).reshape(rows, cols, rows, cols)
