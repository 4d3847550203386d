"""The emergence section (vrh issue 17 item 2): an emergence run folder made from synthetic training logs
of two phases with known maps is drawn (accuracy, sparsity, maps, head identity), its table holds the
logged numbers, it sits beside a detection run, and reports without one have no such section."""

import base64
import json
import re

import numpy as np
import pytest

from vrh import runs
from vrh_lab.organism.emergence import collect, summarize, write_run
from vrh.analyses.reporting import build_report
from vrh.report import emergence as em
from vrh.analyses.reporting import build_sections
from vrh.report.document import figures
from vrh.report.load import load_runs

L, H, K = 2, 4, 2
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SECTION = "Emergence during training"


def _map(**cells):
    """A 2 x 4 map at 0.05 with the given cells, e.g. ``_map(l1h2=0.3)``."""
    m = np.full((L, H), 0.05)
    for name, v in cells.items():
        m[int(name[1]), int(name[3])] = v
    return m.round(5).tolist()


def _top(m, k=K):
    a = np.asarray(m)
    order = np.argsort(-a.flatten(), kind="stable")[:k]
    return [[int(i) // H, int(i) % H] for i in order]


def _test(m, acc, acc_top, acc_random):
    return {"scores": m, "above_threshold": int((np.asarray(m) > 0.1).sum()), "acc": acc, "top": _top(m),
            "acc_top": acc_top, "random": [[[0, 0], [0, 3]], [[1, 0], [1, 1]]], "acc_random": acc_random}


def text_phase():
    """A text-only phase: the causal test runs on text jobs; every head scores about 0.2 at the start."""
    maps = [np.full((L, H), 0.21).tolist(), _map(l0h3=0.34, l1h1=0.3, l0h0=0.22),
            _map(l0h3=0.36, l1h1=0.31, l0h0=0.24)]
    return [{"step": s, "phase": "p_text", "k": K, "n": 50, "text": _test(m, a, t, r)}
            for s, m, a, t, r in zip((0, 10, 20), maps, (0.0, 0.2, 0.3), (0.0, 0.1, 0.12),
                                     ([0.0, 0.0], [0.2, 0.18], [0.3, 0.26]))]


IMAGE_MAPS = [_map(), _map(l0h1=0.12), _map(l1h2=0.3, l0h1=0.15), _map(l1h2=0.4, l0h1=0.2, l1h0=0.11)]


def image_phase():
    """An image phase (steps start over at 0), with the text map tracked beside it. Head (1, 2) appears at
    step 20 and leads from then on; (0, 1) appears first."""
    accs = [(0.0, 0.0, [0.0, 0.0]), (0.1, 0.06, [0.1, 0.08]), (0.5, 0.2, [0.48, 0.44]), (0.8, 0.2, [0.72, 0.68])]
    return [{"step": s, "phase": "p_img", "k": K, "n": 50, "image": _test(m, *a),
             "text": {"scores": _map(l0h3=0.3), "above_threshold": 8, "top": [[0, 3], [0, 0]]}}
            for s, m, a in zip((0, 10, 20, 30), IMAGE_MAPS, accs)]


@pytest.fixture
def emergence_run(tmp_path):
    """Two phase folders with their logs (the way training leaves them), made into a run folder."""
    for name, recs in (("p_text", text_phase()), ("p_img", image_phase())):
        (tmp_path / "build" / name).mkdir(parents=True)
        runs.write_emergence(tmp_path / "build" / name, recs)
    out = tmp_path / "emergence"
    write_run([tmp_path / "build" / "p_text", tmp_path / "build" / "p_img" / runs.EMERGENCE], out)
    return out


def test_write_run_makes_a_run_folder_with_the_log_in_phase_order(emergence_run):
    assert runs.is_finished(emergence_run)
    cfg = runs.read_config(emergence_run)
    assert cfg["command"] == "emergence" and cfg["phases"] == ["p_text", "p_img"] and len(cfg["sources"]) == 2
    recs = runs.read_emergence(emergence_run)
    assert [(r["phase"], r["step"]) for r in recs] == [("p_text", 0), ("p_text", 10), ("p_text", 20), ("p_img", 0),
                                                       ("p_img", 10), ("p_img", 20), ("p_img", 30)]
    res = runs.read_results(emergence_run)
    assert res["n_records"] == 7 and res["k"] == K and res["n"] == 50
    p_text, p_img = res["phases"]
    assert (p_text["phase"], p_text["first_step"], p_text["last_step"], p_text["tasks"]) == ("p_text", 0, 20, ["text"])
    assert p_text["final"]["task"] == "text" and p_text["final"]["top_k_heads"] == [[0, 3], [1, 1]]
    assert p_img["final"] == {"step": 30, "task": "image", "top_k_heads": [[1, 2], [0, 1]], "acc": 0.8,
                              "acc_top": 0.2, "acc_random_mean": pytest.approx(0.7), "above_threshold": 3,
                              "text": {"top_k_heads": [[0, 3], [0, 0]], "above_threshold": 8}}
    assert res["final"]["phase"] == "p_img" and res["final"]["step"] == 30


def test_write_run_refuses_a_log_given_twice_an_empty_one_and_its_own_source(emergence_run, tmp_path):
    src = tmp_path / "build" / "p_img"
    with pytest.raises(ValueError, match="p_img.*step 0.*both"):
        write_run([src, src], tmp_path / "twice")
    with pytest.raises(FileNotFoundError):
        write_run([tmp_path / "build"], tmp_path / "none")  # a folder without a log
    with pytest.raises(ValueError, match="holds the source"):
        write_run([src], tmp_path / "build", overwrite=True)  # would clear the log it reads
    with pytest.raises(FileExistsError):
        write_run([src], emergence_run)  # an existing run without --overwrite
    write_run([src], emergence_run, overwrite=True)
    assert runs.read_config(emergence_run)["phases"] == ["p_img"]


def test_read_keeps_phases_in_order_and_the_last_record_of_a_retracked_step(tmp_path):
    recs = text_phase() + image_phase()
    retracked = {**recs[-1], "seconds": 9.0}
    (tmp_path / runs.EMERGENCE).write_text("".join(json.dumps(r) + "\n" for r in recs + [retracked])
                                           + '{"step": 4')  # a torn last line
    got = runs.read_emergence(tmp_path)
    assert [(r["phase"], r["step"]) for r in got] == [(r["phase"], r["step"]) for r in recs]  # not by step alone
    assert got[-1]["seconds"] == 9.0
    assert collect([tmp_path]) == got and summarize(got)["n_records"] == 7


def test_step_axis_restarts_a_phase_after_the_previous_and_continues_a_continuation():
    recs = [{"phase": "a", "step": s} for s in (0, 10, 20)] + [{"phase": "b", "step": s} for s in (0, 10)] \
        + [{"phase": "c", "step": s} for s in (20, 30)]
    ax = em.step_axis(recs)
    assert ax.x == [0, 10, 20, 30, 40, 50, 60]  # b starts over: one interval after a; c continues b's steps
    assert [b[0] for b in ax.bands] == ["a", "b", "c"] and ax.bands[0][2] == ax.bands[1][1] == 25
    assert (0, "0") in ax.ticks and (30, "0") in ax.ticks  # b's ticks are b's own steps: its step 0 at x 30


def test_report_draws_the_emergence_section_with_its_figures_and_table(emergence_run, tmp_path):
    paths = build_report([emergence_run], tmp_path / "rep")
    html, md = paths["html"].read_text(), paths["md"].read_text()
    assert SECTION in html and f"## {SECTION}" in md and "Other runs" not in html
    secs = build_sections(load_runs([emergence_run]), None)
    names = [f.name for f in figures(secs)]
    want = [f"emergence-emergence-{x}" for x in ("accuracy", "sparsity", "maps-image", "maps-text", "identity")]
    assert names == want
    for fig in figures(secs):  # every figure embedded in the page, and written beside the Markdown
        assert fig.png.startswith(PNG_MAGIC)
        assert base64.b64encode(fig.png).decode() in html
        assert (paths["figures"] / f"{fig.name}.png").read_bytes() == fig.png
    cell = r" \| ([^|]+)"
    rows = re.findall(r"^\| (p_\w+)" + cell * 7 + r" \|$", md, re.M)
    assert [tuple(c.strip() for c in r) for r in rows] == [
        ("p_text", "0", "text jobs", "0:0 0:1", "8", "0.0", "0.0", "0.0"),
        ("p_text", "10", "text jobs", "0:3 1:1", "3", "20.0", "10.0", "19.0"),
        ("p_text", "20", "text jobs", "0:3 1:1", "3", "30.0", "12.0", "28.0"),
        ("p_img", "0", "image", "0:0 0:1", "0", "0.0", "0.0", "0.0"),
        ("p_img", "10", "image", "0:1 0:0", "1", "10.0", "6.0", "9.0"),
        ("p_img", "20", "image", "1:2 0:1", "2", "50.0", "20.0", "46.0"),
        ("p_img", "30", "image", "1:2 0:1", "3", "80.0", "20.0", "70.0")]
    assert "| emergence | emergence | finished |" in md and "| 50 | 80.0 |" in md  # the summary's final accuracy
    assert "ranges 0.210-0.210" in md and "threshold 0.1 means nothing" in md  # the text-job note, measured


def test_figures_show_the_phases_the_heads_and_the_seeds(emergence_run, monkeypatch):
    drawn = []
    real = em.to_png
    monkeypatch.setattr(em, "to_png", lambda fig: drawn.append(fig) or real(fig))
    recs = runs.read_emergence(emergence_run)
    em.accuracy_figure(recs, k=K, title="t")
    ax = drawn[0].axes[0]
    red = [line for line in ax.lines if line.get_color() == em.VRH_COLOR and len(line.get_xdata())]
    assert [list(line.get_ydata()) for line in red] == [[0.0, 0.1, 0.12], [0.0, 0.06, 0.2, 0.2]]
    assert red[0].get_linestyle() == "--" and red[1].get_linestyle() == "-"  # text-job test dashed
    band = ax.collections[-1].get_paths()[0].vertices[:, 1]  # min-max of the last phase's random seeds
    assert {round(v, 2) for v in band} >= {0.44, 0.48, 0.68, 0.72}
    top_labels = [t.get_text() for a in ax.child_axes for t in a.get_xticklabels()]  # the phase names on top
    assert "p_text (text jobs)" in top_labels and "p_img" in top_labels
    em.identity_figure(recs, task="image", k=K, threshold=0.1, title="t")
    ax = drawn[1].axes[0]
    lines = {line.get_label(): list(line.get_ydata()) for line in ax.lines if ":" in line.get_label()}
    assert lines == {"1:2": [0.05, 0.05, 0.3, 0.4], "0:1": [0.05, 0.12, 0.15, 0.2]}
    jac = next(line for line in drawn[1].axes[1].lines if len(line.get_xdata()) == 4)
    assert list(jac.get_ydata()) == pytest.approx([1 / 3, 1 / 3, 1.0, 1.0])  # {00,01}, {01,00}, then the final
    em.sparsity_figure(recs, k=K, threshold=0.1, title="t")
    counts = {line.get_label(): list(line.get_ydata()) for line in drawn[2].axes[0].lines if line.get_label()[0] != "_"}
    assert counts["image: heads > 0.1"] == [0, 1, 2, 3] and counts["text jobs: heads > 0.1"][:3] == [8, 3, 3]
    for fig in drawn:  # titles and legends inside the PNG
        fig.canvas.draw()
        r = fig.canvas.get_renderer()
        for artist in [a.title for a in fig.axes] + list(fig.legends):
            b = artist.get_window_extent(r)
            assert b.x0 >= -1 and b.x1 <= fig.bbox.width + 1 and b.y1 <= fig.bbox.height + 1


def test_emergence_beside_a_detection_run_and_absent_without_one(emergence_run, tmp_path):
    det = tmp_path / "det"
    scores = np.zeros((L, H))
    scores[1, 2] = 0.02
    with runs.RunFolder(det) as run:
        run.write_config({"command": "detect", "detect_ids": ["s0"], "eval_ids": ["e0"]})
        run.append_sample({"id": "s0", "outcome": "correct"})
        runs.write_head_scores(run, runs.HeadScores("out/sum/mean", L, H, 1, {"out/sum/mean": {
            "scores": scores.tolist(), "ranking": [[1, 2], [0, 0]]}}))
        run.write_results({"n_scored": 1})
    both = build_report([emergence_run, det], tmp_path / "both")["html"].read_text()
    assert SECTION in both and "Head scores and sparsity" in both
    assert both.index("Head scores and sparsity") < both.index(SECTION)
    alone = build_report([det], tmp_path / "alone")
    assert SECTION not in alone["html"].read_text() and SECTION not in alone["md"].read_text()
    assert not any("emergence" in p.name for p in alone["figures"].iterdir())


def test_an_emergence_run_without_its_log_is_reported_not_raised(emergence_run, tmp_path):
    (emergence_run / runs.EMERGENCE).unlink()
    md = build_report([emergence_run], tmp_path / "rep")["md"].read_text()
    assert SECTION not in md and f"no {runs.EMERGENCE}" in md  # the summary names the problem
