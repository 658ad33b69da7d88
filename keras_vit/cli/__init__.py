"""The one command-line convention of keras_vit's tools, shared by all of them.

`python -m keras_vit`, `keras_vit.convert`, `keras_vit.export`, `keras_vit.inspect`, `training.fewshot` and
`training.experiments` (and `training.train`, an absl app of its own) follow it:

* absl flags (`absl.flags`, run by `absl.app.run`), underscores only, every value given with its flag (a
  positional argument is a usage error, found first: `Positional arguments are not taken: a.jpg; give each as
  --images=a.jpg` where the tool names the flag, `take_positional_as`). The flags the tools share are defined by
  the helpers here so that they are spelled and mean the same everywhere: `--model` (a variant name such as
  `vit_b16`, the BiT ResNet `bit_r50x1`, or a `.keras` file), `--weights` (`none` for random initialisation, a
  published name, or a file), `--image_size`, `--classes`, `--pooling` (`keras_vit.cli.model`, which also turns
  them into a model), `--out` (where the tool writes) and `--verbose`. A required flag (`require`, which says
  "(required)" in `--help`) and a value are checked by absl's validators (`flags.register_validator`,
  `flags.register_multi_flags_validator`) when the flags are parsed.
* `--help` (also `-h`, `--helpshort`, `--helpfull`) prints the tool's docstring and its flags with their
  defaults on stdout and exits 0, before Keras or TensorFlow is imported: the tools import them only in the
  work itself, after the flags are parsed.
* A usage error (an unknown flag, a bad or missing value, flags that cannot go together) is one line
  `error: ...` on stderr and exit status 2, also found before anything heavy is imported. A failure of the
  work itself (a `ValueError`, an `OSError`, ...) is one line `error: ...` and exit status 1; `--verbose` adds
  the traceback. So is a missing optional package: imported through `keras_vit.extras.require`, its line names
  the extra that installs it (`... needs the tf2onnx package, which is not installed: pip install
  "keras-vit-applications[onnx]"`).
* The work's errors come from the library, in Python's words (`pass weights=None`, `overwrite=True`); a tool
  prints them in its flags' words (`pass --weights=none`, `--overwrite`): `flag_spelling`, the one place where
  the translation lives (`name_arguments` for a library argument named unlike its flag, `destination` ->
  `--out`). keras_vit's own log lines (the `"keras_vit"` logger) print plainly, `warning: <message>`, not
  with absl's prefix (`keras_vit.cli.console.plain_library_lines`).
* A quiet start, and a line on stdout as each stage of long work starts (`progress`): `keras_vit.cli.console`.

A tool, with its own `FlagValues` (several tools can then be imported into one process, e.g. by the tests):

    from absl import flags
    from keras_vit import cli
    from keras_vit.cli import model as cli_model

    FLAGS = flags.FlagValues()
    cli_model.define_model(FLAGS, required=True)
    cli_model.define_weights(FLAGS, required=True)
    cli.define_out(FLAGS, "output folder")
    cli.define_verbose(FLAGS)
    flags.register_validator("out", lambda out: out.endswith("/"), "--out must be a folder, ending in /",
                             flag_values=FLAGS)

    def run(argv):                  # the work: flags parsed and valid, argv = [program]
        model = cli_model.model_from_flags(FLAGS)
        ...

    def main(argv=None) -> int:     # for tests and callers: the exit status, never sys.exit
        return cli.main(run, FLAGS, argv, usage=__doc__)

    if __name__ == "__main__":
        cli.run(run, FLAGS, usage=__doc__)   # absl.app.run with this convention

`cli.main`/`cli.run` take `tensorflow=True` for work that imports TensorFlow whatever the Keras backend (so it
is imported quietly too).

An absl app on the global `flags.FLAGS` (`training.train`) calls `cli.quiet_start()` before anything imports
TensorFlow, may define its shared flags with these helpers (their `flag_values` default to `flags.FLAGS`)
plus `cli.define_verbose()`, and ends with `cli.run(main, usage=__doc__)` instead of `app.run(main)`
(`main(argv)` as absl calls it; `app.UsageError` raised in it is a usage error, exit 2; a `sys.exit(n)` in it
is kept). Messages meant for the user go through `print`/`cli.progress` or a standard logger: the absl logger
shows only errors unless `--verbose`.
"""

from __future__ import annotations

import os
import re
import sys
import textwrap
import traceback

from absl import app, flags

from keras_vit import extras
from keras_vit.cli.console import progress, quiet_start, running  # re-exported (__all__)

