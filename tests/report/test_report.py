"""vrh report: hand-built run folders of every kind in, one self-contained HTML page + Markdown out.

Finished runs are written through the run-folder contract (vrh.runs writers), as the commands write them;
raw file writes are kept for what no vrh version writes on purpose (torn files, old or odd layouts).
"""

import base64
import io
import json
import re

import numpy as np
import pytest

from vrh import runs
from vrh.experiments import conditions
from vrh.experiments import kcurves
from vrh.analyses.reporting import build_report, report_main
from vrh.report.document import figures
from vrh.report.load import load_runs

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
L, H = 4, 6  # 24 heads -> default k = 3


def _write(folder, name, obj):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(obj))


def _finished(folder, config, results):
    """A finished run as a command writes it: config first, results last (with schema_version)."""
    with runs.RunFolder(folder) as run:
        run.write_config(config)
        run.write_results(results)
    return folder


def _config(command, **extra):
    return {"command": command, "model": {"path": "/ckpt/tiny-vlm", "model_type": "toy", "num_layers": L,
                                          "num_heads": H}, "data": {"path": "/data/refs.jsonl", "n": 3},
            "environment": {"vrh": "0.1.0", "git_hash": "abc123", "torch": "2.x", "time": "t"}, **extra}


def _image(path):
    from PIL import Image

    img = np.zeros((48, 64, 3), dtype=np.uint8)
    img[10:30, 20:44] = (200, 60, 60)
    Image.fromarray(img).save(path)
    return str(path)


def make_detect(root):
    """A finished detection run of the current layout (results.json written last)."""
    d = root / "det"
    scores = np.zeros((L, H))
    scores[2, 3], scores[1, 0], scores[3, 5], scores[0, 1] = 0.02, 0.006, 0.002, 0.0004
    ranking = [list(h) for h in sorted(((l, h) for l in range(L) for h in range(H)), key=lambda x: (-scores[x], x))]
    variant = {"scores": scores.tolist(), "ranking": ranking}
    image = _image(root / "img.png")
    recs = [{"id": "s0", "task": "grounding", "image": image, "expression": "the red block", "gt_box": [20, 10, 44, 30],
             "pred_box": [18, 12, 40, 28], "iou": 0.7, "outcome": "correct"},
            {"id": "s1", "task": "grounding", "image": str(root / "missing.png"), "expression": "left thing",
             "gt_box": [0, 0, 16, 16], "pred_box": None, "iou": 0.0, "outcome": "parse_failure"}]
    rects = np.array([[x, y, x + 16, y + 16] for y in range(0, 48, 16) for x in range(0, 64, 16)], dtype=float)
    rng = np.random.default_rng(0)
    with runs.RunFolder(d) as run:
        run.write_config(_config("detect", detect_ids=["s0", "s1"], eval_ids=["e1"]))
        for r in recs:
            run.append_sample(r)
        runs.write_head_scores(run, runs.HeadScores(
            scorer="out/sum/mean", num_layers=L, num_heads=H, n_scored=2,
            variants={"out/sum/mean": variant, "in/sum/mean": variant}))
        runs.write_overlays(run, {"s0": (rng.random((L, H, len(rects))), rects),
                                  "s1": (rng.random((L, H, len(rects))), rects)})
        run.write_results({"n_scored": 2, "n_skipped": 0, "scorer": "out/sum/mean", "top_heads": ranking[:20],
                           "elapsed_seconds": 0.1})
    return d


def make_evaluate(root, name, k, random):
    d = root / name
    heads = {"source": "random", "seed": 1} if random else {"source": str(root / "det"), "scorer": "out/sum/mean"}
    return _finished(d, _config("evaluate", heads=heads, masked_heads=[[0, 0]] * k), {
        "n": 3, "accuracy": 0.33, "counts": {}, "fractions": {"correct": 0.33, "mislocated": 0.34,
                                                              "parse_failure": 0.33},
        "parse_failure_rate": 0.33, "mean_iou": 0.4, "k": k, "heads": heads})


