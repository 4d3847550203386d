"""The report reads run folders only through the run-folder contract (vrh.runs), issue 12 item 7.

No module of vrh.report may name an artefact file (a renamed artefact would silently vanish from the
report) or open run files itself (np.load, json.load, open, read_text): vrh.runs' typed readers do that.
Docstrings may mention file names; code and messages use the vrh.runs constants.
"""

import ast
from pathlib import Path

import vrh.report
from vrh import runs

REPORT_DIR = Path(vrh.report.__file__).parent
FORBIDDEN_CALLS = {("np", "load"), ("numpy", "load"), ("json", "load"), ("json", "loads"), ("pickle", "load"),
                   ("runs", "read_json"), ("runs", "read_jsonl")}  # the low-level readers: use the typed ones
FORBIDDEN_METHODS = {"read_text", "read_bytes"}


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def violations(source: str, name: str = "<src>") -> list[str]:
    """Every literal artefact name and direct file read in ``source`` (docstrings excepted)."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            out += [f"{name}:{node.lineno}: names {a!r}" for a in runs.ARTEFACTS if a in node.value]
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id == "open":
                out.append(f"{name}:{node.lineno}: open()")
            if isinstance(f, ast.Attribute):
                if isinstance(f.value, ast.Name) and (f.value.id, f.attr) in FORBIDDEN_CALLS:
                    out.append(f"{name}:{node.lineno}: {f.value.id}.{f.attr}()")
                if f.attr in FORBIDDEN_METHODS:
                    out.append(f"{name}:{node.lineno}: .{f.attr}()")
    return out


def test_the_checker_catches_literal_names_and_direct_reads():
    bad = '''"""Docstrings may say overlays.npz."""
import numpy as np
def f(path):
    """and here: results.json"""
    z = np.load(path / "overlays.npz")
    t = f"{path}/sample_scores.npz"
    return open(path / "x").read(), (path / "config.json").read_text()
'''
    found = violations(bad)
    assert len(found) == 6, found
    assert not any("Docstrings" in v or ":1:" in v or ":4:" in v for v in found)


def test_report_never_names_artefact_files_or_reads_them_itself():
    files = sorted(REPORT_DIR.glob("*.py"))
    assert len(files) >= 8  # the whole package, not an empty glob
    found = [v for p in files for v in violations(p.read_text(), p.name)]
    assert found == [], "vrh.report must read run folders through vrh.runs:\n" + "\n".join(found)
