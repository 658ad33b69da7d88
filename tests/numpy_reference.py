"""An independent numpy forward pass of the ViT and of its hybrids, written from the paper and the official Flax
code (google-research/vision_transformer: vit_jax/models_vit.py, vit_jax/models_resnet.py).

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
    q = np.einsum("btd,dnh->btnh", x, p["query/kernel"]) + p.get("query/bias", 0.0)  # none: qkv_bias=False
    k = np.einsum("btd,dnh->btnh", x, p["key/kernel"]) + p.get("key/bias", 0.0)
    v = np.einsum("btd,dnh->btnh", x, p["value/kernel"]) + p.get("value/bias", 0.0)
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


# ---------------------------------------------------------------- the hybrids' ResNet stem (float64)

def same_padding(size, kernel, stride):
    """XLA/TensorFlow "SAME": output ceil(size / stride), the smaller half of the padding first."""
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return out, (total // 2, total - total // 2)


def conv_same(x, w, stride):
    """Convolution with HWIO kernel as an explicit sum over kernel taps (no library conv)."""
    k = w.shape[0]
    oh, ph = same_padding(x.shape[1], k, stride)
    ow, pw = same_padding(x.shape[2], k, stride)
    xp = np.pad(x, ((0, 0), ph, pw, (0, 0)))
    y = np.zeros((x.shape[0], oh, ow, w.shape[-1]))
    for i in range(k):
        for j in range(k):
            window = xp[:, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride, :]
            y += np.einsum("bhwc,co->bhwo", window, w[i, j])
    return y


def standardize(w, eps=1e-5):
    """models_resnet.weight_standardize: population std over (H, W, C_in), eps added to the std."""
    w = w - w.mean(axis=(0, 1, 2))
    return w / (w.std(axis=(0, 1, 2)) + eps)


def group_norm(x, scale, bias, groups, eps=1e-6):
    b, h, w, c = x.shape
    g = x.reshape(b, h, w, groups, c // groups)
    mean = g.mean(axis=(1, 2, 4), keepdims=True)
    var = ((g - mean) ** 2).mean(axis=(1, 2, 4), keepdims=True)
    return ((g - mean) / np.sqrt(var + eps)).reshape(b, h, w, c) * scale.reshape(-1) + bias.reshape(-1)


def max_pool_same(x, k=3, stride=2):
    oh, ph = same_padding(x.shape[1], k, stride)
    ow, pw = same_padding(x.shape[2], k, stride)
    xp = np.pad(x, ((0, 0), ph, pw, (0, 0)), constant_values=-np.inf)
    out = np.full((x.shape[0], oh, ow, x.shape[3]), -np.inf)
    for i in range(k):
        for j in range(k):
            out = np.maximum(out, xp[:, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride, :])
    return out


def relu(x):
    return np.maximum(x, 0.0)


def numpy_stem(params, x, block_units, groups):
    """The official hybrid root + stages, from a dict with the official keys."""
    def conv(name, y, stride=1):
        return conv_same(y, standardize(params[f"{name}/kernel"]), stride)

    def gn(name, y):
        return group_norm(y, params[f"{name}/scale"], params[f"{name}/bias"], groups)

    x = relu(gn("gn_root", conv("conv_root", x, 2)))
    x = max_pool_same(x)
    for s, count in enumerate(block_units, start=1):
        for u in range(1, count + 1):
            p = f"block{s}/unit{u}/"
            stride = 2 if (s > 1 and u == 1) else 1
            residual = x
            if p + "conv_proj/kernel" in params:
                residual = gn(p + "gn_proj", conv(p + "conv_proj", x, stride))
            y = relu(gn(p + "gn1", conv(p + "conv1", x)))
            y = relu(gn(p + "gn2", conv(p + "conv2", y, stride)))
            y = gn(p + "gn3", conv(p + "conv3", y))
            x = relu(residual + y)
    return x


def random_resnet_params(rng, block_units, width, in_channels=3, gn_shape_4d=False):
    """Random arrays with the official hybrid key layout and shapes, written from models_resnet.py."""
    def normal(*shape, scale=0.3):
        return rng.standard_normal(shape).astype(np.float32) * scale

    def norm(prefix, c):
        shape = (1, 1, 1, c) if gn_shape_4d else (c,)
        return {f"{prefix}/scale": 1 + normal(*shape), f"{prefix}/bias": normal(*shape)}

    params = {"conv_root/kernel": normal(7, 7, in_channels, width), **norm("gn_root", width)}
    c = width
    for s, count in enumerate(block_units, start=1):
        f = width * 2 ** (s - 1)
        for u in range(1, count + 1):
            p = f"block{s}/unit{u}/"
            params.update({p + "conv1/kernel": normal(1, 1, c, f), p + "conv2/kernel": normal(3, 3, f, f),
                           p + "conv3/kernel": normal(1, 1, f, 4 * f)})
            params.update({**norm(p + "gn1", f), **norm(p + "gn2", f), **norm(p + "gn3", 4 * f)})
            if c != 4 * f or (s > 1 and u == 1):
                params[p + "conv_proj/kernel"] = normal(1, 1, c, 4 * f)
                params.update(norm(p + "gn_proj", 4 * f))
            c = 4 * f
    return params


def stem_units(params):
    """Units per stage of the ResNet stem whose `block{s}/unit{u}/` keys `params` holds (() for the root alone)."""
    units = {}
    for key in params:
        parts = key.split("/")
        if parts[0].startswith("block") and len(parts) > 2 and parts[1].startswith("unit"):
            units.setdefault(int(parts[0][5:]), set()).add(int(parts[1][4:]))
    return tuple(len(units[s]) for s in sorted(units))


def hybrid_forward(params, images, groups=32, classifier="token", approximate_gelu=True, include_top=True):
    """The official hybrid (`VisionTransformer` with `resnet`): root (+ stages) -> `embedding` conv of the
    feature map, whatever its patch size -> Transformer; logits for float images (B, H, W, C)."""
    features = numpy_stem(params, images, stem_units(params), groups)
    return vit_forward(params, features, classifier, approximate_gelu, include_top=include_top)
