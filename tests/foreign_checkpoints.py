"""Tiny timm and Hugging Face ViT checkpoints from random arrays, and numpy forwards in THEIR layouts.

The forwards follow timm's `VisionTransformer.forward` and transformers' `ViTModel` /
`ViTForImageClassification` directly on the PyTorch-layout arrays (`x @ W.T + b`, fused qkv split as
timm's `reshape(B, N, 3, heads, head_dim)`, Conv2d weight (D, C, P, P)), sharing no code with keras_vit or
with tests/numpy_reference.py, so a translation error cannot cancel out.
"""

import json
import math
import pathlib

import numpy as np
from scipy.special import erf


GOLDEN = pathlib.Path(__file__).parent / "data" / "torch_golden"
"""Tiny checkpoints saved by the real timm 1.0.31 and transformers 5.24 with their logits in expected.npz
(tests/data/make_torch_golden.py): 16 wide, 2 heads, 2 layers, patch 8, 32x32 images, 3 classes."""


def _normal(rng, *shape, scale=0.2):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def random_timm_tensors(rng, image_size=32, patch_size=8, hidden=32, layers=2, mlp=64, classes=5,
                        class_token=True, no_embed_class=False, layer_scale=False, qkv_bias=True,
                        pre_logits=None, channels=3):
    """A timm ViT state dict (names and shapes as timm's VisionTransformer) for a tiny configuration."""
    grid = (image_size // patch_size) ** 2
    tokens = grid + (1 if class_token and not no_embed_class else 0)
    t = {
        "patch_embed.proj.weight": _normal(rng, hidden, channels, patch_size, patch_size, scale=0.05),
        "patch_embed.proj.bias": _normal(rng, hidden),
        "pos_embed": _normal(rng, 1, tokens, hidden),
        "norm.weight": 1 + _normal(rng, hidden),
        "norm.bias": _normal(rng, hidden),
    }
    if class_token:
        t["cls_token"] = _normal(rng, 1, 1, hidden)
    if pre_logits:
        t["pre_logits.fc.weight"] = _normal(rng, pre_logits, hidden)
        t["pre_logits.fc.bias"] = _normal(rng, pre_logits)
    if classes:
        t["head.weight"] = _normal(rng, classes, pre_logits or hidden)
        t["head.bias"] = _normal(rng, classes)
    for i in range(layers):
        b = f"blocks.{i}."
        t.update({
            b + "norm1.weight": 1 + _normal(rng, hidden), b + "norm1.bias": _normal(rng, hidden),
            b + "attn.qkv.weight": _normal(rng, 3 * hidden, hidden),
            b + "attn.proj.weight": _normal(rng, hidden, hidden), b + "attn.proj.bias": _normal(rng, hidden),
            b + "norm2.weight": 1 + _normal(rng, hidden), b + "norm2.bias": _normal(rng, hidden),
            b + "mlp.fc1.weight": _normal(rng, mlp, hidden), b + "mlp.fc1.bias": _normal(rng, mlp),
            b + "mlp.fc2.weight": _normal(rng, hidden, mlp), b + "mlp.fc2.bias": _normal(rng, hidden),
        })
        if qkv_bias:
            t[b + "attn.qkv.bias"] = _normal(rng, 3 * hidden)
        if layer_scale:
            t[b + "ls1.gamma"] = 0.5 + _normal(rng, hidden)
            t[b + "ls2.gamma"] = 0.5 + _normal(rng, hidden)
    return t


def hf_config(hidden=32, layers=2, heads=4, mlp=64, image_size=32, patch_size=8, hidden_act="gelu",
              layer_norm_eps=1e-12, classes=5):
    """A transformers ViTConfig dict as saved in config.json."""
    return {
        "architectures": ["ViTForImageClassification"], "model_type": "vit", "hidden_size": hidden,
        "num_hidden_layers": layers, "num_attention_heads": heads, "intermediate_size": mlp,
        "hidden_act": hidden_act, "layer_norm_eps": layer_norm_eps, "image_size": image_size,
        "patch_size": patch_size, "num_channels": 3, "qkv_bias": True,
        "id2label": {str(i): f"LABEL_{i}" for i in range(classes)},
    }


def random_hf_tensors(rng, config, classes=5, prefix="vit.", pooler=False):
    """A transformers ViT state dict (ViTForImageClassification with prefix "vit.", ViTModel with "");
    without query/key/value biases when `config["qkv_bias"]` is False."""
    d, m, p = config["hidden_size"], config["intermediate_size"], config["patch_size"]
    tokens = (config["image_size"] // p) ** 2 + 1
    e = prefix + "embeddings."
    t = {
        e + "cls_token": _normal(rng, 1, 1, d),
        e + "position_embeddings": _normal(rng, 1, tokens, d),
        e + "patch_embeddings.projection.weight": _normal(rng, d, config["num_channels"], p, p, scale=0.05),
        e + "patch_embeddings.projection.bias": _normal(rng, d),
        prefix + "layernorm.weight": 1 + _normal(rng, d),
        prefix + "layernorm.bias": _normal(rng, d),
    }
    if pooler:
        t[prefix + "pooler.dense.weight"] = _normal(rng, d, d)
        t[prefix + "pooler.dense.bias"] = _normal(rng, d)
    if classes:
        t["classifier.weight"] = _normal(rng, classes, d)
        t["classifier.bias"] = _normal(rng, classes)
    for i in range(config["num_hidden_layers"]):
        h = f"{prefix}encoder.layer.{i}."
        for name, (rows, cols) in {
            "attention.attention.query": (d, d), "attention.attention.key": (d, d),
            "attention.attention.value": (d, d), "attention.output.dense": (d, d),
            "intermediate.dense": (m, d), "output.dense": (d, m),
        }.items():
            t[h + name + ".weight"] = _normal(rng, rows, cols)
            if config["qkv_bias"] or not name.startswith("attention.attention."):
                t[h + name + ".bias"] = _normal(rng, rows)
        for name in ("layernorm_before", "layernorm_after"):
            t[h + name + ".weight"] = 1 + _normal(rng, d)
            t[h + name + ".bias"] = _normal(rng, d)
    return t


def write_hf_folder(folder, config, tensors):
    from safetensors.numpy import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


# ---------------------------------------------------------------- numpy forwards in the source layouts

def _ln(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps) * w + b


def _gelu(x, tanh_form):
    if tanh_form:
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def _linear(x, t, name):
    return x @ t[name + ".weight"].T + t.get(name + ".bias", 0.0)  # bias=False layers have none


def _conv_patches(images, weight, bias):
    """nn.Conv2d(kernel=stride=P) on NHWC images with an (D, C, P, P) weight; tokens row-major."""
    p = weight.shape[-1]
    b, h, w, _ = images.shape
    out = [np.einsum("bhwc,dchw->bd", images[:, i:i + p, j:j + p], weight) + bias
           for i in range(0, h, p) for j in range(0, w, p)]
    return np.stack(out, axis=1)


def _attend(q, k, v, heads):
    """q, k, v (B, T, D) with features head-major; returns (B, T, D)."""
    b, n, d = q.shape
    split = lambda a: a.reshape(b, n, heads, d // heads).transpose(0, 2, 1, 3)  # noqa: E731
    q, k, v = split(q), split(k), split(v)
    logits = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d // heads)
    logits = logits - logits.max(-1, keepdims=True)
    probs = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    return (probs @ v).transpose(0, 2, 1, 3).reshape(b, n, d)


def timm_forward(t, images, heads, no_embed_class=False):
    """timm VisionTransformer logits (token pooling with a cls token, else mean), float64, eps 1e-6, erf GELU."""
    t = {k: v.astype(np.float64) for k, v in t.items()}
    x = _conv_patches(images.astype(np.float64), t["patch_embed.proj.weight"], t["patch_embed.proj.bias"])
    cls = "cls_token" in t
    if cls:
        c = np.broadcast_to(t["cls_token"], (x.shape[0], 1, x.shape[2]))
        x = np.concatenate([c, x + t["pos_embed"]], 1) if no_embed_class else np.concatenate([c, x], 1) + t["pos_embed"]
    else:
        x = x + t["pos_embed"]
    i = 0
    while f"blocks.{i}.norm1.weight" in t:
        b = f"blocks.{i}."
        y = _ln(x, t[b + "norm1.weight"], t[b + "norm1.bias"], 1e-6)
        qkv = y @ t[b + "attn.qkv.weight"].T + t.get(b + "attn.qkv.bias", 0.0)
        bsz, n, _ = qkv.shape
        qkv = qkv.reshape(bsz, n, 3, -1)  # timm: reshape(B, N, 3, heads, head_dim)
        y = _linear(_attend(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], heads), t, b + "attn.proj")
        x = x + y * t.get(b + "ls1.gamma", 1.0)
        y = _ln(x, t[b + "norm2.weight"], t[b + "norm2.bias"], 1e-6)
        y = _linear(_gelu(_linear(y, t, b + "mlp.fc1"), False), t, b + "mlp.fc2")
        x = x + y * t.get(b + "ls2.gamma", 1.0)
        i += 1
    x = _ln(x, t["norm.weight"], t["norm.bias"], 1e-6)
    x = x[:, 0] if cls else x.mean(1)
    if "pre_logits.fc.weight" in t:
        x = np.tanh(_linear(x, t, "pre_logits.fc"))
    return _linear(x, t, "head")


def hf_forward(t, config, images, prefix="vit."):
    """transformers ViT: (last_hidden_state, pooler_output or None, logits or None), float64."""
    t = {k: v.astype(np.float64) for k, v in t.items()}
    eps = config["layer_norm_eps"]
    tanh_gelu = config["hidden_act"] != "gelu"
    e = prefix + "embeddings."
    x = _conv_patches(images.astype(np.float64), t[e + "patch_embeddings.projection.weight"],
                      t[e + "patch_embeddings.projection.bias"])
    x = np.concatenate([np.broadcast_to(t[e + "cls_token"], (x.shape[0], 1, x.shape[2])), x], 1)
    x = x + t[e + "position_embeddings"]
    for i in range(config["num_hidden_layers"]):
        h = f"{prefix}encoder.layer.{i}."
        y = _ln(x, t[h + "layernorm_before.weight"], t[h + "layernorm_before.bias"], eps)
        a = h + "attention.attention."
        y = _attend(_linear(y, t, a + "query"), _linear(y, t, a + "key"), _linear(y, t, a + "value"),
                    config["num_attention_heads"])
        x = x + _linear(y, t, h + "attention.output.dense")
        y = _ln(x, t[h + "layernorm_after.weight"], t[h + "layernorm_after.bias"], eps)
        x = x + _linear(_gelu(_linear(y, t, h + "intermediate.dense"), tanh_gelu), t, h + "output.dense")
    x = _ln(x, t[prefix + "layernorm.weight"], t[prefix + "layernorm.bias"], eps)
    pooled = np.tanh(_linear(x[:, 0], t, prefix + "pooler.dense")) if prefix + "pooler.dense.weight" in t else None
    logits = _linear(x[:, 0], t, "classifier") if "classifier.weight" in t else None
    return x, pooled, logits


def rel_err(a, b):
    return float(np.max(np.abs(np.asarray(a, np.float64) - b)) / np.max(np.abs(b)))
