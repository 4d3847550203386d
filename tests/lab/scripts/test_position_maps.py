"""lab/scripts/organism_position_maps.py on the shipped organism A: its retrieval head leads every row set."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_position_maps_on_organism_a():
    done = subprocess.run([sys.executable, str(ROOT / "lab" / "scripts" / "organism_position_maps.py"),
                           str(ROOT / "src" / "vrh" / "organism" / "checkpoints" / "organism_a"), "--n", "8",
                           "--top", "2"], capture_output=True, text=True, timeout=120,
                          env={"OMP_NUM_THREADS": "1", "PATH": ""})
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert [line.split("  ")[0] for line in lines] == ["row producing '['", "row producing x1",
                                                       "rows producing y1 .. ']'"]
    assert [line[27:].split(",")[0].split()[0] for line in lines] == ["3:3"] * 3
