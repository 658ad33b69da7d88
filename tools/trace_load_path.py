"""The rooms (modules of `keras_vit/`) a load from a file walks through, and how often it comes back to one.

`keras_vit.ViT(weights=FILE)` is traced with `sys.setprofile`: every call into a keras_vit module is a step
into that module's room and every return a step back to the caller's. Each function is followed once, as a
reader follows the code: a function already read (the body of a loop over blocks, a helper called for each
key, the second build of a model) is not followed again. A *stay* is a run of steps in one room; a *return* is
a stay in a room the walk had already left. Counted twice: with every call, and with look-ups not counted (a
call that does its work in one room of its own, calling nothing in a third room, such as
`untrusted.read_json` or `model_parts.head`, is something the caller looks up, not a move of the flow). Files
are written here (a small ViT, no download):

    python tools/trace_load_path.py                     # every file kind: stays, returns, visits per room
    python tools/trace_load_path.py --kind=npz --path   # one kind, and the walk room by room

docs/DESIGN.md quotes the counts. Keras' and NumPy's own calls are not rooms: a walk leaves keras_vit only to
come back to the room it left.
"""

import argparse
import collections
import os
import sys
import tempfile

import numpy as np

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "keras_vit") + os.sep
KINDS = ("keras", "weights_h5", "npz")
SMALL = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=2, mlp_dim=64, classes=5)
"""The small ViT every kind is written from."""


def _room(code) -> str | None:
    path = code.co_filename
    if not path.startswith(PACKAGE):
        return None
    return path[len(PACKAGE):].removesuffix(".py").removesuffix("/__init__")


def write_file(kind: str, folder: str) -> str:
    """A file of `kind` holding a small ViT's weights; returns its path."""
    import keras_vit
    from keras_vit.checkpoints import keras_names

    model = keras_vit.ViT(**SMALL, weights=None)
    if kind == "keras":
        path = os.path.join(folder, "small.keras")
        model.save(path)
    elif kind == "weights_h5":
        path = os.path.join(folder, "small.weights.h5")
        model.save_weights(path)
    elif kind == "npz":
        path = os.path.join(folder, "small.npz")
        np.savez(path, **keras_names.to_checkpoint(model, path).params)
    else:
        raise ValueError(f"Unknown --kind: expected one of {', '.join(KINDS)}. Received: kind={kind!r}")
    return path


class Call:
    """One followed call: its room and the followed calls it made, in order."""

    def __init__(self, room: str):
        self.room, self.calls = room, []

    def rooms(self) -> set:
        """The rooms of this call and of everything it called."""
        return {self.room}.union(*(call.rooms() for call in self.calls))


def call_tree(function) -> Call:
    """The followed calls of `function()` (see the module docstring), under a root in the caller's room."""
    root, stack, read = Call(None), [], set()  # stack: (Call or None when not followed)

    def profile(frame, event, arg):
        if event not in ("call", "return"):
            return
        room = _room(frame.f_code)
        if room is None:
            return
        if event == "call":
            parent = stack[-1] if stack else root
            call = None
            if parent is not None and frame.f_code not in read:
                call = Call(room)
                parent.calls.append(call)
            read.add(frame.f_code)
            stack.append(call)
        elif stack:
            stack.pop()

    sys.setprofile(profile)
    try:
        function()
    finally:
        sys.setprofile(None)
    return root


def walk(root: Call, lookups: bool = True) -> list[str]:
    """The rooms of a call tree in the order the calls enter and leave them, one entry a stay. Without
    `lookups`, a call that stays in one room of its own (a look-up: it calls nothing in another room) is not
    a move: the walk stays in the caller's room."""
    rooms = []

    def step(room):
        if room is not None and (not rooms or rooms[-1] != room):
            rooms.append(room)

    def visit(call):
        step(call.room)
        for callee in call.calls:
            if not lookups and callee.rooms() == {callee.room}:
                continue
            visit(callee)
            step(call.room)

    visit(root)
    return rooms


def trace(function, lookups: bool = True) -> list[str]:
    """The rooms `function()` walks through, one entry a stay (see the module docstring)."""
    return walk(call_tree(function), lookups)


def counts(walk: list[str]) -> dict:
    """Stays, rooms, returns and the visits of each room of a walk."""
    visits = collections.Counter(walk)
    return {"stays": len(walk), "rooms": len(visits), "returns": len(walk) - len(visits),
            "visits": dict(visits.most_common())}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=KINDS, action="append", help="file kinds to load (default: all)")
    parser.add_argument("--path", action="store_true", help="print the walk room by room")
    args = parser.parse_args(argv)
    import keras_vit

    with tempfile.TemporaryDirectory() as folder:
        for kind in args.kind or KINDS:
            path = write_file(kind, folder)
            keras_vit.ViT(weights=path)  # first imports and registrations are not part of the walk
            tree = call_tree(lambda: keras_vit.ViT(weights=path))
            for name, lookups in (("every call", True), ("look-ups not counted", False)):
                rooms = walk(tree, lookups)
                result = counts(rooms)
                again = ", ".join(f"{room} {n}" for room, n in result["visits"].items() if n > 1)
                checkpoints = max((n for room, n in result["visits"].items() if room.startswith("checkpoints/")),
                                  default=0)
                print(f"{kind}, {name}: {result['stays']} stays in {result['rooms']} rooms, {result['returns']} "
                      f"returns, at most {checkpoints} visits to a checkpoints/ room (more than one: "
                      f"{again or 'none'})")
                if args.path:
                    print("  " + " -> ".join(rooms))
    return 0


if __name__ == "__main__":
    sys.exit(main())
