"""keras_vit: the Vision Transformer (arXiv 2010.11929) as Keras 3 applications.

Example:
    >>> import keras_vit
    >>> model = keras_vit.ViT_Ti16(weights=None)
    >>> model.count_params()
    5717416

The names below are imported on first use, so `import keras_vit` alone does not import Keras or TensorFlow
(the command-line tools answer `--help` without them). keras_vit's layers are still registered with Keras
before any `.keras` file can be loaded: at once when Keras is already imported, else as soon as it is.
"""

import importlib as _importlib
import importlib.abc as _importlib_abc
import importlib.metadata as _metadata
import logging as _logging
import sys as _sys

__version__ = "0.1.0"

DISTRIBUTION = "keras-vit-applications"
"""The name this package is installed under (`pip install keras-vit-applications`); it imports as `keras_vit`.
PyPI's `keras-vit` is an unrelated project that installs a module of the same name."""

_OTHER_DISTRIBUTION = "keras-vit"

_EXPORTS = {
    **{name: "keras_vit.applications" for name in (
        "ViT_Ti16", "ViT_S16", "ViT_S32", "ViT_B8", "ViT_B16", "ViT_B32", "ViT_L16", "ViT_L32", "ViT_H14",
        "ViT_R50_B16", "ViT_R_Ti16", "ViT_R26_S32", "ViT_R26_B32", "ViT_R50_L32",
    )},
    **{name: "keras_vit.layers" for name in (
        "Patches", "PatchEncoder", "TransformerBlock", "MultiHeadSelfAttention", "DropPath", "TokenPooling",
    )},
    "ViT": "keras_vit.applications",
    "BiT": "keras_vit.bit",
    "BiT_R50x1": "keras_vit.bit",
    "forward_flops": "keras_vit.flops",
    "layout_map": "keras_vit.distribution",
    "feature_extractor": "keras_vit.features",
    "Distiller": "keras_vit.distillation",
    "preprocess_input": "keras_vit.preprocessing",
    "decode_predictions": "keras_vit.preprocessing",
    "WeightsDownloadError": "keras_vit.checkpoints.download",
    "WeightsChecksumError": "keras_vit.checkpoints.download",
    "list_models": "keras_vit.registry",
    "list_weights": "keras_vit.registry",
}

PUBLIC_MODULES = {
    "layers": "keras_vit.layers",
    "loading": "keras_vit.checkpoints.loading",
    "weights": "keras_vit.weights",
    "variants": "keras_vit.variants",
    "preprocessing": "keras_vit.preprocessing",
    "export": "keras_vit.export",
    "inspect": "keras_vit.inspect",
    "convert": "keras_vit.convert",
    "download": "keras_vit.checkpoints.download",
    "position_embedding": "keras_vit.checkpoints.position_embedding",
    "initialization": "keras_vit.initialization",
    "extras": "keras_vit.extras",
    "lora": "keras_vit.lora",
    "quantization": "keras_vit.quantization",
    "distillation": "keras_vit.distillation",
    "distribution": "keras_vit.distribution",
}
"""The modules the documentation names (`keras_vit.loading`, ...) -> where each lives. They, and the names of
`__all__`, are what `keras_vit.<name>` resolves; `dir(keras_vit)` lists both. Every other module is internal:
`keras_vit.model_parts` is an AttributeError unless something has imported it (import it by its full name)."""

__all__ = [
    "ViT",
    "ViT_Ti16",
    "ViT_S16",
    "ViT_S32",
    "ViT_B8",
    "ViT_B16",
    "ViT_B32",
    "ViT_L16",
    "ViT_L32",
    "ViT_H14",
    "ViT_R50_B16",
    "ViT_R_Ti16",
    "ViT_R26_S32",
    "ViT_R26_B32",
    "ViT_R50_L32",
    "BiT",
    "BiT_R50x1",
    "forward_flops",
    "layout_map",
    "feature_extractor",
    "Distiller",
    "Patches",
    "PatchEncoder",
    "TransformerBlock",
    "MultiHeadSelfAttention",
    "DropPath",
    "TokenPooling",
    "preprocess_input",
    "decode_predictions",
    "list_models",
    "list_weights",
    "WeightsDownloadError",
    "WeightsChecksumError",
    "DISTRIBUTION",
    "__version__",
]


