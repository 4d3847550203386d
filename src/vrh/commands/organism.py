"""``vrh organism``: build / train the model organism (``vrh organism build --out DIR``), and make a run folder
of its training's emergence logs (``vrh organism emergence SOURCES... --out DIR``, for ``vrh report``).

Thin wiring over the organism lab (:mod:`vrh_lab.organism`, ``lab/`` of a source checkout), the only place
vrh imports it, inside a function."""

from __future__ import annotations

import argparse
import sys

NAME = "organism"
HELP = ("build the model organisms (vrh organism build --out DIR; see vrh organism build --help); "
        "vrh organism emergence LOGS... --out DIR: a run folder of their emergence logs for vrh report")
# the README's two commands; the single stages a build runs (pretrain-vision, train) are the lab's own tools,
# callable here too and documented with the recipes (docs/organism.md, "Building the organisms")
USAGE = ("usage: vrh organism build --out DIR [--export-to DIR]   (all stages, resumable)\n"
         "       vrh organism build d --out DIR [--export-to DIR]   (organism D on Gemma 3 270M: the gemma extra)\n"
         "       vrh organism build e --out DIR   (organism E: DINOv2-S/14 + SmolLM2-135M, the organism-e extra)\n"
         "       vrh organism emergence SOURCES... --out DIR [--overwrite]   (training logs -> run folder)\n"
         "(one stage alone: vrh organism pretrain-vision | train, docs/organism.md)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("organism_args", nargs=argparse.REMAINDER,
                   help="'build --out DIR' or 'emergence SOURCES... --out DIR' (each has its own -h)")


def _lab_entry(sub: str):
    """The lab's entry point for subcommand ``sub``, or None for an unknown one. Why here and lazily: the
    organism lab (package vrh_lab) builds on vrh, never the other way round; the library runs without it."""
    if sub == "build d":  # organism D: Gemma 3 270M from the package index (vrh_lab.organism_d)
        from vrh_lab.organism_d.train import main as run
    elif sub == "build e":  # organism E: DINOv2 + SmolLM2 from the package index (vrh_lab.organism_e)
        from vrh_lab.organism_e.train import main as run
    elif sub == "build":
        from vrh_lab.organism.pipeline import main as run
    elif sub == "pretrain-vision":
        from vrh_lab.organism.pretrain_vision import main as run
    elif sub == "train":
        from vrh_lab.organism.train import main as run
    elif sub == "emergence":
        from vrh_lab.organism.emergence import run_main as run
    else:
        return None
    return run


def main(args: argparse.Namespace) -> int:
    rest = list(args.organism_args)
    if rest[:2] in (["build", "d"], ["build", "e"]):
        rest = [" ".join(rest[:2]), *rest[2:]]
    try:
        run = _lab_entry(rest[0]) if rest else None
    except ModuleNotFoundError as e:
        if e.name not in ("vrh_lab", "vrh_lab.organism", "vrh_lab.organism_d", "vrh_lab.organism_e"):
            raise
        print(f"vrh organism {rest[0]}: the organism lab (package vrh_lab) is not installed; it is lab/ in a source "
              "checkout of vrh, where pip install -e . installs it with vrh", file=sys.stderr)
        return 2
    if run is None:
        print(USAGE, file=sys.stderr)
        return 2
    return run(rest[1:])