def not_random_control():
    """A real random_control block where k=3 leaves exactly 3 eligible heads: both seeds draw the same set."""
    everything = [(l, h) for l in range(L) for h in range(H)]
    rc1 = conditions.random_controls(L, H, 1, [0, 1], outside=[(2, 3)])
    rc3 = conditions.random_controls(L, H, 3, [0, 1], outside=everything[3:])
    return kcurves.random_control_report([rc1, rc3]).to_json()


def make_sweep(root):
    d = root / "sweep"
    fr = {"correct": 0.5, "mislocated": 0.3, "parse_failure": 0.2}
    return _finished(d, _config("sweep"), {
        "task": "grounding", "k": [0, 1, 3], "baseline_accuracy": 0.9,
        "vrh": {"accuracy": [0.9, 0.6, 0.1], "parse_failure_rate": [0.0, 0.1, 0.5], "fractions": [fr, fr, fr]},
        "random": {"seeds": [0, 1], "accuracy": [[0.9, 0.9], [0.88, 0.86], [0.85, 0.8]], "mean": [0.9, 0.87, 0.825],
                   "std": [0.0, 0.01, 0.025], "parse_failure_rate_mean": [0.0, 0.0, 0.05],
                   "fractions_mean": [fr, fr, fr], "n_distinct_sets": [1, 2, 1]},
        "random_control": not_random_control()})


def make_transfer(root):
    return _finished(root / "transfer", {"command": "transfer"}, {
        "model_a": "A", "model_b": "B", "k": 20, "baseline_accuracy": 0.9, "own_heads_accuracy": 0.1,
        "transferred_heads_accuracy": 0.2, "random_accuracy_mean": 0.88, "spearman": 0.6,
        "kendall": 0.45})  # no topk_overlap


def make_stability(root):
    return _finished(root / "stab", {"command": "stability", "model": "tiny"}, {
        "n_values": [5, 10, 50], "topk_overlap_mean": [0.5, 0.7, 0.95], "topk_overlap_std": [0.1, 0.05, 0.01],
        "k": 20, "token_choice": {"rand1_accuracy": 0.3, "out_accuracy": 0.1, "random_accuracy": 0.85}})


def make_compare(root):
    return _finished(root / "cmp", {"command": "compare"}, {
        "k": [5, 20], "methods": {"VRH (ours)": {"accuracy": [0.5, 0.1]}, "retrieval heads": {"accuracy": [0.85, 0.8]}},
        "random": {"mean": [0.88, 0.87]}})


def make_demo(root):
    return _finished(root / "demo", {"command": "demo"}, {
        "baseline_accuracy": 0.93, "k": 3, "num_heads_total": 32, "vrh_masked_accuracy": 0.21,
        "random_masked_accuracy_mean": 0.9, "random_masked_accuracy_std": 0.01, "random_seeds": [0, 1, 2],
        "vrh_parse_failure_rate": 0.02, "top_k_heads": [[2, 1], [2, 5], [3, 0]], "vqa": {"baseline_accuracy": 0.8},
        "sparsity": {"fraction_above": {"0.05": 0.1}}})


def make_dpo(root):
    dec = {"id": "s0", "kept": True, "drop_reason": None, "chosen_text": "[20, 10, 44, 30]",
           "chosen_outcome": "correct", "chosen_iou": 0.9, "rejected_text": "[0, 0, 63, 47] and a long explanation " * 4,
           "rejected_outcome": "mislocated", "rejected_iou": 0.1}
    return _finished(root / "dpo", _config("dpo-pairs"), {
        "n_samples": 2, "n_pairs": 1, "n_dropped": 1, "dropped": {"rejected_same_as_chosen": 1},
        "chosen_accuracy": 1.0, "rejected_accuracy": 0.5, "negative_policy": "vrh", "k": 3, "decisions": [
            dec, {**dec, "id": "s1", "kept": False, "drop_reason": "rejected_same_as_chosen"}]})


