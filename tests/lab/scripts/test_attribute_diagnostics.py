"""lab/scripts/organism_attribute_diagnostics.py breakdown on an exported checkpoint (the shipped organism A)."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_breakdown_reads_an_exported_checkpoint_and_reports_vqa_by_question():
    done = subprocess.run([sys.executable, str(ROOT / "lab" / "scripts" / "organism_attribute_diagnostics.py"),
                           str(ROOT / "src" / "vrh" / "organism" / "checkpoints" / "organism_a"), "breakdown"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={"OMP_NUM_THREADS": "1", "PATH": ""})
    assert done.returncode == 0, done.stderr[-2000:]
    acc = {m[1]: (int(m[2]), float(m[3])) for m in
           re.finditer(r"attribute expressions using (\S+): n=(\d+) accuracy ([0-9.]+)", done.stdout)}
    assert sum(n for n, _ in acc.values()) == 164  # the attribute expressions of the first 400 held-out samples
    assert acc["colour"][1] >= 0.8 and acc["shape"][1] >= 0.8  # A matches both (docs: 94% / 98%)
    vqa = dict(re.findall(r"VQA '(\w+ \w+) \.\.\.': n=\d+ accuracy ([0-9.]+)", done.stdout))
    assert set(vqa) == {"how many", "what colour", "what shape"}