__all__ = [  # what a tool uses, as cli.<name>; the model flags are `keras_vit.cli.model`'s
    "UsageError", "add_check", "default_text", "define_out", "define_verbose", "execute", "flag_spelling",
    "help_text", "main", "name_arguments", "parse", "print_error", "progress", "quiet_start", "require", "run",
    "take_positional_as",
]

flags.disclaim_key_flags()  # the flags the helpers define belong to the tool that calls them

FLAGS = flags.FLAGS

HELP_FLAGS = ("-h", "-?", "--help", "-help", "--helpshort", "-helpshort", "--helpfull", "-helpfull")
USAGE_EXIT = 2
FAILURE_EXIT = 1

_CHECKS: dict = {}  # FlagValues -> the callables of `add_check`
_ARGUMENTS: dict = {}  # FlagValues -> {library argument name: the flag that sets it}, of `name_arguments`
_POSITIONAL: dict = {}  # FlagValues -> the flag a positional argument is likely meant for, of `take_positional_as`


class UsageError(app.UsageError):
    """A bad or missing flag value, or flags that cannot go together: `error: ...`, exit status 2."""

    def __init__(self, message):
        super().__init__(message, exitcode=USAGE_EXIT)


class _Exit(Exception):
    def __init__(self, code):
        super().__init__(code)
        self.code = code


def require(flag_values, *names):
    """Makes the flags `names` required: an absl validator (`flags.mark_flag_as_required`'s, in the tools'
    words: `flag --out=None: --out is required`), said in `--help` ("(required)")."""
    for name in names:
        flags.register_validator(name, lambda value: value is not None, f"--{name} is required",
                                 flag_values=flag_values)
        flag_values[name].help = f"{flag_values[name].help} (required)"


# --- the shared flags (those that choose a model: keras_vit.cli.model) -------------------------------------


def utf8_path_problem(flag: str, value) -> str | None:
    """Why `value` cannot be a path a tool writes to, or None: TensorFlow and the exports write UTF-8 paths only, and
    a name Python decoded with surrogates (bytes that are not UTF-8) cannot become one."""
    if value is None:
        return None
    try:
        str(value).encode("utf-8")
    except UnicodeEncodeError as error:
        byte = ord(str(value)[error.start]) - 0xDC00
        return (f"--{flag}={str(value).encode('utf-8', 'surrogateescape')!r} is not a UTF-8 path (byte 0x{byte:02x} "
                f"at position {error.start}): TensorFlow writes UTF-8 paths only; choose a name in UTF-8")
    return None


def require_utf8_path(flag_values, name: str) -> None:
    """A validator: the path flag `name` must be UTF-8 (`utf8_path_problem`), a usage error in one line."""
    def check(value):
        problem = utf8_path_problem(name, value)
        if problem:
            raise flags.ValidationError(problem)
        return True
    flags.register_validator(name, check, flag_values=flag_values)


def define_out(flag_values=FLAGS, help="Where the tool writes.", *, required=True):
    """`--out`: where the tool writes (a file or a folder, per tool), a UTF-8 path."""
    holder = flags.DEFINE_string("out", None, help, flag_values=flag_values)
    if required:
        require(flag_values, "out")
    require_utf8_path(flag_values, "out")
    return holder


def define_verbose(flag_values=FLAGS):
    """`--verbose`: tracebacks with errors, and the log lines of TensorFlow and absl."""
    return flags.DEFINE_bool(
        "verbose", False, "Show the traceback of an error and the log lines of TensorFlow and absl.",
        flag_values=flag_values,
    )


def add_check(flag_values, check):
    """Runs `check(flag_values, argv)` once the flags are parsed and absl's validators passed, before the work
    (and before Keras is imported); it raises `UsageError` for a bad value. `argv`: [program]. A check of one
    flag, or of a few named ones, is simpler as an absl validator (`flags.register_validator`,
    `flags.register_multi_flags_validator`)."""
    _CHECKS.setdefault(flag_values, []).append(check)


def take_positional_as(flag_values, name):
    """Names the flag that a positional argument of the tool is likely meant for (`keras_vit.inspect`'s image
    files: `images`), so that its usage error says how to give them: `python -m keras_vit.inspect a.jpg` ->
    `error: Positional arguments are not taken: a.jpg; give each as --images=a.jpg`."""
    _POSITIONAL[flag_values] = name