def make_unknown(root):
    return _finished(root / "demo1", {"command": "mystery"},
                     {"answer_unmasked": "a cat", "answer_masked": "a dog", "nested": {"x": 1}})


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    dirs = [make_detect(root), make_evaluate(root, "eval-vrh", 3, False), make_evaluate(root, "eval-rand", 3, True),
            make_sweep(root), make_transfer(root), make_stability(root), make_compare(root), make_demo(root),
            make_dpo(root), make_unknown(root)]
    out = root / "report"
    return dirs, out, build_report(dirs, out)


SECTIONS = ["Headline (vrh demo)", "Summary", "Provenance", "Head scores and sparsity", "k-curves", "Outcome breakdown",
            "Attention overlays", "Transfer", "Stability", "Method comparison", "DPO preference pairs", "Other runs"]


def test_html_is_self_contained_and_has_every_section(report):
    _, _, paths = report
    html = paths["html"].read_text()
    assert "http://" not in html and "https://" not in html and "<script" not in html.lower()
    assert "<link" not in html.lower() and "@import" not in html and "url(" not in html
    srcs = re.findall(r'src="([^"]*)"', html)
    assert srcs and all(s.startswith("data:image/png;base64,") for s in srcs)
    for title in SECTIONS:
        assert f">{title}</h" in html, title
    assert ">93.0<" in html and ">21.0<" in html and "2:1 2:5 3:0" in html  # demo headline
    assert "answer_unmasked" in html  # unknown command: its results keys are listed
    from PIL import Image

    for s in srcs:
        png = base64.b64decode(s.split(",", 1)[1])
        assert png.startswith(PNG_MAGIC)
        with Image.open(io.BytesIO(png)) as im:
            im.verify()  # decodes as a whole, not just a header
    # every figure kind made it in: heatmap, histogram, k-curve, outcomes, 2 overlays, transfer, stability x2, compare
    assert len(srcs) >= 11


def test_markdown_links_pngs_beside_it(report):
    _, out, paths = report
    md = paths["md"].read_text()
    links = re.findall(r"!\[[^\]]*\]\((figures/[^)]+\.png)\)", md)
    assert len(links) == len(re.findall(r'src="data:', paths["html"].read_text()))
    for link in links:
        assert (out / link).read_bytes().startswith(PNG_MAGIC)
    for title in SECTIONS:
        assert f" {title}\n" in md, title


def test_tables_carry_the_numbers(report):
    html = report[2]["html"].read_text()
    assert "82.5 ± 2.5" in html  # random mean ± std at k=3 (Tab. A1 style)
    assert "-80.0" in html  # VRH drop vs unmasked at k=3
    assert "2:3 1:0 3:5" in html  # top-3 heads, 0-based LAYER:HEAD (the CLI's notation)
    assert "8.3 %" in html  # 2 of 24 heads above 5e-3
    assert "top-3 VRHs" in html and "random k=3 (seed 1)" in html


def test_sections_render_even_with_missing_results(tmp_path):
    d = tmp_path / "half"
    _write(d, "config.json", {"command": "sweep"})  # crashed before results.json
    e = tmp_path / "bad"
    _write(e, "config.json", {"command": "transfer"})
    (e / "results.json").write_text("{not json")
    paths = build_report([d, e], tmp_path / "out", k=5)
    html = paths["html"].read_text()
    assert "no results yet" in html and "unreadable" in html


def test_not_a_run_folder_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        build_report([tmp_path], tmp_path / "out")


def test_report_main_accepts_argv(tmp_path, capsys):
    d = make_stability(tmp_path)
    assert report_main([str(d), "--out", str(tmp_path / "o"), "--k", "5"]) == 0
    assert (tmp_path / "o" / "report.html").is_file()


def test_same_folder_names_get_distinct_labels(tmp_path):
    a, b = make_unknown(tmp_path / "x"), make_unknown(tmp_path / "y")
    assert [r.name for r in load_runs([a, b])] == ["x/demo1", "y/demo1"]


