"""Diagnostics behind docs/organism.md (v2/v3 log) for a training run folder (its ckpt.pt + config.json).

    python lab/scripts/organism_diagnostics.py RUN_DIR [--vision-ckpt lab/organism_runs/v2/vision_a/heads.pt]

Run from the folder the run's config paths are relative to (lab/ for lab/organism_runs/v3: its config names
organism_runs/..., as the folder was called at the repository root when it ran).
Prints: held-out grounding failures by expression kind (correct / the exact box of another object /
partial / nowhere), VQA accuracy by question type, region-caption accuracy per word (size, colour,
shape), and - given the stage-1 checkpoint with its linear heads - the weight norms of the colour and
box read-outs (how loud each signal is in the tower's features).
"""

import argparse
import collections
import json

import torch

from vrh.data import boxes as grounding
from vrh.organism import world
from vrh_lab.organism.evaluate import GROUNDING, generate_answers
from vrh_lab.organism.train import Organisms, TrainConfig, heldout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run")
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--vision-ckpt", default=None)
    a = ap.parse_args()
    torch.set_num_threads(1)
    cfg = TrainConfig.from_dict(json.load(open(f"{a.run}/config.json")))
    org = Organisms(cfg)
    org.load(torch.load(f"{a.run}/ckpt.pt", weights_only=False))
    print("step", org.step)
    s = heldout(cfg, a.n)
    outcome = collections.Counter()
    tau = GROUNDING.tau  # vrh's grounding threshold: "correct" as vrh evaluate judges it
    for x, t in zip(s, generate_answers(org.a, org.tok, s, org.spec_a)):
        f = grounding.parse_box(t)
        if f is None:
            outcome[(x["kind"], "parse failure")] += 1
            continue
        ious = [grounding.iou(f[1], o.box) for o in x["scene"].objects]
        outcome[(x["kind"], "correct" if ious[x["target"]] >= tau else "another object" if max(ious) >= tau
                 else "partial" if max(ious) > 0 else "nowhere")] += 1
    for k in sorted(outcome):
        print("grounding", k, outcome[k])
    v = heldout(cfg, 200, "vqa")
    by = collections.defaultdict(lambda: [0, 0])
    for x, t in zip(v, generate_answers(org.a, org.tok, v, org.spec_a, max_new_tokens=3)):
        k = x["question"].split()[1]  # many / colour / shape
        by[k][0] += t.strip() == x["answer"]
        by[k][1] += 1
    print("vqa accuracy by question:", {k: round(h / n, 3) for k, (h, n) in by.items()})
    c = [world.caption_sample(cfg.heldout_seed, k) for k in range(150)]
    got = [t.split() for t in generate_answers(org.a, org.tok, c, org.spec_a, max_new_tokens=3)]
    for i, name in enumerate(("size", "colour", "shape")):
        acc = sum(len(g) > i and g[i] == x["answer"].split()[i] for g, x in zip(got, c)) / len(c)
        print(f"caption {name} accuracy: {acc:.3f}")
    if a.vision_ckpt:
        heads = torch.load(a.vision_ckpt, weights_only=False)["heads"]
        for k in ("colour", "shape", "box"):
            print(f"stage-1 {k} read-out weight norms:", [round(float(w), 2) for w in heads[f"{k}.weight"].norm(dim=1)])


if __name__ == "__main__":
    main()
