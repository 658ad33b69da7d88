"""The weights table of docs/WEIGHTS.md, generated from `keras_vit.weights.PUBLISHED`: a repository tool (run from
the repository root), not part of the package.

    python tools/weights_table.py --markdown     # print it
    python tools/weights_table.py --write        # rewrite the region between the markers of docs/WEIGHTS.md
    python tools/weights_table.py --check        # exit 1 when that region is out of date
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from keras_vit.variants import VARIANTS  # noqa: E402
from keras_vit.weights import BASE_URL, DEFAULT_WEIGHTS, PUBLISHED, WeightsEntry  # noqa: E402

TABLE_FILE = "docs/WEIGHTS.md"
"""The file that holds the generated weights table, relative to the repository root."""

TABLE_BEGIN = ("<!-- weights table: generated from keras_vit/weights.py by "
               "`python tools/weights_table.py --write docs/WEIGHTS.md` -->")
TABLE_END = "<!-- end of the generated weights table -->"


def _top1_cell(entry: WeightsEntry) -> str:
    return f"{entry.imagenet_top1:g}, {entry.top1_source}" if entry.imagenet_top1 is not None else entry.top1_source


def markdown_table() -> str:
    """The weights table as Markdown, one row per `PUBLISHED` entry, by variant (in `VARIANTS` order), then in
    table order; the default of each named constructor is marked "(default)"; a file elsewhere (DeiT's, on the
    Hugging Face Hub) shows its whole URL."""
    order = {variant: i for i, variant in enumerate(VARIANTS)}
    rows = sorted(PUBLISHED, key=lambda e: order.get(e.variant, len(order)))  # stable: table order per variant
    lines = [
        f"| variant | `weights=` | file under `{BASE_URL}` | res. | classes | pre_logits | ImageNet top-1 | notes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for e in rows:
        default = " (default)" if DEFAULT_WEIGHTS.get(e.variant) == e.name else ""
        pre_logits = "-" if e.representation_size is None else str(e.representation_size)
        file = e.path if e.host is None else e.url
        lines.append(f"| {e.variant} | `{e.name}`{default} | `{file}` | {e.image_size} | {e.classes} | {pre_logits} "
                     f"| {_top1_cell(e)} | {e.notes or '-'} |")
    return "\n".join(lines) + "\n"


def table_region(text: str) -> tuple[int, int]:
    """Where the generated table sits in a Markdown `text`: (start, end) between the two markers."""
    begin, end = text.find(TABLE_BEGIN), text.find(TABLE_END)
    if begin < 0 or end < begin:
        raise ValueError(f"The file has no generated weights table: it needs the lines {TABLE_BEGIN!r} and "
                         f"{TABLE_END!r}, in that order.")
    return begin + len(TABLE_BEGIN) + 1, end


def main(argv=None) -> int:
    """`--markdown` prints the table; `--write [PATH]` rewrites the region between the markers of PATH (default
    docs/WEIGHTS.md); `--check [PATH]` fails (exit 1) when that region is out of date."""
    parser = argparse.ArgumentParser(prog="python tools/weights_table.py", description=main.__doc__)
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--markdown", action="store_true", help="print the weights table as Markdown")
    group.add_argument("--write", metavar="PATH", nargs="?", const=TABLE_FILE,
                       help=f"rewrite the generated table in this Markdown file (default {TABLE_FILE})")
    group.add_argument("--check", metavar="PATH", nargs="?", const=TABLE_FILE,
                       help=f"exit 1 when this file's table is not the generated one (default {TABLE_FILE})")
    args = parser.parse_args(argv)
    table = markdown_table()
    if args.markdown:
        print(table, end="")
        return 0
    path = args.write or args.check
    with open(path, encoding="utf-8") as f:
        text = f.read()
    start, end = table_region(text)
    if args.check:
        if text[start:end] != table:
            print(f"{path}: the weights table is out of date; run `python tools/weights_table.py --write {path}`")
            return 1
        return 0
    with open(path, "w", encoding="utf-8") as f:
        f.write(text[:start] + table + text[end:])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
