"""``vrh models``: every model family vrh knows, with its box convention, token layout and status; and
``vrh models --inspect CHECKPOINT``: one checkpoint built on the meta device (no weights read).

Status is ``tested`` (a built-in adapter: the shared suite runs it on a tiny random-init instance),
``composed`` (a built-in family transformers has no class for, built by vrh from native parts: what the CPU tests
verified and what needs a GPU with the real weights, printed below the table), ``custom`` (an installed plugin or
``--adapter``: not tested by vrh) or ``refused`` (with the reason and what to do). Each family's answer-format
variants (``vrh probe-format``, ``--answer-format``) are listed after it. ``--json`` prints the same rows (or the
inspection) for machines.
"""

from __future__ import annotations

import argparse
import json

NAME = "models"
HELP = ("list the model families vrh supports or refuses (a table), or --inspect one checkpoint without its "
        "weights")
TESTED_NOTE = ("tested: a tiny random-init instance of the real transformers class passes the shared adapter "
               "suite; no real weights were run")
COMPOSED_NOTE = ("composed: no transformers class exists; vrh builds the model from native parts and loads the "
                 "checkpoint's safetensors strictly. Checked on CPU only, no real weights run:")
FORMATS_NOTE = ("answer formats (vrh probe-format tries them; --answer-format NAME picks one; the first is the "
                "default; every family also takes the shared ones by name):")
DEFAULT_WIDTH = 120  # the table's width when stdout is not a terminal and COLUMNS is unset
FAMILY_COLUMNS = ("family", "model types", "status", "answer box", "token layout")
REFUSED_COLUMNS = ("family", "kind", "why", "what to do")
NARROW_MAX = 12  # characters a short column (model types, status) keeps when the table must fold


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the rows (or the inspection) as JSON")
    p.add_argument("--adapter", metavar="SPEC", default=None,
                   help="also list this custom adapter, package.module:Class (checks that it imports); with "
                        "--inspect, inspect through it (default: none)")
    p.add_argument("--inspect", metavar="CHECKPOINT", default=None,
                   help="build this checkpoint (a local folder, 'organism', or a hub id already in the local "
                        "Hugging Face cache: nothing is downloaded) on the meta device from its config and print "
                        "its family, layers x heads, head dim and attention modules (default: list the families)")
    p.add_argument("--image-size", metavar="WxH", nargs="+", default=[],
                   help="with --inspect: count the visual tokens (and how many are cells) the checkpoint's "
                        "processor makes of an image of this size, e.g. 1792x1344; several sizes allowed; a "
                        "checkpoint without tokenizer files is counted with the family's stand-in tokenizer, and says "
                        "so (default: none)")
    p.add_argument("--revision", default=None, help="with --inspect and a hub id: the cached revision (default: main)")


def format_rows(rows: list[dict], width: int | None = None) -> str:
    """The human listing: one table of every family (family, model types, status, box in the answer, token
    layout), then a table of why each refused family is refused and what to do instead. ``width``: the
    terminal's (or ``COLUMNS``), :data:`DEFAULT_WIDTH` when stdout is not a terminal."""
    from rich.console import Console
    from rich.text import Text

    width = width or _width()
    console = Console(width=width, record=True, file=_Discard(), color_system=None)
    cells = [(r["name"], ", ".join(r["model_types"]), r["status"], r["box_convention"], r["token_layout"])
             for r in rows]
    console.print(_table("model families", FAMILY_COLUMNS, cells, width, wide=2))
    console.print(Text(TESTED_NOTE))
    composed = [r for r in rows if r["status"] == "composed"]
    if composed:
        console.print(Text(COMPOSED_NOTE))
        for r in composed:
            console.print(Text(f"  {r['name']}\n    verified on CPU: {r['verified_on_cpu']}\n    needs a GPU with "
                               f"the real weights: {r['needs_gpu']}"
                               + (f"\n    published files seen only in part: {r['config_gaps']}"
                                  if r["config_gaps"] else "")))
    for r in rows:
        if r["status"] == "custom":
            console.print(Text(f"custom: {r['name']} is {r['source']} ({r['status_detail']})"))
    console.print(Text(FORMATS_NOTE))
    own = [r["name"] for r in rows if r.get("answer_formats") == ["native"]]
    for r in rows:
        if len(r.get("answer_formats") or ()) > 1:
            console.print(Text(f"  {r['name']}: {', '.join(r['answer_formats'])}"))
    if own:
        console.print(Text(f"  native only: {', '.join(own)}"))
    refused = [(r["name"], r["status_detail"], r["reason"], r["remedy"]) for r in rows if r["status"] == "refused"]
    if refused:
        console.print(_table("refused families", REFUSED_COLUMNS, refused, width, wide=2))
    return "\n".join(line.rstrip() for line in console.export_text().splitlines()).strip("\n")


def _table(title: str, columns: tuple[str, ...], rows: list[tuple[str, ...]], width: int, wide: int):
    """A rich table of plain-text cells (never markup: "[x1, y1, ...]" stays text) that fits ``width``: when
    the cells do not fit on one line each, the first column (a name) keeps its width, the next ones up to
    :data:`NARROW_MAX` characters, or its longest word where the rest still fits (a model type is not cut,
    ``deepseek_vl_`` over ``v2``), and the last ``wide`` columns share the rest, folded (a header never wraps)."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    natural = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(columns)]
    word = [max([0] + [len(w) for r in rows for w in r[i].split()]) for i in range(len(columns))]
    room = width - 3 * len(columns) - 1  # per column: a space of padding each side and a separator (or edge)
    if sum(natural) > room:
        narrow = natural[:1] + [min(n, max(len(c), NARROW_MAX, w))
                                for n, c, w in zip(natural[1:-wide], columns[1:], word[1:])]
        if room - sum(narrow) < sum(len(c) for c in columns[-wide:]):  # too narrow for whole words: fold them
            narrow = natural[:1] + [min(n, max(len(c), NARROW_MAX)) for n, c in zip(natural[1:-wide], columns[1:])]
        share = max((room - sum(narrow)) // wide, 1)
        natural = narrow + [max(share, len(c)) for c in columns[-wide:]]
    table = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left")
    for column, w in zip(columns, natural):
        table.add_column(column, overflow="fold", width=w)
    for r in rows:
        table.add_row(*(Text(v) for v in r))
    return table


def _width() -> int:
    import shutil

    return shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns


class _Discard:
    """A file that drops what is written: the console records, and the caller prints the export."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


def main(args: argparse.Namespace) -> int:
    if args.inspect:
        from vrh.models.inspect import inspect_checkpoint, parse_image_size
        from vrh.testing.builders import stand_in_tokenizer

        sizes = tuple(parse_image_size(s) for s in args.image_size)
        found = inspect_checkpoint(args.inspect, image_sizes=sizes, adapter=args.adapter, revision=args.revision,
                                   stand_in=stand_in_tokenizer)  # a config-only folder is counted all the same
        print(json.dumps(found.to_json(), indent=2) if args.json else found.format())
        return 0
    if args.image_size or args.revision:
        raise ValueError("--image-size and --revision go with --inspect CHECKPOINT")
    from vrh.models.adapters import adapter_class, list_families

    extra = (adapter_class(args.adapter),) if args.adapter else ()
    rows = list_families(extra)
    print(json.dumps(rows, indent=2) if args.json else format_rows(rows))
    return 0
