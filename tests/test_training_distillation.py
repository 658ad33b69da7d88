"""The training app with a teacher (`--teacher`, DeiT's distillation): the refusals before any step, the teacher's
record in config.json, a resume with another teacher, and the loss the step computes."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--image_size=8", "--patch_size=4", "--hidden_size=16", "--num_layers=1", "--num_heads=2", "--mlp_dim=32",
        "--global_batch_size=16", "--log_every=2", "--show_predictions=0", "--export=false", "--jit_compile=false"]


def train(workdir, *args, tiny=True):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    cmd = [sys.executable, "-m", "training.train", f"--workdir={workdir}", *(TINY if tiny else []), *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.e2e  # the default tier's time budget (10 minutes on 2 cores)
def test_distillation_flags_without_a_teacher_are_a_usage_error(tmp_path):
    done = train(tmp_path / "run", "--distillation=soft")
    assert done.returncode == 2 and "--distillation sets how the student learns from a teacher" in done.stderr
    done = train(tmp_path / "run", "--teacher", str(tmp_path / "missing"), "--steps=1")
    assert done.returncode == 2 and "missing" in done.stderr and not (tmp_path / "run").exists()


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    """A BiT teacher trained by the app for a few steps on the embedded digits (10 classes)."""
    workdir = tmp_path_factory.mktemp("teacher") / "bit"
    done = train(workdir, "--model=bit_tiny", "--steps=4", "--image_size=16", "--global_batch_size=16",
                 "--show_predictions=0", "--export=false", "--jit_compile=false", tiny=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return workdir


@pytest.mark.e2e
def test_a_student_learns_from_a_teacher_of_another_size_and_records_it(teacher, tmp_path):
    done = train(tmp_path / "student", f"--teacher={teacher}", "--steps=4", "--distillation=soft",
                 "--distillation_tau=2")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "the teacher takes 16x16 images; each batch is resized to that" in done.stdout + done.stderr
    config = json.loads((tmp_path / "student" / "config.json").read_text())
    assert config["teacher"] == str(teacher) and len(config["teacher_sha256"]) == 64
    assert config["distillation"] == "soft" and config["distillation_tau"] == 2.0


@pytest.mark.e2e
def test_a_resume_with_a_changed_teacher_is_refused_unless_asked(teacher, tmp_path):
    import shutil

    mine = tmp_path / "teacher"
    shutil.copytree(teacher, mine)
    assert train(tmp_path / "student", f"--teacher={mine}", "--steps=2").returncode == 0
    with open(mine / "model.keras", "ab") as file:  # another teacher in the same place
        file.write(b"\0")
    done = train(tmp_path / "student", f"--teacher={mine}", "--steps=4")
    assert done.returncode != 0 and "teacher_sha256" in done.stderr
    assert "--resume_with_changes" in done.stderr


@pytest.mark.e2e
def test_a_teacher_of_other_classes_is_refused_before_training(tmp_path):
    other = tmp_path / "other"
    folder = tmp_path / "three"
    from PIL import Image
    import numpy as np

    for label in "abc":
        for index in range(4):
            os.makedirs(folder / "train" / label, exist_ok=True)
            os.makedirs(folder / "test" / label, exist_ok=True)
            for split in ("train", "test"):
                Image.fromarray(np.full((8, 8, 3), 80 * "abc".index(label), np.uint8)).save(
                    folder / split / label / f"{index}.png")
    assert train(other, f"--dataset=folder:{folder}", "--steps=1").returncode == 0
    done = train(tmp_path / "student", f"--teacher={other}", "--steps=2")  # the digits: 10 classes
    assert done.returncode == 2 and "has 3 classes; the dataset has 10" in done.stderr
    assert not (tmp_path / "student" / "checkpoints").exists() or not os.listdir(tmp_path / "student" / "checkpoints")
