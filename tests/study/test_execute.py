"""vrh study run: ordinary run folders, one model load per model, a rerun that only checks, a killed study
that resumes to the same folder as an uninterrupted run, and a changed setting that reruns only its cells."""

import shutil

import pytest

from vrh import runs
from vrh.study.cells import cell_state
from vrh.study.kinds import build_cells
from vrh.study.execute import run_study
from vrh.study.spec import load_study

from .conftest import write_study
from .folders import differences, folder_content

QUIET = dict(log=lambda m: None)


def test_every_cell_is_an_ordinary_finished_run_folder_and_each_model_loads_once(small_study):
    path, out = small_study
    study = load_study(path)
    cells = build_cells(study)
    assert {c.kind for c in cells} == {"data", "detect", "sweep", "crosstask", "compare", "transfer", "stability"}
    for c in cells:
        assert cell_state(out, c) == ("done", [])
        if c.kind != "data":
            assert runs.read_config(out / c.folder)["command"] in ("detect", "sweep", "compare", "transfer",
                                                                   "stability")
    res = runs.read_json(out / "results.json")
    assert res["model_loads"] == {"A": 1, "B": 1}  # transfer A -> B ran while B was loaded
    # the second grounding benchmark went through the refcoco converter's real layout
    assert runs.read_json(out / "data" / "world_refcoco" / "convert.json")["source"] == "refcoco"
    # sweeps read the detection cell of their model and benchmark (shared, not detected again)
    assert runs.read_config(out / "A" / "sweep_world")["config"]["heads"] == str(out / "A" / "detect_world")


def test_a_rerun_does_nothing_but_check(small_study, tmp_path):
    path, out = small_study
    before = folder_content(out)
    rep = run_study(load_study(path), out, **QUIET)
    assert rep.ran == [] and rep.redone == {} and len(rep.already_done) == len(build_cells(load_study(path)))
    assert folder_content(out) == before


def crash_at(monkeypatch, n: int):
    """The n-th write of a finished unit of work (a sample record, a detection batch) raises
    KeyboardInterrupt, as a kill between two writes would stop the study; returns a counter."""
    import vrh.runs
    from vrh.runs.folder import RunFolder

    calls = {"n": 0}
    real_append, real_batch = RunFolder.append_sample, vrh.runs.write_batch_state

    def tick():
        calls["n"] += 1
        if n and calls["n"] >= n:
            raise KeyboardInterrupt(f"simulated kill at write {calls['n']}")

    def append(self, record):
        tick()
        return real_append(self, record)

    def batch(*a, **k):
        tick()
        return real_batch(*a, **k)

    monkeypatch.setattr(RunFolder, "append_sample", append)
    monkeypatch.setattr(vrh.runs, "write_batch_state", batch)
    return calls


def _kill_and_resume(small_study, tmp_path, monkeypatch, fraction: float):
    path, reference = small_study
    counter = crash_at(monkeypatch, 0)  # counts the writes of a whole run (once per session)
    out = tmp_path / "killed"
    total = _total_writes(path, tmp_path / "count", counter)
    monkeypatch.undo()
    point = max(1, int(total * fraction))
    crash_at(monkeypatch, point)
    with pytest.raises(KeyboardInterrupt):
        run_study(load_study(path), out, **QUIET)
    monkeypatch.undo()
    states = {c.id: cell_state(out, c)[0] for c in build_cells(load_study(path))}
    partial = [c for c, s in states.items() if s == "partial"]
    assert "done" in states.values() and len(partial) == 1  # killed inside one cell, after others finished
    rep = run_study(load_study(path), out, **QUIET)
    assert rep.resumed == partial and rep.ran and not set(rep.ran) & set(rep.already_done)
    assert differences(reference, out) == []


_TOTALS: dict[str, int] = {}


def _total_writes(path, out, counter) -> int:
    if str(path) not in _TOTALS:
        run_study(load_study(path), out, **QUIET)
        _TOTALS[str(path)] = counter["n"]
    return _TOTALS[str(path)]


