"""The benchmark cases as data: what each child process measures.

A case is one model (or matmul) in one framework, task and dtype; a child process runs it for each
of its batch sizes, smallest first, so its batch-16 peak memory is the process's peak.
Architectures are paper Table 1 sizes (tests check them against `keras_vit.variants`).
"""

import dataclasses

# Same keys as keras_vit.ViT's architecture arguments; `classes` sizes the head.
ARCHS = {
    "B16": dict(image_size=224, patch_size=16, hidden_size=768, num_layers=12, num_heads=12, mlp_dim=3072, classes=1000),
    "S16": dict(image_size=224, patch_size=16, hidden_size=384, num_layers=12, num_heads=6, mlp_dim=1536, classes=1000),
    # --quick: the tests' tiny configuration, seconds per case.
    "tiny": dict(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, classes=10),
}

MATMUL_N = {"full": 4096, "quick": 256}

# Which runner runs in which Python: keras_vit and the matmul in this one, peers in `--peers-python`.
PEER_RUNNERS = ("timm", "keras_hub", "torch_matmul")


@dataclasses.dataclass(frozen=True)
class Case:
    """One benchmark case.

    Attributes:
        runner: `keras_vit`, `keras_hub`, `timm`, `matmul` (TensorFlow) or `torch_matmul` (the module
            `runner_<runner>.py`).
        task: `infer`, `train`, `serve` (keras_vit's SavedModel signature), `matmul` (the ceiling),
            `floor` (the model's matrix products alone, `model_matmuls.py`) or `train-floor` (a training
            step's products alone).
        dtype: `float32` or `bfloat16` (mixed_bfloat16 for Keras, CPU autocast for timm).
        arch: a key of `ARCHS` ("" for the matmul).
        batches: batch sizes measured in this process, smallest first.
        jit: compile with XLA (TensorFlow runners only).
        label: the mode shown in the table, e.g. `XLA` or `eager`.
        policy: a Keras dtype policy overriding the dtype's default (`mixed_bfloat16` for bfloat16).
        rematerialize: keras_vit training recomputes the MLP hidden layer and attention probabilities in the
            backward pass (`keras_vit.ViT`'s default); False stores them (the `-stored-alt` row).
        backend: the Keras backend of a keras_vit case; `torch` runs in `--keras-torch-python`.
    """

    runner: str
    task: str
    dtype: str
    arch: str
    batches: tuple
    jit: bool = False
    label: str = ""
    policy: str = ""
    rematerialize: bool = True
    backend: str = "tensorflow"

    @property
    def name(self):
        parts = [self.runner, self.task, self.arch, self.dtype, self.label]
        return "/".join(p for p in parts if p)

    @property
    def is_peer(self):
        return self.runner in PEER_RUNNERS


def _mode(jit):
    return "XLA" if jit else "graph"


# keras_vit's own choices (benchmarks/README.md has the measurements behind them): inference runs as a
# plain `tf.function` (oneDNN graph: fused MatMul+bias+GELU, AMX bf16 matmuls) in both dtypes; XLA's CPU
# dot upcasts bf16 to float32 and gained nothing in float32. float32 training compiles with XLA (5% less
# CPU); mixed_bfloat16 training runs as a graph (XLA's CPU dot is slow in bf16, as for inference).
KERAS_VIT_JIT = {"float32": False, "bfloat16": False}
KERAS_VIT_TRAIN_JIT = {"float32": True, "bfloat16": False}


