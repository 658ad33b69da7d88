"""An independent numpy forward pass of the ViT, written from the paper and the official Flax code.

Parameters come as a flat dict in the official checkpoint layout (keys joined with '/', see
docs/REFERENCE.md), so checkpoint tests can run it straight from a file's arrays. It shares no code
with keras_vit.
"""

import math

import numpy as np


def layer_norm(x, scale, bias, eps=1e-6):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * scale + bias


def gelu(x, approximate):
    if approximate:
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def softmax(x):
    x = x - x.max(-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(-1, keepdims=True)


def attention(x, p):
    """Self-attention with (D, heads, head_dim) kernels; returns output and probabilities (B, n, T, T)."""
    q = np.einsum("btd,dnh->btnh", x, p["query/kernel"]) + p["query/bias"]
    k = np.einsum("btd,dnh->btnh", x, p["key/kernel"]) + p["key/bias"]
    v = np.einsum("btd,dnh->btnh", x, p["value/kernel"]) + p["value/bias"]
    logits = np.einsum("btnh,bsnh->bnts", q, k) / math.sqrt(q.shape[-1])
    probs = softmax(logits)
    context = np.einsum("bnts,bsnh->btnh", probs, v)
    return np.einsum("btnh,nhd->btd", context, p["out/kernel"]) + p["out/bias"], probs


def encoder_block(x, p, approximate_gelu=True, eps=1e-6):
    """One pre-LN block; `p` holds the block's keys without the `Transformer/encoderblock_i/` prefix."""
    mha = {k.split("/", 1)[1]: v for k, v in p.items() if k.startswith("MultiHeadDotProductAttention_1/")}
    y = layer_norm(x, p["LayerNorm_0/scale"], p["LayerNorm_0/bias"], eps)
    y, _ = attention(y, mha)
    x = x + y
    y = layer_norm(x, p["LayerNorm_2/scale"], p["LayerNorm_2/bias"], eps)
    y = y @ p["MlpBlock_3/Dense_0/kernel"] + p["MlpBlock_3/Dense_0/bias"]
    y = gelu(y, approximate_gelu)
    y = y @ p["MlpBlock_3/Dense_1/kernel"] + p["MlpBlock_3/Dense_1/bias"]
    return x + y


def vit_forward(params, images, classifier="token", approximate_gelu=True, eps=1e-6, include_top=True):
    """Logits (or normalised tokens with include_top=False) of the official ViT for float images (B,H,W,C)."""
    kernel = params["embedding/kernel"]  # (P, P, C, D), HWIO
    p = kernel.shape[0]
    b, h, w, c = images.shape
    gh, gw = h // p, w // p
    # A stride-P VALID convolution, written as an explicit loop over the patch grid.
    tokens = np.zeros((b, gh * gw, kernel.shape[-1]), dtype=np.float64)
    for i in range(gh):
        for j in range(gw):
            patch = images[:, i * p:(i + 1) * p, j * p:(j + 1) * p, :]
            tokens[:, i * gw + j] = np.einsum("bhwc,hwcd->bd", patch, kernel) + params["embedding/bias"]
    if classifier == "token":
        cls = np.broadcast_to(params["cls"], (b, 1, tokens.shape[-1]))
        tokens = np.concatenate([cls, tokens], axis=1)
    x = tokens + params["Transformer/posembed_input/pos_embedding"]
    i = 0
    while f"Transformer/encoderblock_{i}/LayerNorm_0/scale" in params:
        prefix = f"Transformer/encoderblock_{i}/"
        block = {k[len(prefix):]: v for k, v in params.items() if k.startswith(prefix)}
        x = encoder_block(x, block, approximate_gelu, eps)
        i += 1
    x = layer_norm(x, params["Transformer/encoder_norm/scale"], params["Transformer/encoder_norm/bias"], eps)
    if not include_top:
        return x
    x = x[:, 0] if classifier == "token" else x.mean(axis=1)
    if "pre_logits/kernel" in params:
        x = np.tanh(x @ params["pre_logits/kernel"] + params["pre_logits/bias"])
    return x @ params["head/kernel"] + params["head/bias"]


def random_official_params(rng, image_size=32, patch_size=8, hidden=32, layers=2, heads=4, mlp=64, classes=5,
                           classifier="token", representation_size=None, channels=3):
    """Random arrays with the official .npz key layout and shapes for a tiny configuration."""
    def normal(*shape, scale=0.2):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    hd = hidden // heads
    n = (image_size // patch_size) ** 2 + (1 if classifier == "token" else 0)
    params = {
        "embedding/kernel": normal(patch_size, patch_size, channels, hidden, scale=0.05),
        "embedding/bias": normal(hidden),
        "Transformer/posembed_input/pos_embedding": normal(1, n, hidden),
        "Transformer/encoder_norm/scale": 1 + normal(hidden),
        "Transformer/encoder_norm/bias": normal(hidden),
        "head/kernel": normal(representation_size or hidden, classes),
        "head/bias": normal(classes),
    }
    if classifier == "token":
        params["cls"] = normal(1, 1, hidden)
    if representation_size:
        params["pre_logits/kernel"] = normal(hidden, representation_size)
        params["pre_logits/bias"] = normal(representation_size)
    for i in range(layers):
        b = f"Transformer/encoderblock_{i}/"
        params.update({
            b + "LayerNorm_0/scale": 1 + normal(hidden), b + "LayerNorm_0/bias": normal(hidden),
            b + "LayerNorm_2/scale": 1 + normal(hidden), b + "LayerNorm_2/bias": normal(hidden),
            b + "MlpBlock_3/Dense_0/kernel": normal(hidden, mlp), b + "MlpBlock_3/Dense_0/bias": normal(mlp),
            b + "MlpBlock_3/Dense_1/kernel": normal(mlp, hidden), b + "MlpBlock_3/Dense_1/bias": normal(hidden),
            b + "MultiHeadDotProductAttention_1/out/kernel": normal(heads, hd, hidden),
            b + "MultiHeadDotProductAttention_1/out/bias": normal(hidden),
        })
        for name in ("query", "key", "value"):
            params[b + f"MultiHeadDotProductAttention_1/{name}/kernel"] = normal(hidden, heads, hd)
            params[b + f"MultiHeadDotProductAttention_1/{name}/bias"] = normal(heads, hd)
    return params
