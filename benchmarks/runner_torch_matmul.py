"""Peer floor: every matrix product of one ViT forward (`model_matmuls.vit_matmuls`) in eager PyTorch.

The PyTorch counterpart of `runner_matmul.py`'s "floor" and "train-floor" (a training step's products,
`model_matmuls.training_matmuls`) tasks: the same list of products (keras_vit's decomposition, not timm's
fused q/k/v `Linear` and SDPA attention), the model's shapes and dtype (float32, or bfloat16 tensors rather
than autocast), each per-layer weight distinct, under `torch.inference_mode()`, nothing but the products:
how fast PyTorch's CPU matmul kernels, the ones timm runs on, do the same work.

task "matmul": one (n, n) x (n, n) product, PyTorch's GEMM ceiling (`serving_paths.py`). spec["threads"]
(optional): `torch.set_num_threads`.
"""

import measure
import model_matmuls


def run(spec):
    import torch

    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    tasks = (*model_matmuls.FLOOR_TASKS, "matmul")
    if spec["task"] not in tasks:
        raise ValueError(f"runner_torch_matmul runs the tasks {tasks}. Received: task={spec['task']!r}")
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[spec["dtype"]]
    generator = torch.Generator().manual_seed(0)
    if spec["task"] == "matmul":
        a, b = (torch.randn((spec["n"], spec["n"]), generator=generator).to(dtype) for _ in range(2))

        def product():
            with torch.inference_mode():
                return torch.matmul(a, b)

        seconds = measure.time_calls(product, spec["warmup"], spec["iters"]["1"])
        return {"batches": [measure.batch_result(seconds, 1)], "extra": {"torch_threads": torch.get_num_threads()}}
    batches = []
    for batch in spec["batches"]:
        products_of = model_matmuls.FLOOR_TASKS[spec["task"]]
        operands = model_matmuls.operand_pairs(
            products_of(spec["arch"], batch), lambda shape: torch.randn(shape, generator=generator).to(dtype))

        def products():
            with torch.inference_mode():
                return [torch.matmul(a, b)[..., :1, :1] for a, b in operands]

        seconds = measure.time_calls(products, spec["warmup"], spec["iters"][str(batch)])
        batches.append(measure.batch_result(seconds, batch))
        del operands
    return {"batches": batches, "extra": {"torch_threads": torch.get_num_threads()}}
