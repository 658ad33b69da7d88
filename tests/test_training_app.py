"""`python -m training.train` end to end on tiny configs, each in a fresh process (a fresh TensorFlow)."""

import json
import os
import re
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--image_size=8", "--patch_size=4", "--hidden_size=16", "--num_layers=1", "--num_heads=2",
        "--mlp_dim=32", "--global_batch_size=16", "--log_every=2", "--show_predictions=0",
        "--jit_compile=false"]  # the XLA compile would dominate these few-step runs


def train(workdir, *args, timeout=240):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    cmd = [sys.executable, "-m", "training.train", f"--workdir={workdir}", *TINY, *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def weights(path):
    """Every array of a `.weights.h5` file by its path in the file."""
    arrays = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: arrays.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
    return arrays


@pytest.mark.e2e
def test_one_device_run_writes_config_checkpoints_metrics_and_a_summary_line(tmp_path):
    result = train(tmp_path, "--steps=4", "--checkpoint_every=2", "--strategy=one_device", "--export=false",
                   "--eval_every=2")
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert any(line.startswith("step 2: eval_accuracy=") for line in lines)
    assert lines[-1].startswith("final: eval_accuracy=") and "359 test images after 4 steps" in lines[-1]
    assert any(line.startswith("step 2/4 (50%) loss=") and "img/s ETA" in line for line in lines)
    # The first step's compilation is announced before it starts, and timed on the line after it.
    compiling = lines.index("compiling the training step (the first step takes a while on CPU) ...")
    assert re.fullmatch(r"compiled the training step: the first step took \d+\.\d s", lines[compiling + 1])
    assert not any(line.startswith("step ") for line in lines[:compiling]), lines
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["steps"] == 4 and 0.0 <= metrics["eval_accuracy"] <= 1.0 and metrics["eval_loss"] > 0
    assert metrics["train_images_per_sec"] > 0 and f"{metrics['eval_accuracy']:.4f}" in lines[-1]
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["steps"] == 4 and config["hidden_size"] == 16 and config["recipe"] == "demo"
    assert sorted(os.listdir(tmp_path / "checkpoints"))[0] == "checkpoint"
    assert os.path.exists(tmp_path / "checkpoints" / "ckpt-4.index")
    assert list((tmp_path / "tensorboard" / "train").iterdir())  # event files
    import keras

    import keras_vit  # noqa: F401  (registers the layers)

    model = keras.saving.load_model(tmp_path / "model.keras")  # safe mode
    assert model.output_shape == (None, 10)
    # A different config in the same workdir is refused, naming the field.
    other = train(tmp_path, "--steps=4", "--checkpoint_every=2", "--learning_rate=0.5", "--export=false")
    assert other.returncode != 0 and "learning_rate" in other.stderr
    # Another checkpoint interval changes nothing computed: the finished run says so, with no new figures.
    model_written = os.path.getmtime(tmp_path / "model.keras")
    again = train(tmp_path, "--steps=4", "--checkpoint_every=3", "--export=false")
    assert again.returncode == 0, again.stderr[-3000:]
    lines = again.stdout.splitlines()  # the restore's line, then what the run is
    assert not any(line.startswith(("training ", "final:", "exported")) or "images/s" in line for line in lines)
    assert lines[-1:] == [
        f"already finished: {tmp_path} holds this run, trained for all its 4 steps and evaluated "
        f"(eval_accuracy={metrics['eval_accuracy']:.4f} on 359 test images, in {tmp_path / 'metrics.json'}); its "
        f"model is {tmp_path / 'model.keras'}. To train it further, pass a larger --steps (or --epochs) with "
        f"--resume_with_changes; for a new run, another --workdir."]
    assert os.path.getmtime(tmp_path / "model.keras") == model_written  # nothing saved again


def interrupted_copy(full, interrupted):
    """The state a kill between steps 3 and 6 of the run in `full` leaves in `interrupted`: its config and
    checkpoint 3, nothing after it."""
    shutil.copytree(full / "checkpoints", interrupted / "checkpoints")
    shutil.copy(full / "config.json", interrupted / "config.json")
    for name in os.listdir(interrupted / "checkpoints"):
        if name.startswith("ckpt-6"):
            os.remove(interrupted / "checkpoints" / name)
    (interrupted / "checkpoints" / "checkpoint").write_text(
        'model_checkpoint_path: "ckpt-3"\nall_model_checkpoint_paths: "ckpt-3"\n'
    )


@pytest.mark.e2e
def test_resumed_run_ends_with_the_weights_of_an_uninterrupted_run(tmp_path):
    args = ["--steps=6", "--checkpoint_every=3", "--keep_checkpoints=5", "--export=false"]
    full = tmp_path / "full"
    assert train(full, *args).returncode == 0
    interrupted = tmp_path / "interrupted"
    interrupted_copy(full, interrupted)
    result = train(interrupted, *args)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "resumed from" in result.stdout and "ckpt-3 at step 3" in result.stdout
    resumed, uninterrupted = weights(interrupted / "model.weights.h5"), weights(full / "model.weights.h5")
    assert resumed.keys() == uninterrupted.keys() and len(resumed) > 10
    for name in uninterrupted:
        np.testing.assert_allclose(resumed[name], uninterrupted[name], rtol=0, atol=1e-6, err_msg=name)
    # ... and not trivially: training moved the weights between the two checkpoints.
    final_sum = float(sum(np.sum(w) for w in uninterrupted.values()))
    assert not np.isclose(weights_of_checkpoint(full / "checkpoints" / "ckpt-3"), final_sum, rtol=1e-4)


def weights_of_checkpoint(prefix):
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(prefix))
    return float(sum(np.sum(reader.get_tensor(k)) for k in reader.get_variable_to_shape_map()
                     if k.startswith("model/") and "OPTIMIZER" not in k))


