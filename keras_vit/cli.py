"""The one command-line convention of keras_vit's tools, shared by all of them.

`python -m keras_vit`, `keras_vit.convert`, `keras_vit.export`, `keras_vit.inspect` and `training.fewshot`
(and `training.train`, an absl app of its own) follow it:

* absl flags (`absl.flags`, run by `absl.app.run`), underscores only. The flags the tools share are defined by
  the helpers here so that they are spelled and mean the same everywhere: `--model` (a variant name such as
  `vit_b16`, the BiT ResNet `bit_r50x1`, or a `.keras` file), `--weights` (`none` for random initialisation,
  a published name, or a file), `--image_size`, `--classes`, `--pooling`, `--out` (where the tool writes)
  and `--verbose`.
* `--help` (also `-h`, `--helpshort`, `--helpfull`) prints the tool's docstring and its flags with their
  defaults on stdout and exits 0, before Keras or TensorFlow is imported: the tools import them only in the
  work itself, after the flags are parsed.
* A usage error (an unknown flag, a bad or missing value, flags that cannot go together) is one line
  `error: ...` on stderr and exit status 2, also found before anything heavy is imported. A failure of the
  work itself (a `ValueError`, an `OSError`, ...) is one line `error: ...` and exit status 1; `--verbose` adds
  the traceback. So is a missing optional package: imported through `keras_vit.extras.require`, its line names
  the extra that installs it (`... needs the tf2onnx package, which is not installed: pip install
  "keras-vit[onnx]"`).
* A quiet start: `TF_CPP_MIN_LOG_LEVEL=3` unless the user set it, set before TensorFlow is first imported;
  the lines TensorFlow's C++ code still prints while it is imported (absl's "WARNING: All log messages before
  absl::InitializeLog() is called are written to STDERR", oneDNN's "oneDNN custom operations are on", which
  TF_CPP_MIN_LOG_LEVEL does not reach) are kept off stderr by importing it with file descriptor 2 redirected
  (shown again if the import fails); absl's verbosity is WARNING and absl's and TensorFlow's own Python
  loggers show only errors. `--verbose` shows all of it (and does not set TF_CPP_MIN_LOG_LEVEL).
* Long work prints a line as each stage starts (`progress`), on stdout, so stderr holds only errors.

A tool, with its own `FlagValues` (several tools can then be imported into one process, e.g. by the tests):

    from absl import flags
    from keras_vit import cli

    FLAGS = flags.FlagValues()
    cli.define_model(FLAGS, required=True)
    cli.define_weights(FLAGS, required=True)
    cli.define_out(FLAGS, "output folder")
    cli.define_verbose(FLAGS)

    def run(argv):                  # the work: flags parsed, argv = [program, positional arguments...]
        model = cli.model_from_flags(FLAGS)
        ...

    def main(argv=None) -> int:     # for tests and callers: the exit status, never sys.exit
        return cli.main(run, FLAGS, argv, usage=__doc__)

    if __name__ == "__main__":
        cli.run(run, FLAGS, usage=__doc__)   # absl.app.run with this convention

`cli.main`/`cli.run` take `renamed={"old_name": "new_name"}` (old spellings keep working, unlisted),
`positional=True` or the flag names positional arguments stand for (`("weights", "out")`), and
`tensorflow=True` for work that imports TensorFlow whatever the Keras backend (so it is imported quietly too).

An absl app on the global `flags.FLAGS` (`training.train`) calls `cli.quiet_start()` before anything imports
TensorFlow, may define its shared flags with these helpers (their `flag_values` default to `flags.FLAGS`)
plus `cli.define_verbose()`, and ends with `cli.run(main, usage=__doc__, positional=True)` instead of
`app.run(main)` (`main(argv)` as absl calls it; `app.UsageError` raised in it is a usage error, exit 2; a
`sys.exit(n)` in it is kept). Messages meant for the user go through `print`/`cli.progress` or a standard
logger: the absl logger shows only errors unless `--verbose`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import tempfile
import textwrap
import traceback

from absl import app, flags

from keras_vit import variants

from keras_vit import extras

flags.disclaim_key_flags()  # the flags the helpers define belong to the tool that calls them

FLAGS = flags.FLAGS

HELP_FLAGS = ("-h", "-?", "--help", "-help", "--helpshort", "-helpshort", "--helpfull", "-helpfull")
USAGE_EXIT = 2
FAILURE_EXIT = 1

ARCHITECTURE_FLAGS = ("image_size", "classes", "pooling", "classifier")
"""Flags of a constructor that a `.keras` model (whose file fixes its architecture) refuses."""

_running = False  # a tool's work is running: `progress` prints
_REQUIRED: dict = {}  # FlagValues -> names that must be given
_CHECKS: dict = {}  # FlagValues -> callables run after parsing; they raise UsageError


class UsageError(app.UsageError):
    """A bad or missing flag value, or flags that cannot go together: `error: ...`, exit status 2."""

    def __init__(self, message):
        super().__init__(message, exitcode=USAGE_EXIT)


class _Exit(Exception):
    def __init__(self, code):
        super().__init__(code)
        self.code = code


# --- the shared flags --------------------------------------------------------------------------------------


BIT_REFUSED_FLAGS = {"pooling": "token", "classifier": None}
"""Flag values a BiT `--model` refuses (None: any value): a ResNet has no [class] token and no `classifier`."""


def _variant_names() -> list[str]:
    return [variant.model_name for variant in variants.VARIANTS.values()]


def check_bit_arguments(model: str, **given) -> None:
    """Raises a ValueError for constructor arguments a BiT `model` cannot take (`given`: name -> value, None
    when not given): `pooling="token"`, any `classifier`, and a published ViT checkpoint as `weights`."""
    for name, value in given.items():
        if value is None or (name not in BIT_REFUSED_FLAGS and name != "weights"):
            continue
        if name == "weights":
            from keras_vit.weights import is_name

            if is_name(value):
                raise ValueError(
                    f"--weights={value!r} is a published ViT checkpoint; a BiT ResNet ({model}) takes none "
                    "(BiT checkpoints are not supported): pass --weights=none or a .weights.h5 / .keras file of "
                    f"the same architecture. Received: --model={model!r}"
                )
        elif BIT_REFUSED_FLAGS[name] in (None, value):
            raise ValueError(
                f"--{name}={value} applies to ViT models only: a BiT ResNet has no tokens to pool"
                + (" (its features are pooled with --pooling=avg or max)" if name == "pooling" else "")
                + f". Received: --model={model!r}"
            )


def define_model(flag_values=FLAGS, *, default=None, required=False, keras_files=True, extra_names=(),
                 refuse_bit=None, help=None):
    """`--model`: a variant name (`vit_b16`, any spelling `keras_vit.variants.get_variant` takes), a BiT ResNet
    name (`variants.BIT_MODELS`) or, with `keras_files`, a `.keras` file. Checked when the flags are parsed: an unknown
    name or a missing file is a usage error, and so is a `.keras` file together with `--image_size`,
    `--classes`, `--pooling` or `--classifier` (the file fixes the architecture), or a BiT name with a ViT-only
    value (`check_bit_arguments`). `extra_names`: more accepted values (e.g. "tiny"). `refuse_bit`: the tool's
    reason to refuse the BiT names (a usage error saying it; they are then not listed as known)."""
    names = _variant_names() + ([] if refuse_bit else list(variants.BIT_MODELS))
    what = "a variant name (" + ", ".join(names) + ")" + (" or a .keras file" if keras_files else "")
    holder = flags.DEFINE_string("model", default, help or f"The model: {what}.", flag_values=flag_values)
    if required:
        require(flag_values, "model")

    def check(fv, argv):
        model = fv.model
        if model is None or model in extra_names:
            return
        if model.endswith(".keras"):
            if not keras_files:
                raise UsageError(f"--model must be a variant name here, not a .keras file. Received: --model={model!r}")
            if not os.path.isfile(model):
                raise UsageError(f"The model file does not exist. Received: --model={model!r}")
            _refuse_architecture_flags(fv, f"--model={model!r}")
            return
        bit = variants.bit_name(model)
        if bit is not None:
            if refuse_bit:
                raise UsageError(f"{refuse_bit} Received: --model={model!r}")
            given = {name: fv[name].value for name in (*BIT_REFUSED_FLAGS, "weights") if name in fv}
            try:
                check_bit_arguments(model, **given)
            except ValueError as error:
                raise UsageError(str(error)) from None
            return
        from keras_vit.variants import get_variant

        try:
            get_variant(model)
        except ValueError:
            raise UsageError(f"Unknown model. Received: {model!r}. Known: {what}.") from None

    _CHECKS.setdefault(flag_values, []).append(check)
    return holder


def define_weights(flag_values=FLAGS, *, default=None, required=False, purpose="the results", help=None):
    """`--weights`: `none` (random initialisation), a published name, or a file (a checkpoint, a
    `.weights.h5`, or a trained `.keras` model, which then is the model). Checked when the flags are parsed:
    a value that is neither `none`, a published name nor an existing file or folder is a usage error. With
    `required`, a variant-name `--model` needs `--weights` (random weights would silently make `purpose`
    meaningless): `--weights=none` asks for them explicitly."""
    from keras_vit.weights import all_names

    text = help or (
        "The weights: none (random initialisation), a published name (" + ", ".join(all_names()) + ", imagenet) "
        "or a file (.npz, .safetensors, Hugging Face folder, .weights.h5, or a trained .keras model, which "
        "then is the model)" + (". Required with a variant name: pass --weights=none explicitly for random "
                                "weights (default with a .keras model: its own)" if required else "") + "."
    )
    holder = flags.DEFINE_string("weights", default, text, flag_values=flag_values)

    def check(fv, argv):
        weights, model = fv.weights, fv.model if "model" in fv else None
        if weights is None:
            if required and model is not None and not model.endswith(".keras"):
                raise UsageError(
                    f"--weights is required with a variant name: random weights would make {purpose} meaningless. "
                    "Pass --weights=none explicitly for random weights, or a published name or a weights file."
                )
            return
        check_weights(weights)
        if weights.endswith(".keras") and model is not None:
            _refuse_architecture_flags(fv, f"--weights={weights!r}")

    _CHECKS.setdefault(flag_values, []).append(check)
    return holder


def check_weights(weights: str) -> None:
    """`none`, a published name, or an existing file or folder; else a UsageError (no Keras imported)."""
    from keras_vit.weights import IMAGENET_ALIAS, all_names, is_name

    if weights.lower() == "none" or is_name(weights) or os.path.exists(weights):
        return
    raise UsageError(
        f"--weights is neither none, a published name ({', '.join(all_names())}, {IMAGENET_ALIAS}) nor an "
        f"existing file or folder. Received: --weights={weights!r}"
    )


def _refuse_architecture_flags(fv, source):
    for name in ARCHITECTURE_FLAGS:
        if name in fv and fv[name].present:
            raise UsageError(
                f"--{name} cannot apply to a .keras model ({source}): the file fixes its architecture. Drop "
                f"--{name}, or pass a variant name as --model."
            )


def define_image_size(flag_values=FLAGS, *, help=None):
    """`--image_size`: the input side of a variant (resamples the position embedding of loaded weights)."""
    return flags.DEFINE_integer(
        "image_size", None, help or "Input height and width for a variant name, a multiple of the patch size "
        "(default: the weights' resolution, 224 without weights); resamples the position embedding.",
        lower_bound=1, flag_values=flag_values,
    )


def define_classes(flag_values=FLAGS, *, help=None):
    """`--classes`: the head's classes of a variant (another count than the weights' gives a new zero head)."""
    return flags.DEFINE_integer(
        "classes", None, help or "Classes of the head for a variant name (default: the weights', 1000 without "
        "weights); another count gives a new zero-initialised head.", lower_bound=1, flag_values=flag_values,
    )


def define_pooling(flag_values=FLAGS, *, help=None):
    """`--pooling`: no head, the pooled features (`token`, `avg` or `max`)."""
    return flags.DEFINE_enum(
        "pooling", None, ["token", "avg", "max"], help or "Features instead of classes for a variant name: no "
        "head, the [class] token (token) or the patch-token mean (avg) or max (default: the head).",
        flag_values=flag_values,
    )


def define_out(flag_values=FLAGS, help="Where the tool writes.", *, required=True):
    """`--out`: where the tool writes (a file or a folder, per tool)."""
    holder = flags.DEFINE_string("out", None, help, flag_values=flag_values)
    if required:
        require(flag_values, "out")
    return holder


def define_verbose(flag_values=FLAGS):
    """`--verbose`: tracebacks with errors, and the log lines of TensorFlow and absl."""
    return flags.DEFINE_bool(
        "verbose", False, "Show the traceback of an error and the log lines of TensorFlow and absl.",
        flag_values=flag_values,
    )


def require(flag_values, *names):
    """Makes the flags `names` required: each one missing is a usage error, and `--help` says "(required)"."""
    _REQUIRED.setdefault(flag_values, []).extend(names)


def add_check(flag_values, check):
    """Runs `check(flag_values, argv)` after parsing, before the work (and before Keras is imported); it
    raises `UsageError` for a bad value. `argv`: [program, positional arguments...]."""
    _CHECKS.setdefault(flag_values, []).append(check)


# --- parsing, help and errors ------------------------------------------------------------------------------


def help_text(flag_values=FLAGS, usage=None, full=False) -> str:
    """The docstring `usage` and the tool's own flags (all of them with `full`), each with its default."""
    lines = [textwrap.dedent(usage or "").strip(), "", "flags:"]
    required = set(_REQUIRED.get(flag_values, ()))
    seen = set()
    for name in list(flag_values):
        flag = flag_values[name]
        if id(flag) in seen or name != flag.name:
            continue
        seen.add(id(flag))
        module = flag_values.find_module_defining_flag(flag.name) or ""
        if not full and (module == "absl" or module.startswith("absl.")):
            continue
        spelled = f"--[no]{flag.name}" if flag.boolean else f"--{flag.name}"
        text = " ".join((flag.help or "").split())
        if flag.name in required:
            text += " (required)"
        elif flag.default is not None and "(default:" not in text:
            text += f" (default: {default_text(flag.default)})"
        lines.append(textwrap.fill(f"{spelled}: {text}", width=110, initial_indent="  ", subsequent_indent="      "))
    return "\n".join(lines).lstrip("\n") + "\n"


