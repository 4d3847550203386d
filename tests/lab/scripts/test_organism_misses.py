"""lab/scripts/organism_misses.py: a miss is classified by where its box lands in the rebuilt world scene."""

import json
import subprocess
import sys
from pathlib import Path

from vrh.organism import world

ROOT = Path(__file__).resolve().parents[3]


def test_misses_are_placed_on_the_scene(tmp_path):
    s = world.grounding_sample(20000, 3)
    objs, t = s["scene"].objects, s["target"]
    other = next(i for i in range(len(objs)) if i != t)
    rows = [{"kind": "none", "id": "grounding-20000-000003", "outcome": "correct", "pred_box": list(objs[t].box),
             "gt_box": list(objs[t].box)},
            {"kind": "none", "id": "grounding-20000-000003", "outcome": "mislocated",
             "pred_box": list(objs[other].box), "gt_box": list(objs[t].box)},
            {"kind": "none", "id": "grounding-20000-000003", "outcome": "mislocated", "pred_box": [0, 0, 1, 1],
             "gt_box": list(objs[t].box)},
            {"kind": "top_k", "id": "grounding-20000-000003", "outcome": "mislocated", "pred_box": None,
             "gt_box": list(objs[t].box)}]
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = subprocess.run([sys.executable, str(ROOT / "lab" / "scripts" / "organism_misses.py"), str(tmp_path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    kind = s["kind"]
    assert "outcomes {'correct': 1, 'mislocated': 2}" in out.stdout
    assert f"misses on another object: 1 ({kind} 1)" in out.stdout
    assert f"misses on no object: 1 ({kind} 1)" in out.stdout