def test_real_sweep_results_format_renders(tmp_path):
    """Guards against drift between the library's sweep results (kcurves) and the k-curve section."""
    import torch

    from vrh.report.load import load_run
    from vrh.report.sections import kcurve_section, outcome_section
    from vrh.experiments.runner import ConditionResults
    from vrh.tasks import get_task

    task = get_task("grounding")
    conds, controls = kcurves.sweep_conditions(torch.arange(8.0).reshape(2, 4), [0, 2, 4], [0, 1], method="m")
    outcomes = {"none": ("correct", "correct"), "top_k": ("mislocated", "parse_failure"),
                "random": ("correct", "mislocated")}
    summaries = {c.label: task.summarize([{"outcome": o, "iou": 0.0} for o in outcomes[c.kind]]) for c in conds}
    res = ConditionResults(conds, summaries=summaries)
    d = _finished(tmp_path / "sw", {"command": "sweep"},
                  {**kcurves.fold_curves(res, [0, 1]).to_json(),
                   "random_control": kcurves.random_control_report(controls).to_json(),
                   "conditions": kcurves.conditions_table(res)})
    run = load_run(d)
    secs = [kcurve_section([run]), outcome_section([run])]
    assert all(secs) and len(figures(secs)) == 2
    kc = secs[0].blocks[1]  # the run's subsection
    table = next(b for b in kc.blocks if hasattr(b, "rows"))
    assert table.columns[-1] == "distinct random sets" and [r[-1] for r in table.rows] == ["1", "2", "1"]
    texts = " ".join(b.text for b in kc.blocks if hasattr(b, "warn"))
    # k=4 of 8 heads with the top 4 excluded: both seeds draw the same 4 heads
    assert "k=4: 1 distinct random head set(s) from 2 seed(s)" in texts and "not random" in texts


def test_odd_but_plausible_results_still_render(tmp_path):
    """Per-k transfer, partial sweeps (None where a condition was skipped), stability with only the token
    choice, compare at a single k, detect without samples or overlays: everything renders, nothing raises."""
    runs = {
        "tr": ("transfer", {"model_a": "A", "model_b": "B", "k": [1, 5], "own_heads_accuracy": [0.8, 0.2],
                            "transferred_heads_accuracy": [0.85, None], "baseline_accuracy": 0.9}),
        "sw": ("sweep", {"k": [0, 5], "baseline_accuracy": None, "vrh": {"accuracy": [0.9, None]},
                         "random": {"accuracy": [[], [0.8]], "mean": [None, 0.8]}}),
        "st": ("stability", {"token_choice": {"out_accuracy": 0.1}}),
        "cm": ("compare", {"k": 20, "methods": {"ours": {"accuracy": 0.1}, "x": {}}}),
        "ev": ("evaluate", {"n": 2, "accuracy": 0.5, "correct": 0.5, "wrong": 0.5}),
    }
    dirs = []
    for name, (cmd, res) in runs.items():
        _write(tmp_path / name, "config.json", {"command": cmd})
        _write(tmp_path / name, "results.json", res)
        dirs.append(tmp_path / name)
    _write(tmp_path / "de", "config.json", {"command": "detect"})
    _write(tmp_path / "de", "head_scores.json", {"scorer": "out", "num_layers": 2, "num_heads": 2,  # old layout:
                                                 "scores": [[0.0, 0.01], [0.002, 0.0]], "ranking": [[0, 1]]})
    dirs.append(tmp_path / "de")
    html = build_report(dirs, tmp_path / "out")["html"].read_text()
    for title in ["Transfer", "k-curves", "Stability", "Method comparison", "Head scores and sparsity"]:
        assert f">{title}</h" in html
    assert "Attention overlays" not in html  # no overlays.npz: no empty section


# --- run states and warnings the reader must not miss -------------------------------------------------
def _section_html(html, title):
    """The HTML of one top-level section, up to the next one."""
    start = html.index(f">{title}</h2>")
    nxt = html.find("<h2>", start)
    return html[start:nxt if nxt >= 0 else len(html)]


