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


def test_a_clone_named_vrh_in_the_working_folder_behaves_as_the_gotcha_says(tmp_path):
    """Issue 46 item 19: a folder named vrh in the current folder shadows an editable install as an empty
    namespace package (the page's symptom); inside the clone, or with the package found by path, the real one."""
    import subprocess
    import sys

    import vrh

    (tmp_path / "vrh" / "src").mkdir(parents=True)  # a clone's root: no __init__.py
    probe = "import vrh; print(getattr(vrh, '__file__', None) is None, hasattr(vrh, 'load_model'))"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    def run(cwd, **extra):
        return subprocess.run([sys.executable, "-c", probe], cwd=cwd, env={**env, **extra}, capture_output=True,
                              text=True, check=True).stdout.split()

    src = str(Path(vrh.__file__).resolve().parents[1])
    by_finder = not any(Path(p).resolve() == Path(src) for p in sys.path if p)  # the editable install's finder
    assert run(tmp_path) == (["True", "False"] if by_finder else ["False", "True"])
    assert run(tmp_path, PYTHONPATH=src) == ["False", "True"]  # a package found on the path wins over the folder
    assert run(DOC.parents[1]) == ["False", "True"]  # inside the clone: its src/, not a vrh/ folder
    page = DOC.read_text()
    assert "AttributeError: module 'vrh' has no attribute 'load_model'" in page and "vrh-src" in page
