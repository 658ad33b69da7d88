"""What a running command-line tool shows besides its results: a quiet start and a line per stage of long work.

* A quiet start: `TF_CPP_MIN_LOG_LEVEL=3` unless the user set it, set before TensorFlow is first imported
  (`quiet_start`); the lines TensorFlow's C++ code still prints while it is imported (absl's "WARNING: All log
  messages before absl::InitializeLog() is called are written to STDERR", oneDNN's "oneDNN custom operations
  are on", which TF_CPP_MIN_LOG_LEVEL does not reach) are kept off stderr by importing it with file descriptor 2
  redirected (`import_keras`; shown again if the import fails); absl's verbosity is WARNING and absl's and
  TensorFlow's own Python loggers show only errors (`quiet_loggers`). `--verbose` shows all of it (and does not
  set TF_CPP_MIN_LOG_LEVEL).
* keras_vit's own log lines (the `"keras_vit"` logger and its children, e.g. `keras_vit.loading`'s "Resampled
  the position embedding ..." or `keras_vit.export.warmup`'s "No TF Serving warmup file written ...") print
  plainly on stderr, `warning: <message>` (`plain_library_lines`): not with the prefix absl's handler gives the
  lines that reach Python's root logger (`W1205 14:24:26.411556 140314809891712 loading.py:213] ...`), which
  the lines of other libraries (TensorFlow, absl) keep. Warnings and errors; with `--verbose` its info lines
  too (the message alone). A level set on the `"keras_vit"` logger by the user is kept.
* Long work prints a line as each stage starts (`progress`), on stdout, so stderr holds only errors and
  warnings; only while a tool runs (`running`): library calls of the same functions print nothing.

`keras_vit.cli` runs a tool's work inside these; an absl app of its own calls `quiet_start()` before anything
imports TensorFlow.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile

_running = False  # a tool's work is running: `progress` prints


def progress(message: str) -> None:
    """A line as a stage of long work starts ("loading ...", "exporting ...", "writing ..."), on stdout, while
    a tool runs (library calls of the same functions print nothing)."""
    if _running:
        print(message, flush=True)


@contextlib.contextmanager
def running(verbose=False, tensorflow=False):
    """A tool's work: after a quiet start and a quiet import of Keras (and of TensorFlow with `tensorflow`),
    with absl's and TensorFlow's loggers showing only errors (all of it with `verbose`); `progress` prints."""
    global _running
    quiet_start(verbose)
    saved, _running = None, True
    plain = plain_library_lines(verbose)
    try:
        import_keras(verbose, tensorflow=tensorflow)
        if not verbose:
            saved = quiet_loggers()
        yield
    finally:
        _running = False
        _restore_loggers(saved)
        _restore_library_lines(plain)


def quiet_start(verbose=False) -> None:
    """`TF_CPP_MIN_LOG_LEVEL=3` unless the user set it or `verbose`, while TensorFlow is not imported yet (it
    reads the variable once, as it loads); call it before anything imports TensorFlow."""
    if not verbose and "tensorflow" not in sys.modules:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def import_keras(verbose=False, tensorflow=False) -> None:
    """Imports Keras (with the TensorFlow backend: TensorFlow; with `tensorflow`: TensorFlow in any case)
    without TensorFlow's start-up lines.

    The lines TF_CPP_MIN_LOG_LEVEL=3 leaves (absl's "All log messages before absl::InitializeLog()", oneDNN's
    notice: printed by C++ code while the libraries load) are dropped by importing with fd 2 redirected, and
    shown if the import fails; nothing is dropped with `verbose`. Quiet whatever TF_CPP_MIN_LOG_LEVEL says:
    importing TensorFlow sets it to 1 in its process's environment, so every tool started from a process that
    imported TensorFlow (a notebook, pytest) inherits a 1.
    """
    missing = [name for name in ["keras"] + (["tensorflow"] if tensorflow else []) if name not in sys.modules]
    if missing:
        with contextlib.nullcontext() if verbose else _stderr_captured():
            for name in missing:
                __import__(name)


LIBRARY_LOGGER = "keras_vit"
"""The logger keras_vit's modules log on (`logging.getLogger("keras_vit")` or a child, `getLogger(__name__)`)."""


class PlainFormatter(logging.Formatter):
    """`warning: <message>` (`error: ...`), as the tools' own `error: ...` lines; a lower level's message alone."""

    def format(self, record):
        message = record.getMessage()
        if record.exc_info:
            message += "\n" + self.formatException(record.exc_info)
        return f"{record.levelname.lower()}: {message}" if record.levelno >= logging.WARNING else message


def plain_library_lines(verbose=False):
    """keras_vit's log lines go to stderr as `warning: <message>`, and not on to the root logger (where absl's
    handler would prefix them with its `W1205 14:24:26.411556 140314809891712 loading.py:213] `); warnings and
    errors, and with `verbose` info lines too, unless the user set the logger's level. Returns what
    `_restore_library_lines` needs."""
    logger = logging.getLogger(LIBRARY_LOGGER)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(PlainFormatter())
    saved = logger.propagate, logger.level
    logger.addHandler(handler)
    logger.propagate = False
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO if verbose else logging.WARNING)
    return logger, handler, saved


def _restore_library_lines(plain) -> None:
    logger, handler, (propagate, level) = plain
    logger.removeHandler(handler)
    logger.propagate = propagate
    logger.setLevel(level)


class _OnlyErrors(logging.Filter):
    def filter(self, record):
        return record.levelno >= logging.ERROR


_ONLY_ERRORS = _OnlyErrors()


def quiet_loggers():
    """absl's verbosity to WARNING (absl.app.run sets INFO, and TensorFlow restores what it finds after muting
    it for a while), and only errors from absl's and TensorFlow's own loggers (their warnings are about
    TensorFlow's internals, e.g. the TFLite converter's `trackable_obj`); keras_vit's warnings still show.
    Returns what `_restore_loggers` needs."""
    from absl import logging as absl_logging

    verbosity = absl_logging.get_verbosity()
    if verbosity > absl_logging.WARNING:
        absl_logging.set_verbosity(absl_logging.WARNING)
    loggers = [absl_logging.get_absl_logger(), logging.getLogger("tensorflow")]
    for logger in loggers:
        logger.addFilter(_ONLY_ERRORS)
    return verbosity, loggers


def _restore_loggers(saved) -> None:
    if not saved:
        return
    from absl import logging as absl_logging

    verbosity, loggers = saved
    for logger in loggers:
        logger.removeFilter(_ONLY_ERRORS)
    if absl_logging.get_verbosity() != verbosity:
        absl_logging.set_verbosity(verbosity)


@contextlib.contextmanager
def _stderr_captured():
    """C-level stderr (fd 2) goes to a temporary file; what was written is shown only if the block raises."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        except BaseException:
            os.dup2(saved, 2)
            captured.seek(0)
            sys.stderr.write(captured.read().decode(errors="replace"))
            raise
        finally:
            try:
                sys.stderr.flush()
            finally:
                os.dup2(saved, 2)
                os.close(saved)
