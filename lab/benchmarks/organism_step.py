"""Organism C's training step on 1 vs 2 CPU threads, measured side by side in one run (issue 17).

Why: the issue asks for a full build of organism C under 4 hours on 2 cores, and the training logs only
say how fast each phase ran with one thread while another build had the other core. This times the two
kinds of step C's shipped recipe (C1r) runs - the text phase (``lm_c_text``: text-only retrieval jobs) and
the image phase (``lm_c_restart_long``'s config: the image task with VQA, captions, text jobs and the
attribute probes) - with 1 and with 2 torch threads, interleaved round by round so that load from other
processes hits both sides alike, each step rendering its own batch in the process as ``--workers 0`` does.
It prints s/step per (phase, threads), the 2-thread speed-up (median of the per-round ratios) and the
C1r build time those rates give (1500 text + 15,000 image steps; evaluations and tracking not counted).

    python lab/benchmarks/organism_step.py [--steps 10] [--rounds 3]
    python lab/benchmarks/organism_step.py --tiny --steps 1 --rounds 1   # seconds: the pipeline's tiny sizes

Weights are random (tower included): a step's cost does not depend on their values.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace

import torch

from vrh_lab.organism.pipeline import LM_C_RESTART_LONG, LM_C_TEXT, TINY
from vrh_lab.organism.train import Organisms, train_step

# C1r's steps by kind: lm_c_text 1500 text steps; lm_c 4000 + lm_c_long 6000 + lm_c_restart 3000 +
# lm_c_restart_long 2000 image steps
C1R_STEPS = {"text": 1500, "image": 15_000}


def time_steps(org: Organisms, threads: int, steps: int) -> float:
    torch.set_num_threads(threads)
    train_step(org)  # one untimed step at this thread count
    t0 = time.perf_counter()
    for _ in range(steps):
        train_step(org)
    return (time.perf_counter() - t0) / steps


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10, help="timed steps per (phase, threads, round)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tiny", action="store_true", help="the pipeline's tiny sizes (a smoke run, not a measurement)")
    a = ap.parse_args(argv)
    blank = dict(vision_init_a="", weights_from="", init_from="", lm_init="")
    if a.tiny:
        blank.update(text=TINY["text"], vision_a=TINY["vision_a"], batch_a=4, attr_aux_layers=(0, 1))
    orgs = {"text": Organisms(replace(LM_C_TEXT, **blank)), "image": Organisms(replace(LM_C_RESTART_LONG, **blank))}
    for org in orgs.values():
        org.step = 2000  # past every curriculum phase: the full world
    out: dict = {}
    before = torch.get_num_threads()
    for kind, org in orgs.items():
        per = {1: [], 2: []}
        try:
            for _ in range(a.rounds):
                for threads in (1, 2):
                    per[threads].append(time_steps(org, threads, a.steps))
        finally:
            torch.set_num_threads(before)
        out[kind] = {"s_per_step_1_thread": round(statistics.median(per[1]), 3),
                     "s_per_step_2_threads": round(statistics.median(per[2]), 3),
                     "speedup_2_vs_1": round(statistics.median(x / y for x, y in zip(per[1], per[2])), 3)}
        print(kind, json.dumps(out[kind]), flush=True)
    for threads, key in ((1, "s_per_step_1_thread"), (2, "s_per_step_2_threads")):
        hours = sum(C1R_STEPS[k] * out[k][key] for k in C1R_STEPS) / 3600
        out[f"c1r_build_hours_{threads}_thread{'s' if threads > 1 else ''}"] = round(hours, 2)
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
