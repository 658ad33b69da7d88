"""Imports flow one way: no cycle among the modules of `keras_vit/` and `training/`, counting the imports inside
functions too (they hide a cycle from Python, not from the reader) and a subpackage's `__init__` (importing
`keras_vit.layers.pooling` runs `keras_vit/layers/__init__.py` first); and the library stands at most
`MAX_FLOORS` floors tall (a module stands a floor above everything it imports)."""

import functools

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("keras_vit", "training")
MAX_FLOORS = 8


def _modules() -> dict[str, str]:
    """Module name -> file, for every module of `PACKAGES`."""
    found = {}
    for package in PACKAGES:
        for folder, _, files in os.walk(os.path.join(ROOT, package)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    parts = os.path.relpath(path, ROOT)[:-3].split(os.sep)
                    found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(module: str, path: str, modules: dict) -> set[str]:
    """The project modules `module` imports anywhere in its file (`from a import b` counts `a.b` when it is one)."""
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        out.update(name for name in names if name in modules and name != module)
    return out


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_cycle_and_only_cycles():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def _parents(module: str) -> set[str]:
    """The subpackages whose `__init__` importing `module` runs (not the root packages: theirs import lazily)."""
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(2, len(parts))}


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports, each imported module's subpackage `__init__`s included."""
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        imported = {m for m in _imports(name, path, modules) if m not in PACKAGES}
        graph[name] = imported | {parent for m in imported for parent in _parents(m)
                                  if parent in modules and parent != name and not name.startswith(parent + ".")}
    return graph


def floors(graph: dict[str, set[str]]) -> dict[str, int]:
    """Each module's floor: 1 for one that imports no project module, else one above the highest it imports."""
    @functools.lru_cache(maxsize=None)
    def floor(module):
        return 1 + max((floor(other) for other in graph.get(module, ())), default=0)
    return {module: floor(module) for module in graph}


def test_the_graph_counts_a_subpackages_init():
    graph = import_graph()
    assert graph["keras_vit.vit"], "the import reader found no imports: it is broken"
    assert "keras_vit.layers" in graph["keras_vit.bit"]  # it imports keras_vit.layers.resnet
    assert floors({"a": {"b"}, "b": {"c"}, "c": set()}) == {"a": 3, "b": 2, "c": 1}


def test_no_import_cycles_among_the_project_modules():
    assert find_cycles(import_graph()) == []


def test_the_library_is_at_most_eight_floors_tall():
    library = {module: floor for module, floor in floors(import_graph()).items() if module.startswith("keras_vit")}
    tallest = max(library, key=library.get)
    assert library[tallest] <= MAX_FLOORS, (tallest, library[tallest])


def test_docs_design_names_every_library_module_on_its_floor():
    """docs/DESIGN.md's floor table lists each module of keras_vit/ (by its path or its file name) in the row of the
    floor the import graph puts it on: a new module or a move that changes a floor updates the table."""
    import re

    with open(os.path.join(ROOT, "docs", "DESIGN.md"), encoding="utf-8") as file:
        design = file.read()
    table = design[design.index("| floor |"):]
    table = table[:table.index("\n\n")]
    rows = {}
    for line in table.splitlines()[2:]:
        cells = line.split("|")
        rows[int(cells[1])] = set(re.findall(r"`([A-Za-z_/]+)`", cells[3]))
    misplaced = []
    for module, floor in floors(import_graph()).items():
        if not module.startswith("keras_vit"):
            continue
        path = "__init__" if module == "keras_vit" else module[len("keras_vit."):].replace(".", "/")
        names = {path, path.split("/")[-1], f"{path}/__init__"}
        if not names & rows.get(floor, set()):
            misplaced.append(f"{path} (floor {floor})")
    assert not misplaced, f"docs/DESIGN.md's floor table does not list these on their floors: {misplaced}"


def test_the_load_path_tracer_counts_stays_and_returns(tmp_path):
    """tools/trace_load_path.py (the room counts docs/DESIGN.md quotes): hand-counted arithmetic, and a real walk
    of an `.npz` load that goes from `applications` through the reader to the loader."""
    import sys

    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import trace_load_path

    assert trace_load_path.counts(["a", "b", "a", "c", "a"]) == {
        "stays": 5, "rooms": 3, "returns": 2, "visits": {"a": 3, "b": 1, "c": 1}}
    path = trace_load_path.write_file("npz", str(tmp_path))
    import keras_vit

    walk = trace_load_path.trace(lambda: keras_vit.ViT(weights=path))
    assert walk[0] == walk[-1] == "applications"
    assert {"checkpoints/npz", "checkpoints/loading", "checkpoints/keras_names", "vit"} <= set(walk)
    assert all(a != b for a, b in zip(walk, walk[1:]))  # a stay is a run: no two in a row in one room
    flow = trace_load_path.trace(lambda: keras_vit.ViT(weights=path), lookups=False)
    assert set(flow) <= set(walk) and len(flow) < len(walk) and "checkpoints/untrusted" not in flow  # a look-up


@pytest.mark.parametrize("kind", ["npz", "keras"])
def test_a_load_from_a_file_enters_each_checkpoint_room_at_most_twice(tmp_path, kind):
    """docs/DESIGN.md's goal for the checkpoint layer: `ViT(weights=FILE)` coordinates one entry point of each room
    (resolve, read or open, resolve the arguments, load), so no room of `checkpoints/` is entered a third time."""
    import sys

    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import trace_load_path

    path = trace_load_path.write_file(kind, str(tmp_path))
    import keras_vit

    keras_vit.ViT(weights=path)  # first imports are not part of the walk
    visits = trace_load_path.counts(trace_load_path.trace(lambda: keras_vit.ViT(weights=path), lookups=False))["visits"]
    over = {room: n for room, n in visits.items() if room.startswith("checkpoints/") and n > 2}
    assert not over, f"checkpoint rooms entered more than twice: {over}"
