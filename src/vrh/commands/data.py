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
    sub = p.add_subparsers(dest="data_command", metavar="ACTION")
    sub.add_parser("list", help="the sources and the local layout each expects",
                   description="the sources and the local layout each expects")
    c = sub.add_parser("convert", help="convert a local benchmark snapshot to DIR/data.jsonl + DIR/images",
                       description="convert a local benchmark snapshot to DIR/data.jsonl + DIR/images; skipped rows "
                                   "and their reasons go to DIR/skipped.jsonl, a summary to DIR/convert.json; the "
                                   "last line puts the sample count next to the paper's and says why they differ")
    c.add_argument("name", metavar="NAME", help="source name (see `vrh data list`)")
    c.add_argument("src", metavar="SRC", help="the local snapshot: a parquet/CSV file or the snapshot's folder")
    c.add_argument("--out", required=True, metavar="DIR", help="folder to write data.jsonl and images/ into")
    c.add_argument("--split", default=None, help="split to convert (default: the source's first, see `vrh data list`)")
    c.add_argument("--limit", type=int, default=None, metavar="N", help="stop after N samples (default: all)")
    c.add_argument("--overwrite", action="store_true",
                   help="replace a previous conversion in --out (deletes only what convert writes)")
    c.add_argument("--all-expressions", action="store_true",
                   help="refcoco/+/g: one sample per referring expression instead of one per row (answer[0])")
    c.add_argument("--images", default=None, metavar="DIR",
                   help="toloka, vaw, spatialrgpt, *-refer: local image folder (toloka: by the CSV's URL file names, "
                        "default images/ beside the CSV; vaw: Visual Genome <image_id>.jpg; spatialrgpt: by "
                        "image_info.file_path, default the JSONL's folder; *-refer: COCO train2014)")
    c.add_argument("--expression", default=None, choices=("object", "prompt"),
                   help="refspatial --task grounding: the field that becomes the expression (default: object)")
    c.add_argument("--task", default=None, choices=("grounding", "point"),
                   help="refspatial: grounding against the mask's box (default), or point: the benchmark's own "
                        "prompt + suffix judged by a point inside the mask (vrh evaluate --task point)")
    c.add_argument("--allow-pickle", action="store_true",
                   help="*-refer: read a refs(...).p pickle (unpickling runs code the file's author chose; only for "
                        "a copy you trust)")
    c.add_argument("--refs", default=None, metavar="NAME",
                   help="*-refer: the refs file to read when the folder holds several, e.g. 'refs(umd).p'")
    c.add_argument("--seed", type=int, default=None,
                   help="vaw: seed of the multiple-choice generator (default: 0)")
    c.add_argument("--regions", default=None, choices=("draw", "describe"),
                   help="spatialrgpt: draw the regions on the image (default) or describe their boxes in the text")
    c.add_argument("--subset", default=None, choices=("size", "qualitative", "all", "multi_choice"),
                   help="spatialrgpt: size (default: width/height questions, the paper's 266) or qualitative; "
                        "mathvista: all (default: testmini's 1,000) or multi_choice (its 540)")
    i = sub.add_parser("inspect", help="counts (next to the paper's), box/answer statistics, a few samples as PNG",
                       description="counts, box/answer statistics and a few samples drawn as PNG; each benchmark's "
                                   "sample count next to the paper's (App. E.2), with the reasons they differ (read "
                                   "from the convert.json beside FILE when there is one)")
    i.add_argument("file", metavar="FILE", help="a dataset JSONL (e.g. DIR/data.jsonl from convert)")
    i.add_argument("--out", required=True, metavar="DIR", help="folder for inspect.json and the PNGs")
    i.add_argument("--n-render", type=int, default=8, metavar="N", help="samples to render (default: 8)")
    p.set_defaults(data_parser=p)


def _list() -> int:
    from vrh.data.sources import get_source, source_names

    for name in source_names():
        s = get_source(name)
        opts = " ".join("--" + o.replace("_", "-") for o in s.options)
        print(f"{name}  [{s.task}; splits {', '.join(s.splits)} (default {s.default_split})]"
              + (f"  options: {opts}" if opts else ""))
        print(f"    {s.summary}")
        print(f"    layout: {s.layout}")
    return 0


def _convert(args: argparse.Namespace) -> int:
    from vrh.data.sources import convert

    report = convert(args.name, args.src, args.out, split=args.split, limit=args.limit, overwrite=args.overwrite,
                     all_expressions=args.all_expressions, images=args.images, expression=args.expression,
                     task=args.task, allow_pickle=args.allow_pickle, refs=args.refs, seed=args.seed,
                     regions=args.regions, subset=args.subset)
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
