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


def test_overwrite_clears_everything_a_previous_run_wrote(tmp_path):
    d = tmp_path / "r"
    with runs.RunFolder(d) as run:
        run.write_config({"command": "compare"})
        run.write_results({"a": 1})
    (d / runs.OVERLAYS).write_bytes(b"x")  # a stale artefact of an earlier detection in the same folder
    (d / runs.shard_name(1, 2)).write_text("")
    (d / runs.DETECT_STATE).mkdir()
    (d / runs.DETECT_STATE / "batch-000000.pt").write_bytes(b"x")
    (d / "compare.png").write_bytes(b"x")  # the extra files of the command that wrote it
    with runs.RunFolder(d / "detect") as sub:  # a sub-run
        sub.write_config({"command": "detect"})
    (d / "results.json.tmp").write_text("")
    runs.RunFolder(d, overwrite=True).release()
    assert list(d.iterdir()) == []


def test_overwrite_removes_nothing_a_run_did_not_write(tmp_path):
    d = tmp_path / "r"
    with runs.RunFolder(d) as run:
        run.write_config({"command": "evaluate"})
    (d / "notes.txt").write_text("mine")
    (d / "sub").mkdir()  # not a vrh run folder
    with pytest.raises(FileExistsError, match="holds files no vrh run writes.*notes.txt.*sub"):
        runs.RunFolder(d, overwrite=True)
    assert sorted(c.name for c in d.iterdir()) == sorted([runs.CONFIG, "notes.txt", "sub"])


def test_overwrite_refuses_a_model_checkpoint_folder(tmp_path):
    """A model folder has a config.json too (this one the organism's): --overwrite must not delete it."""
    import shutil

    from vrh.models.loading import organism_path

    model = tmp_path / "model"
    shutil.copytree(organism_path(), model)
    before = sorted(p.name for p in model.iterdir())
    with pytest.raises(FileExistsError, match="not a vrh run folder"):
        runs.RunFolder(model, overwrite=True)
    with pytest.raises(FileExistsError, match="not a vrh run folder"):
        runs.RunFolder(model, resume=True)
    assert sorted(p.name for p in model.iterdir()) == before  # not even a lock file is left


def test_a_run_folder_identifies_itself(tmp_path):
    with runs.RunFolder(tmp_path / "r") as run:
        run.write_config({"command": "x"})
    assert runs.read_config(tmp_path / "r")[runs.RUN_MARK] == runs.RUN_FORMAT
    assert runs.is_run_folder(tmp_path / "r")
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / runs.CONFIG).write_text('{"model_type": "llava", "command": "x"}')
    assert not runs.is_run_folder(tmp_path / "hf")


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


def test_head_scores_ranking_reads_as_an_attribute_and_as_the_method_it_was():
    """``h.ranking[:3]`` failed (a method beside attributes: issue 46 item 18); ``h.ranking()`` still works."""
    hs = runs.HeadScores(scorer="a", num_layers=1, num_heads=3, n_scored=1,
                         variants={"a": {"scores": [[0.1, 0.7, 0.2]], "ranking": [[0, 1], [0, 2], [0, 0]]},
                                   "b": {"scores": [[0.5, 0.2, 0.1]], "ranking": [[0, 0], [0, 1], [0, 2]]}})
    assert hs.ranking[:2] == [(0, 1), (0, 2)] and hs.ranking() == hs.ranking == [(0, 1), (0, 2), (0, 0)]
    assert hs.ranking("b")[0] == (0, 0) and len(hs.ranking) == 3
    assert json.dumps(hs.ranking) == "[[0, 1], [0, 2], [0, 0]]"
    with pytest.raises(ValueError, match="no scorer 'c'"):
        hs.ranking("c")


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
    with runs.RunFolder(tmp_path) as run:
        run.write_config({"command": "detect"})
    runs.write_batch_state(tmp_path, 3, state)
    (tmp_path / runs.DETECT_STATE / "batch-000004.pt.tmp").write_bytes(b"half a file")
    got = runs.read_batch_states(tmp_path)
    assert list(got) == [3] and got[3]["ids"] == ["a", "b"] and got[3]["records"] == state["records"]
    assert torch.equal(got[3]["scorers"]["s"]["lists"]["_scores"][0], torch.ones(2, 3))
    with runs.RunFolder(tmp_path, resume=True) as run:
        runs.clear_batch_states(run)
    assert runs.read_batch_states(tmp_path) == {}


