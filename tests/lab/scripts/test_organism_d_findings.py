"""lab/scripts/organism_d_findings.sh runs D's commands on D's run folders (the base's text heads before any image
training, compared with D's VRHs), and D-frozen's part only when DF names it.

The script runs for real (bash) with a recording ``vrh`` first on PATH instead of the commands (an hour of model
runs) and recording stand-ins for the two Python scripts beside a copy of it.
"""

import subprocess
from pathlib import Path

from script_harness import run_recorded

SCRIPT = Path(__file__).resolve().parents[3] / "lab" / "scripts" / "organism_d_findings.sh"


def run_script(tmp_path: Path, **extra_env: str) -> tuple[subprocess.CompletedProcess, list[list[str]], Path]:
    out = tmp_path / "findings"
    proc, calls = run_recorded(SCRIPT, tmp_path, out, ("organism_d_digits.py", "organism_d_figures.py"),
                               drop_env=("DF",), **extra_env)
    return proc, calls, out


def arg(call: list[str], flag: str) -> str:
    return call[call.index(flag) + 1]


def test_d_part(tmp_path):
    proc, calls, out = run_script(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert [c[1] if c[0] == "vrh" else c[0] for c in calls] == [
        "demo", "compare", "stability", "text-heads", "compare-heads", "report", "organism_d_digits.py",
        "organism_d_figures.py"]
    text = next(c for c in calls if c[1:2] == ["text-heads"])
    assert arg(text, "--model") == "organism:organism_d_base"  # the LM before any image training
    assert arg(text, "--max-new-tokens") == "32"  # the base repeats the needle sentence whole
    assert arg(text, "--cross-heads") == f"{out}/demo/detect"
    cmp = next(c for c in calls if c[1:2] == ["compare-heads"])
    assert (arg(cmp, "--heads"), arg(cmp, "--heads-b"), arg(cmp, "--model")) == (
        f"{out}/demo/detect", f"{out}/text_base", "organism:organism_d")
    report = next(c for c in calls if c[1:2] == ["report"])
    assert not any(a.endswith(("det_df", "cmp_df")) for a in report)
    figures = calls[-1]
    assert figures[1] == str(out) and arg(figures, "--json") == f"{out}/figures.json"


def test_d_frozen_part_with_df(tmp_path):
    frozen = str(tmp_path / "build" / "export" / "organism_d_frozen")
    proc, calls, out = run_script(tmp_path, DF=frozen)
    assert proc.returncode == 0, proc.stderr
    df = [c for c in calls if frozen in c]
    assert [c[1] for c in df] == ["detect", "compare-heads"]
    assert arg(df[0], "--out") == f"{out}/det_df"
    assert arg(df[0], "--data") == f"{out}/demo/data/grounding.jsonl"
    assert (arg(df[1], "--heads"), arg(df[1], "--heads-b")) == (f"{out}/det_df", f"{out}/text_base")
    assert arg(df[1], "--out") == f"{out}/cmp_df"
    vs_d = next(c for c in calls if c[1:2] == ["compare-heads"] and arg(c, "--heads") == f"{out}/det_df"
                and "--model" not in c)  # D-frozen's VRHs against D's: rankings only
    assert (arg(vs_d, "--heads-b"), arg(vs_d, "--out")) == (f"{out}/demo/detect", f"{out}/df_vs_d")
    report = next(c for c in calls if c[1:2] == ["report"])
    assert report[report.index("--k") - 3:report.index("--k")] == [f"{out}/det_df", f"{out}/cmp_df", f"{out}/df_vs_d"]
