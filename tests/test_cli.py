"""keras_vit.cli: one convention for every tool (absl flags, fast --help, exit 2 / 1 with one `error:` line,
a quiet start), checked through real processes where it is about their output and exit status."""

import os
import re
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from absl import flags

from keras_vit import cli
from keras_vit.cli import model as cli_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = ["keras_vit", "keras_vit.convert", "keras_vit.export", "keras_vit.inspect", "training.fewshot", "training.train"]
NOISE = re.compile(r"oneDNN|cpu_feature_guard|absl::InitializeLog|WARNING: All log messages|rebuild TensorFlow|"
                   r"^[IWEF]\d{4} |Traceback")
COMMON = {  # the shared flags each tool has, spelled the same everywhere
    "keras_vit": ["--model", "--weights", "--image_size", "--classes", "--[no]verbose"],
    "keras_vit.convert": ["--model", "--weights", "--image_size", "--classes", "--out", "--[no]verbose"],
    "keras_vit.export": ["--model", "--weights", "--image_size", "--classes", "--pooling", "--out", "--[no]verbose"],
    "keras_vit.inspect": ["--model", "--weights", "--image_size", "--classes", "--out", "--[no]verbose"],
    "training.fewshot": ["--model", "--weights", "--image_size", "--[no]verbose"],
    "training.train": ["--model", "--weights", "--image_size", "--workdir", "--[no]verbose"],
}