def __getattr__(name):
    if name in _EXPORTS:
        value = getattr(_importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    if name in PUBLIC_MODULES:  # `keras_vit.loading`, ... without an import
        value = _importlib.import_module(PUBLIC_MODULES[name])
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted({*__all__, *PUBLIC_MODULES})


def _import_all():
    """What `import keras_vit` used to import at once: every public name, so every layer is registered."""
    for name in _EXPORTS:
        __getattr__(name)


def _register() -> None:
    """Registers keras_vit's layers (imports every public name); an error says it was this registration's.

    Raises:
        ImportError: naming keras_vit's registration, the error as its cause.
    """
    try:
        _import_all()
    except Exception as error:
        raise ImportError(
            f"keras_vit could not register its layers with Keras after `import keras` ({type(error).__name__}: "
            f"{error}); `.keras` files holding keras_vit layers would not load."
        ) from error


def _importing_keras_vit(but=None) -> bool:
    """Whether a keras_vit module (other than `but`) is being executed: its import started and has not ended."""
    return any(getattr(getattr(module, "__spec__", None), "_initializing", False)
               for name, module in list(_sys.modules.items())
               if name != but and (name == __name__ or name.startswith(__name__ + ".")))


class _AfterKerasImport(_importlib_abc.MetaPathFinder):
    """Registers keras_vit's layers right after `import keras` runs, before the importer gets Keras back.

    It stays on `sys.meta_path` until Keras has actually been executed and the registration has run:
    `importlib.util.find_spec("keras")` alone (which `import tensorflow` calls to locate Keras without importing
    it) consults it too, and the spec such a call gets is never loaded. Every spec it hands out for `keras` runs
    the registration after Keras's own module code, whichever importer loads it.

    When Keras is imported by a keras_vit module being imported (`import keras_vit.layers` in a fresh process),
    the registration, which imports that module too, waits until the outermost keras_vit module being imported
    has run: until the registration has run, the finder hands out keras_vit's own modules with that step after
    their code. A registration that fails is not swallowed: the import that ran it raises an ImportError naming
    keras_vit's registration, with the error as its cause.
    """

    pending = False
    """Keras was imported while a keras_vit module was being imported: the registration waits for its end."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "keras" and not fullname.startswith(__name__ + "."):
            return None
        spec = None
        for finder in _sys.meta_path:  # the finders after this one locate the real module
            if finder is self or isinstance(finder, _AfterKerasImport) or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module
        finder = self

        def register():
            if finder in _sys.meta_path:
                _sys.meta_path.remove(finder)  # Keras is loaded: once is enough
            finder.pending = False
            _register()

        def exec_then_register(module):
            exec_module(module)
            if _importing_keras_vit():
                finder.pending = True  # importing keras_vit's modules now would find them half-run
            else:
                register()

        def exec_then_register_if_pending(module):
            exec_module(module)
            if finder.pending and not _importing_keras_vit(but=fullname):
                register()

        spec.loader.exec_module = exec_then_register if fullname == "keras" else exec_then_register_if_pending
        return spec


def _check_other_distribution() -> None:
    """One line when PyPI's unrelated `keras-vit` is installed too: both write `keras_vit/` into site-packages."""
    try:
        other = _metadata.distribution(_OTHER_DISTRIBUTION)
    except _metadata.PackageNotFoundError:
        return
    if other.metadata["Name"] != _OTHER_DISTRIBUTION:  # a normalised lookup that found this package itself
        return
    _logging.getLogger("keras_vit").warning(
        "The unrelated PyPI package %s %s is installed beside %s: both install the module keras_vit, so this one "
        "may be partly overwritten. Run `pip uninstall %s` and reinstall %s.", _OTHER_DISTRIBUTION,
        other.version, DISTRIBUTION, _OTHER_DISTRIBUTION, DISTRIBUTION)


_check_other_distribution()

if "keras" in _sys.modules:
    _import_all()
elif not any(isinstance(finder, _AfterKerasImport) for finder in _sys.meta_path):
    _sys.meta_path.insert(0, _AfterKerasImport())