@pytest.mark.e2e
def test_nan_loss_stops_with_a_message_and_keeps_the_last_good_checkpoint(tmp_path):
    result = train(tmp_path, "--steps=20", "--checkpoint_every=1", "--optimizer=sgd", "--learning_rate=1000",
                   "--grad_clip_norm=0", "--warmup_steps=0", "--schedule=constant", "--export=false")
    assert result.returncode == 1
    assert "Loss became" in result.stderr or "optimizer state became non-finite" in result.stderr
    assert "last good checkpoint" in result.stderr
    stopped_at = int(result.stderr.split("at step ")[1].split(" ")[0].rstrip(";"))
    assert stopped_at < 20
    saved = sorted(int(n[len("ckpt-"):-len(".index")]) for n in os.listdir(tmp_path / "checkpoints")
                   if n.startswith("ckpt-") and n.endswith(".index"))
    # Nothing written at or after the diverged step; the checkpoint whose step diverged is moved aside.
    assert max(saved, default=0) <= stopped_at - 2
    assert (tmp_path / "checkpoints" / f"diverged-ckpt-{stopped_at - 1}.index").exists()
    assert not (tmp_path / "metrics.json").exists()


@pytest.mark.e2e
@pytest.mark.parametrize("precision", ["bfloat16", pytest.param("float16", marks=pytest.mark.e2e)])
def test_mixed_precision_step(tmp_path, precision):
    result = train(tmp_path, "--steps=1", f"--mixed_precision={precision}", "--export=false")
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert np.isfinite(metrics["eval_loss"])
    import keras

    import keras_vit  # noqa: F401  (registers the layers)

    model = keras.saving.load_model(tmp_path / "model.keras")  # the saved copy is float32
    assert all(w.dtype == "float32" for w in model.weights)
    assert {layer.dtype_policy.name for layer in model.layers} == {"float32"}  # computes in float32 too


@pytest.mark.e2e
def test_augmentations_and_export_run(tmp_path):
    result = train(tmp_path, "--steps=3", "--randaugment=2,10", "--mixup=0.2", "--cutmix=1.0",
                   "--label_smoothing=0.1", "--show_predictions=3", "--image_size=16", timeout=400)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "export" / "1" / "saved_model.pb").exists()
    assert "classified 3 test images with the exported model" in result.stdout


@pytest.mark.e2e
def test_finetune_recipe_loads_weights_resamples_and_zeroes_the_new_head(tmp_path):
    sys.path.insert(0, os.path.dirname(__file__))
    from numpy_reference import random_official_params

    params = random_official_params(np.random.default_rng(0), image_size=8, patch_size=4, hidden=16, layers=1,
                                    heads=2, mlp=32, classes=5)
    np.savez(tmp_path / "pretrained.npz", **params)
    # Warm-up starts at learning rate 0, so one step leaves the loaded weights as they were.
    result = train(tmp_path / "run", "--recipe=finetune", "--dataset=digits", "--model=tiny", "--image_size=16",
                   f"--weights={tmp_path / 'pretrained.npz'}", "--steps=1", "--export=false")
    assert result.returncode == 0, result.stderr[-3000:]
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (config["optimizer"], config["zero_head"], config["warmup_steps"]) == ("sgd", True, 500)
    import keras

    import keras_vit  # noqa: F401  (registers the layers)
    from keras_vit import model_parts

    model = keras.saving.load_model(tmp_path / "run" / "model.keras")
    np.testing.assert_array_equal(model_parts.encoder_norm(model).gamma.numpy(),
                                  params["Transformer/encoder_norm/scale"])
    head = model_parts.head(model)
    assert head.kernel.shape == (16, 10) and not np.any(head.kernel.numpy()) and not np.any(head.bias.numpy())
    position = model_parts.patch_encoder(model).position_embedding.numpy()
    assert position.shape == (1, 17, 16)  # 2x2 grid at 8 resampled to 4x4 at 16, plus the class token
    np.testing.assert_array_equal(position[0, 0], params["Transformer/posembed_input/pos_embedding"][0, 0])


