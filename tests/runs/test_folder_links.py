"""The run folder's own files and links (issue 45 items 4, 5 and the hard-link note), below the CLI."""

import os

import pytest

from vrh import runs
from vrh.runs import safe_paths
from vrh.runs.folder import check_out


@pytest.fixture
def victim(tmp_path):
    v = tmp_path / "victim.txt"
    v.write_text("precious\n")
    return v


@pytest.mark.parametrize("dangling", [False, True])
def test_a_linked_lock_is_refused_in_one_line_and_its_target_is_never_written(tmp_path, victim, dangling):
    out = tmp_path / "out"
    out.mkdir()
    (out / runs.LOCK).symlink_to(tmp_path / "new.txt" if dangling else victim)
    with pytest.raises(FileExistsError, match=r"\.vrh-lock is a symlink; vrh never writes through one") as e:
        check_out(out)
    assert "\n" not in str(e.value)
    with pytest.raises(safe_paths.SymlinkRefused, match=r"\.vrh-lock is a symlink inside"):
        runs.RunFolder(out)
    assert victim.read_text() == "precious\n" and not (tmp_path / "new.txt").exists()


def test_a_hard_linked_copy_keeps_its_lock_file_and_its_samples(tmp_path):
    out, copy = tmp_path / "out", tmp_path / "copy"
    with runs.RunFolder(out) as run:
        run.write_config({"command": "evaluate"})
        run.append_sample({"id": "a"})
    (out / runs.LOCK).write_text("4242\n")  # a lock file left by a killed run
    copy.mkdir()
    for f in out.iterdir():
        os.link(f, copy / f.name)
    with runs.RunFolder(out, resume=True) as run:
        run.write_config({"command": "evaluate"})
        run.append_sample({"id": "b"})
        assert (copy / runs.LOCK).read_text() == "4242\n"  # the pid went into a lock file of its own
    assert [r["id"] for r in runs.read_jsonl(out / runs.SAMPLES)] == ["a", "b"]
    assert [r["id"] for r in runs.read_jsonl(copy / runs.SAMPLES)] == ["a"]
    assert os.stat(out / runs.SAMPLES).st_nlink == 1


def test_resume_refuses_links_at_the_run_own_names_and_temporaries_lose_theirs(tmp_path, victim):
    out = tmp_path / "out"
    with runs.RunFolder(out) as run:
        run.write_config({"command": "evaluate"})
        run.append_sample({"id": "a"})
    (out / runs.RESULTS).symlink_to(victim)
    with pytest.raises(FileExistsError, match=r"--resume: .* holds symlinks where the run keeps its files "
                                              r"\(results.json\)"):
        check_out(out, resume=True)
    (out / runs.RESULTS).unlink()
    (out / (runs.RESULTS + ".tmp")).symlink_to(victim)
    with runs.RunFolder(out, resume=True) as run:
        run.write_config({"command": "evaluate"})
        run.write_results({"accuracy": 1.0})
    assert victim.read_text() == "precious\n" and runs.read_results(out)["accuracy"] == 1.0
    assert not (out / (runs.RESULTS + ".tmp")).exists()


def test_write_json_and_jsonl_never_write_through_a_link(tmp_path, victim):
    (tmp_path / "x.json").symlink_to(victim)
    (tmp_path / "y.jsonl.tmp").symlink_to(victim)
    runs.write_json(tmp_path / "x.json", {"a": 1})  # the link at the name is replaced by the file
    runs.write_jsonl(tmp_path / "y.jsonl", [{"b": 2}])
    assert victim.read_text() == "precious\n"
    assert runs.read_json(tmp_path / "x.json") == {"a": 1} and not (tmp_path / "x.json").is_symlink()
    assert runs.read_jsonl(tmp_path / "y.jsonl") == [{"b": 2}]