def test_random_control_warning_is_shown_with_its_kcurve(report):
    _, _, paths = report
    html, md = paths["html"].read_text(), paths["md"].read_text()
    kc = _section_html(html, "k-curves")
    assert 'class="warn"' in kc and "the control is not random" in kc  # next to the figure, not only elsewhere
    assert "k=3: 1 distinct random head set(s) from 2 seed(s)" in kc and "k=1: 2 distinct" in kc
    assert "distinct random sets" in kc  # the table column from random.n_distinct_sets
    assert "> **Warning:** sweep: random control: k=3" in md
    assert "1 random-control warning(s)" in _section_html(html, "Summary")


def test_finished_detect_run_renders_as_before(report):
    """Detection now also writes results.json: still a detect run, not an unknown command."""
    from vrh.analyses.reporting import build_sections
    from vrh.report.load import load_run

    html = report[2]["html"].read_text()
    run = load_run(report[0][0])
    assert run.finished and run.results["n_scored"] == 2 and run.head_scores.scorer == "out/sum/mean"
    assert "det (detect)" not in _section_html(html, "Other runs") and "demo1 (mystery)" in html
    names = [f.name for f in figures(build_sections([run], None))]
    assert names == ["det-heatmap", "det-histogram", "det-overlay-0-s0", "det-overlay-1-s1"]
    assert _section_html(html, "Attention overlays").count("<img") == 2
    assert "INCOMPLETE" not in html and "did not finish" not in html


def _incomplete_sweep(root):
    """A sweep interrupted after three records: config and tagged samples (one of an old sweep's kind)."""
    run = runs.RunFolder(root / "sweep-half")
    run.write_config(_config("sweep"))
    run.append_sample({"id": "a", "condition": "none", "kind": "none", "k": 0, "outcome": "correct"})
    run.append_sample({"id": "a", "condition": "top2", "kind": "top_k", "k": 2, "outcome": "mislocated"})
    run.append_sample({"id": "b", "condition": "top2", "kind": "vrh", "k": 2, "outcome": "correct"})
    run.close()
    return run.path


def test_incomplete_runs_are_marked(tmp_path):
    from vrh.report.load import load_runs
    from vrh.report.sections import summary_row

    half = _incomplete_sweep(tmp_path)
    stab = make_stability(tmp_path)
    # detection crashed after its head scores (no results.json; a current run records detect_ids) ...
    crashed = tmp_path / "det-crashed"
    with runs.RunFolder(crashed) as run:
        run.write_config(_config("detect", detect_ids=["s0"], eval_ids=[]))
        runs.write_head_scores(run, runs.HeadScores("out", 1, 2, 1, {"out": {"scores": [[0.1, 0.0]],
                                                                             "ranking": [[0, 0], [0, 1]]}}))
    # ... while a detection written before detection recorded results.json finished with its head scores
    old = tmp_path / "det-old"
    _write(old, "config.json", {"command": "detect", "eval_ids": []})
    _write(old, "head_scores.json", {"scorer": "out", "num_layers": 1, "num_heads": 2,
                                     "scores": [[0.1, 0.0]], "ranking": [[0, 0], [0, 1]]})
    dirs = [half, stab, crashed, old]
    status = {r.name: summary_row(r)[2] for r in load_runs(dirs)}
    assert status == {"sweep-half": "INCOMPLETE", "stab": "finished", "det-crashed": "INCOMPLETE",
                      "det-old": "finished"}
    html = build_report(dirs, tmp_path / "out")["html"].read_text()
    top = html[:html.index("<nav>")]
    assert 'class="warn"' in top and "2 of 4 runs did not finish" in top
    # progress by condition kind, the old sweep kind "vrh" counted as top_k
    assert "sweep-half (3 sample records so far over 2 conditions (none 1, top_k 2))" in top
    assert "INCOMPLETE: no results yet" in _section_html(html, "Summary")


