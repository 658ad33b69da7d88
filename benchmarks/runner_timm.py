"""Peer: timm's `VisionTransformer` in eager PyTorch (float32, or bfloat16 through CPU autocast).

Inference under `torch.inference_mode()`; training is the plain loop (forward, cross-entropy,
backward, AdamW step). timm uses `F.scaled_dot_product_attention` (its fused attention) by default.
spec["threads"] (optional, `serving_paths.py`): `torch.set_num_threads`; PyTorch's default without it.
"""

import contextlib

import measure


def _build(arch):
    import torch
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    return VisionTransformer(
        img_size=arch["image_size"],
        patch_size=arch["patch_size"],
        embed_dim=arch["hidden_size"],
        depth=arch["num_layers"],
        num_heads=arch["num_heads"],
        mlp_ratio=arch["mlp_dim"] / arch["hidden_size"],
        num_classes=arch["classes"],
    )


def run(spec):
    import torch

    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    memory = measure.memory_stages()
    memory("imported")
    arch = spec["arch"]
    model = _build(arch)
    memory("built")
    bf16 = spec["dtype"] == "bfloat16"

    def autocast():
        return torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()

    if spec["task"] == "infer":
        model.eval()
    elif spec["task"] == "train":
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05)
        loss_fn = torch.nn.CrossEntropyLoss()
    else:
        raise ValueError(f"timm runs the tasks 'infer' and 'train'. Received: task={spec['task']!r}")
    generator = torch.Generator().manual_seed(1)
    batches = []
    for batch in spec["batches"]:
        size = arch["image_size"]
        x = torch.rand((batch, 3, size, size), generator=generator) * 2 - 1
        if spec["task"] == "infer":

            def step():
                with torch.inference_mode(), autocast():
                    return model(x)

        else:
            y = torch.arange(batch) % arch["classes"]

            def step():
                optimizer.zero_grad(set_to_none=True)
                with autocast():
                    loss = loss_fn(model(x), y)
                loss.backward()
                optimizer.step()
                return loss.item()

        step()
        memory(f"first_step_{batch}")
        seconds = measure.time_calls(step, spec["warmup"], spec["iters"][str(batch)])
        memory(f"timed_{batch}")
        batches.append(measure.batch_result(seconds, batch))
    extra = {"torch_threads": torch.get_num_threads()}
    if spec["task"] == "train":
        def mb(tensors):
            return round(sum(t.numel() * t.element_size() for t in tensors) / 2**20, 1)

        extra.update(memory_mb=memory("end"), weights_mb=mb(model.parameters()),
                     optimizer_mb=mb(t for state in optimizer.state.values() for t in state.values()
                                     if torch.is_tensor(t)))
    return {"batches": batches, "extra": extra}
