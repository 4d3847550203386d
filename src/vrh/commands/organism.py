"""``vrh organism``: build / train the model organism (``vrh organism build --out DIR``), and make a run folder
of its training's emergence logs (``vrh organism emergence SOURCES... --out DIR``, for ``vrh report``)."""

from __future__ import annotations

import argparse
import sys

NAME = "organism"
HELP = ("build / train the model organism (vrh organism build --out DIR; see vrh organism build --help); "
        "vrh organism emergence LOGS... --out DIR: a run folder of its emergence logs for vrh report")
USAGE = ("usage: vrh organism build --out DIR [--export-to DIR]   (all stages, resumable)\n"
         "       vrh organism pretrain-vision --out DIR [--patch-size P ...]\n"
         "       vrh organism train --out DIR [--config PRESET_OR_JSON] [--steps N]\n"
         "       vrh organism emergence SOURCES... --out DIR [--overwrite]   (training logs -> run folder)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("organism_args", nargs=argparse.REMAINDER,
                   help="'build --out DIR', 'pretrain-vision --out DIR', 'train --out DIR' or "
                        "'emergence SOURCES... --out DIR' (each has its own -h)")


def main(args: argparse.Namespace) -> int:
    rest = list(args.organism_args)
    if rest and rest[0] == "build":
        from vrh.organism.pipeline import main as run
    elif rest and rest[0] == "pretrain-vision":
        from vrh.organism.pretrain_vision import main as run
    elif rest and rest[0] == "train":
        from vrh.organism.train import main as run
    elif rest and rest[0] == "emergence":
        from vrh.organism.emergence import run_main as run
    else:
        print(USAGE, file=sys.stderr)
        return 2
    return run(rest[1:])
