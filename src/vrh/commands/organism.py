"""``vrh organism``: build / train the model organism (``vrh organism build --out DIR``)."""

from __future__ import annotations

import argparse
import sys

NAME = "organism"
HELP = "build / train the model organism (vrh organism build --out DIR; see vrh organism build --help)"
USAGE = ("usage: vrh organism build --out DIR [--export-to DIR]   (all stages, resumable)\n"
         "       vrh organism pretrain-vision --out DIR [--patch-size P ...]\n"
         "       vrh organism train --out DIR [--config PRESET_OR_JSON] [--steps N]")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("organism_args", nargs=argparse.REMAINDER,
                   help="'build --out DIR', 'pretrain-vision --out DIR' or 'train --out DIR' (each has its own -h)")


def main(args: argparse.Namespace) -> int:
    rest = list(args.organism_args)
    if rest and rest[0] == "build":
        from vrh.organism.pipeline import main as run
    elif rest and rest[0] == "pretrain-vision":
        from vrh.organism.pretrain_vision import main as run
    elif rest and rest[0] == "train":
        from vrh.organism.train import main as run
    else:
        print(USAGE, file=sys.stderr)
        return 2
    return run(rest[1:])