def default_text(value) -> str:
    """A flag's default as `--help` shows it: `true`, `'vit_b16'`, `5`, `'1,5,10'`."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return repr(",".join(str(v) for v in value))
    return repr(value)


def _rewrite(args, renamed):
    if not renamed:
        return args
    pattern = re.compile(r"^--?(" + "|".join(re.escape(name) for name in renamed) + r")(=.*)?$")
    rewritten = []
    for index, arg in enumerate(args):
        if arg == "--":
            return rewritten + args[index:]
        match = pattern.match(arg)
        rewritten.append(f"--{renamed[match.group(1)]}{match.group(2) or ''}" if match else arg)
    return rewritten


def parse(flag_values=FLAGS, args=(), *, usage=None, renamed=None, positional=False) -> list[str]:
    """Parses `args` (without the program name) into `flag_values` from their defaults, then checks them
    (see `main` for `renamed` and `positional`).

    Returns:
        [program name, positional arguments...], as `absl.app.run` passes to main.

    Raises:
        _Exit: after `--help` (0) or a usage error (2), both printed.
    """
    args = list(args)
    ahead = args[: args.index("--")] if "--" in args else args
    if any(arg in HELP_FLAGS for arg in ahead):
        sys.stdout.write(help_text(flag_values, usage, full=any(a.lstrip("-") == "helpfull" for a in ahead)))
        sys.stdout.flush()
        raise _Exit(0)
    program = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "keras_vit"
    try:
        flag_values.unparse_flags()
        argv = flag_values([program, *_rewrite(args, renamed or {})])
        if flag_values is not FLAGS and not FLAGS.is_parsed():
            FLAGS.mark_as_parsed()  # absl.logging and absl.app read the global flags
        if isinstance(positional, (tuple, list)):
            argv = _positional_flags(flag_values, argv, positional)
        elif len(argv) > 1 and not positional:
            raise UsageError(f"Unexpected arguments (every value needs its --flag): {' '.join(argv[1:])}")
        for name in _REQUIRED.get(flag_values, ()):
            if flag_values[name].value is None:
                raise UsageError(f"--{name} is required: {' '.join(flag_values[name].help.split())}")
        for check in _CHECKS.get(flag_values, ()):
            check(flag_values, argv)
    except (flags.Error, app.UsageError) as error:
        print_error(error)
        raise _Exit(USAGE_EXIT) from None
    return argv


def _positional_flags(flag_values, argv, names):
    """Positional arguments as the flags `names`, in order (an old form some tools keep)."""
    values = argv[1:]
    if len(values) > len(names):
        raise UsageError(f"Unexpected arguments (every value needs its --flag): {' '.join(values[len(names):])}")
    for name, value in zip(names, values):
        if flag_values[name].present:
            raise UsageError(f"--{name} given twice: as --{name}={flag_values[name].value!r} and as {value!r}")
        flag_values[name].parse(value)
    return argv[:1]


def print_error(error) -> None:
    """`error: <message on one line>` on stderr."""
    text = " ".join(str(error).split()) or type(error).__name__
    if not isinstance(error, (ValueError, OSError, app.UsageError, flags.Error, extras.MissingExtra)):
        text = f"{type(error).__name__}: {text}"
    sys.stdout.flush()
    print(f"error: {text}", file=sys.stderr, flush=True)


def _verbose(flag_values) -> bool:
    return "verbose" in flag_values and bool(flag_values.verbose)


def execute(work, argv, verbose=False, tensorflow=False) -> int:
    """Runs `work(argv)` after a quiet start; returns its exit status (0 for None), 2 for a usage error,
    1 for a failure, printed on one line (after the traceback with `verbose`)."""
    global _running
    quiet_start(verbose)
    quiet = _quiet(verbose)
    levels, _running = None, True
    try:
        import_keras(verbose, tensorflow=tensorflow)
        if quiet:
            levels = _quiet_loggers()
        status = work(argv)
    except (app.UsageError, flags.Error) as error:
        if verbose:
            traceback.print_exc()
        print_error(error)
        return USAGE_EXIT
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr, flush=True)
        return 130
    except Exception as error:  # noqa: BLE001  every failure is one line; --verbose shows where it came from
        if verbose:
            traceback.print_exc()
        print_error(error)
        return FAILURE_EXIT
    finally:
        _running = False
        _restore_loggers(levels)
    sys.stdout.flush()
    return 0 if status is None else int(status)


def main(work, flag_values=FLAGS, argv=None, *, usage=None, renamed=None, positional=False,
         tensorflow=False) -> int:
    """Parses `argv` (default `sys.argv[1:]`; without the program name) and runs `work`: the exit status.

    Args:
        work: `work(argv) -> int | None`, called with [program, positional arguments...] once the flags are
            parsed and checked.
        flag_values: the tool's `absl.flags.FlagValues`.
        usage: the text `--help` prints above the flags (the tool's docstring).
        renamed: {old flag name: new flag name}; the old spellings keep working.
        positional: whether positional arguments are allowed (else they are a usage error), or the names of
            the flags they stand for, in order (`("weights", "out")`).
        tensorflow: the work needs TensorFlow whatever the Keras backend (imported quietly before it).
    """
    try:
        argv = parse(flag_values, sys.argv[1:] if argv is None else argv, usage=usage, renamed=renamed,
                     positional=positional)
    except _Exit as done:
        return done.code
    return execute(work, argv, _verbose(flag_values), tensorflow)


def run(work, flag_values=FLAGS, *, usage=None, renamed=None, positional=False, tensorflow=False):
    """`absl.app.run(work)` with this convention: parses `sys.argv`, runs `work` and exits with its status."""

    def flags_parser(argv):
        try:
            return parse(flag_values, argv[1:], usage=usage, renamed=renamed, positional=positional)
        except _Exit as done:
            sys.exit(done.code)

    app.run(lambda argv: execute(work, argv, _verbose(flag_values), tensorflow), flags_parser=flags_parser)


# --- a quiet start -----------------------------------------------------------------------------------------


def quiet_start(verbose=False) -> None:
    """`TF_CPP_MIN_LOG_LEVEL=3` unless the user set it or `verbose`, while TensorFlow is not imported yet (it
    reads the variable once, as it loads); call it before anything imports TensorFlow."""
    if not verbose and "tensorflow" not in sys.modules:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def _quiet(verbose) -> bool:
    # Not tied to TF_CPP_MIN_LOG_LEVEL: importing TensorFlow sets it to 1 in its process's environment, so
    # every tool started from a process that imported TensorFlow (a notebook, pytest) inherits a 1.
    return not verbose


class _OnlyErrors(logging.Filter):
    def filter(self, record):
        return record.levelno >= logging.ERROR


_ONLY_ERRORS = _OnlyErrors()


def _quiet_loggers():
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


def import_keras(verbose=False, tensorflow=False) -> None:
    """Imports Keras (with the TensorFlow backend: TensorFlow; with `tensorflow`: TensorFlow in any case)
    without TensorFlow's start-up lines.

    The lines TF_CPP_MIN_LOG_LEVEL=3 leaves (absl's "All log messages before absl::InitializeLog()", oneDNN's
    notice: printed by C++ code while the libraries load) are dropped by importing with fd 2 redirected, and
    shown if the import fails; nothing is dropped with `verbose`.
    """
    missing = [name for name in ["keras"] + (["tensorflow"] if tensorflow else []) if name not in sys.modules]
    if missing:
        with _stderr_captured() if _quiet(verbose) else contextlib.nullcontext():
            for name in missing:
                __import__(name)


def progress(message: str) -> None:
    """A line as a stage of long work starts ("loading ...", "exporting ...", "writing ..."), on stdout, while
    a tool runs (library calls of the same functions print nothing)."""
    if _running:
        print(message, flush=True)


# --- flags -> a model --------------------------------------------------------------------------------------


def _describe_weights(weights):
    return "random weights" if weights is None else f"weights {weights}"


def build_model(model, weights=None, *, image_size=None, classes=None, pooling=None, **kwargs):
    """The one way the tools turn `--model`, `--weights`, `--image_size`, `--classes` and `--pooling` into a
    Keras model: `keras_vit.applications.build_model`, with a progress line.

    Args:
        model: a variant name (any spelling of `keras_vit.variants.get_variant`), a BiT name (`variants.BIT_MODELS`,
            `bit_name`), a `.keras` file, or None:
            the architecture the checkpoint `weights` describes (`keras_vit.ViT(weights=...)`).
        weights: None or "none" (random), a published name, a checkpoint or `.weights.h5` file, or (with a
            variant name) a trained `.keras` file, which is then loaded as the model itself.
        image_size, classes, pooling: for a variant name (or a checkpoint); a `.keras` model refuses them.
        **kwargs: more constructor arguments (`include_top`, `classifier_activation`, ...).

    Raises:
        ValueError: an unknown name, flags a `.keras` model cannot take, or any loading error.
    """
    from keras_vit import applications, weights_files

    weights = weights_files.none_if_none(weights)
    keras_file = model if model is not None and model.endswith(".keras") else None
    if keras_file is None and weights is not None and str(weights).endswith(".keras"):
        keras_file, weights = weights, None  # a trained .keras model given as --weights is the model itself
    if keras_file is not None:
        given = {"image_size": image_size, "classes": classes, "pooling": pooling}
        given.update({k: kwargs[k] for k in ("classifier",) if kwargs.get(k) is not None})
        refused = [name for name, value in given.items() if value is not None]
        if refused:
            raise ValueError(
                f"--{refused[0]} cannot apply to a .keras model ({keras_file!r}): the file fixes its architecture."
            )
        progress(f"loading {keras_file}" + (f" with {_describe_weights(weights)}" if weights else "") + " ...")
        return applications.build_model(keras_file, weights)
    if image_size is not None:
        kwargs["input_shape"] = (image_size, image_size, 3)
    if classes is not None:
        kwargs["classes"] = classes
    if pooling is not None:
        kwargs.update(include_top=False, pooling=pooling)
    if model is None:
        from keras_vit import vit

        progress(f"loading {weights} ...")
        return vit.ViT(weights=weights, **kwargs)
    bit = variants.bit_name(model)
    if bit is not None:
        check_bit_arguments(model, weights=weights, pooling=kwargs.get("pooling"), classifier=kwargs.get("classifier"))
        model = bit
    else:
        from keras_vit.variants import get_variant

        try:
            model = get_variant(model).model_name
        except ValueError:
            pass  # applications.build_model names the known models
    progress(f"building {model} with {_describe_weights(weights)} ...")
    return applications.build_model(model, weights, **kwargs)


def model_from_flags(flag_values=FLAGS, **kwargs):
    """`build_model` from the parsed `--model`, `--weights`, `--image_size`, `--classes` and `--pooling` (those
    of them that `flag_values` defines); `kwargs` go to the constructor."""
    values = {name: flag_values[name].value for name in ("image_size", "classes", "pooling") if name in flag_values}
    weights = flag_values.weights if "weights" in flag_values else None
    return build_model(flag_values.model, weights, **values, **kwargs)


def keras_file_of(flag_values=FLAGS) -> str | None:
    """The `.keras` file the flags load as the model (`--model`, or `--weights` with a variant name), or None."""
    for name in ("model", "weights"):
        value = flag_values[name].value if name in flag_values else None
        if value is not None and value.endswith(".keras"):
            return value
    return None