def name_arguments(flag_values, **flag_of):
    """Says which flag sets a library argument of another name, for the tool's error lines (`flag_spelling`):
    `cli.name_arguments(FLAGS, destination="out")` turns `Received: destination='x'` into `Received: --out='x'`.
    A library argument named as a flag (`weights`, `overwrite`, ...) needs nothing."""
    _ARGUMENTS.setdefault(flag_values, {}).update(flag_of)


# --- the library's words in the tools' words ---------------------------------------------------------------

_VALUE = r"""None|True|False|'[^']*'|"[^"]*"|[^\s,;:()`'"]+"""
NONE_VALUES = {"weights": "none"}
"""Flags whose Python `None` the command line spells as a value (`weights=None` is `--weights=none`)."""


def flag_spelling(text: str, flag_values=FLAGS) -> str:
    """A library message in the words of the tool whose flags are `flag_values`: each keyword argument that a
    flag of the tool sets (named as the flag, or named by `name_arguments`) is spelled as that flag.

    `weights=None` and `--weights=None` -> `--weights=none`; `overwrite=True` -> `--overwrite` (`False` ->
    `--nooverwrite`); `version=3` -> `--version=3`; `` `weights` `` and `` `weights=` `` -> `--weights`;
    `--overwrite (`--overwrite`)`, a library message naming both spellings, -> `--overwrite`. Names that are no
    flag of the tool (`path=...`) and absl's own flags are left as they are. The one place where the tools
    translate: `execute` prints every failure of the work through it (the library keeps Python's spelling for
    Python callers); usage errors found while parsing are absl's and the tools' own words, flags already.

    Example:
        >>> fv = flags.FlagValues()
        >>> _ = flags.DEFINE_string("weights", None, "", flag_values=fv)
        >>> _ = flags.DEFINE_bool("overwrite", False, "", flag_values=fv)
        >>> flag_spelling("pass weights=None or overwrite=True (`--overwrite`). Received: path='a'", fv)
        "pass --weights=none or --overwrite. Received: path='a'"
    """
    names = {name: name for name in _tool_flags(flag_values)}
    names.update({argument: flag for argument, flag in _ARGUMENTS.get(flag_values, {}).items() if flag in names})
    if not names:
        return text
    alternatives = "|".join(re.escape(name) for name in sorted(names, key=len, reverse=True))

    def spelled(match):
        name, value = names[match[2]], match[3]
        if flag_values[name].boolean and value in ("True", "False"):
            return f"--{name}" if value == "True" else f"--no{name}"
        if value == "None" and name in NONE_VALUES:
            value = NONE_VALUES[name]
        return f"--{name}={value}"

    text = re.sub(rf"(?<![\w.\-/])(`?)(?:--)?({alternatives})=({_VALUE})\1(?!\w)", spelled, text)
    text = re.sub(rf"`({alternatives})=?`", lambda match: f"--{names[match[1]]}", text)
    return re.sub(r"(--[\w-]+(?:=\S+)?) \(`?\1`?\)", r"\1", text)  # both spellings given: one


def _tool_flags(flag_values) -> list[str]:
    """The flags of the tool itself: not absl's own (`--v`, `--logtostderr`, ...)."""
    names = []
    for name in list(flag_values):
        flag = flag_values[name]
        module = flag_values.find_module_defining_flag(flag.name) or ""
        if name == flag.name and not (module == "absl" or module.startswith("absl.")):
            names.append(name)
    return names


# --- parsing, help and errors ------------------------------------------------------------------------------


def help_text(flag_values=FLAGS, usage=None, full=False) -> str:
    """The docstring `usage` and the tool's own flags (all of them with `full`), each with its default."""
    lines = [textwrap.dedent(usage or "").strip(), "", "flags:"]
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
        if flag.default is not None and "(default:" not in text:
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