def test_a_study_killed_mid_cell_resumes_to_the_folder_of_an_uninterrupted_run(small_study, tmp_path,
                                                                                monkeypatch):
    _kill_and_resume(small_study, tmp_path, monkeypatch, 0.5)


@pytest.mark.parametrize("fraction", [0.05, 0.3, 0.7, 0.95])
def test_killed_at_other_points_it_resumes_to_the_same_folder(small_study, tmp_path, monkeypatch, fraction):
    _kill_and_resume(small_study, tmp_path, monkeypatch, fraction)


def test_a_changed_setting_reruns_only_the_cells_it_changes_and_says_which(small_study, tmp_path):
    path, reference = small_study
    out = tmp_path / "out"
    shutil.copytree(reference, out)
    changed = write_study(tmp_path, ks="[0, 1]")
    rep = run_study(load_study(changed), out, **QUIET)
    assert sorted(rep.ran) == ["sweep/A/world", "sweep/A/world_refcoco", "sweep/B/world", "sweep/B/world_refcoco"]
    assert all(d == ["ks: [0, 2] -> [0, 1]"] for d in rep.redone.values()) and sorted(rep.redone) == sorted(rep.ran)
    assert runs.read_results(out / "A" / "sweep_world")["k"] == [0, 1]


def test_a_cell_killed_between_its_results_and_the_clean_up_loses_its_state_on_resume(small_study, tmp_path):
    """A detection cell killed after its results.json, before detect_state/ was removed: the resumed study counts it
    done, runs nothing, and removes the state as the finished run would have (issue 45 item 12)."""
    path, reference = small_study
    out = tmp_path / "out"
    shutil.copytree(reference, out)
    before = folder_content(out)
    cell = next(c for c in build_cells(load_study(path)) if c.kind == "detect")
    state = out / cell.folder / runs.DETECT_STATE
    state.mkdir()
    (state / "batch-000000.pt").write_bytes(b"left by the kill")
    rep = run_study(load_study(path), out, **QUIET)
    assert rep.ran == [] and cell.id in rep.already_done
    assert not state.exists() and folder_content(out) == before


@pytest.mark.slow
def test_a_study_killed_with_sigkill_resumes_to_the_same_folder(small_study, tmp_path):
    """A real kill -9 of `vrh study run` mid-way (once a sweep has written samples), then the same command."""
    import os
    import signal
    import subprocess
    import sys
    import time

    path, reference = small_study
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "vrh", "study", "run", str(path), "--out", str(out)]
    env = {**os.environ, "VRH_NO_PROGRESS": "1"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None and not (out / "A" / "sweep_world" / "samples.jsonl").exists():
            time.sleep(0.05)
        assert proc.poll() is None, "the study finished before it could be killed"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert subprocess.run(cmd, env=env, capture_output=True).returncode == 0
    assert differences(reference, out) == []


def test_a_changed_dataset_removes_only_what_the_study_wrote_in_its_folder(small_study, tmp_path):
    """Issue 33 item 3: a redone dataset cell removed its folder whole (``shutil.rmtree``)."""
    path, reference = small_study
    out = tmp_path / "out"
    shutil.copytree(reference, out)
    mine = out / "data" / "world" / "MY_NOTES.txt"
    mine.write_text("mine")
    changed = write_study(tmp_path, n_world=13)
    with pytest.raises(FileExistsError, match="redoing cell .*world.*MY_NOTES.txt"):
        run_study(load_study(changed), out, **QUIET)
    assert mine.read_text() == "mine" and (out / "data" / "world" / "grounding.jsonl").is_file()
    mine.unlink()
    rep = run_study(load_study(changed), out, **QUIET)
    assert "data/world" in rep.redone and len(runs.read_jsonl(out / "data" / "world" / "grounding.jsonl")) == 13
