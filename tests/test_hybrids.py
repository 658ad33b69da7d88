"""Every published hybrid (issue 27): R+ViT-Ti/16 (the ResNet root alone under 8x8 patches of its feature map),
R26+ViT-S/32 and B/32 (four stages of 2 units), R50+ViT-L/32 (the real ResNet-50's (3, 4, 6, 3) units) and the
paper's R50+ViT-B/16 (tests/test_resnet.py).

Per stem kind, tiny random weights written in the official `.npz` layout and in timm's `vision_transformer_hybrid`
safetensors layout load through `keras_vit.ViT(weights=path)` and match numpy forwards that share no code with
keras_vit (tests/numpy_reference.py, the official Flax code; tests/foreign_checkpoints.py, timm's Transformer);
the named constructors' parameter counts follow a formula written from the official code and agree with what
timm documents.
"""

import numpy as np
import pytest
import scipy.ndimage
from foreign_checkpoints import random_timm_tensors, rel_err, timm_forward
from numpy_reference import hybrid_forward, numpy_stem, random_official_params, random_resnet_params
from test_resnet import r50_vit_count

import keras_vit
from keras_vit import model_parts, variants, weights
from keras_vit.checkpoints.architecture import infer
from keras_vit.checkpoints.canonical import Checkpoint
from keras_vit.variants import VARIANTS

safetensors_numpy = pytest.importorskip("safetensors.numpy")

# Tiny stems of each published kind (width 8, GroupNorm groups 4), 64x64 images, the embedding's patch side on the
# stem's feature map: the root alone with 8x8 patches (R+Ti/16), three stages (R50+B/16's shape, stride 16),
# (2, 2, 2, 2) units (R26), (3, 4, 6, 3) (R50+L/32).
KINDS = {
    "root_p8": ((), 8),
    "three_stages": ((1, 1, 1), 1),
    "r26": ((2, 2, 2, 2), 1),
    "r50_s32": ((3, 4, 6, 3), 1),
}
WIDTH, GROUPS, IMAGE = 8, 4, 64
# The default tier runs one stem of each shape (root alone, three, four stages); 16 units take 3-5 s more each.
KIND_PARAMS = [kind if kind != "r50_s32" else pytest.param(kind, marks=pytest.mark.e2e) for kind in KINDS]


def stride_of(units):
    """Written from vit_jax/models_vit.py: conv_root stride 2, max pool stride 2, then 2 per stage after block1."""
    return 4 * 2 ** max(len(units) - 1, 0)


def channels_of(units, width=WIDTH):
    """The stem's output channels: 4 * width * 2**(stages - 1) after the bottleneck stages, the root's width alone."""
    return width * 2 ** (len(units) - 1) * 4 if units else width


def official_file(tmp_path, kind, seed=0):
    """(path, params): a tiny hybrid in the official layout (Transformer D=16, 1 block, 3 classes)."""
    units, p = KINDS[kind]
    rng = np.random.default_rng(seed)
    params = random_resnet_params(rng, units, WIDTH)
    params.update(random_official_params(rng, image_size=IMAGE // stride_of(units), patch_size=p,
                                         channels=channels_of(units), hidden=16, layers=1, heads=2, mlp=32, classes=3))
    path = tmp_path / f"{kind}.npz"
    np.savez(path, **params)
    return path, params


def timm_backbone(params, units):
    """The official stem arrays under timm's names, written from timm's `_load_weights` (vision_transformer.py):
    `patch_embed.backbone.[stem.]conv/norm` (no `stem.` for the root alone), `stages.{i}.blocks.{j}.conv{r}/norm{r}`,
    `downsample.conv/norm`; Conv2d weights (O, I, kh, kw), contiguous (safetensors' numpy writer ignores strides)."""
    def conv(kernel):
        return np.ascontiguousarray(kernel.transpose(3, 2, 0, 1))

    root = "patch_embed.backbone." + ("stem." if units else "")
    out = {root + "conv.weight": conv(params["conv_root/kernel"]),
           root + "norm.weight": params["gn_root/scale"], root + "norm.bias": params["gn_root/bias"]}
    for i, count in enumerate(units):
        for j in range(count):
            src, dst = f"block{i + 1}/unit{j + 1}/", f"patch_embed.backbone.stages.{i}.blocks.{j}."
            for official, timm in [(f"conv{r}", f"conv{r}") for r in (1, 2, 3)] + [("conv_proj", "downsample.conv")]:
                if src + official + "/kernel" in params:
                    out[dst + timm + ".weight"] = conv(params[src + official + "/kernel"])
            for official, timm in [(f"gn{r}", f"norm{r}") for r in (1, 2, 3)] + [("gn_proj", "downsample.norm")]:
                if src + official + "/scale" in params:
                    out[dst + timm + ".weight"] = params[src + official + "/scale"]
                    out[dst + timm + ".bias"] = params[src + official + "/bias"]
    return out


