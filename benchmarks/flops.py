"""Analytic FLOP counts of a ViT forward pass (2 FLOPs per multiply-accumulate).

Counts the matrix products only (patch projection, q/k/v/out projections, the two attention
products, the MLP and the head); LayerNorm, softmax and GELU add well under 1%. For ViT-B/16 at
224 this gives 35.1 GFLOP per image, the figure of the paper's model family (17.6 GMACs).
A training step is counted as 3 forwards (forward + twice the work for the backward pass).

Example:
    >>> round(vit_forward_gflop(224, 16, 768, 12, 3072, 1000), 1)
    35.1
"""


def vit_forward_gflop(image_size, patch_size, hidden_size, num_layers, mlp_dim, classes, channels=3,
                      class_token=True):
    """GFLOP of one image through a ViT forward pass (token classifier unless `class_token=False`)."""
    n = (image_size // patch_size) ** 2
    t = n + int(class_token)
    d = hidden_size
    macs = n * patch_size * patch_size * channels * d  # patch projection
    per_block = t * d * 3 * d + 2 * t * t * d + t * d * d + 2 * t * d * mlp_dim
    macs += num_layers * per_block + d * classes
    return 2.0 * macs / 1e9


def arch_forward_gflop(arch):
    """`vit_forward_gflop` over an architecture dict (the keys of `cases.Arch`)."""
    return vit_forward_gflop(
        arch["image_size"], arch["patch_size"], arch["hidden_size"], arch["num_layers"], arch["mlp_dim"],
        arch["classes"],
    )


TRAIN_FORWARD_MULTIPLE = 3.0


def matmul_gflop(n):
    """GFLOP of one (n, n) x (n, n) matrix product."""
    return 2.0 * n**3 / 1e9