def parse(flag_values=FLAGS, args=(), *, usage=None) -> list[str]:
    """Parses `args` (without the program name) into `flag_values` from their defaults, then checks them:
    absl's required flags and validators, then the checks of `add_check`.

    Returns:
        [program name], as `absl.app.run` passes to main.

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
        _refuse_positional(flag_values, _positional(flag_values, args))  # before the required flags' checks
        flag_values.unparse_flags()
        argv = flag_values([program, *args])
        if flag_values is not FLAGS and not FLAGS.is_parsed():
            FLAGS.mark_as_parsed()  # absl.logging and absl.app read the global flags
        _refuse_positional(flag_values, argv[1:])
        for check in _CHECKS.get(flag_values, ()):
            check(flag_values, argv)
    except (flags.Error, app.UsageError) as error:
        print_error(error)
        raise _Exit(USAGE_EXIT) from None
    return argv


def _positional(flag_values, args) -> list[str]:
    """The positional arguments among `args` as absl would leave them: a word that is no flag and no value of
    the non-boolean flag before it (`--model vit_b16`); everything after `--`. Stops at an unknown flag (absl
    names it)."""
    found, args = [], list(args)
    while args:
        arg = args.pop(0)
        if arg == "--":
            return found + args
        if not arg.startswith("-") or arg == "-":
            found.append(arg)
            continue
        name = arg.lstrip("-").split("=", 1)[0]
        if name in flag_values:
            if "=" not in arg and not flag_values[name].boolean and args:
                args.pop(0)  # its value
        elif not (name.startswith("no") and name[2:] in flag_values and flag_values[name[2:]].boolean):
            break  # an unknown flag: absl's error
    return found


def _refuse_positional(flag_values, positional) -> None:
    if not positional:
        return
    message = f"Positional arguments are not taken: {' '.join(positional)}; "
    name = _POSITIONAL.get(flag_values)
    if name is None:
        raise UsageError(message + "give every value with its flag (--name=value)")
    raise UsageError(message + "give each as " + " ".join(f"--{name}={arg}" for arg in positional))


def print_error(error, flag_values=None) -> None:
    """`error: <message on one line>` on stderr (the failed absl validators', a line each, joined by "; "); with
    `flag_values`, in the words of that tool's flags (`flag_spelling`)."""
    problems = str(error).splitlines() if isinstance(error, flags.IllegalFlagValueError) else [str(error)]
    if flag_values is not None:
        problems = [flag_spelling(problem, flag_values) for problem in problems]
    problems = [" ".join(problem.split()) for problem in problems if problem.strip()]
    text = "; ".join(problem.rstrip(".") for problem in problems) if len(problems) > 1 else "".join(problems)
    text = text or type(error).__name__
    if not isinstance(error, (ValueError, OSError, app.UsageError, flags.Error, extras.MissingExtra)):
        text = f"{type(error).__name__}: {text}"
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")  # a path of bytes that are not UTF-8: escaped
    sys.stdout.flush()
    print(f"error: {text}", file=sys.stderr, flush=True)


def _verbose(flag_values) -> bool:
    return "verbose" in flag_values and bool(flag_values.verbose)


def execute(work, argv, verbose=False, tensorflow=False, flag_values=None) -> int:
    """Runs `work(argv)` after a quiet start (`keras_vit.cli.console.running`); returns its exit status (0 for
    None), 2 for a usage error, 1 for a failure, printed on one line (after the traceback with `verbose`), in
    the words of the tool's flags `flag_values` (`flag_spelling`)."""
    try:
        with running(verbose, tensorflow=tensorflow):
            status = work(argv)
    except (app.UsageError, flags.Error) as error:
        if verbose:
            traceback.print_exc()
        print_error(error, flag_values)
        return USAGE_EXIT
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr, flush=True)
        return 130
    except Exception as error:  # noqa: BLE001  every failure is one line; --verbose shows where it came from
        if verbose:
            traceback.print_exc()
        print_error(error, flag_values)
        return FAILURE_EXIT
    sys.stdout.flush()
    return 0 if status is None else int(status)


def main(work, flag_values=FLAGS, argv=None, *, usage=None, tensorflow=False) -> int:
    """Parses `argv` (default `sys.argv[1:]`; without the program name) and runs `work`: the exit status.

    Args:
        work: `work(argv) -> int | None`, called with [program] once the flags are parsed and checked.
        flag_values: the tool's `absl.flags.FlagValues`.
        usage: the text `--help` prints above the flags (the tool's docstring).
        tensorflow: the work needs TensorFlow whatever the Keras backend (imported quietly before it).
    """
    try:
        argv = parse(flag_values, sys.argv[1:] if argv is None else argv, usage=usage)
    except _Exit as done:
        return done.code
    return execute(work, argv, _verbose(flag_values), tensorflow, flag_values)


def run(work, flag_values=FLAGS, *, usage=None, tensorflow=False):
    """`absl.app.run(work)` with this convention: parses `sys.argv`, runs `work` and exits with its status."""

    def flags_parser(argv):
        try:
            return parse(flag_values, argv[1:], usage=usage)
        except _Exit as done:
            sys.exit(done.code)

    app.run(lambda argv: execute(work, argv, _verbose(flag_values), tensorflow, flag_values),
            flags_parser=flags_parser)
