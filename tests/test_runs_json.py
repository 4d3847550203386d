"""A run folder's JSON may come from anyone: every file is read through the one JSON reader
(:func:`vrh.infra.json_text.read_json`), and a wrong type, depth or size is one line naming the file (issue 45
item 13)."""

from __future__ import annotations

import json

import pytest

from vrh import runs
from vrh.models import answer_formats


def _run(tmp_path, **files):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / runs.CONFIG).write_text(json.dumps({"command": "detect"}))
    for name, text in files.items():
        (folder / name.replace("__", ".")).write_text(text, encoding="utf-8")
    return folder


HEAD = {"scorer": "vrh", "num_layers": 1, "num_heads": 2, "scores": [[0.5, 0.1]], "ranking": [[0, 0], [0, 1]]}

BAD = [
    ("config.json", "read_config", "[1, 2]", "config.json holds an array, not an object"),
    ("config.json", "read_config", "[" * 1300 + "]" * 1300, "config.json is not valid JSON (nested more than 100"),
    ("results.json", "read_results", "[1, 2]", "results.json holds an array, not an object"),
    ("results.json", "read_results", '"done"', "results.json holds a string, not an object"),
    ("head_scores.json", "read_head_scores", "[1, 2]", "head_scores.json holds an array, not an object"),
    ("head_scores.json", "read_head_scores", json.dumps({**HEAD, "scores": "oops"}),
     "head_scores.json is not head scores vrh wrote: variant 'vrh': scores is a string, not 1 rows of 2 numbers"),
    ("head_scores.json", "read_head_scores", json.dumps({**HEAD, "ranking": [[0, 5]]}),
     "variant 'vrh': ranking is not a list of [layer, head] pairs inside 1 x 2"),
    ("head_scores.json", "read_head_scores", json.dumps({**HEAD, "num_layers": "1"}),
     "num_layers / num_heads are '1' / 2, not positive integers"),
    ("head_scores.json", "read_head_scores", json.dumps({k: v for k, v in HEAD.items() if k != "scorer"}),
     "scorer is null, not a name"),
]


@pytest.mark.parametrize("name, reader, text, message", BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_a_wrong_run_file_is_one_line_naming_it(tmp_path, name, reader, text, message):
    folder = _run(tmp_path)
    (folder / name).write_text(text, encoding="utf-8")
    with pytest.raises(ValueError) as e:
        getattr(runs, reader)(folder)
    line = str(e.value)
    assert "\n" not in line and str(folder / name) in line and message in line, line


def test_good_head_scores_still_read(tmp_path):
    folder = _run(tmp_path, head_scores__json=json.dumps(HEAD))
    assert runs.read_head_scores(folder).ranking() == [(0, 0), (0, 1)]


def test_a_huge_run_file_is_refused_before_it_is_read(tmp_path, monkeypatch):
    folder = _run(tmp_path)
    with open(folder / runs.RESULTS, "wb") as f:
        f.truncate(300 * 2**20)  # sparse: no disk used; reading it would take 300 MB and more to parse
    monkeypatch.setattr("pathlib.Path.read_bytes", lambda self: pytest.fail(f"{self} was read"))
    with pytest.raises(ValueError, match=r"results.json is 314,572,800 bytes, more than the 268,435,456"):
        runs.read_results(folder)


def test_a_run_file_with_a_bom_reads(tmp_path):
    folder = _run(tmp_path)
    (folder / runs.RESULTS).write_bytes(b"\xef\xbb\xbf" + json.dumps({"n": 1}).encode())
    assert runs.read_results(folder) == {"n": 1}


@pytest.mark.parametrize("text, message", [("[" * 50 + "]" * 50, "is not valid JSON (nested more than 8"),
                                           ("\xff", None)])
def test_a_variants_file_is_one_line(tmp_path, text, message):
    f = tmp_path / "variants.json"
    if message is None:
        f.write_bytes(b'[{"name": "\xff"}]')
        message = "is not UTF-8"
    else:
        f.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError) as e:
        answer_formats.read_variants(f)
    assert "\n" not in str(e.value) and str(f) in str(e.value) and message in str(e.value)


def _nested_runs(tmp_path, depth: int, check) -> None:
    """A demo-like run naming a sub-run that names a sub-run, ``depth`` deep, handed to ``check(root)``."""
    root = folder = tmp_path / "r"
    made = []
    try:
        for _ in range(depth):
            folder.mkdir()
            made.append(folder)
            (folder / runs.CONFIG).write_text(json.dumps({"command": "demo", "subruns": ["s"]}))
            folder = folder / "s"
        check(root)
    finally:  # deepest first: pytest's own clean-up of tmp_path recurses, once per level
        for folder in reversed(made):
            (folder / runs.CONFIG).unlink(missing_ok=True)
            folder.rmdir()


def _all_read(depth: int):
    from vrh.report.load import load_runs

    def check(root):
        loaded = load_runs([root])
        assert len(loaded) == depth and loaded[0].path == root
        assert loaded[-1].problems[-1].startswith("sub-run 's' not found")
    return check


def test_nested_sub_runs_are_runs_not_a_recursion_error(tmp_path, monkeypatch):
    """Nested deeper than the stack allows (here a stack of 150 frames more than the test's own, and 300 runs):
    the report reads every run, one per level, on a stack of its own."""
    import sys

    depth, frame = 0, sys._getframe()
    while frame is not None:
        depth, frame = depth + 1, frame.f_back
    check = _all_read(300)

    def limited(root):
        old = sys.getrecursionlimit()
        sys.setrecursionlimit(depth + 150)
        try:
            check(root)
        finally:
            sys.setrecursionlimit(old)
    _nested_runs(tmp_path, 300, limited)


@pytest.mark.slow
def test_1300_nested_sub_runs_are_runs(tmp_path):
    """The issue's case as found: 1,300 folders nested in one another, at Python's default stack."""
    _nested_runs(tmp_path, 1300, _all_read(1300))
