"""The public Python API keeps working: every name ``import vrh`` offers, every import the docs show, and
every import path from before the package was regrouped (``vrh.MOVED``), which gives the same module."""

import importlib
import re
from pathlib import Path

import pytest

import vrh

DOCS = Path(__file__).resolve().parents[1] / "docs"


@pytest.mark.parametrize("name", sorted(vrh.__all__))
def test_every_top_level_name_resolves(name):
    assert getattr(vrh, name) is not None


@pytest.mark.parametrize("old", sorted(vrh.MOVED))
def test_an_old_import_path_is_the_module_at_the_new_one(old):
    assert importlib.import_module(old) is importlib.import_module(vrh.MOVED[old])


def test_old_paths_reach_submodules_and_names_of_split_modules():
    from vrh.adapters.qwen_vl import Qwen2_5_VLAdapter  # noqa: F401  (docs/adapters.md)
    from vrh.inference import generate_answers, load_model, query_sets  # docs/notebook.md, before the split
    from vrh.models.generation import generate_answers as gen, query_sets as qs
    from vrh.models.loading import load_model as load

    assert (generate_answers, load_model, query_sets) == (gen, load, qs)
    import vrh.masking

    assert vrh.masking.mask_heads is vrh.mask_heads


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
