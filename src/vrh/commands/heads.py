"""``vrh heads``: the named head sets vrh ships, and the atlas that crosses them (no model needed).

    vrh heads list                 every named set (paper:..., qrhead:...) with its grid and source
    vrh heads atlas --out DIR      the published head atlas: DIR/atlas.json, atlas.md, atlas.png

The sets are :mod:`vrh.data.published_heads` (and the paper's :mod:`vrh.data.paper_heads`); the atlas is
:mod:`vrh.experiments.head_atlas`.
"""

from __future__ import annotations

import argparse

NAME = "heads"
HELP = ("the named head sets (vrh heads list: paper:MODEL/BENCHMARK, qrhead:MODEL/DATA, with their sources) and the "
        "published head atlas (vrh heads atlas --out DIR: VRHs vs text retrieval heads on one backbone)")
FILES = ("atlas.json", "atlas.md", "atlas.png")


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="heads_command", metavar="ACTION")
    sub.add_parser("list", help="every named head set with its size, grid, ranking and source",
                   description="every named head set (usable as --mask-heads, --heads, --cross-heads, compare-heads' "
                               "sides) with its size, layer x head grid, whether it is a ranking, and its source")
    a = sub.add_parser("atlas", help="intersect the paper's VRH lists with the published text retrieval heads",
                       description="the published head atlas: every paper list (5 benchmarks x 4 VLMs) against every "
                                   "published text list on the same language backbone, and the paper's lists against "
                                   "each other across benchmarks and same-backbone models; shared heads with the "
                                   "hypergeometric chance and p. Writes DIR/atlas.json, atlas.md, atlas.png "
                                   "(replacing only those three files)")
    a.add_argument("--out", required=True, metavar="DIR", help="folder for atlas.json, atlas.md and atlas.png")
    p.set_defaults(heads_parser=p)


def _list() -> int:
    from vrh.data.published_heads import all_named_sets

    for r in all_named_sets():
        order = "ranked" if r["ranked"] else "a set (no ranking)"
        print(f"{r['name']}  [{r['kind']}; {r['n']} heads, {order}; grid {r['grid'][0]} x {r['grid'][1]}]")
        print(f"    {r['source']}")
        print(f"    rule: {r['rule']}")
        if r["note"]:
            print(f"    note: {r['note']}")
    return 0


def _atlas(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from vrh.experiments.head_atlas import build_atlas
    from vrh.report.head_atlas import figure, markdown
    from vrh.runs import safe_paths

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"--out {out}: not a folder")
    out.mkdir(parents=True, exist_ok=True)
    atlas = build_atlas()
    md = markdown(atlas)
    for name, data in zip(FILES, (json.dumps(atlas, indent=1) + "\n", md, figure(atlas))):
        safe_paths.write_atomic(out, out / name, data)
    lines = [p for p in atlas["pairs"] if p["relation"] == "text vs VRH"]
    for s in atlas["summary"]:
        print(f"{s['backbone']}: {s['relation']}: {s['min']}-{s['max']} shared (median {s['median']:g}) in "
              f"{s['pairs']} pairs, chance {', '.join(f'{c:.2f}' for c in s['chance'])}, every p <= {s['max_p']:.2g} "
              f"(layer-matched chance <= {s['layer_chance_max']:.2f}, p <= {s['max_layer_p']:.2g})")
    print(f"heads atlas: {len(lines)} VRH lists against their backbone's text list, {len(atlas['pairs'])} pairs -> {out}")
    return 0


def main(args: argparse.Namespace) -> int:
    if args.heads_command == "list":
        return _list()
    if args.heads_command == "atlas":
        return _atlas(args)
    args.heads_parser.print_help()
    return 2
