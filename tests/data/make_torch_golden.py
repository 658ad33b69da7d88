"""Writes tests/data/torch_golden/: tiny timm and Hugging Face ViT checkpoints saved by the real libraries,
with the logits those libraries compute (float32, CPU). Not run by the test suite, which only reads the files.

Run where torch, timm and transformers are installed (they are not test dependencies):

    python tests/data/make_torch_golden.py [vit] [deit]     # both by default; each part rewrites its own files

`vit`: the ViT files and expected.npz, made with torch 2.14.1, timm 1.0.31, transformers 5.24.0. `deit`: DeiT with
its distillation token (timm's `VisionTransformerDistilled`, transformers' `DeiTForImageClassificationWithTeacher`
and `DeiTForImageClassification`) and expected_deit.npz, made with torch 2.14.1, timm 1.0.31, transformers 5.25.0.
"""

import os
import sys

import numpy as np
import torch
from safetensors.torch import save_file
from timm.models.deit import VisionTransformerDistilled
from timm.models.vision_transformer import VisionTransformer
from transformers import (DeiTConfig, DeiTForImageClassification, DeiTForImageClassificationWithTeacher, ViTConfig,
                          ViTForImageClassification, ViTModel)

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_golden")
TINY = dict(image_size=32, patch_size=8, hidden_size=16, num_heads=2, num_layers=2, mlp_dim=32, classes=3)
TIMM_CASES = {
    "timm_token": dict(),
    "timm_gap": dict(class_token=False, global_pool="avg", fc_norm=False),
    "timm_layer_scale": dict(init_values=0.1),
    "timm_no_embed_class": dict(no_embed_class=True),
}
HF_CASES = {"hf_gelu": ("gelu", 1e-12), "hf_gelu_tanh": ("gelu_pytorch_tanh", 1e-6)}


def _perturb(model):
    """Moves every parameter off its (often zero or one) initial value so no mapping error can hide."""
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.1)
    return model.eval()


def _hf_config(config_class=ViTConfig, **kwargs):
    t = TINY
    return config_class(hidden_size=t["hidden_size"], num_hidden_layers=t["num_layers"], num_attention_heads=t["num_heads"],
                     intermediate_size=t["mlp_dim"], image_size=t["image_size"], patch_size=t["patch_size"], **kwargs)


def _timm(model_class, name, **kwargs):
    """A tiny timm model of `model_class`, perturbed, saved as `<name>.safetensors`."""
    t = TINY
    model = _perturb(model_class(
        img_size=t["image_size"], patch_size=t["patch_size"], embed_dim=t["hidden_size"], depth=t["num_layers"],
        num_heads=t["num_heads"], mlp_ratio=t["mlp_dim"] / t["hidden_size"], num_classes=t["classes"], **kwargs))
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, os.path.join(OUT, f"{name}.safetensors"))
    return model


def _start(seed):
    """Seeds torch; the test images as torch input (NCHW) and the expected arrays so far ({"images": NHWC})."""
    torch.manual_seed(seed)
    os.makedirs(OUT, exist_ok=True)
    images = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype(np.float32)
    return torch.from_numpy(images.transpose(0, 3, 1, 2).copy()), {"images": images}


def deit():
    """DeiT's distilled models: logits (the mean of the two heads in eval) and the normalised tokens."""
    x, expected = _start(1)
    t = TINY
    with torch.no_grad():
        model = _timm(VisionTransformerDistilled, "timm_deit_distilled")
        expected["timm_deit_distilled"] = model(x).numpy()
        expected["timm_deit_distilled_tokens"] = model.forward_features(x).numpy()
        config = dict(hidden_act="gelu", layer_norm_eps=1e-12, num_labels=t["classes"])
        model = _perturb(DeiTForImageClassificationWithTeacher(_hf_config(DeiTConfig, **config)))
        model.save_pretrained(os.path.join(OUT, "hf_deit_teacher"), safe_serialization=True)
        result = model(pixel_values=x)
        expected["hf_deit_teacher"] = result.logits.numpy()
        expected["hf_deit_teacher_cls"] = result.cls_logits.numpy()
        expected["hf_deit_teacher_dist"] = result.distillation_logits.numpy()
        model = _perturb(DeiTForImageClassification(_hf_config(DeiTConfig, **config)))
        model.save_pretrained(os.path.join(OUT, "hf_deit_single"), safe_serialization=True)
        expected["hf_deit_single"] = model(pixel_values=x).logits.numpy()
        expected["hf_deit_single_tokens"] = model.deit(pixel_values=x).last_hidden_state.numpy()
    np.savez(os.path.join(OUT, "expected_deit.npz"), **expected)


def main():
    x, expected = _start(0)
    t = TINY
    with torch.no_grad():
        for name, kwargs in TIMM_CASES.items():
            model = _timm(VisionTransformer, name, **kwargs)
            expected[name] = model(x).numpy()
        for name, (act, eps) in HF_CASES.items():
            model = _perturb(ViTForImageClassification(_hf_config(hidden_act=act, layer_norm_eps=eps, num_labels=t["classes"])))
            model.save_pretrained(os.path.join(OUT, name), safe_serialization=True)
            expected[name] = model(pixel_values=x).logits.numpy()
        model = _perturb(ViTModel(_hf_config()))
        model.save_pretrained(os.path.join(OUT, "hf_model"), safe_serialization=True)
        result = model(pixel_values=x)
        expected["hf_model_hidden"] = result.last_hidden_state.numpy()
        expected["hf_model_pooled"] = result.pooler_output.numpy()
    np.savez(os.path.join(OUT, "expected.npz"), **expected)


if __name__ == "__main__":
    parts = sys.argv[1:] or ["vit", "deit"]
    for part in parts:
        {"vit": main, "deit": deit}[part]()
