"""The matrix products of a ViT forward pass and of a training step, shape by shape: what `flops.py` counts.

The "matmul floor" cases (`runner_matmul.py` for TensorFlow, `runner_torch_matmul.py` for PyTorch) time
these products alone, with the model's shapes and nothing else: no LayerNorm, softmax, GELU, casts or
transposes (task `floor`: `vit_matmuls`, one forward; task `train-floor`: `training_matmuls`, a forward
and its backward pass). No model with this decomposition runs faster on that framework's kernels (within
a run's spread), so the floor bounds what a goal stated against a peer can reach (benchmarks/README.md).

Example:
    >>> import flops
    >>> arch = dict(image_size=224, patch_size=16, hidden_size=768, num_layers=12, num_heads=12,
    ...             mlp_dim=3072, classes=1000)
    >>> products = vit_matmuls(arch, batch=2)
    >>> round(sum(p.gflop for p in products) / 2, 1) == round(flops.arch_forward_gflop(arch), 1)
    True
    >>> step = training_matmuls(arch, batch=2)
    >>> round(sum(p.gflop for p in step) / sum(p.gflop for p in products), 2)  # 3 forwards less the pixels' gradient
    2.99
"""

import dataclasses

PATCH_PROJECTION = "patch projection"
"""The first product: its left operand is the pixels, which a training step takes no gradient of."""


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
        MatMul(PATCH_PROJECTION, batch * patches, arch["patch_size"] ** 2 * 3, d),
        MatMul("q/k/v projections", batch * tokens, d, d, count=3 * layers),
        MatMul("attention logits q k^T", tokens, head_dim, tokens, batch=batch * heads, count=layers),
        MatMul("attention probs v", tokens, tokens, head_dim, batch=batch * heads, count=layers),
        MatMul("attention output projection", batch * tokens, d, d, count=layers),
        MatMul("MLP in", batch * tokens, d, arch["mlp_dim"], count=layers),
        MatMul("MLP out", batch * tokens, arch["mlp_dim"], d, count=layers),
        MatMul("head", batch, d, arch["classes"]),
    ]


def training_matmuls(arch, batch, class_token=True):
    """The products of one training step on `batch` images: each product of `vit_matmuls`, then its
    gradients as products of their own: (m, n) x (n, k) for the left operand (none for the patch projection,
    whose left operand is the pixels) and (k, m) x (m, n) for the right one, each with its forward's FLOPs.
    This is the least a step computes; a rematerializing model recomputes some forward products on top."""
    step = []
    for p in vit_matmuls(arch, batch, class_token):
        step.append(p)
        if p.what != PATCH_PROJECTION:
            step.append(dataclasses.replace(p, what=f"{p.what}: left gradient", k=p.n, n=p.k))
        step.append(dataclasses.replace(p, what=f"{p.what}: right gradient", m=p.k, k=p.m))
    return step


FLOOR_TASKS = {"floor": vit_matmuls, "train-floor": training_matmuls}
"""The products each floor task of the runners times, from (arch, batch)."""


def operand_shapes(product):
    """(left shape, right shape) of one product."""
    lead = (product.batch,) if product.batch else ()
    return lead + (product.m, product.k), lead + (product.k, product.n)


def operand_pairs(products, random):
    """(left, right) operands of every product of `products` (`vit_matmuls` or `training_matmuls`), made by
    `random(shape)`: one left operand per kind of product (an activation) and `count` distinct right ones
    (per-layer weights, or gradients), so that they stream from memory as in the model."""
    pairs = []
    for product in products:
        left, right = operand_shapes(product)
        a = random(left)
        pairs += [(a, random(right)) for _ in range(product.count)]
    return pairs
