"""docs/architecture.md stays true: every path it names exists, its tree lists every package and top-level
module of src/vrh (and nothing that is gone), and it says where each kind of addition goes."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "vrh"
DOC = (ROOT / "docs" / "architecture.md").read_text()


def _tree_entries() -> set[str]:
    block = re.search(r"```\nsrc/vrh/\n(.*?)```", DOC, flags=re.S).group(1)
    return {m.group(1) for m in re.finditer(r"^  (\S+)", block, flags=re.M)}


def test_the_tree_lists_every_package_and_top_level_module():
    have = {p.name + "/" for p in SRC.iterdir() if (p / "__init__.py").is_file()}
    have |= {p.name for p in SRC.glob("*.py")}
    assert _tree_entries() == have


def _named_paths() -> set[str]:
    """Backticked names that are paths: ``src/vrh/...``, ``tests/...``, ``docs/...``, or package-relative
    ones like ``core/masking.py`` (resolved under src/vrh); names with a <placeholder> are skipped."""
    out = set()
    for tok in re.findall(r"`([^`\s]+)`", DOC):
        if "<" in tok or not re.fullmatch(r"[\w./-]+", tok):
            continue
        if tok.endswith((".py", "/", ".md")) and ("/" in tok or tok.endswith(".md")):
            out.add(tok)
    return out


def test_every_path_it_names_exists():
    missing = []
    for tok in sorted(_named_paths()):
        candidates = [ROOT / tok, SRC / tok, ROOT / "docs" / tok]
        if not any(c.exists() for c in candidates):
            missing.append(tok)
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"
    assert len(_named_paths()) > 30  # the check reads the page


def test_it_says_where_each_kind_of_addition_goes():
    for what in ("a model family", "a benchmark source", "a task", "a scorer", "an answer rule", "a masking mode",
                 "an analysis command with its report section", "a study cell kind"):
        assert f"**Add {what}**" in DOC, what


def test_the_layers_are_the_import_tests_layers():
    import sys

    sys.path.insert(0, str(ROOT / "tests"))
    from test_imports import LAYERS

    listed = re.findall(r"^\d+\. \*\*(\w+)\*\*", DOC, flags=re.M)
    assert listed == [name for name, _ in LAYERS]


ONE_FILE_KINDS = {  # the kinds the page promises in one file, and the test that adds one touching nothing else
    "a benchmark source": ("tests/test_extensions.py", "register_source("),
    "a scorer": ("tests/test_extensions.py", "@register_scorer("),
    "an answer rule": ("tests/test_extensions.py", "@register_answer_rule("),
    "a masking mode": ("tests/test_extensions.py", "@register_mask_mode("),
    "a study cell kind": ("tests/study/test_kinds.py", "register_cell_kind("),
}


def test_the_one_folder_promise_is_kept_by_a_test_that_adds_one():
    """An analysis is one folder: tests/analyses/test_registry.py adds one from a temporary package and sees it
    everywhere, with no other file of vrh edited."""
    assert re.search(r"\*\*Add an analysis command with its report section\*\* \(1 folder\)", DOC)
    assert "register_analysis(" in (ROOT / "tests" / "analyses" / "test_registry.py").read_text()


def test_the_one_file_promises_are_kept_by_a_test_that_adds_one():
    """Each kind the page says is one file is added by a test from a temporary module, with no other file of vrh
    edited (tests/test_extensions.py, tests/study/test_kinds.py): the count cannot silently grow."""
    for what, (test, registration) in ONE_FILE_KINDS.items():
        assert re.search(rf"\*\*Add {what}\*\* \(1 file\)", DOC), what
        assert registration in (ROOT / test).read_text(), (what, test)