def _images(seed=1, size=IMAGE):
    return np.random.default_rng(seed).uniform(-1, 1, (2, size, size, 3)).astype("float32")


def _float64(params):
    return {k: np.asarray(v, "float64") for k, v in params.items()}


# ---------------------------------------------------------------- each stem kind against the numpy references

@pytest.mark.parametrize("kind", KIND_PARAMS)
def test_official_layout_hybrid_loads_and_matches_the_official_forward(tmp_path, kind):
    units, p = KINDS[kind]
    path, params = official_file(tmp_path, kind)
    model = keras_vit.ViT(hybrid=dict(block_units=units, width=WIDTH, groups=GROUPS), weights=str(path),
                          classifier_activation=None)
    assert model.input_shape == (None, IMAGE, IMAGE, 3) and model_parts.patches(model).patch_size == p
    assert model_parts.architecture(model)["patch_size"] == stride_of(units) * p  # pixels between tokens
    images = _images()
    expected = hybrid_forward(_float64(params), images.astype("float64"), groups=GROUPS)
    assert rel_err(model.predict(images, verbose=0), expected) < 1e-4


@pytest.mark.parametrize("kind", KIND_PARAMS)
def test_timm_layout_hybrid_loads_and_matches_timms_forward(tmp_path, kind):
    units, p = KINDS[kind]
    rng = np.random.default_rng(3)
    stem = random_resnet_params(rng, units, WIDTH)
    tensors = random_timm_tensors(rng, image_size=IMAGE // stride_of(units), patch_size=p, hidden=16, layers=1,
                                  mlp=32, classes=3, channels=channels_of(units))
    tensors.update(timm_backbone(stem, units))
    path = tmp_path / "model.safetensors"
    safetensors_numpy.save_file(tensors, str(path), metadata={"format": "pt"})
    model = keras_vit.ViT(hybrid=dict(block_units=units, width=WIDTH, groups=GROUPS), weights=str(path), num_heads=2,
                          classifier_activation=None)
    images = _images(seed=4)
    features = numpy_stem(_float64(stem), images.astype("float64"), units, GROUPS)
    assert rel_err(model.predict(images, verbose=0), timm_forward(tensors, features, heads=2)) < 1e-4


def test_another_resolution_resamples_the_position_embedding(tmp_path):
    """R+Ti/16-style file trained at 64 (2x2 tokens of 8x8 patches on the root's 16x16 map), run at 96x128:
    the grid becomes 3x4 and the network is the official forward with the scipy-resampled table."""
    path, params = official_file(tmp_path, "root_p8", seed=5)
    model = keras_vit.ViT(hybrid=dict(block_units=(), width=WIDTH, groups=GROUPS), weights=str(path),
                          image_size=(96, 128), classifier_activation=None)
    table = params["Transformer/posembed_input/pos_embedding"].astype("float64")
    grid = scipy.ndimage.zoom(table[0, 1:].reshape(2, 2, -1), (3 / 2, 4 / 2, 1), order=1).reshape(1, 12, -1)
    resampled = {**_float64(params),
                 "Transformer/posembed_input/pos_embedding": np.concatenate([table[:, :1], grid], axis=1)}
    assert model_parts.patch_encoder(model).position_embedding.shape == (1, 13, 16)
    images = np.random.default_rng(6).uniform(-1, 1, (1, 96, 128, 3)).astype("float32")
    expected = hybrid_forward(resampled, images.astype("float64"), groups=GROUPS)
    assert rel_err(model.predict(images, verbose=0), expected) < 1e-4


# ---------------------------------------------------------------- architecture inference of the published kinds

