"""A run folder's JSONL files and a folder's ``.vrh-written`` record are read line by line, never whole
(issue 45 item 15: a 1 GB sparse ``.vrh-written`` cost 2.2 GB of memory, a 1 GB JSONL 2.4 GB). Measured as
the peak of Python's allocations (tracemalloc), which depends on the input, not on the machine."""

import json
import tracemalloc

from vrh import runs
from vrh.runs import written

MB = 2**20


def _peak(fn):
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_record_of_a_sparse_gigabyte_is_read_in_bounded_memory(tmp_path):
    folder = tmp_path / "f"
    written.record(folder, ["a.txt"])
    with open(folder / written.MANIFEST, "ab") as f:
        f.write(b"\0" * (8 * MB))  # a hole without a newline (a sparse file reads as zeros)
        f.write(b"\n" + json.dumps("b.txt").encode() + b"\n")
        f.write(json.dumps("x" * (2 * written.MAX_LINE)).encode() + b"\n")  # too long to be a path vrh wrote
    have, peak = _peak(lambda: written.recorded(folder))
    assert have == {"a.txt", "b.txt"}
    assert peak < 2 * MB, f"{peak / MB:.1f} MB for an 8 MB record"


def test_a_large_jsonl_is_read_line_by_line(tmp_path):
    path = tmp_path / runs.SAMPLES
    with open(path, "w") as f:
        f.write(json.dumps({"id": "a"}) + "\n")
        f.write(" \n" * MB)  # 2 MB of blank lines: whole, the text and its list of lines took over 10 MB
        f.write(json.dumps({"id": "b"}) + "\n")
        f.write('{"id": "torn')  # a torn last line is ignored, as before
    recs, peak = _peak(lambda: runs.read_jsonl(path))
    assert [r["id"] for r in recs] == ["a", "b"]
    assert peak < 2 * MB, f"{peak / MB:.1f} MB for a 2 MB file"
    assert [r["id"] for r in runs.iter_jsonl(path)] == ["a", "b"]


def test_a_bad_line_before_the_last_still_names_its_line(tmp_path):
    import pytest

    path = tmp_path / "x.jsonl"
    path.write_text('{"a": 1}\nnope\n{"b": 2}\n')
    with pytest.raises(ValueError, match=r"x.jsonl:2: not valid JSON"):
        runs.read_jsonl(path)
