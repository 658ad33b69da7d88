"""The matrix products of a ViT forward pass, shape by shape: what `flops.py` counts, as a list.

The "matmul floor" cases (`runner_matmul.py` for TensorFlow, `runner_torch_matmul.py` for PyTorch) time
these products alone, with the model's shapes and nothing else: no LayerNorm, softmax, GELU, casts or
transposes. No model with this decomposition runs faster on that framework's kernels (within a run's
spread), so the floor bounds what a goal stated against a peer can reach (benchmarks/README.md).

Example:
    >>> import flops
    >>> arch = dict(image_size=224, patch_size=16, hidden_size=768, num_layers=12, num_heads=12,
    ...             mlp_dim=3072, classes=1000)
    >>> products = vit_matmuls(arch, batch=2)
    >>> round(sum(p.gflop for p in products) / 2, 1) == round(flops.arch_forward_gflop(arch), 1)
    True
"""

import dataclasses


@dataclasses.dataclass(frozen=True)
class MatMul:
    """`count` products of (batch, m, k) x (batch, k, n) operands (`batch` 0: plain 2-D matrices)."""

    what: str
    m: int
    k: int
    n: int
    batch: int = 0
    count: int = 1

    @property
    def gflop(self):
        return 2.0 * max(self.batch, 1) * self.m * self.k * self.n * self.count / 1e9


def vit_matmuls(arch, batch, class_token=True):
    """The products of one ViT forward on `batch` images, tokens flattened to (batch * T, D) as keras_vit
    runs them; per-layer products appear once with `count = num_layers`."""
    patches = (arch["image_size"] // arch["patch_size"]) ** 2
    tokens = patches + int(class_token)
    d, heads, layers = arch["hidden_size"], arch["num_heads"], arch["num_layers"]
    head_dim = d // heads
    return [
        MatMul("patch projection", batch * patches, arch["patch_size"] ** 2 * 3, d),
        MatMul("q/k/v projections", batch * tokens, d, d, count=3 * layers),
        MatMul("attention logits q k^T", tokens, head_dim, tokens, batch=batch * heads, count=layers),
        MatMul("attention probs v", tokens, tokens, head_dim, batch=batch * heads, count=layers),
        MatMul("attention output projection", batch * tokens, d, d, count=layers),
        MatMul("MLP in", batch * tokens, d, arch["mlp_dim"], count=layers),
        MatMul("MLP out", batch * tokens, arch["mlp_dim"], d, count=layers),
        MatMul("head", batch, d, arch["classes"]),
    ]


def operand_shapes(product):
    """(left shape, right shape) of one product."""
    lead = (product.batch,) if product.batch else ()
    return lead + (product.m, product.k), lead + (product.k, product.n)


def operand_pairs(arch, batch, random):
    """(left, right) operands of every product of `vit_matmuls(arch, batch)`, made by `random(shape)`: one
    left operand per kind of product (an activation) and `count` distinct right ones (per-layer weights),
    so that weights stream from memory as in the model."""
    pairs = []
    for product in vit_matmuls(arch, batch):
        left, right = operand_shapes(product)
        a = random(left)
        pairs += [(a, random(right)) for _ in range(product.count)]
    return pairs
