"""What the report page says (issue 18): the k of the runs it reads, one definition of sparsity, a demo
summary row with its data and n, no own-heads column for a transfer that did not run it, and table cells
that may break only where breaking does not garble them."""

import re

import numpy as np
import pytest

from vrh import runs
from vrh.report import build_report
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
    assert f"Top-{n_top} heads (layer, head): (3,7)" in html


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


def test_the_page_has_one_definition_of_sparsity(tmp_path):
    """The demo records sparsity at its own thresholds (0.05 / 0.1); the page shows the head-score
    section's (vrh.sparsity.DEFAULT_THRESHOLDS) everywhere, recomputed from the demo's detection."""
    demo = _demo(tmp_path / "demo")
    for dirs in ([demo, demo / "detect"], [demo]):  # the detection in the report, or only the demo folder
        html = build_report(dirs, tmp_path / "out")["html"].read_text()
        headline = html[html.index(">Headline (vrh demo)</h2>"):html.index(">Summary</h2>")]
        assert "heads scoring above" in headline
        cell = r'<td class="n">([\d.]+)</td>'
        rows = re.findall("<tr>" + cell * 3, headline)
        # scores 0.00, 0.01, ..., 0.31: 31 above 0.001 and 0.005
        assert rows == [("0.001", "96.9", "31"), ("0.005", "96.9", "31")]
        assert "0.05" not in headline and "0.1<" not in headline
        if len(dirs) == 2:
            scores = html[html.index(">Head scores and sparsity</h2>"):]
            assert "heads above 0.001" in scores and "heads above 0.005" in scores


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


def test_compare_section_names_the_variant_of_each_method():
    from vrh.report.characterize import _variant_lines

    text = _variant_lines({"ocr_heads": {"keys": "prompt", "row": "own"}, "out/sum/mean": {"m": 20}, "x": {}})
    assert text == "ocr_heads (keys=prompt, row=own); out/sum/mean (m=20)"
    assert _variant_lines(None) == ""