def _published_shapes(name, image=224):
    """A checkpoint with the array shapes of a published hybrid (zeros; only the shapes the inference reads)."""
    v = VARIANTS[name]
    units = variants.RESNET_STEMS[v.hybrid]["block_units"]
    p, d = v.patch_size // stride_of(units), v.hidden_size
    params = {"conv_root/kernel": np.zeros((7, 7, 3, 64)), "gn_root/scale": np.zeros(64), "gn_root/bias": np.zeros(64),
              "embedding/kernel": np.zeros((p, p, channels_of(units, 64), d)), "cls": np.zeros((1, 1, d)),
              "Transformer/posembed_input/pos_embedding": np.zeros((1, (image // v.patch_size) ** 2 + 1, d))}
    for s, count in enumerate(units, start=1):
        for u in range(1, count + 1):
            params[f"block{s}/unit{u}/conv1/kernel"] = np.zeros((1, 1, 1, 1))
    for i in range(v.num_layers):
        b = f"Transformer/encoderblock_{i}/"
        params[b + "MultiHeadDotProductAttention_1/query/kernel"] = np.zeros((d, v.num_heads, d // v.num_heads))
        params[b + "MlpBlock_3/Dense_0/kernel"] = np.zeros((d, v.mlp_dim))
    return Checkpoint(params, "official", f"{name}.npz", True, 1e-6)


@pytest.mark.parametrize("name", ["R_Ti16", "R26_S32", "R26_B32", "R50_L32", "R50_B16"])
def test_published_shapes_infer_the_named_variant(name):
    arch = infer(_published_shapes(name, image=384))
    assert arch.variant_name() == VARIANTS[name].model_name
    assert arch.image_size == (384, 384) and arch.model_arguments()["patch_size"] == VARIANTS[name].patch_size


def test_stems_by_name_follow_the_official_configs():
    # vit_jax/configs/models.py: resnet.num_layers of R+Ti/16 (), R26+S/32 and B/32 (2, 2, 2, 2), R50+B/16 (3, 4, 9),
    # R50+L/32 (3, 4, 6, 3); width_factor 1 (64 channels); patches.size (8, 8) for R+Ti/16, (1, 1) for the others.
    expected = {"R_Ti16": ((), 8, 192), "R26_S32": ((2, 2, 2, 2), 1, 384), "R26_B32": ((2, 2, 2, 2), 1, 768),
                "R50_L32": ((3, 4, 6, 3), 1, 1024), "R50_B16": ((3, 4, 9), 1, 768)}
    for name, (units, patches, hidden) in expected.items():
        v = VARIANTS[name]
        assert variants.RESNET_STEMS[v.hybrid] == dict(block_units=units, width=64)
        assert (v.patch_size, v.hidden_size) == (stride_of(units) * patches, hidden), name
        assert v.constructor_name == f"ViT_{name}" and v.title in getattr(keras_vit, v.constructor_name).__doc__
    assert VARIANTS["R_Ti16"].title == "R+ViT-Ti/16" and VARIANTS["R_Ti16"].patch_size == 32  # 4 * 8 pixels
    assert variants.get_variant("vit_r_ti16") is VARIANTS["R_Ti16"]


# ---------------------------------------------------------------- parameter counts

# Formula (tests/test_resnet.py, written from the official code) against timm's documented counts, 1000 classes:
# timm's model card for vit_large_r50_s32_224.augreg_in21k_ft_in1k says 329.0 M and for
# vit_base_r50_s16_384.orig_in21k_ft_in1k 99.0 M; timm's vit_small_r26_s32_224.augreg_in21k model.safetensors is
# 178 MB, 4 bytes a parameter of the 21843-class model (44,456,467 * 4 = 177.8 MB). No count documented by timm
# for vit_tiny_r_s16_p8_* was found.
COUNTS = {  # name: (formula arguments, count at 224 with 1000 classes)
    "R_Ti16": (dict(block_units=(), patch=8, d=192, mlp=768), 6_337_704),
    "R26_S32": (dict(block_units=(2, 2, 2, 2), d=384, mlp=1536), 36_431_912),
    "R26_B32": (dict(block_units=(2, 2, 2, 2)), 101_383_976),
    "R50_L32": (dict(block_units=(3, 4, 6, 3), d=1024, mlp=4096, layers=24), 328_994_856),
}


def test_formula_counts_agree_with_timms_documented_counts():
    for name, (arguments, count) in COUNTS.items():
        assert r50_vit_count(**arguments) == count, name
    assert round(COUNTS["R50_L32"][1] / 1e6, 1) == 329.0
    assert round(r50_vit_count(image=384) / 1e6, 1) == 99.0
    in21k = r50_vit_count(block_units=(2, 2, 2, 2), d=384, mlp=1536, classes=21843)
    assert in21k == 44_456_467 and round(in21k * 4 / 1e6) == 178


@pytest.mark.parametrize("name", [n if n in ("R_Ti16", "R26_S32") else pytest.param(n, marks=pytest.mark.e2e)
                                  for n in COUNTS])  # R26_B32 3 s, R50_L32 15 s to build on 2 cores
def test_named_constructor_builds_offline_with_its_golden_count(name):
    model = getattr(keras_vit, VARIANTS[name].constructor_name)(weights=None)
    assert model.count_params() == COUNTS[name][1] and model.name == VARIANTS[name].model_name
    assert model.input_shape == (None, 224, 224, 3) and model_parts.model_grid(model) == (7, 7)


# ---------------------------------------------------------------- weights table and refusals

def test_weights_table_rows_of_every_published_hybrid():
    rows = {(e.variant, e.name): (e.path, e.image_size, e.classes, e.imagenet_top1) for e in weights.PUBLISHED
            if VARIANTS[e.variant].hybrid and e.variant != "R50_B16"}
    run = {"R_Ti16": "R_Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0",
           "R26_S32": "R26_S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0",
           "R50_L32": "R50_L_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1"}
    ft = {"R_Ti16": ("0.03", 75.40), "R26_S32": ("0.01", 83.85), "R50_L32": ("0.01", 85.99)}  # vit_jax README
    for name, stem in run.items():
        assert rows[(name, "augreg_in21k")] == (f"augreg/{stem}.npz", 224, 21843, None)
        lr, top1 = ft[name]
        assert rows[(name, "augreg_in21k_ft_in1k")] == (
            f"augreg/{stem}--imagenet2012-steps_20k-lr_{lr}-res_384.npz", 384, 1000, top1)
        assert rows[(name, "augreg_in21k_ft_in1k_224")][1:] == (224, 1000, None)
        assert weights.get_entry(name, "imagenet") is weights.WEIGHTS[(name, "augreg_in21k_ft_in1k")]
    assert rows[("R26_B32", "imagenet21k")] == ("imagenet21k/R26+ViT-B_32.npz", 224, 21843, None)
    assert rows[("R50_L32", "imagenet21k")] == ("imagenet21k/R50+ViT-L_32.npz", 224, 21843, None)
    assert len(rows) == 11
    with pytest.raises(ValueError, match=r"R26_B32 has no ImageNet-1k fine-tuned weights.*'imagenet21k'"):
        weights.get_entry("R26_B32", "imagenet")


@pytest.mark.parametrize("kwargs, match", [
    (dict(hybrid="r26", patch_size=16), r"multiple of the stride of its ResNet stem \(32\).*patch_size=16, "
                                        r"hybrid='r26'\. Use patch_size=32"),
    (dict(hybrid="r", patch_size=6), r"multiple of the stride of its ResNet stem \(4\).*patch_size=6"),
    (dict(hybrid="r101"), r"Unknown hybrid stem. Received: hybrid='r101'. Known: r, r26, r50, r50_s32"),
])
def test_bad_hybrid_arguments_are_refused_clearly(kwargs, match):
    with pytest.raises(ValueError, match=match):
        keras_vit.ViT(**{**dict(image_size=64, patch_size=32, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32),
                         **kwargs})


def test_a_checkpoint_of_another_stem_or_backbone_is_refused_clearly(tmp_path):
    path, _ = official_file(tmp_path, "r26")
    with pytest.raises(ValueError, match=r"hybrid='r50_s32' \(checkpoint stem: \{'block_units': \(2, 2, 2, 2\)"):
        keras_vit.ViT(hybrid="r50_s32", weights=str(path))
    tensors = random_timm_tensors(np.random.default_rng(0), channels=8)
    tensors["patch_embed.backbone.conv1.0.weight"] = np.zeros((8, 3, 3, 3), "float32")  # timm's resnet26d stems
    safetensors_numpy.save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"CNN backbone that is not the official hybrids' ResNet.*conv1\.0\.weight"):
        keras_vit.ViT(weights=str(tmp_path / "model.safetensors"), num_heads=4)
