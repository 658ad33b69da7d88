"""Frozen SavedModels (`freeze_weights`, `--freeze_weights`): the weights are constants of the served graph, the
outputs those of the same export with variables, and weights too large for a graph stay variables or are refused.

One tiny classifier exported in bf16, frozen and not (the bf16 export is the one frozen weights speed up).
"""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from export_fixtures import SIZE, random_image, tiny_vit
from keras_vit.export import export_saved_model, frozen
from keras_vit.export.__main__ import main


def _graph_ops(version_dir) -> dict:
    """{op type: count} over every function of a SavedModel's graph."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    with open(os.path.join(version_dir, "saved_model.pb"), "rb") as file:
        saved.ParseFromString(file.read())
    counts = {}
    for function in saved.meta_graphs[0].graph_def.library.function:
        for node in function.node_def:
            counts[node.op] = counts.get(node.op, 0) + 1
    return counts


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    keras.utils.set_random_seed(0)
    model = tiny_vit(classifier_activation=None)
    base = tmp_path_factory.mktemp("frozen")
    paths = {freeze: export_saved_model(model, base / str(freeze), precision="bfloat16", freeze_weights=freeze)
             for freeze in ("auto", False)}
    return model, paths


@pytest.mark.e2e
def test_frozen_bf16_export_computes_what_the_variables_export_does(exports):
    model, paths = exports
    frozen_ops, variable_ops = _graph_ops(paths["auto"]), _graph_ops(paths[False])
    assert frozen_ops.get("VarHandleOp", 0) + frozen_ops.get("ReadVariableOp", 0) == 0, frozen_ops
    assert variable_ops.get("ReadVariableOp", 0) > 0
    pixels = np.stack([random_image((SIZE, SIZE, 3), seed) for seed in range(6)]).astype("float32")
    outputs = {freeze: tf.saved_model.load(path).signatures["predict_images"](images=tf.constant(pixels))["logits"]
               for freeze, path in paths.items()}
    # The same bf16 ops on the same bf16 weights: equal up to oneDNN's blocking of the matmuls.
    np.testing.assert_allclose(outputs["auto"], outputs[False], atol=2e-2)
    assert (np.argmax(outputs["auto"], -1) == np.argmax(outputs[False], -1)).all()


@pytest.mark.e2e  # the default tier's time budget (10 minutes on 2 cores)
def test_weights_are_frozen_up_to_the_limit_then_stay_variables_or_are_refused(tmp_path, monkeypatch):
    model = tiny_vit()
    assert _graph_ops(export_saved_model(model, tmp_path / "default")).get("ReadVariableOp", 0) == 0
    monkeypatch.setattr(frozen, "FREEZE_LIMIT_BYTES", frozen.weight_bytes(model) - 1)
    path = export_saved_model(model, tmp_path / "auto", freeze_weights="auto")
    assert _graph_ops(path).get("ReadVariableOp", 0) > 0
    with pytest.raises(ValueError, match=r"do not fit a frozen SavedModel.*freeze_weights=True"):
        export_saved_model(model, tmp_path / "forced", freeze_weights=True)
    assert not os.path.exists(tmp_path / "forced")  # nothing half-written
    with pytest.raises(ValueError, match=r"`freeze_weights` must be one of .*Received: freeze_weights='yes'"):
        export_saved_model(model, tmp_path / "bad", freeze_weights="yes")


def test_cli_refuses_freeze_weights_for_other_formats(tmp_path, capsys):
    status = main(["--model=vit_ti16", "--weights=none", f"--out={tmp_path}", "--format=tflite",
                   "--freeze_weights=false"])
    assert status != 0
    assert "--freeze_weights is for --format=saved_model" in capsys.readouterr().err


@pytest.mark.e2e
def test_frozen_weights_under_xla_compute_the_model(tmp_path):
    model = tiny_vit(classifier_activation=None)
    path = export_saved_model(model, tmp_path / "xla", jit_compile=True)
    pixels = np.stack([random_image((SIZE, SIZE, 3), seed) for seed in range(3)]).astype("float32")
    served = tf.saved_model.load(path).signatures["predict_images"](images=tf.constant(pixels))["logits"]
    np.testing.assert_allclose(served, model(pixels / 127.5 - 1.0), atol=1e-4)


def test_a_model_of_two_outputs_is_refused_not_served_by_its_first(tmp_path):
    features = tiny_vit(include_top=False, pooling="avg")
    inputs = keras.Input((SIZE, SIZE, 3))
    two = keras.Model(inputs, [features(inputs), features(inputs)])
    with pytest.raises(ValueError, match=r"must have one output.*Received a model with 2 outputs"):
        export_saved_model(two, tmp_path / "two")
    assert not os.path.exists(tmp_path / "two")
