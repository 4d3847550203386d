"""docs/howto/*.md: each page's code blocks run, in order, in one namespace (the pages cannot rot), and each
page has the same sections (what for, when to use, the pattern, variations, gotchas)."""

import re
from pathlib import Path

import pytest

PAGES = sorted((Path(__file__).resolve().parents[1] / "docs" / "howto").glob("*.md"))
SECTIONS = ("**What for.**", "**When to use.**", "## Canonical pattern", "## Variations", "## Gotchas")


def test_there_are_how_to_pages():
    assert len(PAGES) >= 1


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_each_page_has_the_sections(page):
    text = page.read_text()
    assert [s for s in SECTIONS if s not in text] == []
    assert [text.index(s) for s in SECTIONS] == sorted(text.index(s) for s in SECTIONS)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_each_pages_code_runs(page, tmp_path, monkeypatch, capsys):
    from test_extensions import REGISTRIES, _registered

    _registered()  # every registry complete, then a private copy: what a page registers does not outlive it
    for module, attr in REGISTRIES:
        monkeypatch.setattr(module, attr, dict(getattr(module, attr)))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("VRH_NO_PROGRESS", "1")
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)
    ns: dict = {}
    for block in blocks:
        exec(compile(block, str(page), "exec"), ns)
    out = capsys.readouterr().out
    for expected in re.findall(r"<!-- prints: (.*?) -->", page.read_text()):
        assert expected in out, (page.name, expected)
