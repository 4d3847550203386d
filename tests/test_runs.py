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
    with pytest.raises(ValueError, match="seed: 1 -> 2"):
        runs.RunFolder(tmp_path / "r", resume=True).write_config({"command": "x", "seed": 2})


def test_failed_write_fails(tmp_path):
    with pytest.raises(TypeError):
        runs.write_json(tmp_path / "x.json", {"bad": object()})


def test_bad_middle_line_is_an_error(tmp_path):
    p = tmp_path / "s.jsonl"
    p.write_text('{"id": 1}\nnot json\n{"id": 2}\n')
    with pytest.raises(ValueError, match=":2"):
        runs.read_jsonl(p)


def test_overwrite_clears_the_whole_previous_run(tmp_path):
    d = tmp_path / "r"
    with runs.RunFolder(d) as run:
        run.write_config({"command": "x"})
        run.write_results({"a": 1})
    (d / "old.npz").write_bytes(b"x")
    (d / "sub").mkdir()
    (d / "sub" / "f").write_text("y")
    runs.RunFolder(d, overwrite=True)
    assert list(d.iterdir()) == []


def test_overwrite_refuses_a_folder_that_is_not_a_run(tmp_path):
    (tmp_path / "important.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not a vrh run folder"):
        runs.RunFolder(tmp_path, overwrite=True)
    assert (tmp_path / "important.txt").exists()


def test_non_empty_folder_error_names_both_flags(tmp_path):
    with runs.RunFolder(tmp_path / "r") as run:
        run.write_config({"command": "x"})
    with pytest.raises(FileExistsError, match="--overwrite.*--resume"):
        runs.RunFolder(tmp_path / "r")


def test_resume_error_names_the_setting_that_differs(tmp_path):
    with runs.RunFolder(tmp_path / "r") as run:
        run.write_config({"command": "x", "config": {"k": 3, "seeds": [0, 1]}})
    with pytest.raises(ValueError, match=r"config\.k: 3 -> 5"):
        runs.RunFolder(tmp_path / "r", resume=True).write_config({"command": "x", "config": {"k": 5, "seeds": [0, 1]}})


def test_results_carry_the_schema_version_and_mark_completion(tmp_path):
    with runs.RunFolder(tmp_path / "r") as run:
        run.write_config({"command": "x"})
        assert not runs.is_finished(run.path)
        run.write_results({"accuracy": 0.5})
    assert runs.read_results(tmp_path / "r") == {"schema_version": runs.SCHEMA_VERSION, "accuracy": 0.5}
    assert runs.is_finished(tmp_path / "r")


def test_head_scores_round_trip(tmp_path):
    hs = runs.HeadScores(scorer="a", num_layers=1, num_heads=2, n_scored=3,
                         variants={"a": {"scores": [[0.1, 0.7]], "ranking": [[0, 1], [0, 0]]},
                                   "b": {"scores": [[0.5, 0.2]], "ranking": [[0, 0], [0, 1]]}},
                         extra={"capture_forwards": 2})
    with runs.RunFolder(tmp_path / "r") as run:
        runs.write_head_scores(run, hs)
    back = runs.read_head_scores(tmp_path / "r")
    assert back == hs and back.ranking("b") == [(0, 0), (0, 1)] and back.scores().tolist()[0][1] == pytest.approx(0.7)
    with pytest.raises(ValueError, match="no scorer 'c'"):
        back.scores("c")


def test_rank_shards_count_as_finished_and_are_merged_before_results(tmp_path):
    """What a data-parallel run leaves when it is killed: per-rank shards (one of them torn, one record in
    two files after an interrupted merge); a resumed run of any size sees each record once and
    write_results folds them into samples.jsonl."""
    d = tmp_path / "r"
    with runs.RunFolder(d) as run:
        run.write_config({"command": "x"})
        run.append_sample({"condition": "none", "id": "a"})
    (d / runs.shard_name(0, 2)).write_text(json.dumps({"condition": "none", "id": "b"}) + "\n"
                                           + json.dumps({"condition": "none", "id": "a"}) + "\n")
    (d / runs.shard_name(1, 2)).write_text(json.dumps({"condition": "top1", "id": "a"}) + "\n{\"torn")
    with runs.RunFolder(d, resume=True) as run:
        keys = [(r["condition"], r["id"]) for r in run.finished_samples()]
        assert keys == [("none", "a"), ("none", "b"), ("top1", "a")]
        run.append_sample({"condition": "top1", "id": "b"})
        run.write_results({"n": 4})
    assert not list(d.glob(runs.SHARD_GLOB))
    merged = [(r["condition"], r["id"]) for r in runs.read_samples(d)]
    assert sorted(merged) == sorted([*keys, ("top1", "b")]) and len(merged) == 4


def test_batch_states_round_trip_and_a_torn_write_is_ignored(tmp_path):
    import torch

    state = {"ids": ["a", "b"], "records": [{"id": "a", "iou": None, "box": [1.0, 2.0]}],
             "scorers": {"s": {"lists": {"_scores": [torch.ones(2, 3)], "_include": [True]}, "counters": {"n_x": 1}}}}
    runs.write_batch_state(tmp_path, 3, state)
    (tmp_path / runs.DETECT_STATE / "batch-000004.pt.tmp").write_bytes(b"half a file")
    got = runs.read_batch_states(tmp_path)
    assert list(got) == [3] and got[3]["ids"] == ["a", "b"] and got[3]["records"] == state["records"]
    assert torch.equal(got[3]["scorers"]["s"]["lists"]["_scores"][0], torch.ones(2, 3))
    with runs.RunFolder(tmp_path, resume=True) as run:
        runs.clear_batch_states(run)
    assert runs.read_batch_states(tmp_path) == {}
