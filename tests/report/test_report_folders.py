"""Which run folders a report covers and what it leaves in ``--out`` (issue 26): a run that names sub-runs
brings them along once, a folder given twice is reported once, and a rerun into the same ``--out`` leaves
no figure of the previous report behind."""

import shutil

import numpy as np
import pytest

from vrh import runs
from vrh.analyses.reporting import build_report
from vrh.report.load import load_runs


def _finished(folder, config, results):
    with runs.RunFolder(folder) as run:
        run.write_config(config)
        run.write_results(results)
    return folder


def _detect(folder, L=2, H=4):
    scores = np.arange(L * H, dtype=float).reshape(L, H) / 100  # (L, H)
    ranking = [[int(i) // H, int(i) % H] for i in np.argsort(-scores.ravel(), kind="stable")]
    with runs.RunFolder(folder) as run:
        run.write_config({"command": "detect", "detect_ids": ["s0"]})
        runs.write_head_scores(run, runs.HeadScores("out", L, H, 1, {"out": {"scores": scores.tolist(),
                                                                             "ranking": ranking}}))
        run.write_results({"n_scored": 1})
    return folder


def _stability(folder):
    return _finished(folder, {"command": "stability"}, {"n_values": [5, 10], "topk_overlap_mean": [0.5, 0.9],
                                                        "k": 2})


def test_a_rerun_removes_figures_the_new_report_does_not_show(tmp_path):
    out = tmp_path / "out"
    first = build_report([_detect(tmp_path / "det"), _stability(tmp_path / "stab")], out)
    old = sorted(p.name for p in first["figures"].glob("*.png"))
    assert "stab-stability.png" in old and "det-heatmap.png" in old
    mine = [first["figures"] / "notes.txt", first["figures"] / "keep" / "x.png"]
    mine[1].parent.mkdir()
    for p in mine:
        p.write_text("not the report's")
    again = build_report([tmp_path / "det"], out)
    assert sorted(p.name for p in again["figures"].glob("*.png")) == ["det-heatmap.png", "det-histogram.png"]
    linked = {line.split("](figures/")[1].rstrip(")") for line in again["md"].read_text().splitlines()
              if "](figures/" in line}
    assert linked == {"det-heatmap.png", "det-histogram.png"}
    assert all(p.read_text() == "not the report's" for p in mine)  # only PNGs directly in figures/ go


def test_a_folder_given_twice_is_reported_once_with_a_note(tmp_path):
    det = _detect(tmp_path / "runs" / "det")
    alias = tmp_path / "runs" / "." / "det"
    loaded = load_runs([det, alias, tmp_path / "runs" / "det"])
    assert [r.name for r in loaded] == ["det"] and loaded[0].times_given == 3
    html = build_report([det, alias], tmp_path / "out")["html"].read_text()
    assert "det'" not in html and html.count("<td>det</td>") == 2  # summary + provenance
    assert '<p class="muted">det was given 2 times and is reported once.</p>' in html


def test_sub_runs_are_read_only_inside_their_run_folder(tmp_path):
    parent = tmp_path / "study"
    _finished(parent, {"command": "study", "subruns": ["a", "../outside", "missing", "x\0y", "."]},
              {"subruns": ["a", "b"]})
    _stability(parent / "a")
    _stability(parent / "b")
    _stability(tmp_path / "outside")
    loaded = load_runs([parent])
    assert [r.name for r in loaded] == ["study", "a", "b"]  # config and results both name sub-runs; once each
    problems = " ".join(loaded[0].problems)
    for name in ("'../outside'", "'x\\x00y'", "'.'"):
        assert f"sub-run {name} is no folder inside study; not read" in problems
    assert "sub-run 'missing' not found" in problems
    paths = build_report([parent], tmp_path / "out")
    md = paths["md"].read_text()
    assert paths["html"].read_text().count(">Stability</h2>") == 1
    assert "(figures/a-stability.png)" in md and "(figures/b-stability.png)" in md


def test_two_demos_label_their_sub_runs_by_folder(tmp_path):
    dirs = []
    for name in ("demo_a", "demo_b"):
        d = _finished(tmp_path / name, {"command": "demo", "subruns": ["detect"]}, {"k": 1, "subruns": ["detect"]})
        _detect(d / "detect")
        dirs.append(d)
    assert [r.name for r in load_runs(dirs)] == ["demo_a", "demo_a/detect", "demo_b", "demo_b/detect"]


# --- a report never touches a file of the user's (issue 33 item 1) -------------------------------------
def _tree(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_folder_that_is_not_a_vrh_report_is_refused_and_left_as_it_was(tmp_path):
    out = tmp_path / "mine"
    (out / "figures").mkdir(parents=True)
    (out / "figures" / "fig1.png").write_bytes(b"my figure")
    (out / "report.md").write_text("my report")
    with pytest.raises(FileExistsError, match="not a vrh report folder"):
        build_report([_detect(tmp_path / "det")], out)
    assert _tree(out) == {"figures/fig1.png": b"my figure", "report.md": b"my report"}


def test_the_cli_refuses_it_in_one_line(tmp_path, capsys):
    from vrh.cli import main

    out = tmp_path / "mine"
    out.mkdir()
    (out / "report.md").write_text("my report")
    assert main(["report", str(_detect(tmp_path / "det")), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "not a vrh report folder" in err and "Traceback" not in err
    assert (out / "report.md").read_text() == "my report"


def test_a_figures_symlink_is_never_followed(tmp_path):
    out = tmp_path / "out"
    build_report([det := _detect(tmp_path / "det")], out)  # a vrh report folder ...
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "det-heatmap.png").write_bytes(b"not vrh's")
    (elsewhere / "old.png").write_bytes(b"not vrh's either")
    shutil.rmtree(out / "figures")
    (out / "figures").symlink_to(elsewhere)  # ... whose figures now point out of it
    with pytest.raises(FileExistsError, match="symlink"):
        build_report([det], out)
    assert _tree(elsewhere) == {"det-heatmap.png": b"not vrh's", "old.png": b"not vrh's either"}


def test_a_rerun_replaces_only_what_the_previous_report_wrote(tmp_path):
    out = tmp_path / "out"
    build_report([det := _detect(tmp_path / "det"), _stability(tmp_path / "stab")], out)
    (out / "figures" / "mine.png").write_bytes(b"my figure")  # the user's, beside vrh's
    (out / "notes.md").write_text("my notes")
    build_report([det], out)
    assert (out / "figures" / "mine.png").read_bytes() == b"my figure" and (out / "notes.md").read_text() == "my notes"
    assert not (out / "figures" / "stab-stability.png").exists()  # the previous report's, no longer shown


def test_a_file_of_the_users_under_a_name_the_report_writes_is_refused(tmp_path):
    out = tmp_path / "out"
    build_report([det := _detect(tmp_path / "det")], out)
    theirs = out / "figures" / "stab-stability.png"  # not written by the first report, named as the next one writes it
    theirs.write_bytes(b"my figure")
    with pytest.raises(FileExistsError, match="stab-stability.png.*vrh did not write"):
        build_report([det, _stability(tmp_path / "stab")], out)
    assert theirs.read_bytes() == b"my figure"
