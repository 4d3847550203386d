"""docs/notebook.md's code blocks run, in order, in one namespace (the page cannot rot)."""

import os
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "notebook.md"


def test_notebook_page_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("VRH_NO_PROGRESS", "1")
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) >= 4
    ns: dict = {}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), ns)
    out = capsys.readouterr().out
    assert "top heads:" in out and "top-3 masked:" in out
    acc = {c.label: s["accuracy"] for c, s in ns["res"].by_condition()}
    assert acc["none"] - acc[ns["top3"].label] >= 0.4  # the organism's heads are causal
    assert os.path.getsize("notebook_attention.png") > 1000
    # the page says it plots the top head's attention: the best-ranked head, not the first of a sorted set
    import vrh

    assert (ns["layer"], ns["head"]) == vrh.rank_heads(ns["scores"])[0]
