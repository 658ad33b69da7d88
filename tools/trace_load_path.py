"""The rooms (modules of `keras_vit/`) a load from a file walks through, and how often it comes back to one.

`keras_vit.ViT(weights=FILE)` is traced with `sys.setprofile`: every call into a keras_vit module is a step
into that module's room and every return a step back to the caller's. Each function body is walked once per
call, as a reader would follow it: a callee that the same call of its caller already entered (the body of a
loop over blocks, a helper called for each key) is not followed again. A *stay* is a run of steps in one room;
a *return* is a stay in a room the walk had already left. Files are written here (a small ViT, no download):

    python tools/trace_load_path.py                 # every file kind: stays, returns, visits per room
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
    from keras_vit.checkpoints import own

    model = keras_vit.ViT(**SMALL, weights=None)
    if kind == "keras":
        path = os.path.join(folder, "small.keras")
        model.save(path)
    elif kind == "weights_h5":
        path = os.path.join(folder, "small.weights.h5")
        model.save_weights(path)
    elif kind == "npz":
        path = os.path.join(folder, "small.npz")
        np.savez(path, **own.to_checkpoint(model, path).params)
    else:
        raise ValueError(f"Unknown --kind: expected one of {', '.join(KINDS)}. Received: kind={kind!r}")
    return path


def trace(function) -> list[str]:
    """The rooms `function()` walks through, one entry a stay (see the module docstring)."""
    walk = []
    stack = []  # one entry a keras_vit call: [room, followed?]
    read = set()  # the functions whose body the walk has followed

    def step(room):
        if room is not None and (not walk or walk[-1] != room):
            walk.append(room)

    def profile(frame, event, arg):
        if event not in ("call", "return"):
            return
        room = _room(frame.f_code)
        if room is None:
            return
        if event == "call":
            parent = stack[-1] if stack else None
            followed = parent is None or (parent[1] and frame.f_code not in read)
            read.add(frame.f_code)
            stack.append([room, followed])
            if followed:
                step(room)
        elif stack:
            _, followed = stack.pop()
            if followed and stack:
                step(stack[-1][0])

    sys.setprofile(profile)
    try:
        function()
    finally:
        sys.setprofile(None)
    return walk


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
            walk = trace(lambda: keras_vit.ViT(weights=path))
            result = counts(walk)
            rooms = ", ".join(f"{room} {n}" for room, n in result["visits"].items() if n > 1)
            print(f"{kind}: {result['stays']} stays in {result['rooms']} rooms, {result['returns']} returns "
                  f"(rooms entered more than once: {rooms or 'none'})")
            if args.path:
                print("  " + " -> ".join(walk))
    return 0


if __name__ == "__main__":
    sys.exit(main())
