"""Optional packages, each imported through `require`, whose error names the extra that installs it.

The extras are those of setup.cfg's `[options.extras_require]` (`inspect`, `onnx`, `image`, `keras-cv`, ...).
A tool then stops with one line instead of a bare `ModuleNotFoundError`, naming the distribution as PyPI knows
it (`DISTRIBUTION`, `install_hint`):

    error: the ONNX export needs the tf2onnx package, which is not installed: pip install "keras-vit-applications[onnx]"

Example:
    >>> from keras_vit import extras
    >>> extras.require("json", "none", "this example").__name__
    'json'
    >>> try:
    ...     extras.require("nothing", "onnx", "it")
    ... except extras.MissingExtra as error:  # a ModuleNotFoundError
    ...     print(error)
    it needs the nothing package, which is not installed: pip install "keras-vit-applications[onnx]"
"""

from __future__ import annotations

import importlib

from keras_vit import DISTRIBUTION  # the name the package is installed by (declared once, in keras_vit/__init__)

PACKAGES = {
    "PIL": "Pillow",
    "ai_edge_litert": "ai-edge-litert",
    "keras_cv": "keras-cv",
    "sklearn": "scikit-learn",
    "tensorflow_datasets": "tensorflow-datasets",
}
"""Top-level module -> the package (distribution) that installs it, where the two names differ."""


class MissingExtra(ModuleNotFoundError):
    """An optional package is not installed; the message says which extra installs it. A
    `ModuleNotFoundError`, so code that catches `ImportError` still does; the tools print it as one
    `error: ...` line (`keras_vit.cli.print_error`)."""


def install_hint(extra: str) -> str:
    """The command that installs an extra: `pip install "keras-vit-applications[image]"`."""
    return f'pip install "{DISTRIBUTION}[{extra}]"'


def package_of(module: str) -> str:
    """The package that installs `module` (`"PIL.Image"` -> `"Pillow"`, `"tf2onnx"` -> `"tf2onnx"`)."""
    top = module.split(".")[0]
    return PACKAGES.get(top, top)


def require(module: str, extra: str, purpose: str):
    """Imports and returns `module`, an optional package's (sub)module.

    Args:
        module: what to import, e.g. `"matplotlib"` or `"PIL.Image"`.
        extra: the extra of setup.cfg that installs its package, e.g. `"inspect"`.
        purpose: what needs it, the start of the message: `"the ONNX export"`.

    Raises:
        MissingExtra: the package is not installed: `"{purpose} needs the {package} package, which is not
            installed: pip install "keras-vit-applications[{extra}]""` (`install_hint`). A module missing inside
            an installed package's own imports (another package) is raised as it is.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        top = module.split(".")[0]
        if error.name is None or error.name.split(".")[0] != top:
            raise
        message = f"{purpose} needs the {package_of(module)} package, which is not installed"
        raise MissingExtra(f"{message}: {install_hint(extra)}", name=top) from error
