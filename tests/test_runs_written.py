"""The one removal rule (:mod:`vrh.runs.written`, issue 33 item 3): vrh removes only what it recorded writing,
refuses anything else and names it, and never follows a symlink."""

import pytest

from vrh.runs import written


def _files(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() or p.is_symlink())


def test_what_was_recorded_is_removed_with_the_folder(tmp_path):
    d = tmp_path / "d"
    written.record(d, ["a.txt", d / "sub" / "b.txt", "tree/"])
    (d / "a.txt").write_text("x")
    (d / "sub").mkdir()
    (d / "sub" / "b.txt").write_text("x")
    (d / "tree" / "deep").mkdir(parents=True)
    (d / "tree" / "deep" / "c.bin").write_bytes(b"x")  # a tree a tool vrh ran wrote: removed whole
    (d / "a.txt.tmp").write_text("torn")  # a recorded file's temporary
    assert written.foreign(d) == []
    written.remove_written(d)
    assert not d.exists()


def test_a_recorded_name_that_was_never_written_is_skipped(tmp_path):
    d = tmp_path / "d"
    written.record(d, ["a.txt", "never.txt"])
    (d / "a.txt").write_text("x")
    written.remove_written(d)
    assert not d.exists()


@pytest.mark.parametrize("theirs, named", [("notes.txt", "notes.txt"), ("sub/notes.txt", "sub/notes.txt"),
                                           ("mine/x.csv", "mine/")])
def test_anything_unrecorded_is_refused_by_name_and_nothing_is_removed(tmp_path, theirs, named):
    d = tmp_path / "d"
    written.record(d, ["a.txt", "sub/b.txt"])
    (d / "sub").mkdir()
    for name in ("a.txt", "sub/b.txt", theirs):
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_text("x")
    before = _files(d)
    with pytest.raises(written.NotWrittenByVrh, match=f"did not write \\({named}\\)"):
        written.remove_written(d)
    assert _files(d) == before


def test_a_folder_without_a_record_is_refused_unless_empty(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    written.remove_written(d)  # empty: nothing to refuse, nothing removed
    (d / "x").write_text("mine")
    with pytest.raises(written.NotWrittenByVrh, match="no record of writing \\(x\\)"):
        written.remove_written(d)
    with pytest.raises(written.NotWrittenByVrh, match="not empty and holds no record"):
        written.record(d, ["y"])  # nor is it written into
    assert _files(d) == ["x"]


def test_symlinks_are_never_followed(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "a.txt").write_text("theirs")
    d = tmp_path / "d"
    written.record(d, ["a.txt", "sub/"])
    (d / "a.txt").symlink_to(elsewhere / "a.txt")  # a recorded name that is now a link: the user's
    with pytest.raises(written.NotWrittenByVrh, match="a.txt"):
        written.remove_written(d)
    (d / "a.txt").unlink()
    (d / "sub").symlink_to(elsewhere)  # a recorded tree that is now a link
    with pytest.raises(written.NotWrittenByVrh, match="sub"):
        written.remove_written(d)
    link = tmp_path / "link"
    link.symlink_to(d)
    with pytest.raises(written.NotWrittenByVrh, match="symlink"):
        written.remove_written(link)
    assert (elsewhere / "a.txt").read_text() == "theirs"


def test_only_limits_both_the_check_and_the_removal(tmp_path):
    d = tmp_path / "d"
    (d / "notes").mkdir(parents=True)
    (d / "notes" / "n.txt").write_text("mine")  # the user's, beside what a conversion writes
    with written.Recorder(d, shared=True) as rec:
        rec.add("images/a.png", "data.jsonl")
    (d / "images").mkdir()
    (d / "images" / "a.png").write_bytes(b"x")
    (d / "data.jsonl").write_text("{}")
    written.remove_written(d, only=("images",))
    assert _files(d) == [".vrh-written", "data.jsonl", "notes/n.txt"]


def test_paths_outside_the_folder_are_refused(tmp_path):
    with pytest.raises(ValueError, match="not a path inside"):
        written.record(tmp_path / "d", ["../x"])
    assert not (tmp_path / "d").exists()


def test_a_torn_last_line_of_the_record_is_ignored(tmp_path):
    d = tmp_path / "d"
    written.record(d, ["a.txt"])
    with open(d / written.MANIFEST, "a") as f:
        f.write('"b.t')  # killed while recording b.txt: b.txt was not written either
    assert written.recorded(d) == {"a.txt"}