def _env():
    """A fresh shell's environment: this process imported TensorFlow, which set TF_CPP_MIN_LOG_LEVEL=1 here."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _run(*args, env=None, timeout=300):
    start = time.perf_counter()
    result = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                            env=env or _env())
    return result, time.perf_counter() - start


def _no_noise(stderr):
    noisy = [line for line in stderr.splitlines() if NOISE.search(line)]
    assert not noisy, stderr[-3000:]


@pytest.mark.parametrize("tool", TOOLS)
def test_help_lists_the_flags_with_defaults_fast_and_quietly(tool):
    result, _ = _run("-m", tool, "--help")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "flags:" in result.stdout
    for flag in COMMON[tool]:
        assert f"  {flag}: " in result.stdout, (flag, result.stdout)
    assert "--[no]verbose: Show the traceback of an error" in result.stdout and "(default: false)" in result.stdout
    assert "image-size" not in result.stdout.split("flags:")[1]  # underscores only
    # Fast: --help imports neither Keras nor TensorFlow (test_help_imports_neither_keras_nor_tensorflow_...).


@pytest.mark.parametrize("tool", TOOLS)
def test_a_bad_flag_is_one_error_line_and_exit_2(tool):
    result, _ = _run("-m", tool, "--no_such_flag=1")
    assert result.returncode == 2
    assert result.stderr == "error: Unknown command line flag 'no_such_flag'\n"
    assert result.stdout == ""


@pytest.mark.e2e  # the default tier's time budget (10 minutes on 2 cores)
def test_help_imports_neither_keras_nor_tensorflow_and_import_keras_vit_still_registers_the_layers():
    script = textwrap.dedent(f"""
        import runpy, sys
        for tool in {TOOLS!r}:
            sys.argv = [tool, "--help"]
            try:
                runpy.run_module(tool, run_name="__main__", alter_sys=True)
            except SystemExit as done:
                assert done.code == 0, (tool, done.code)
        heavy = sorted(m for m in ("keras", "tensorflow", "jax", "torch") if m in sys.modules)
        assert not heavy, heavy
        import keras  # after `import keras_vit` (done by the tools): the layers register now
        assert keras.saving.get_registered_object("keras_vit>PatchEncoder") is not None
        print("ok")
    """)
    result, _ = _run("-c", script)
    assert result.returncode == 0 and result.stdout.endswith("ok\n"), result.stdout[-2000:] + result.stderr[-3000:]


@pytest.mark.e2e
def test_a_real_run_starts_quietly_even_with_onednn_on():
    """`TF_ENABLE_ONEDNN_OPTS=1` makes TensorFlow print its oneDNN notice from C++ even under
    TF_CPP_MIN_LOG_LEVEL=3; the tools import TensorFlow with stderr redirected, so nothing shows."""
    result, _ = _run("-m", "keras_vit", "--model=vit_ti16", "--image_size=32", "--classes=3",
                     env={**_env(), "TF_ENABLE_ONEDNN_OPTS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr == ""
    assert "building vit_ti16 with random weights ..." in result.stdout and "keras_vit 0.1.0 OK" in result.stdout
    assert "top-3 classes of a generated image (random weights): " in result.stdout


@pytest.mark.e2e  # moved from the default tier (its time budget)
def test_a_failure_is_one_error_line_and_exit_1():
    result, _ = _run("-m", "keras_vit", "--model=vit_ti16", "--image_size=33")
    assert result.returncode == 1
    assert result.stderr.startswith("error: The image size must be divisible by the patch size 16")
    assert result.stderr.count("\n") == 1
    _no_noise(result.stderr)


# --- in-process: parsing, checks and exit statuses -----------------------------------------------------------


@pytest.fixture
def tool_flags():
    fv = flags.FlagValues()
    cli_model.define_model(fv, required=True)
    cli_model.define_weights(fv, required=True, purpose="this test")
    cli_model.define_image_size(fv)
    cli_model.define_classes(fv)
    cli_model.define_pooling(fv)
    cli.define_out(fv, "Where it goes.")
    cli.define_verbose(fv)
    return fv


def _main(fv, args, work=lambda argv: 0, **kwargs):
    return cli.main(work, fv, args, usage="A test tool.", **kwargs)


def test_usage_errors_exit_2_on_one_line(tool_flags, tmp_path, capsys):
    keras_file = tmp_path / "m.keras"
    keras_file.write_bytes(b"")
    cases = [
        ([], "error: flag --model=None: --model is required; flag --out=None: --out is required\n"),
        (["--model=vit_b16", "--out=o"], "Pass --weights=none explicitly for random weights"),
        (["--model=vit_zz", "--weights=none", "--out=o"], "flag --model=vit_zz: Unknown model. Received: 'vit_zz'"),
        (["--model=x.keras", "--out=o"], "flag --model=x.keras: The model file does not exist"),
        (["--model=vit_b16", "--weights=nope", "--out=o"], "flag --weights=nope: --weights is neither none, a published"),
        (["--model=vit_b16", "--weights=none"], "flag --out=None: --out is required"),
        (["--model=vit_b16", "--weights=none", "--out=o", "--image_size=0"], "flag --image_size=0"),
        (["--model=vit_b16", "--weights=none", "--out=o", "extra"],
         "error: Positional arguments are not taken: extra; give every value with its flag (--name=value)\n"),
        (["--model", "vit_b16", "vit_l16", "--weights=none", "--out=o"],
         "error: Positional arguments are not taken: vit_l16; give every value"),
        (["extra", "--verbose", "--noverbose", "--", "-x"], "error: Positional arguments are not taken: extra -x;"),
        (["--unknown", "extra"], "error: Unknown command line flag 'unknown'"),
        ([f"--model={keras_file}", "--out=o", "--pooling=token"], "--pooling cannot apply to a .keras model"),
        (["--model=vit_b16", f"--weights={keras_file}", "--out=o", "--classes=3"],
         "--classes cannot apply to a .keras model"),
    ]
    for args, message in cases:
        assert _main(tool_flags, args) == 2, args
        captured = capsys.readouterr()
        assert captured.err.startswith("error: ") and captured.err.count("\n") == 1, captured.err
        assert message in captured.err, (message, captured.err)
        assert captured.out == ""


def test_valid_flags_reach_the_work_from_their_defaults_each_time(tool_flags, tmp_path):
    keras_file = tmp_path / "m.keras"
    keras_file.write_bytes(b"")
    seen = []
    work = lambda argv: seen.append((argv[1:], tool_flags.model, tool_flags.weights, tool_flags.image_size))
    assert _main(tool_flags, ["--model=B16", "--weights=none", "--out=o", "--image_size=384"], work) == 0
    assert _main(tool_flags, [f"--model={keras_file}", "--out=o"], work) == 0  # no weights needed
    assert seen == [([], "B16", "none", 384), ([], str(keras_file), None, None)]


def test_absl_validators_are_usage_errors_and_add_check_runs_once_they_pass(tool_flags, capsys):
    flags.register_validator("out", lambda out: out.endswith("/"), "--out must be a folder, ending in /",
                             flag_values=tool_flags)
    flags.register_multi_flags_validator(["image_size", "classes"], lambda given: None in given.values(),
                                         "--image_size and --classes cannot go together", flag_values=tool_flags)
    checked = []
    cli.add_check(tool_flags, lambda fv, argv: checked.append(fv.out))
    args = ["--model=vit_b16", "--weights=none"]
    assert _main(tool_flags, [*args, "--out=o", "--image_size=32", "--classes=3"]) == 2
    assert capsys.readouterr().err == ("error: flag --out=o: --out must be a folder, ending in /; flags "
                                       "image_size=32, classes=3: --image_size and --classes cannot go together\n")
    assert checked == []  # not while a validator fails
    assert _main(tool_flags, [*args, "--out=o/"]) == 0
    assert checked == ["o/"]

    def late(fv, argv):
        raise cli.UsageError("found by a check")

    cli.add_check(tool_flags, late)
    assert _main(tool_flags, [*args, "--out=o/"]) == 2
    assert capsys.readouterr().err == "error: found by a check\n"


def test_failures_exit_1_with_a_traceback_only_with_verbose(tool_flags, capsys):
    def fail(argv):
        raise ValueError("the work failed\nover two lines")

    args = ["--model=vit_b16", "--weights=none", "--out=o"]
    assert _main(tool_flags, args, fail) == 1
    assert capsys.readouterr().err == "error: the work failed over two lines\n"
    assert _main(tool_flags, [*args, "--verbose"], fail) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):")
    assert err.endswith("ValueError: the work failed\nover two lines\nerror: the work failed over two lines\n")

    def bug(argv):
        return {}["missing"]

    assert _main(tool_flags, args, bug) == 1
    assert capsys.readouterr().err == "error: KeyError: 'missing'\n"

    def usage(argv):
        raise cli.UsageError("found late")

    assert _main(tool_flags, args, usage) == 2
    assert capsys.readouterr().err == "error: found late\n"


# --- the library's words in the flags' words ----------------------------------------------------------------


def test_flag_spelling_turns_the_arguments_a_tool_sets_into_its_flags():
    fv = flags.FlagValues()
    cli_model.define_weights(fv)
    cli.define_out(fv)
    flags.DEFINE_bool("overwrite", False, "Replace.", flag_values=fv)
    flags.DEFINE_integer("version", None, "Version.", flag_values=fv)
    cli.name_arguments(fv, export_base="out")
    cases = [
        ("or pass weights=None (random initialisation, no download) or weights=\"/path/to/file.npz\".",
         "or pass --weights=none (random initialisation, no download) or --weights=\"/path/to/file.npz\"."),
        ("cannot build --model=vit_ti16 with --weights=None: no",
         "cannot build --model=vit_ti16 with --weights=none: no"),
        ("Version 1 already exists at 'b/1'; pass a new version, or overwrite=True (`--overwrite`) to replace it. "
         "Received: export_base='b', version=1",
         "Version 1 already exists at 'b/1'; pass a new version, or --overwrite to replace it. "
         "Received: --out='b', --version=1"),
        ("pass overwrite=False", "pass --nooverwrite"),
        ("`version` must be >= 0; pass the file as `weights=`", "--version must be >= 0; pass the file as --weights"),
        # not flags of this tool, or not the argument: as they are
        ("Received: path='a.weights.h5', classes=3, model.weights=1, preweights=None",
         "Received: path='a.weights.h5', classes=3, model.weights=1, preweights=None"),
        ("flag --out=None: --out is required", "flag --out=None: --out is required"),
    ]
    for text, expected in cases:
        assert cli.flag_spelling(text, fv) == expected, text
    assert cli.flag_spelling("pass weights=None", flags.FlagValues()) == "pass weights=None"


def test_failures_of_the_work_are_printed_in_the_words_of_the_flags(tool_flags, tmp_path, monkeypatch, capsys):
    import keras

    from keras_vit import weights
    from keras_vit.checkpoints import download
    from training import config, model

    def unreachable(**kwargs):
        raise OSError("network is unreachable")

    monkeypatch.setattr(keras.utils, "get_file", unreachable)
    entry = weights.get_entry("B16", weights.IMAGENET_ALIAS)
    args = ["--model=vit_ti16", "--weights=none", "--out=o"]
    assert _main(tool_flags, args, lambda argv: download.fetch(entry, str(tmp_path))) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "; or pass --weights=none (random initialisation, no download) or " \
        "--weights=\"/path/to/file.npz\" (a checkpoint on disk)." in err, err
    assert "weights=None" not in err

    cfg = config.make_config("demo", model="vit_ti16", image_size=33, steps=4)
    assert _main(tool_flags, args, lambda argv: model.model_from_config(cfg, 3)) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: cannot build --model=vit_ti16 with --weights=none: The image size must be "), err


def test_help_text_shows_defaults_and_required(capsys):
    fv = flags.FlagValues()
    cli_model.define_model(fv, default="vit_b16")
    flags.DEFINE_list("shots", ["1", "5"], "Shots.", flag_values=fv)
    cli.define_out(fv, "Where it goes.")
    cli.define_verbose(fv)
    assert _main(fv, ["--model=nonsense", "-h"]) == 0  # help wins, nothing is checked
    out = capsys.readouterr().out
    assert out.startswith("A test tool.\n\nflags:\n")
    assert "(default: 'vit_b16')" in out and "--shots: Shots. (default: '1,5')" in out
    assert "--out: Where it goes. (required)" in out and "--[no]verbose" in out


def test_model_from_flag_values_refuses_architecture_flags_for_a_keras_file(tmp_path):
    with pytest.raises(ValueError, match="--image_size cannot apply to a .keras model"):
        cli_model.model_from_flag_values(str(tmp_path / "m.keras"), image_size=64)
    with pytest.raises(ValueError, match="--pooling cannot apply"):
        cli_model.model_from_flag_values("vit_b16", str(tmp_path / "m.keras"), pooling="token")


def test_model_from_flag_values_accepts_any_variant_spelling():
    model = cli_model.model_from_flag_values("ViT-Ti/16", "none", image_size=32, classes=3)
    assert model.input_shape == (None, 32, 32, 3) and model.output_shape == (None, 3)


# --- every default in --help; what the smoke test prints ---------------------------------------------------


def _flag_texts(help_output):
    """{`--flag` as spelled in --help: its text on one line} of the `flags:` part of a tool's --help."""
    texts, name = {}, None
    for line in help_output.split("flags:\n", 1)[1].splitlines():
        match = re.match(r"^  (--\S+?): (.*)$", line)
        if match:
            name = match.group(1)
            texts[name] = match.group(2)
        elif name:
            texts[name] += " " + line.strip()
    return texts


