import json

import pytest

from vrh import runs


def test_run_folder_writes_config_samples_and_results(tmp_path):
    with runs.RunFolder(tmp_path / "r") as run:
        cfg = run.write_config({"command": "x", "seed": 1})
        run.append_sample({"id": "a"})
        run.append_sample({"id": "b"})
        run.write(runs.RESULTS, {"accuracy": 0.5})
    assert cfg["environment"]["torch"] and "transformers" in cfg["environment"]
    assert [r["id"] for r in runs.read_jsonl(tmp_path / "r" / runs.SAMPLES)] == ["a", "b"]
    assert runs.read_json(tmp_path / "r" / runs.RESULTS) == {"accuracy": 0.5}


def test_refuses_non_empty_folder_without_resume(tmp_path):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "x").write_text("")
    with pytest.raises(FileExistsError, match="--resume"):
        runs.RunFolder(tmp_path / "r")


def test_resume_keeps_finished_samples_and_drops_torn_line(tmp_path):
    d = tmp_path / "r"
    with runs.RunFolder(d) as run:
        run.write_config({"command": "x"})
        run.append_sample({"id": "a"})
    with open(d / runs.SAMPLES, "a") as f:
        f.write('{"id": "b", "trunc')  # a crash mid-write
    with runs.RunFolder(d, resume=True) as run:
        assert [r["id"] for r in run.finished_samples()] == ["a"]
        run.append_sample({"id": "c"})
    assert [r["id"] for r in runs.read_jsonl(d / runs.SAMPLES)] == ["a", "c"]


def test_resume_with_other_config_is_an_error(tmp_path):
    with runs.RunFolder(tmp_path / "r") as run:
        run.write_config({"command": "x", "seed": 1})
    with pytest.raises(ValueError, match="differs"):
        runs.RunFolder(tmp_path / "r", resume=True).write_config({"command": "x", "seed": 2})


def test_failed_write_fails(tmp_path):
    with pytest.raises(TypeError):
        runs.write_json(tmp_path / "x.json", {"bad": object()})


def test_bad_middle_line_is_an_error(tmp_path):
    p = tmp_path / "s.jsonl"
    p.write_text('{"id": 1}\nnot json\n{"id": 2}\n')
    with pytest.raises(ValueError, match=":2"):
        runs.read_jsonl(p)