@pytest.mark.e2e
def test_killed_run_resumes_with_the_same_command(tmp_path):
    import signal
    import time

    args = ["--steps=400", "--checkpoint_every=20", "--keep_checkpoints=50", "--export=false"]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    cmd = [sys.executable, "-m", "training.train", f"--workdir={tmp_path / 'killed'}", *TINY, *args]
    process = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 200
    while not (tmp_path / "killed" / "checkpoints" / "ckpt-40.index").exists() and time.time() < deadline:
        assert process.poll() is None, "the run ended before it could be killed"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    saved = max(int(n[5:-6]) for n in os.listdir(tmp_path / "killed" / "checkpoints") if n.endswith(".index"))
    assert 40 <= saved < 400
    result = train(tmp_path / "killed", *args)
    assert result.returncode == 0 and f"at step {saved}" in result.stdout, result.stderr[-3000:]
    assert train(tmp_path / "full", *args).returncode == 0
    a, b = weights(tmp_path / "killed" / "model.weights.h5"), weights(tmp_path / "full" / "model.weights.h5")
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=0, atol=1e-5, err_msg=name)


def test_a_missing_dataset_folder_is_the_error_even_in_the_workdir_of_another_run(tmp_path):
    from training import config, loop
    from training.sources import DatasetNotFoundError

    workdir = tmp_path / "workdir"  # the shared default --workdir, holding the last run (the demo)
    workdir.mkdir()
    (workdir / "config.json").write_text(config.make_config("demo", steps=4, workdir=str(workdir)).to_json())
    cfg = config.make_config(None, dataset=f"folder:{tmp_path / 'missing'}", workdir=str(workdir), steps=1)
    with pytest.raises(DatasetNotFoundError, match=rf"^Image folder '{tmp_path / 'missing'}' does not exist: check"):
        loop.run(cfg)
    assert sorted(os.listdir(workdir)) == ["config.json"]  # refused before the workdir was touched


def test_published_weights_are_fetched_before_the_dataset_is_downloaded(tmp_path, monkeypatch):
    import tensorflow_datasets as tfds

    from keras_vit.checkpoints import download
    from training import config, loop

    order = []

    def offline(entry, cache_dir=None):
        order.append("weights")
        raise download.WeightsDownloadError("offline", entry=entry, path="/cache/keras_vit/ti.npz",
                                            reason="Network is unreachable")

    monkeypatch.setattr(download, "fetch", offline)
    monkeypatch.setattr(tfds.core.DatasetBuilder, "download_and_prepare", lambda self, *a, **k: order.append("data"))
    cfg = config.make_config(None, dataset="cifar10", data_dir=str(tmp_path / "tfds"), download=True,
                             weights="augreg_in21k", model="vit_ti16", workdir=str(tmp_path / "run"))
    with pytest.raises(download.WeightsDownloadError) as info:
        loop.run(cfg)
    assert order == ["weights"]  # the data would be downloaded only after the weights
    assert str(info.value) == (
        "Could not download --weights=augreg_in21k for --model=vit_ti16 (Network is unreachable) from "
        "https://storage.googleapis.com/vit_models/augreg/Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0.npz. "
        "Check the network (and a proxy, if any), or download that file elsewhere and place it at "
        "/cache/keras_vit/ti.npz (it is then used without a download); or pass --weights=/path/to/file.npz (a "
        "checkpoint on disk), or leave out --weights to train from scratch.")


def test_a_run_is_finished_only_when_its_evaluation_model_and_export_are_there(tmp_path):
    import types

    from training import config, loop

    cfg = config.make_config("demo", steps=4, workdir=str(tmp_path))
    run = types.SimpleNamespace(cfg=cfg, total_steps=4, _export_path=lambda: str(tmp_path / "export" / "1"))
    metrics = {"eval_accuracy": 0.5, "eval_examples": 359, "steps": 4, "train_images_per_sec": 100.0}
    (tmp_path / "metrics.json").write_text(json.dumps(metrics))
    (tmp_path / "model.keras").write_bytes(b"")
    assert loop._Run._finished(run, 3) is None  # steps left to train
    assert loop._Run._finished(run, 4) is None  # no export yet (--export): the rerun exports
    (tmp_path / "export" / "1").mkdir(parents=True)
    assert loop._Run._finished(run, 4) == metrics
    (tmp_path / "metrics.json").write_text(json.dumps(dict(metrics, eval_error="cannot decode x.png")))
    assert loop._Run._finished(run, 4) is None  # the final evaluation failed: the rerun evaluates