@pytest.mark.parametrize("tool", TOOLS)
def test_every_flag_in_help_says_its_default_or_that_it_is_required(tool):
    result, _ = _run("-m", tool, "--help")
    texts = _flag_texts(result.stdout)
    assert texts, result.stdout
    silent = [name for name, text in texts.items() if "default" not in text.lower() and "(required)" not in text]
    assert not silent, silent


def test_training_help_shows_each_recipes_defaults():
    from training import config

    result, _ = _run("-m", "training.train", "--help")
    texts = _flag_texts(result.stdout)
    batch = texts["--global_batch_size"]
    assert batch.startswith("Batch size summed over all replicas. (default: the recipe's: ")
    for recipe in ("scratch", "demo", "finetune"):
        assert f"{config.RECIPES[recipe]['global_batch_size']} ({recipe}" in batch, batch
    assert "'tiny' (scratch, demo); 'vit_b16' (pretrain_i21k, finetune, augreg)" in texts["--model"]
    assert texts["--workdir"].endswith("(default: 'workdir')")  # the same in every recipe: one value
    assert "2,15 (augreg)" in texts["--randaugment"] and "(default: 'keras')" in texts["--augment_library"]
    assert "(default: 'token', the checkpoint's with --weights; a recipe chosen without --recipe" in texts[
        "--classifier"]
    assert "(default: about 20 lines a run)." in texts["--log_every"]  # its own words, not repeated


