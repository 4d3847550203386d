"""What the unmasked model gets wrong, from a grounding sweep's run folder (e.g. runs/demo/sweep_grounding).

    python lab/scripts/organism_misses.py runs/demo/sweep_grounding [--show 20]

Counts the outcomes of the unmasked condition and the misses whose first coordinate is right (x1 within
6 px of the GT box's) but whose y1 is off by more than 8 px: "right column, wrong row", i.e. the
positions after x1 found another object in the same column (docs/organism.md, run v6 r); and, for world
samples, whether each miss is another object's box (IoU >= the grounding task's tau, 0.5, with it), near the
referent, or on no object.
"""

from __future__ import annotations

import argparse
import collections
from pathlib import Path

from vrh.data.boxes import iou
from vrh.organism import world
from vrh.runs import read_jsonl
from vrh.tasks import get_task

TAU = get_task("grounding").tau  # what the sweep judged correct by default; a miss on another object clears it too


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", help="a sweep run folder (samples.jsonl)")
    ap.add_argument("--show", type=int, default=0, help="print this many misses")
    a = ap.parse_args()
    rows = [r for r in read_jsonl(Path(a.run) / "samples.jsonl") if r["kind"] == "none"]
    misses = [r for r in rows if r["outcome"] != "correct"]
    column = [r for r in misses if r["pred_box"] and abs(r["pred_box"][0] - r["gt_box"][0]) <= 6
              and abs(r["pred_box"][1] - r["gt_box"][1]) > 8]
    print(f"unmasked: {len(rows)} samples, outcomes {dict(collections.Counter(r['outcome'] for r in rows))}")
    print(f"misses with x1 right (<= 6 px) and y1 wrong (> 8 px): {len(column)} of {len(misses)}")
    # where a miss lands: on another object of the scene (IoU >= TAU with it: the selection failed, the box
    # read-out worked), near the referent, or on no object; world scenes are rebuilt from the sample ids
    where = collections.Counter()
    for r in misses:
        kind = r.get("kind") or "?"
        try:
            _, seed, idx = r["id"].rsplit("-", 2)
            s = world.grounding_sample(int(seed), int(idx))
        except ValueError:  # not a world sample id
            where[(kind, "unknown scene")] += 1
            continue
        ious = [iou(r["pred_box"], o.box) if r["pred_box"] else 0.0 for o in s["scene"].objects]
        best = max(range(len(ious)), key=ious.__getitem__)
        tag = ("near the referent" if best == s["target"] and ious[best] > 0 else
               "another object" if ious[best] >= TAU else "no object")
        where[(s["kind"], tag)] += 1
    for tag in ("another object", "near the referent", "no object", "unknown scene"):
        n = sum(v for (_, t), v in where.items() if t == tag)
        if n:
            kinds = ", ".join(f"{k} {v}" for (k, t), v in sorted(where.items()) if t == tag)
            print(f"misses on {tag}: {n} ({kinds})")
    for r in misses[:a.show]:
        print(f"  IoU {r['iou']:.2f}  {r['expression']!r}  GT {r['gt_box']}  predicted {r['pred_box']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
