"""The public Python API keeps working: every name ``import vrh`` offers and every import the docs show; and
``import vrh`` changes nothing about how Python imports (no finder of its own on ``sys.meta_path``)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

import vrh

DOCS = Path(__file__).resolve().parents[1] / "docs"


@pytest.mark.parametrize("name", sorted(vrh.__all__))
def test_every_top_level_name_resolves(name):
    assert getattr(vrh, name) is not None


def test_importing_vrh_installs_no_import_hook():
    code = "import sys; before = list(sys.meta_path); import vrh; print(sys.meta_path == before)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True"


def _doc_imports() -> list[str]:
    found = []
    for page in ("notebook.md", "adapters.md", "guide.md"):
        for block in re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), flags=re.S):
            found += [line.strip() for line in block.splitlines()
                      if re.match(r"\s*(from vrh[\w.]* import |import vrh)", line)]
    return found


def test_every_import_the_docs_show_works():
    lines = _doc_imports()
    assert len(lines) >= 5
    for line in lines:
        exec(line, {})