# --- safety: planted pickles, two writers, hostile ids -------------------------------------------------
class _Payload:
    """Unpickling this calls open(MARKER, "w"): a pickle that runs code."""

    marker = ""

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _plant_pickle(path, marker):
    import torch

    _Payload.marker = str(marker)
    torch.save({"step": 1, "evil": _Payload()}, path)


def test_a_planted_pickle_in_a_batch_state_runs_nothing_and_names_the_file(tmp_path):
    marker = tmp_path / "pwned"
    (tmp_path / runs.DETECT_STATE).mkdir()
    bad = tmp_path / runs.DETECT_STATE / "batch-000000.pt"
    _plant_pickle(bad, marker)
    with pytest.raises(ValueError, match=f"{bad}.*not a readable detection batch state") as e:
        runs.read_batch_states(tmp_path)
    assert not marker.exists()
    assert "weights_only=False" not in str(e.value)  # torch's own advice to load it unsafely is not passed on
    bad.write_bytes(b"PK\x03\x04 torn")  # a torn file: one line naming it
    with pytest.raises(ValueError, match=f"{bad}.*--resume"):
        runs.read_batch_states(tmp_path)


def test_load_torch_file_refuses_code_and_reads_plain_state(tmp_path):
    import torch

    marker = tmp_path / "pwned"
    _plant_pickle(tmp_path / "ckpt.pt", marker)
    with pytest.raises(ValueError, match="ckpt.pt: not a readable checkpoint"):
        runs.load_torch_file(tmp_path / "ckpt.pt")
    assert not marker.exists()
    torch.save({"step": 3, "config": {"betas": (0.9, 0.98)}, "w": torch.ones(2)}, tmp_path / "ok.pt")
    assert runs.load_torch_file(tmp_path / "ok.pt")["step"] == 3


_HOLD = """
import sys, time
from vrh import runs
run = runs.RunFolder(sys.argv[1], resume=True)
print("locked", flush=True)
time.sleep(60)
"""


def _holder(path):
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", _HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "locked"
    return p


def test_a_second_writer_is_refused_naming_the_holder_and_a_killed_holder_frees_the_folder(tmp_path):
    import signal

    d = tmp_path / "r"
    with runs.RunFolder(d) as run:
        run.write_config({"command": "evaluate"})
        run.write_results({"accuracy": 0.5})
    p = _holder(d)
    try:
        for kw in ({"resume": True}, {"overwrite": True}):
            with pytest.raises(runs.RunFolderInUse, match=f"{d} is in use by another vrh process \\(pid {p.pid}\\)"):
                runs.RunFolder(d, **kw)
        assert runs.read_results(d) == {"schema_version": runs.SCHEMA_VERSION, "accuracy": 0.5}  # untouched
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    with runs.RunFolder(d, overwrite=True) as run:  # the OS dropped the dead holder's lock
        run.write_config({"command": "evaluate"})
    assert not (d / runs.LOCK).exists()  # released on exit


def test_a_refused_new_folder_leaves_nothing_behind(tmp_path):
    d = tmp_path / "r"
    with runs.RunFolder(d) as run:
        run.write_config({"command": "evaluate"})
    p = _holder(d)
    try:
        with pytest.raises(runs.RunFolderInUse):
            runs.RunFolder(d, resume=True)
    finally:
        p.kill()
        p.wait()
    assert sorted(c.name for c in d.iterdir()) == sorted([runs.CONFIG, runs.LOCK])  # the killed holder's lock file only
    runs.RunFolder(d, resume=True).release()
    assert sorted(c.name for c in d.iterdir()) == [runs.CONFIG]


