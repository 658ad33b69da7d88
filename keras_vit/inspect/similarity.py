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
        num_prefix_tokens: leading non-patch rows (1 for token models, 2 with DeiT's distillation token, 0
            for GAP models).

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


def similarity_against_distance(similarity):
    """How much 2-D structure the position embeddings hold: similarity of near against far patches.

    Over the pairs of distinct patches of `position_embedding_similarity`'s output: the mean cosine similarity
    of the 4-neighbours (grid distance 1), of the far pairs (at least half the longer grid side apart), and
    the Pearson correlation between similarity and grid distance (about 0 for random embeddings, strongly
    negative when near patches get similar embeddings, as in the paper's Figure 7 centre).

    Args:
        similarity: array (rows, columns, rows, columns).

    Returns:
        dict of floats: `neighbours`, `far`, `distance_correlation`.

    Example:
        >>> import numpy as np
        >>> rows, cols = np.meshgrid(np.arange(3), np.arange(3), indexing="ij")
        >>> points = np.stack([rows.ravel(), cols.ravel()], -1).astype(float)
        >>> near = -np.linalg.norm(points[:, None] - points[None], axis=-1).reshape(3, 3, 3, 3)
        >>> {k: round(v, 2) for k, v in similarity_against_distance(near).items()}
        {'neighbours': -1.0, 'far': -2.22, 'distance_correlation': -1.0}
    """
    similarity = np.asarray(similarity, dtype=np.float64)
    if similarity.ndim != 4 or similarity.shape[:2] != similarity.shape[2:] or similarity[..., 0, 0].size < 3:
        raise ValueError("`similarity` must have shape (rows, columns, rows, columns) with 3 or more patches. "
                         f"Received: shape={similarity.shape}")
    rows, cols = similarity.shape[:2]
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    points = np.stack([r.ravel(), c.ravel()], axis=-1).astype(np.float64)
    distance = np.linalg.norm(points[:, None] - points[None], axis=-1)
    values = similarity.reshape(rows * cols, rows * cols)
    pairs = ~np.eye(rows * cols, dtype=bool)
    far = distance >= max(rows, cols) / 2
    return dict(neighbours=float(values[distance == 1].mean()), far=float(values[far & pairs].mean()),
                distance_correlation=float(np.corrcoef(distance[pairs], values[pairs])[0, 1]))