@pytest.mark.parametrize("activation", [None, "softmax"])
def test_smoke_test_prints_probabilities_of_a_logits_model(activation, tiny, tmp_path, capsys):
    """The training app saves `model.keras` with a head without activation (logits): the smoke test prints
    probabilities (a softmax of them) and says so, and a softmax head's outputs as they are."""
    import keras

    import keras_vit
    from keras_vit import __main__ as smoke

    path = str(tmp_path / "model.keras")
    model = keras_vit.ViT(**tiny, classifier_activation=activation)
    model.get_layer("head").bias.assign(np.array([3.0, 1.0, 0.0, -1.0, -3.0]))  # logits well outside [0, 1]
    model.save(path)
    model = keras.saving.load_model(path)
    outputs = np.asarray(model.predict(smoke._image(model, None), verbose=0), np.float64)[0]
    expected = np.exp(outputs) / np.exp(outputs).sum() if activation is None else outputs
    assert smoke.main([f"--model={path}"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("top-3 classes of "))
    shown = [(int(i), float(v)) for i, v in re.findall(r"(\d+)(?: \([^)]*\))?: (-?\d+\.\d{4})", line)]
    top = np.argsort(expected)[::-1][:3]
    assert shown == [(int(i), round(float(expected[i]), 4)) for i in top], line
    what = "probabilities: a softmax of the model's logits" if activation is None else "probabilities"
    assert line.endswith(f" ({what})"), line


def test_a_path_that_is_not_utf8_is_a_usage_error_naming_the_byte(capsys):
    """--out / --workdir from bytes that are not UTF-8 (Python decodes them with surrogates): one line, exit 2."""
    from keras_vit.export.__main__ import main as export_main

    out = b"/tmp/out_\xff_dir".decode("utf-8", "surrogateescape")
    assert cli.utf8_path_problem("out", "/tmp/fine") is None
    assert export_main(["--model=vit_ti16", "--weights=none", f"--out={out}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "is not a UTF-8 path (byte 0xff at position 9)" in err
