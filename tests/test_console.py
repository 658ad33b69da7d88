"""keras_vit.cli.console: keras_vit's own log lines print plainly while a tool runs (`warning: ...`), not through the
root logger, where absl's handler (installed by `absl.app.run`) would prefix them; other libraries' lines keep
their way."""

import logging
import os
import subprocess
import sys

import pytest
from absl import flags

from keras_vit import cli
from keras_vit.cli import console

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append((record.name, record.getMessage()))


@pytest.fixture
def root_records():
    """What reaches the root logger (absl's handler sits there in a tool started by absl.app.run)."""
    handler = _Records()
    logging.getLogger().addHandler(handler)
    yield handler.records
    logging.getLogger().removeHandler(handler)


def _tool(args, work):
    fv = flags.FlagValues()
    cli.define_verbose(fv)
    return cli.main(work, fv, args, usage="A test tool.")


def _logs(argv):
    logging.getLogger("keras_vit.loading").warning("Resampled the position embedding from a %dx%d to a %dx%d "
                                                   "patch grid.", 2, 2, 4, 4)
    logging.getLogger("keras_vit").info("Loaded 5 arrays.")
    logging.getLogger("other_library").warning("its own line")


def test_keras_vit_warnings_print_plainly_and_other_libraries_lines_reach_the_root_logger(root_records, capsys):
    library = logging.getLogger("keras_vit")
    before = library.propagate, library.level, list(library.handlers)
    assert _tool([], _logs) == 0
    err = capsys.readouterr().err
    assert err == "warning: Resampled the position embedding from a 2x2 to a 4x4 patch grid.\n"
    assert root_records == [("other_library", "its own line")]  # keras_vit's: not through absl's handler
    assert (library.propagate, library.level, list(library.handlers)) == before  # as it was after the tool

    root_records.clear()
    assert _tool(["--verbose"], _logs) == 0  # --verbose: keras_vit's info lines too, the message alone
    assert capsys.readouterr().err == ("warning: Resampled the position embedding from a 2x2 to a 4x4 patch grid.\n"
                                       "Loaded 5 arrays.\n")
    assert root_records == [("other_library", "its own line")]


def test_a_level_the_user_set_on_the_keras_vit_logger_is_kept(capsys, monkeypatch):
    monkeypatch.setattr(logging.getLogger("keras_vit"), "level", logging.ERROR)
    assert _tool([], _logs) == 0
    assert capsys.readouterr().err == ""
    assert logging.getLogger("keras_vit").level == logging.ERROR


def test_plain_formatter():
    record = logging.LogRecord("keras_vit.x", logging.ERROR, "f.py", 1, "bad %s", ("thing",), None)
    assert console.PlainFormatter().format(record) == "error: bad thing"


@pytest.mark.e2e
def test_a_tool_prints_the_resampling_warning_without_absls_prefix(tiny, tmp_path):
    """A real tool (absl.app.run installs absl's handler on the root logger): the warning of loading weights at
    another resolution is one plain line."""
    import keras_vit

    weights = str(tmp_path / "tiny.weights.h5")
    keras_vit.ViT(**tiny).save_weights(weights)
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    size = 2 * tiny["image_size"]
    result = subprocess.run([sys.executable, "-m", "keras_vit.convert", f"--weights={weights}",
                             f"--out={tmp_path / 'big.weights.h5'}", f"--image_size={size}"],
                            capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.startswith("warning: Resampled the position embedding from a "), result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
