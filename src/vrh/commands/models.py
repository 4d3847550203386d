"""``vrh models``: every model family vrh knows, with its box convention, token layout and status.

Status is ``tested`` (a built-in adapter: the shared suite runs it on a tiny random-init instance),
``custom`` (an installed plugin or ``--adapter``: not tested by vrh) or ``refused`` (with the reason and
what to do). ``--json`` prints the same rows for machines.
"""

from __future__ import annotations

import argparse
import json

NAME = "models"
HELP = "list the model families vrh supports or refuses: model types, box convention, token layout, status"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the rows as JSON (a list of objects)")
    p.add_argument("--adapter", metavar="SPEC", default=None,
                   help="also list this custom adapter, package.module:Class (checks that it imports) "
                        "(default: none)")


def format_rows(rows: list[dict]) -> str:
    """The human listing: one header line per family, then its conventions (or why it is refused)."""
    lines = []
    for r in rows:
        status = r["status"] + (f" ({r['status_detail']})" if r.get("status_detail") else "")
        lines.append(f"{r['name']}  [{', '.join(r['model_types'])}]  {status}")
        lines.append(f"    boxes:  {r['box_convention']}")
        lines.append(f"    tokens: {r['token_layout']}")
        if r["status"] == "refused":
            lines.append(f"    why:    {r['reason']}")
            lines.append(f"    do:     {r['remedy']}")
        elif r["status"] == "custom":
            lines.append(f"    class:  {r['source']}")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    from vrh.models.adapters import adapter_class, list_families

    extra = (adapter_class(args.adapter),) if args.adapter else ()
    rows = list_families(extra)
    print(json.dumps(rows, indent=2) if args.json else format_rows(rows))
    return 0
