"""What the report page says (issue 18): the k of the runs it reads, one definition of sparsity, a demo
summary row with its data and n, no own-heads column for a transfer that did not run it, and table cells
that may break only where breaking does not garble them."""

import re

import numpy as np
import pytest

from vrh import runs
from vrh.analyses.reporting import build_report
from vrh.report.document import Table, _html_block
from vrh.report.kchoice import report_k
from vrh.report.load import load_runs

L, H = 4, 8  # 32 heads: the old default marked the top 4 here


def _finished(folder, config, results):
    with runs.RunFolder(folder) as run:
        run.write_config(config)
        run.write_results(results)
    return folder


def _detect(folder):
    scores = np.arange(L * H, dtype=float).reshape(L, H) / 100  # (L, H); head (3, 7) scores highest
    ranking = [[int(i) // H, int(i) % H] for i in np.argsort(-scores.ravel(), kind="stable")]
    with runs.RunFolder(folder) as run:
        run.write_config({"command": "detect", "detect_ids": ["s0"]})
        runs.write_head_scores(run, runs.HeadScores("out", L, H, 1, {"out": {"scores": scores.tolist(),
                                                                             "ranking": ranking}}))
        run.write_results({"n_scored": 1})
    return folder


def _demo(folder, k=3):
    """A demo run with its detection sub-run inside, as ``vrh demo`` writes them (the demo folder first)."""
    _finished(folder, {"command": "demo", "config": {"world_seed": 7}, "k": k, "subruns": ["detect"]}, {
        "baseline_accuracy": 0.9, "k": k, "num_heads_total": L * H, "vrh_masked_accuracy": 0.2,
        "n_detect": 50, "n_eval": 40, "top_k_heads": [[3, 7], [3, 6], [3, 5]],
        "sparsity": {"fraction_above": {"0.05": 0.5, "0.1": 0.4}, "count_above": {"0.05": 16, "0.1": 13}}})
    _detect(folder / "detect")
    return folder


def _heatmap_caption(html):
    return re.search(r"Layer x head VRH scores; ringed: the (top-\d+) heads \(([^<]*)\)", html).groups()


@pytest.mark.parametrize("extra, k, expected", [
    ("demo", None, ("top-3", "k = 3 from the demo run demo")),
    ("evaluate", None, ("top-5", "k = 5 from ev")),
    ("sweep", None, ("top-6", "k = 6 from the largest k of sw")),
    ("evaluate", 2, ("top-2", "k = 2 from --k")),
    (None, None, ("top-4", "no run records a k: default for 32 heads; pass --k to choose")),
])
def test_heat_map_marks_the_k_the_runs_were_made_with(tmp_path, extra, k, expected):
    dirs = []
    if extra == "demo":
        dirs = [_demo(tmp_path / "demo"), tmp_path / "demo" / "detect"]
    else:
        dirs = [_detect(tmp_path / "det")]
    if extra == "evaluate":
        dirs.append(_finished(tmp_path / "ev", {"command": "evaluate", "heads": {"source": "det"}},
                              {"n": 4, "accuracy": 0.5, "k": 5, "condition": {"kind": "top_k", "k": 5}}))
    if extra == "sweep":
        dirs.append(_finished(tmp_path / "sw", {"command": "sweep"}, {"k": [0, 1, 3, 6], "vrh": {}, "random": {}}))
    html = build_report(dirs, tmp_path / "out", k=k)["html"].read_text()
    assert _heatmap_caption(html) == expected
    n_top = int(expected[0].split("-")[1])
    assert f"Top-{n_top} heads (LAYER:HEAD): 3:7" in html


def test_random_evaluations_do_not_set_k_and_disagreeing_runs_are_named(tmp_path):
    det = _detect(tmp_path / "det")
    rnd = _finished(tmp_path / "rnd", {"command": "evaluate"},
                    {"n": 4, "accuracy": 0.5, "k": 9, "condition": {"kind": "random", "k": 9, "seed": 0}})
    a = _finished(tmp_path / "a", {"command": "evaluate"}, {"n": 4, "k": 2, "condition": {"kind": "top_k", "k": 2}})
    b = _finished(tmp_path / "b", {"command": "transfer"}, {"k": 4})
    c = _finished(tmp_path / "c", {"command": "evaluate"}, {"n": 4, "k": 4, "condition": {"kind": "top_k", "k": 4}})
    kc = report_k(load_runs([det, rnd, a, b, c]))
    assert (kc.k, kc.source, kc.others) == (4, "b, c", ("2 (a)",))  # the most common k; random k=9 is no top-k
    html = build_report([det, rnd, a, b, c], tmp_path / "out")["html"].read_text()
    assert "mark the top-4 heads (k from b, c); other runs used other ks: 2 (a)." in html


def test_sparsity_uses_the_thresholds_each_run_recorded_and_names_them(tmp_path):
    """The demo records sparsity at its own thresholds (0.05 / 0.1, results.json): its headline shows those
    numbers as recorded, and its detection's head-score section uses the same thresholds (the run it is
    part of recorded them). A detection that is part of no run recording any gets the report's defaults
    (the paper's 0.001 / 0.005), and the page says so."""
    demo = _demo(tmp_path / "demo")
    cell = r'<td class="n">([\d.]+)</td>'
    for dirs in ([demo, demo / "detect"], [demo]):  # the sub-run is reported either way
        html = build_report(dirs, tmp_path / "out")["html"].read_text()
        headline = html[html.index(">Headline (vrh demo)</h2>"):html.index(">Summary</h2>")]
        assert re.findall("<tr>" + cell * 3, headline) == [("0.05", "50.0", "16"), ("0.1", "40.0", "13")]
        assert "thresholds 0.05 and 0.1, recorded by demo" in headline and "0.001" not in headline
        scores = html[html.index(">Head scores and sparsity</h2>"):]
        # scores 0.00, 0.01, ..., 0.31: 26 above 0.05, 21 above 0.1 (recomputed at the demo's thresholds)
        assert "heads above 0.05" in scores and "heads above 0.1<" in scores and "0.001" not in scores
        assert re.search(r"<td>heads above 0.05</td><td[^>]*>81.2 %</td><td[^>]*>26</td>", scores)
        assert "thresholds 0.05 and 0.1, recorded by demo" in scores
    html = build_report([_detect(tmp_path / "det")], tmp_path / "out2")["html"].read_text()
    scores = html[html.index(">Head scores and sparsity</h2>"):]
    assert "heads above 0.001" in scores and "heads above 0.005" in scores
    assert "det recorded no sparsity thresholds: the report&#x27;s defaults, the paper&#x27;s Fig. 5" in scores


def test_demo_summary_row_shows_data_and_n(tmp_path):
    from vrh.report.sections import summary_row

    row = summary_row(load_runs([_demo(tmp_path / "demo")])[0])
    assert row[4] == "synthetic world (seed 7)" and row[5] == "40" and row[6] == "90.0"
    assert "heads detected on 50 other samples" in row[7]


def test_transfer_without_own_heads_has_no_own_column(tmp_path):
    tr = _finished(tmp_path / "tr", {"command": "transfer"}, {
        "model_a": "A", "model_b": "B", "k": 3, "baseline_accuracy": 0.9, "own_heads_accuracy": None,
        "transferred_heads_accuracy": 0.2, "random_accuracy_mean": 0.88, "spearman": None, "kendall": None,
        "topk_overlap": None})
    html = build_report([tr], tmp_path / "out")["html"].read_text()
    assert "own VRHs" not in html
    assert ">Spearman</th>" not in html and ">k</th>" in html  # no column of dashes only
    assert "Accuracy of model B: unmasked, random heads, transferred VRHs." in html


def test_cells_break_only_where_it_does_not_garble_them():
    t = Table(["run", "n", "folder"], [["sweep_grounding", "200", "/tmp/demo_r/sweep_grounding"]])
    html = _html_block(t)
    assert '<td class="n">200</td>' in html  # numbers never wrap (.n: nowrap)
    assert "<td>sweep_grounding</td>" in html  # short words break only between words
    assert '<td class="brk">/tmp/demo_r/sweep_grounding</td>' in html  # paths may break anywhere


def test_compare_and_other_rows_read_n_eval(tmp_path):
    from vrh.report.sections import summary_row

    cmp = _finished(tmp_path / "cmp", {"command": "compare"}, {"k": [1, 2], "n_eval": 200, "methods": {}})
    assert summary_row(load_runs([cmp])[0])[5] == "200"


def test_transfer_names_checkpoints_relative_to_their_common_folder(tmp_path):
    from vrh.report.sections import summary_row

    a, b = "/home/me/organism_runs/v5/export/organism_a", "/home/me/organism_runs/vC/export/organism_c"
    tr = _finished(tmp_path / "tr", {"command": "transfer"}, {"model_a": a, "model_b": b, "k": 3,
                                                              "baseline_accuracy": 0.9})
    note = summary_row(load_runs([tr])[0])[7]
    assert note.startswith("heads of organism_a masked in organism_c") and "/home" not in note
    same = _finished(tmp_path / "same", {"command": "transfer"}, {"model_a": "/x/a/model", "model_b": "/x/b/model",
                                                                  "k": 3, "baseline_accuracy": 0.9})
    html = build_report([same], tmp_path / "out")["html"].read_text()
    assert "heads of a/model masked in b/model" in html and "a/model → b/model" in html and "/x/" not in html


def test_masked_evaluations_show_the_unmasked_run_as_reference(tmp_path, monkeypatch):
    from vrh.report import plots

    drawn = []
    real = plots.outcome_bars
    monkeypatch.setattr(plots, "outcome_bars", lambda *a, **kw: drawn.append((a, kw)) or real(*a, **kw))
    fr = {"correct": 0.2, "mislocated": 0.7, "parse_failure": 0.1}
    masked = _finished(tmp_path / "ev-top", {"command": "evaluate"},
                       {"n": 10, "accuracy": 0.2, "k": 3, "fractions": fr, "condition": {"kind": "top_k", "k": 3}})
    plain = _finished(tmp_path / "ev-none", {"command": "evaluate"},
                      {"n": 10, "accuracy": 0.9, "k": 0, "fractions": {"correct": 0.9, "mislocated": 0.1},
                       "condition": {"kind": "none", "k": 0}})
    html = build_report([masked, plain], tmp_path / "out")["html"].read_text()
    (labels, fracs), kw = drawn[-1]
    assert labels[0].startswith("ev-none") and kw["reference"] == 0.9  # the unmasked bar first, and a line
    assert "dashed line: unmasked accuracy 90.0 % (ev-none)" in html
    drawn.clear()
    build_report([masked], tmp_path / "out2")
    assert drawn[-1][1].get("reference") is None  # nothing unmasked to compare with: no line
    on = {"model": {"path": "/m/tiny"}, "data": {"path": "/d/refs.jsonl"}}
    ev = _finished(tmp_path / "ev", {"command": "evaluate", **on},
                   {"n": 10, "accuracy": 0.2, "k": 3, "fractions": fr, "condition": {"kind": "top_k", "k": 3}})
    other = _finished(tmp_path / "sw-other", {"command": "sweep", "model": {"path": "/m/tiny"},
                                              "data": {"path": "/d/other.jsonl"}}, {"k": [0], "baseline_accuracy": 0.5})
    sw = _finished(tmp_path / "sw", {"command": "sweep", **on}, {"k": [0, 3], "baseline_accuracy": 0.85})
    html = build_report([ev, other, sw], tmp_path / "out3")["html"].read_text()
    assert drawn[-1][1]["reference"] == 0.85  # the sweep on the same model and data, not the other one
    assert "dashed line: unmasked accuracy 85.0 % (sw, same model and data)" in html


def test_dpo_pairs_show_one_example_per_drop_reason_and_old_runs_their_counts(tmp_path):
    from vrh.experiments import preference_pairs as dpo
    from vrh.analyses.reporting import build_sections
    from vrh.report.document import Table
    from vrh.report.pairs import DROP_MEANING

    assert set(DROP_MEANING) == {dpo.DROP_CHOSEN_INCORRECT, dpo.DROP_SAME_ANSWER, dpo.DROP_REJECTED_CORRECT,
                                 dpo.DROP_OVER_LIMIT}

    def decision(i, kept, reason=None):
        return {"id": f"s{i}", "kept": kept, "drop_reason": reason, "chosen_text": f"[{i}, 0, 9, 9]",
                "chosen_outcome": "correct" if reason != "chosen_incorrect" else "mislocated", "chosen_iou": 0.8,
                "rejected_text": f"[{i}, 5, 9, 9]", "rejected_outcome": "mislocated", "rejected_iou": 0.1}

    decisions = ([decision(i, True) for i in range(4)] + [decision(4, False, "chosen_incorrect"),
                 decision(5, False, "chosen_incorrect"), decision(6, False, "rejected_same_as_chosen")])
    new = _finished(tmp_path / "dpo", {"command": "dpo-pairs"}, {
        "n_samples": 7, "n_pairs": 4, "n_dropped": 3, "dropped": {"chosen_incorrect": 2, "rejected_same_as_chosen": 1},
        "negative_policy": "vrh", "k": 3, "decisions": decisions})
    old = _finished(tmp_path / "old", {"command": "dpo-pairs"}, {"n_samples": 2, "n_pairs": 1, "n_dropped": 1})
    secs = build_sections(load_runs([new, old]), None)
    sec = next(s for s in secs if s.title == "DPO preference pairs")
    examples = next(b for b in sec.blocks[1].blocks if isinstance(b, Table) and b.columns[0] == "sample")
    assert [r[0] for r in examples.rows] == ["s0", "s1", "s2", "s4", "s6"]
    assert [r[4] for r in examples.rows][-2:] == ["dropped: chosen_incorrect", "dropped: rejected_same_as_chosen"]
    assert examples.rows[0][2] == "[0, 0, 9, 9] (correct, IoU 0.80)" and "one per drop reason" in examples.caption
    old_blocks = sec.blocks[2].blocks
    assert "old records no per-sample decisions: no examples to show." in [getattr(b, "text", "") for b in old_blocks]
    assert not any(s.title == "Other runs" for s in secs)


def test_compare_section_names_the_variant_of_each_method():
    from vrh.analyses.compare.section import _variant_lines

    text = _variant_lines({"ocr_heads": {"keys": "prompt", "row": "own"}, "out/sum/mean": {"m": 20}, "x": {}})
    assert text == "ocr_heads (keys=prompt, row=own); out/sum/mean (m=20)"
    assert _variant_lines(None) == ""


def test_every_std_is_said_to_be_the_population_std(tmp_path):
    """Runs record np.std (ddof 0); the page said "mean ± std over seeds" without saying which (issue 37
    item 13)."""
    demo = _demo(tmp_path / "demo")
    md = build_report([demo], tmp_path / "out")["md"].read_text()
    assert "mean ± population std (divided by the number of draws, not one less) over seeds" in md  # the table
    assert "a ± after a mean over seeds or resamplings is their population std" in md  # the opening line


def test_many_runs_of_one_k_are_counted_not_listed_as_its_source(tmp_path):
    """Overlay captions named every run of the k as its source, eight folder names under each overlay
    (issue 37 item 12)."""
    evs = [_finished(tmp_path / f"ev{i}", {"command": "evaluate"},
                     {"n": 4, "k": 3, "condition": {"kind": "top_k", "k": 3}}) for i in range(5)]
    kc = report_k(load_runs([_detect(tmp_path / "det"), *evs]))
    assert (kc.k, kc.source) == (3, "ev0, ev1, ev2 and 2 other runs")
