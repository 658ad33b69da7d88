"""The runnable examples in the docstrings of every module of `keras_vit/` and `training/` run and print what
they say.

The modules are found by walking the two packages (`pkgutil.walk_packages`), so a new module's examples run
without being listed here; only modules whose source holds an example (`>>>`) are imported (the command-line
entry points define absl flags on import). One test per module; `SLOW` docstrings run in the e2e tier.
"""

import doctest
import importlib
import importlib.util
import pkgutil

import pytest

import keras_vit
import training

PACKAGES = (keras_vit, training)

# Modules that must keep at least one runnable example (the model code's reference examples).
MUST_HAVE_EXAMPLES = [
    "keras_vit.layers.patches",
    "keras_vit.layers.patch_encoder",
    "keras_vit.layers.transformer_block",
    "keras_vit.layers.attention",
    "keras_vit.layers.drop_path",
    "keras_vit.layers.pooling",
    "keras_vit.variants",
    "keras_vit.vit",
    "keras_vit.weights",
    "keras_vit.checkpoints.download",
    "keras_vit.model_config",
    "keras_vit.checkpoints.canonical",
    "keras_vit.checkpoints.own",
]

# Docstrings whose example cannot be tiny: the named constructors build their full-size model (weights=None).
_FULL_SIZE = "builds the full-size model of a named constructor (random weights): {} s on 2 CPU cores"
SLOW = {
    "keras_vit.applications.ViT_H14": _FULL_SIZE.format(30),
    "keras_vit.applications.ViT_L32": _FULL_SIZE.format(21),
    "keras_vit.applications.ViT_L16": _FULL_SIZE.format(12),
    "keras_vit.applications.ViT_R50_B16": _FULL_SIZE.format(8),
    "keras_vit.applications.ViT_R50_L32": _FULL_SIZE.format(15),
    "keras_vit.applications.ViT_R26_B32": _FULL_SIZE.format(3.2),
    "keras_vit.applications.ViT_B16": _FULL_SIZE.format(4.5),
    "keras_vit.applications.ViT_B32": _FULL_SIZE.format(3.4),
}


def _reraise(name):
    raise  # a subpackage that fails to import fails the collection (walk_packages would skip it silently)


def module_names():
    """Every module and package under `PACKAGES`, in walk order."""
    names = []
    for package in PACKAGES:
        names.append(package.__name__)
        names += [info.name for info in pkgutil.walk_packages(package.__path__, package.__name__ + ".",
                                                               onerror=_reraise)]
    return names


def _has_examples(name):
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return False
    with open(spec.origin, encoding="utf-8") as f:
        return ">>>" in f.read()


def _collect():
    """The docstrings with examples of each module, by module name."""
    tests = {}
    finder = doctest.DocTestFinder(exclude_empty=True)
    for name in module_names():
        if _has_examples(name):
            found = sorted((test for test in finder.find(importlib.import_module(name)) if test.examples),
                           key=lambda test: test.name)
            if found:
                tests[name] = found
    return tests


DOCTESTS = _collect()


def _run(tests):
    report = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in tests:
        runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)


@pytest.mark.parametrize("module", sorted(DOCTESTS))
def test_docstring_examples(module):
    """The module's examples, one test per module (a Keras session is cleared after each test)."""
    _run([test for test in DOCTESTS[module] if test.name not in SLOW])


@pytest.mark.e2e
@pytest.mark.parametrize("name", sorted(SLOW))
def test_slow_docstring_example(name):
    """`SLOW`'s reasons: the examples that cannot be tiny."""
    tests = [test for tests in DOCTESTS.values() for test in tests if test.name == name]
    assert tests, f"SLOW names {name!r}, which is no docstring with examples: drop it"
    _run(tests)


def test_the_walk_finds_every_module_and_the_reference_examples():
    names = module_names()
    for name in ("keras_vit.layers.attention", "keras_vit.checkpoints.canonical", "training.optim", "training.data"):
        assert name in names
    missing = [name for name in MUST_HAVE_EXAMPLES if name not in DOCTESTS]
    assert not missing, f"no runnable example left in {missing}"
