"""lab/scripts/organism_findings.sh runs organism C's part when C's checkpoint resolves and skips it (green)
when it does not.

The script runs for real (bash, its own C check), with a recording ``vrh`` first on PATH instead of the
commands (minutes of model runs) and a recording acceptance checker beside a copy of the script.
"""

import subprocess
from pathlib import Path

from script_harness import run_recorded

SCRIPT = Path(__file__).resolve().parents[3] / "lab" / "scripts" / "organism_findings.sh"


def run_script(tmp_path: Path, c: str, **extra_env: str) -> tuple[subprocess.CompletedProcess, list[list[str]], Path]:
    out = tmp_path / "findings"
    proc, calls = run_recorded(SCRIPT, tmp_path, out, ("organism_acceptance.py",), C=c, **extra_env)
    return proc, calls, out


def test_c_missing_is_skipped_and_stale_c_runs_removed(tmp_path):
    stale = tmp_path / "findings" / "demo_c"
    stale.mkdir(parents=True)
    (stale / "results.json").write_text("{}")
    proc, calls, out = run_script(tmp_path, "organism:does_not_exist")
    assert proc.returncode == 0, proc.stderr
    assert "organism:does_not_exist does not resolve" in proc.stdout and "skipping C's part" in proc.stdout
    assert not stale.exists()
    assert not any("organism:does_not_exist" in call for call in calls)
    assert [c[1] for c in calls if c[0] == "vrh"] == ["demo", "detect", "detect", "transfer", "stability", "compare",
                                                      "sweep", "dpo-pairs", "text-heads", "report"]  # A/B's part
    text_a = next(c for c in calls if c[:2] == ["vrh", "text-heads"])
    assert text_a[text_a.index("--cross-heads") + 1] == f"{out}/det_a"
    report = next(c for c in calls if c[:2] == ["vrh", "report"])
    assert not any(arg.endswith(("demo_c", "compare_c", "a_to_c", "c_to_a")) for arg in report)
    assert calls[-1][0] == "organism_acceptance.py"


def test_c_present_runs_its_part(tmp_path):
    model_c = tmp_path / "organism_c"
    model_c.mkdir()
    (model_c / "config.json").write_text("{}")
    proc, calls, out = run_script(tmp_path, str(model_c), CP="organism:does_not_exist")
    assert proc.returncode == 0, proc.stderr
    c_calls = [c for c in calls if str(model_c) in c]
    assert [c[1] for c in c_calls] == ["demo", "compare", "transfer", "detect", "text-heads", "compare-heads"]
    text_c = next(c for c in c_calls if c[1] == "text-heads")  # issue 38: the text heads beside C's own VRHs
    assert text_c[text_c.index("--cross-heads") + 1] == f"{out}/det_c"
    cmp_c = next(c for c in c_calls if c[1] == "compare-heads")
    assert (cmp_c[cmp_c.index("--heads") + 1], cmp_c[cmp_c.index("--heads-b") + 1]) == (f"{out}/det_c",
                                                                                         f"{out}/text_c")
    demo = c_calls[0]
    assert demo[demo.index("--ks") + 1] == "0,1,2,3,4,5,6,7,8"  # k = 1 .. 25% of 32 heads
    assert demo[demo.index("--out") + 1] == f"{out}/demo_c"
    transfers = [c for c in calls if c[:2] == ["vrh", "transfer"]]
    a_to_c = next(c for c in transfers if c[c.index("--model") + 1] == str(model_c))
    c_to_a = next(c for c in transfers if c[c.index("--heads") + 1] == f"{out}/demo_c/detect")
    assert a_to_c[a_to_c.index("--heads") + 1] == f"{out}/det_a"
    assert a_to_c[a_to_c.index("--heads-b") + 1] == f"{out}/demo_c/detect"
    assert c_to_a[c_to_a.index("--model") + 1] == "organism:organism_a"
    assert c_to_a[c_to_a.index("--heads-b") + 1] == f"{out}/det_a"
    report = next(c for c in calls if c[:2] == ["vrh", "report"])
    for run in ("demo_c", "demo_c/detect", "demo_c/sweep_grounding", "demo_c/sweep_vqa", "compare_c",
                "transfer_a_to_c", "transfer_c_to_a", "det_c", "text_c", "cmp_c"):
        assert f"{out}/{run}" in report
    assert "skipping C's part" not in proc.stdout and "skipping the C -> C' transfer" in proc.stdout
    assert not any(c[1:3] == ["organism", "emergence"] for c in calls)  # no training log in this checkpoint


def test_c_prime_adds_the_positive_control(tmp_path):
    model_c, model_cp = tmp_path / "organism_c", tmp_path / "organism_c_prime"
    for m in (model_c, model_cp):
        m.mkdir()
        (m / "config.json").write_text("{}")
    proc, calls, out = run_script(tmp_path, str(model_c), CP=str(model_cp))
    assert proc.returncode == 0, proc.stderr
    assert "skipping" not in proc.stdout
    det = next(c for c in calls if c[:2] == ["vrh", "detect"] and c[c.index("--model") + 1] == str(model_cp))
    tr = next(c for c in calls if c[:2] == ["vrh", "transfer"] and c[c.index("--model") + 1] == str(model_cp))
    assert det[det.index("--out") + 1] == f"{out}/det_cp"
    assert tr[tr.index("--heads") + 1] == f"{out}/demo_c/detect" and tr[tr.index("--heads-b") + 1] == f"{out}/det_cp"
    assert f"{out}/transfer_c_to_cp" in next(c for c in calls if c[:2] == ["vrh", "report"])


def test_c_with_a_training_log_adds_its_emergence_run(tmp_path):
    model_c = tmp_path / "organism_c"
    model_c.mkdir()
    (model_c / "config.json").write_text("{}")
    (model_c / "emergence.jsonl").write_text("{}\n")
    proc, calls, out = run_script(tmp_path, str(model_c), CP="organism:does_not_exist")
    assert proc.returncode == 0, proc.stderr
    em = next(c for c in calls if c[1:3] == ["organism", "emergence"])
    assert em[3] == str(model_c) and em[em.index("--out") + 1] == f"{out}/emergence_c"
    assert f"{out}/emergence_c" in next(c for c in calls if c[:2] == ["vrh", "report"])