def test_only_incomplete_runs_is_an_error(tmp_path):
    from vrh import cli

    half = _incomplete_sweep(tmp_path)
    with pytest.raises(ValueError, match="no finished run to report.*sweep-half did not finish"):
        build_report([half], tmp_path / "out")
    with pytest.raises(ValueError, match="no finished run"):
        report_main([str(half), "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out" / "report.html").exists()
    assert cli.main(["report", str(half), "--out", str(tmp_path / "out")]) == 2  # a clear error, not exit 0


def test_newer_schema_is_noted_and_unversioned_runs_are_version_1(tmp_path):
    from vrh.report.load import load_run

    _write(tmp_path / "new", "config.json", {"command": "stability"})
    _write(tmp_path / "new", "results.json", {"schema_version": runs.SCHEMA_VERSION + 1, "k": 20})
    old = make_compare(tmp_path)
    assert load_run(tmp_path / "new").newer_schema and not load_run(old).newer_schema
    _write(tmp_path / "v1", "config.json", {"command": "compare"})
    _write(tmp_path / "v1", "results.json", {"k": [5]})
    assert load_run(tmp_path / "v1").schema_version == 1
    html = build_report([tmp_path / "new", old, tmp_path / "v1"], tmp_path / "out")["html"].read_text()
    top = html[:html.index("<nav>")]
    assert f"new (version {runs.SCHEMA_VERSION + 1})" in top and "upgrade vrh" in top
    assert "cmp (version" not in top and "v1 (version" not in top


def test_mask_label_reads_condition_kinds_old_and_new(tmp_path):
    from vrh.report.load import load_run, sample_kind
    from vrh.report.sections import summary_row

    assert [sample_kind({"kind": k}) for k in ("vrh", "method", "top_k", "random", "none", "list")] == \
        ["top_k", "top_k", "top_k", "random", "none", "list"]
    assert sample_kind({}) is None
    base = {"n": 2, "accuracy": 0.5, "k": 3}
    rnd = _finished(tmp_path / "rnd", {"command": "evaluate"},
                    {**base, "condition": {"kind": "random", "seed": 4, "k": 3, "label": "random3:s4"}})
    old = _finished(tmp_path / "old", {"command": "evaluate"}, {**base, "condition": {"kind": "vrh", "k": 3}})
    lst = _finished(tmp_path / "lst", {"command": "evaluate"}, {**base, "condition": {"kind": "list", "k": 3}})
    running = runs.RunFolder(tmp_path / "running")
    running.write_config({"command": "evaluate", "conditions": [{"kind": "none", "k": 0, "label": "none"}]})
    notes = [summary_row(load_run(d))[-1] for d in (rnd, old, lst, running.path)]
    assert notes[0].startswith("random k=3 (seed 4)") and notes[1].startswith("top-3 VRHs")
    assert notes[2].startswith("3 listed heads") and notes[3].startswith("no masking; INCOMPLETE")


def test_torn_overlays_are_reported_not_raised(tmp_path):
    d = make_detect(tmp_path)
    (d / runs.OVERLAYS).write_bytes(b"PK\x03\x04 torn")
    html = build_report([d], tmp_path / "out")["html"].read_text()
    assert f"{runs.OVERLAYS} unreadable" in _section_html(html, "Summary")
    assert "Attention overlays" not in html and ">Head scores and sparsity</h" in html


@pytest.mark.slow
def test_every_kind_of_section_fits_a_700px_window_in_chromium(report, browser, shots_dir):
    """Headless Chromium, 700 px wide: no sideways scrolling and every image decodes. Slow only because
    it needs Chromium (``apt-get install -y chromium``): ``python -m pytest -m slow tests/report``."""
    page = browser.check(report[2]["html"], width=700)
    assert page.viewport_width == 700
    assert page.scroll_width <= page.viewport_width and page.too_wide == [], page.too_wide
    assert len(page.images) == len(re.findall(r'src="data:', report[2]["html"].read_text())) >= 11
    assert all(i["loaded"] and i["shown_width"] <= 700 for i in page.images), page.images
    if shots_dir:
        browser.screenshot(report[2]["html"], shots_dir / "fixture-report-700px.png")