@pytest.mark.parametrize("ids", [["file", "allow_pickle"], ["a", "a/rects"], ["ü/🙂:*", "x" * 10_000]])
def test_any_sample_id_round_trips_through_the_npz_artefacts(tmp_path, ids):
    import numpy as np

    with runs.RunFolder(tmp_path / "r") as run:
        overlays = {i: (np.full((1, 2, 3), n, dtype=np.float32), np.full((3, 4), n, dtype=np.float32))
                    for n, i in enumerate(ids)}
        runs.write_overlays(run, overlays)
        runs.write_sample_scores(run, {i: np.full((2, 1, 2), n) for n, i in enumerate(ids)})
    got = runs.read_overlays(tmp_path / "r")
    assert list(got) == ids
    for n, i in enumerate(ids):
        assert (got[i][0] == n).all() and got[i][0].shape == (1, 2, 3) and got[i][1].shape == (3, 4)
        assert (runs.read_sample_scores(tmp_path / "r", i) == n).all()
    assert not list((tmp_path / "r").glob("*.tmp*"))


def test_npz_artefacts_of_the_first_format_still_read(tmp_path):
    import numpy as np

    np.savez(tmp_path / runs.OVERLAYS, **{"s1": np.ones((1, 1, 2)), "s1/rects": np.zeros((2, 4))})
    np.savez(tmp_path / runs.SAMPLE_SCORES, **{"vrh|x;y": np.ones((3, 1, 1))})
    assert list(runs.read_overlays(tmp_path)) == ["s1"]
    assert runs.read_sample_scores(tmp_path, "vrh/x:y").shape == (3, 1, 1)


def test_skipped_samples_are_listed_in_results(tmp_path):
    with runs.RunFolder(tmp_path / "r") as run:
        run.write_config({"command": "evaluate"})
        run.note_skipped([{"id": "a", "reason": "prompt too long"}, {"id": "a", "reason": "prompt too long"}])
        run.write_results({"n": 0})
    assert runs.read_results(tmp_path / "r")["skipped_samples"] == {"n": 1, "samples": [{"id": "a",
                                                                                         "reason": "prompt too long"}]}


def test_a_resume_mismatch_names_the_users_settings_first_one_per_line(tmp_path):
    with runs.RunFolder(tmp_path / "r") as run:
        run.write_config({"command": "sweep", "config": {"k": 3}, "model": {"path": "m" * 200, "sha": "a"}})
    with pytest.raises(ValueError) as e:
        runs.RunFolder(tmp_path / "r", resume=True).write_config(
            {"command": "sweep", "config": {"k": 4}, "model": {"path": "n" * 200, "sha": "a"}})
    lines = str(e.value).splitlines()
    assert lines[0].endswith("2 setting(s) differ from the interrupted run's (rerun with the same settings, or "
                             "--overwrite to start over):")
    assert lines[1] == "  config.k: 3 -> 4" and lines[2].startswith("  model.path: mmm")


def test_a_resume_mismatch_in_the_conditions_names_the_field_and_shows_whole_values(tmp_path):
    """The conditions' difference was cut at 80 characters, mid-JSON (issue 37 item 10): each differing field
    of each condition on its own line, a long value abbreviated between its items, extra conditions counted."""
    def conditions(heads, n=3):
        return [{"label": "none", "kind": "none"}, {"label": "top_k", "kind": "top_k", "heads": heads},
                *({"label": f"random:s{i}", "kind": "random", "heads": [[i, 0]]} for i in range(n))]

    old_heads = [[layer, head] for layer in range(4) for head in range(8)]
    new_heads = old_heads[:-1] + [[3, 9]]
    with runs.RunFolder(tmp_path / "r") as run:
        run.write_config({"command": "sweep", "conditions": conditions(old_heads)})
    with pytest.raises(ValueError) as e:
        runs.RunFolder(tmp_path / "r", resume=True).write_config({"command": "sweep",
                                                                 "conditions": conditions(new_heads, n=5)})
    lines = str(e.value).splitlines()[1:]
    assert lines[0].startswith("  conditions[1].heads: [[0, 0], [0, 1], ") and " -> [[0, 0], [0, 1], " in lines[0]
    for side in lines[0].removeprefix("  conditions[1].heads: ").split(" -> "):
        assert side.endswith(" more]") and "... " in side and json.loads(side.split(", ...")[0] + "]")
    assert lines[1:] == ['  conditions[5]: (absent) -> {"label": "random:s3", "kind": "random", "heads": [[3, 0]]}',
                         '  conditions[6]: (absent) -> {"label": "random:s4", "kind": "random", "heads": [[4, 0]]}']
    many = [{"label": f"k{i}", "k": i} for i in range(40)]
    with runs.RunFolder(tmp_path / "s") as run:
        run.write_config({"command": "sweep", "conditions": many})
    with pytest.raises(ValueError) as e:
        runs.RunFolder(tmp_path / "s", resume=True).write_config(
            {"command": "sweep", "conditions": [{**c, "k": c["k"] + 1} for c in many]})
    lines = str(e.value).splitlines()
    assert "40 setting(s) differ" in lines[0] and len(lines) == 1 + runs.folder.MAX_DIFFERENCES
    assert lines[1] == "  conditions[0].k: 0 -> 1" and lines[-1] == "  ... and 21 more"