def build_cases(quick=False, peers=(), serving=True, alt_modes=False, keras_torch=False):
    """Every case of a run, in the order each repeat runs them.

    Args:
        quick: tiny sizes (the `tiny` arch, batches 1 and 4, a 256 matmul) for validation.
        peers: the peer runners available (`"timm"`, `"keras_hub"`, `"torch_matmul"`: PyTorch is there).
        serving: include the SavedModel serving cases (float32 and bfloat16 exports).
        alt_modes: also run keras_vit inference and training in the mode it does not choose (graph vs
            XLA), and the matmul with XLA, to check the choices above.
        keras_torch: also run keras_vit's training on Keras' torch backend (`torch`: the default
            rematerialization; `torch-stored`: storing activations), float32 and mixed_bfloat16.
    """
    infer_arch, train_arch = ("tiny", "tiny") if quick else ("B16", "S16")
    big = 4 if quick else 16
    infer_batches, train_batches = (1, big), (big,)
    cases = []
    for dtype in ("float32", "bfloat16"):
        # XLA's matmul was never the faster one here (slower in float32, 4x slower in bf16).
        for jit in (False, True) if alt_modes else (False,):
            cases.append(Case("matmul", "matmul", dtype, "", (1,), jit=jit, label=_mode(jit)))
    for dtype in ("float32", "bfloat16"):
        cases.append(Case("matmul", "floor", dtype, infer_arch, infer_batches, label="graph"))
    for dtype in ("float32", "bfloat16"):
        cases.append(Case("matmul", "train-floor", dtype, train_arch, train_batches, label="graph"))
    def chosen_and_alt(task, dtype, arch, batches, jit):  # keras_vit's mode, and with --alt-modes the other
        cases.append(Case("keras_vit", task, dtype, arch, batches, jit=jit, label=_mode(jit)))
        if alt_modes:
            cases.append(Case("keras_vit", task, dtype, arch, batches, jit=not jit, label=_mode(not jit) + "-alt"))

    for dtype in ("float32", "bfloat16"):
        chosen_and_alt("infer", dtype, infer_arch, infer_batches, KERAS_VIT_JIT[dtype])
    # Inference-only option: weights stored in bf16 (policy "bfloat16"), no per-call weight casts.
    cases.append(Case("keras_vit", "infer", "bfloat16", infer_arch, infer_batches, jit=KERAS_VIT_JIT["bfloat16"],
                      label=_mode(KERAS_VIT_JIT["bfloat16"]) + "-bf16weights", policy="bfloat16"))
    for dtype in ("float32", "bfloat16"):
        chosen_and_alt("train", dtype, train_arch, train_batches, KERAS_VIT_TRAIN_JIT[dtype])
    # What rematerialization (the default) costs in speed and saves in memory: the same step storing everything.
    jit = KERAS_VIT_TRAIN_JIT["float32"]
    cases.append(Case("keras_vit", "train", "float32", train_arch, train_batches, jit=jit,
                      label=_mode(jit) + "-stored-alt", rematerialize=False))
    if keras_torch:  # the same model and step on PyTorch's kernels, through Keras
        for dtype in ("float32", "bfloat16"):
            for remat in (True, False):
                cases.append(Case("keras_vit", "train", dtype, train_arch, train_batches, backend="torch",
                                  label="torch" if remat else "torch-stored", rematerialize=remat))
    if serving:  # `export_saved_model(precision=dtype)`; times serving_default (bytes in) and predict_images
        for dtype in ("float32", "bfloat16"):
            jit = KERAS_VIT_JIT[dtype]
            cases.append(Case("keras_vit", "serve", dtype, infer_arch, infer_batches, jit=jit, label="SavedModel"))
    if "timm" in peers:
        for dtype in ("float32", "bfloat16"):
            cases.append(Case("timm", "infer", dtype, infer_arch, infer_batches, label="eager"))
        for dtype in ("float32", "bfloat16"):
            cases.append(Case("timm", "train", dtype, train_arch, train_batches, label="eager"))
    if "torch_matmul" in peers:  # timm's floors: PyTorch's matmul kernels
        for dtype in ("float32", "bfloat16"):
            cases.append(Case("torch_matmul", "floor", dtype, infer_arch, infer_batches, label="eager"))
        for dtype in ("float32", "bfloat16"):
            cases.append(Case("torch_matmul", "train-floor", dtype, train_arch, train_batches, label="eager"))
    if "keras_hub" in peers:
        cases.append(Case("keras_hub", "infer", "float32", infer_arch, infer_batches, jit=True, label="XLA"))
        cases.append(Case("keras_hub", "infer", "bfloat16", infer_arch, infer_batches, jit=False, label="graph"))
        cases.append(Case("keras_hub", "train", "float32", train_arch, train_batches, jit=True, label="XLA"))
    return cases


def iterations(case, batch, quick):
    """(warmup, timed) calls for one batch size of a case: enough to settle, few enough for 12 minutes."""
    if quick:
        return 1, 2
    if case.task == "matmul":
        return 2, 8
    if case.task in ("train", "train-floor"):
        return 2, 4
    return (2, 8) if batch == 1 else (1, 3)
