"""``vrh data``: benchmarks from their published local layouts into vrh's JSONL format, and a look at the
result before any GPU time is spent.

    vrh data list
    vrh data convert NAME SRC --out DIR [--split S] [--limit N]
    vrh data inspect DIR/data.jsonl --out DIR2

See ``docs/benchmarks.md`` for every source.
"""

from __future__ import annotations

import argparse

NAME = "data"
HELP = "convert benchmarks (RefCOCO, CV-Bench, ...) from their local layout to vrh JSONL; list; inspect"


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="data_command", metavar="ACTION",
                           parser_class=type("DataParser", (_SourceFlags, type(p)), {}))
    sub.add_parser("list", help="the sources and the local layout each expects",
                   description="the sources and the local layout each expects")
    c = sub.add_parser("convert", help="convert a local benchmark snapshot to DIR/data.jsonl + DIR/images",
                       description="convert a local benchmark snapshot to DIR/data.jsonl + DIR/images; skipped rows "
                                   "and their reasons go to DIR/skipped.jsonl, a summary to DIR/convert.json; the "
                                   "last line puts the sample count next to the paper's and says why they differ; "
                                   "the other flags are the sources' own (see `vrh data list`)")
    c.add_source_flags = True
    c.add_argument("name", metavar="NAME", help="source name (see `vrh data list`)")
    c.add_argument("src", metavar="SRC", help="the local snapshot: a parquet/CSV file or the snapshot's folder")
    c.add_argument("--out", required=True, metavar="DIR", help="folder to write data.jsonl and images/ into")
    c.add_argument("--split", default=None, help="split to convert (default: the source's first, see `vrh data list`)")
    c.add_argument("--limit", type=int, default=None, metavar="N", help="stop after N samples (default: all)")
    c.add_argument("--overwrite", action="store_true",
                   help="replace a previous conversion in --out (deletes only what convert writes)")
    i = sub.add_parser("inspect", help="counts (next to the paper's), box/answer statistics, a few samples as PNG",
                       description="counts, box/answer statistics and a few samples drawn as PNG; each benchmark's "
                                   "sample count next to the paper's (App. E.2), with the reasons they differ (read "
                                   "from the convert.json beside FILE when there is one)")
    i.add_argument("file", metavar="FILE", help="a dataset JSONL (e.g. DIR/data.jsonl from convert)")
    i.add_argument("--out", required=True, metavar="DIR", help="folder for inspect.json and the PNGs")
    i.add_argument("--n-render", type=int, default=8, metavar="N", help="samples to render (default: 8)")
    p.set_defaults(data_parser=p)


class _SourceFlags:
    """A parser whose ``add_source_flags`` is set adds one flag per option the registered sources declare
    (:class:`vrh.data.sources.registry.SourceOption`), the first time it parses or prints its help: so a
    source's own option (a plugin's too) is a flag without an edit here, and ``vrh --help`` imports no source."""

    add_source_flags = False

    def _with_source_flags(self) -> None:
        if self.add_source_flags:
            self.add_source_flags = False
            for flag, kwargs in source_flags().items():
                self.add_argument(flag, **kwargs)  # type: ignore[attr-defined]

    def parse_known_args(self, args=None, namespace=None):
        self._with_source_flags()
        return super().parse_known_args(args, namespace)  # type: ignore[misc]

    def format_help(self):
        self._with_source_flags()
        return super().format_help()  # type: ignore[misc]


def source_flags() -> dict[str, dict]:
    """``add_argument`` keywords for each option flag of the registered sources, in flag order. Sources sharing
    an option share its flag: the help names each (those with the same text together), the choices are the
    union, and the value's type must agree."""
    from vrh.data.sources import get_source, source_names

    by_flag: dict[str, list] = {}
    for name in source_names():
        for o in get_source(name).option_specs:
            by_flag.setdefault(o.flag, []).append((name, o))
    flags = {}
    for flag, uses in sorted(by_flag.items()):
        types = {o.type for _, o in uses}
        if len(types) > 1:
            raise ValueError(f"sources {', '.join(n for n, _ in uses)} declare {flag} with different types "
                             f"({', '.join(sorted(t.__name__ for t in types))})")
        helps: dict[str, list[str]] = {}
        for name, o in uses:
            helps.setdefault(o.help, []).append(name)
        text = "; ".join(f"{', '.join(names)}" + (f": {h}" if h else "") for h, names in helps.items())
        (kind,) = types
        if kind is bool:
            flags[flag] = {"action": "store_true", "help": text}
            continue
        choices = [c for _, o in uses for c in (o.choices or ())]
        kwargs: dict = {"default": None, "type": kind, "help": text,
                        "metavar": next((o.metavar for _, o in uses if o.metavar), None)}
        if all(o.choices for _, o in uses):
            kwargs["choices"] = tuple(dict.fromkeys(choices))
        flags[flag] = kwargs
    return flags


def _list() -> int:
    from vrh.data.sources import get_source, source_names

    for name in source_names():
        s = get_source(name)
        opts = " ".join(o.flag for o in s.option_specs)
        print(f"{name}  [{s.task}; splits {', '.join(s.splits)} (default {s.default_split})]"
              + (f"  options: {opts}" if opts else ""))
        print(f"    {s.summary}")
        print(f"    layout: {s.layout}")
    return 0


def _convert(args: argparse.Namespace) -> int:
    from vrh.data.sources import convert

    own = {flag[2:].replace("-", "_") for flag in source_flags()}  # every source's options, set or not
    report = convert(args.name, args.src, args.out, split=args.split, limit=args.limit, overwrite=args.overwrite,
                     **{name: getattr(args, name) for name in sorted(own)})
    print("\n".join(report.lines()))
    return 0


def _inspect(args: argparse.Namespace) -> int:
    from vrh.data.sources.inspection import inspect_dataset, summary_lines

    summary = inspect_dataset(args.file, args.out, n_render=args.n_render)
    print("\n".join(summary_lines(summary)))
    print(f"-> {args.out}")
    return 0


def main(args: argparse.Namespace) -> int:
    if args.data_command == "list":
        return _list()
    if args.data_command == "convert":
        return _convert(args)
    if args.data_command == "inspect":
        return _inspect(args)
    args.data_parser.print_help()
    return 2