@pytest.mark.parametrize("args, message", [
    (["--validation_split=1.5", "--dataset=folder:x"],
     "error: flag --validation_split=1.5: --validation_split must be a fraction of the training images strictly "
     "between 0 and 1, e.g. 0.2 (leave it out to evaluate on the folder's test/, val/ or validation/ split)"),
    (["--validation_split=0.2"],
     "error: --validation_split holds out part of an image folder (--dataset=folder:PATH); for another dataset "
     "choose the splits with --train_split and --eval_split (e.g. 'train[:90%]' and 'train[90%:]'). "
     "Received: --dataset=digits"),
    (["--validation_split=0.2", "--dataset=folder:x", "--eval_split=test"],
     "error: --validation_split makes both splits of the folder's training images; leave out --eval_split=test, "
     "or --validation_split. Received: --eval_split=test"),
])
def test_a_bad_validation_split_is_one_usage_error(tmp_path, args, message):
    result = subprocess.run([sys.executable, "-m", "training.train", f"--workdir={tmp_path / 'run'}", *args],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stderr.splitlines()) == (2, [message])
    assert not (tmp_path / "run").exists()


@pytest.mark.e2e
def test_a_flat_folder_trains_and_evaluates_on_its_validation_split(tmp_path):
    import tensorflow as tf

    for name, colour in (("cat", (220, 30, 30)), ("dog", (30, 30, 220))):  # the flat layout PATH/<label>/
        os.makedirs(tmp_path / "images" / name)
        for i in range(6):
            tf.io.write_file(str(tmp_path / "images" / name / f"{i}.png"),
                             tf.io.encode_png(np.full((8, 8, 3), colour, np.uint8)))
    result = train(tmp_path / "run", f"--dataset=folder:{tmp_path / 'images'}", "--validation_split=0.34",
                   "--steps=2", "--global_batch_size=4", "--export=false")
    assert result.returncode == 0, result.stderr[-3000:]
    final = result.stdout.strip().splitlines()[-1]
    assert " on 4 held_out[validation_split=0.34,seed=0] images after 2 steps" in final  # 2 of each class's 6
    assert "[fit[validation_split=0.34,seed=0]: 8 images, 2 classes]" in result.stdout
    assert (tmp_path / "run" / "model.labels.txt").read_text() == "cat\ndog\n"


@pytest.mark.e2e
def test_a_lora_run_trains_the_adapters_only_resumes_exactly_and_exports_merged(tmp_path):
    import tensorflow as tf

    args = ["--steps=6", "--checkpoint_every=3", "--keep_checkpoints=5", "--lora_rank=2",
            "--lora_targets=query,value,mlp_dense_1", "--learning_rate=0.01"]
    full = tmp_path / "full"
    result = train(full, *args)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((full / "config.json").read_text())["lora_rank"] == 2
    first, last = (tf.train.load_checkpoint(str(full / "checkpoints" / f"ckpt-{n}")) for n in (3, 6))
    shapes = last.get_variable_to_shape_map()
    # tf.train.Checkpoint files a variable under the first path that reaches it: the trained ones under the
    # optimizer's list, the frozen ones under the model
    trained = sorted(k for k in shapes if k.startswith("optimizer/_trainable_variables/"))
    frozen = sorted(k for k in shapes if k.startswith("model/"))
    assert len(trained) == 3 * 2 + 2 and len(frozen) > 10  # A and B of 3 targets in 1 block, the head
    assert all(np.array_equal(first.get_tensor(k), last.get_tensor(k)) for k in frozen)  # the base is frozen
    assert all(not np.array_equal(first.get_tensor(k), last.get_tensor(k)) for k in trained)
    # resumed from checkpoint 3, it ends where the uninterrupted run ended
    interrupted = tmp_path / "interrupted"
    interrupted_copy(full, interrupted)
    assert train(interrupted, *args).returncode == 0
    resumed = tf.train.load_checkpoint(str(interrupted / "checkpoints" / "ckpt-6"))
    for name in trained:
        np.testing.assert_allclose(resumed.get_tensor(name), last.get_tensor(name), rtol=0, atol=1e-6, err_msg=name)
    # the export serves the merged model: the same scores as the saved LoRA model
    import keras

    import keras_vit  # noqa: F401  (registers its classes with Keras)

    model = keras.saving.load_model(full / "model.keras")
    assert model.get_config()["lora"]["targets"] == ["query", "value", "mlp_dense_1"]
    served = tf.saved_model.load(str(full / "export" / "1")).signatures["predict_images"]
    pixels = np.random.default_rng(0).uniform(0, 255, (2, 8, 8, 3)).astype("float32")
    scores = list(served(images=tf.constant(pixels)).values())[0].numpy()
    np.testing.assert_allclose(scores, keras.ops.convert_to_numpy(model(pixels / 127.5 - 1)), atol=1e-5)  # logits