def test_resume_refuses_a_folder_vrh_did_not_make(tmp_path):
    """Issue 33 item 2: the user's results.json was overwritten and their torn last line dropped."""
    from vrh.runs.folder import check_out

    d = tmp_path / "theirs"
    (d / "Documents").mkdir(parents=True)
    (d / "notes.txt").write_text("mine")
    (d / runs.RESULTS).write_text('{"mine": 1}')
    (d / runs.SAMPLES).write_text('{"id": "a"}\n{"id": "b", "torn')
    before = {p: p.read_bytes() for p in d.rglob("*") if p.is_file()}
    with pytest.raises(FileExistsError, match="--resume: .* is not a vrh run folder"):
        check_out(d, resume=True)
    with pytest.raises(FileExistsError, match="--resume: .* is not a vrh run folder"):
        runs.RunFolder(d, resume=True)
    assert {p: p.read_bytes() for p in d.rglob("*") if p.is_file()} == before and not (d / runs.LOCK).exists()


def test_resume_refuses_what_overwrite_refuses(tmp_path):
    d = tmp_path / "r"
    with runs.RunFolder(d) as run:
        run.write_config({"command": "evaluate"})
    (d / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="--resume: .*holds files no vrh run writes \\(notes.txt\\)"):
        runs.RunFolder(d, resume=True)
    (d / "notes.txt").unlink()
    with runs.RunFolder(d, resume=True) as run:  # vrh's own folder resumes as before
        run.write_config({"command": "evaluate"})


def test_the_cli_refuses_resume_into_a_foreign_folder_before_loading(tmp_path, capsys):
    from vrh.cli import main

    from vrh.organism.world import write_split

    data = write_split(tmp_path / "data", 2, 0)
    d = tmp_path / "theirs"
    d.mkdir()
    (d / runs.RESULTS).write_text('{"mine": 1}')
    assert main(["evaluate", "--model", "organism", "--data", str(data), "--out", str(d),
                 "--resume"]) == 2
    err = capsys.readouterr().err
    assert "is not a vrh run folder" in err and "Traceback" not in err
    assert (d / runs.RESULTS).read_text() == '{"mine": 1}'


def test_detection_state_with_a_file_of_the_users_is_refused_and_kept(tmp_path):
    d = tmp_path / "r"
    with runs.RunFolder(d) as run:
        run.write_config({"command": "detect"})
    runs.write_batch_state(d, 0, {"ids": [], "records": [], "scorers": {}})
    mine = d / runs.DETECT_STATE / "notes.txt"
    mine.write_text("mine")
    with pytest.raises(FileExistsError, match="detect_state/notes.txt"):
        runs.RunFolder(d, overwrite=True)
    assert mine.read_text() == "mine" and len(list(mine.parent.glob("batch-*.pt"))) == 1


@pytest.mark.parametrize("flags", [{}, {"resume": True}, {"overwrite": True}])
def test_a_run_killed_before_its_config_was_in_place_is_no_run_yet(tmp_path, flags):
    d = tmp_path / "r"
    d.mkdir()
    (d / runs.LOCK).write_text("123\n")
    (d / (runs.CONFIG + ".tmp")).write_text('{"vrh_run": 1, "comm')  # killed between the write and the rename
    with runs.RunFolder(d, **flags) as run:
        run.write_config({"command": "evaluate"})
    assert runs.is_run_folder(d) and not (d / (runs.CONFIG + ".tmp")).exists()
