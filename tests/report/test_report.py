"""vrh report: hand-built run folders of every kind in, one self-contained HTML page + Markdown out."""

import base64
import io
import json
import re

import numpy as np
import pytest

from vrh.report import build_report, report_main
from vrh.report.document import figures
from vrh.report.load import load_runs

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
L, H = 4, 6  # 24 heads -> default k = 3


def _write(folder, name, obj):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(obj))


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
    d = root / "det"
    _write(d, "config.json", _config("detect", eval_ids=["e1"]))
    scores = np.zeros((L, H))
    scores[2, 3], scores[1, 0], scores[3, 5], scores[0, 1] = 0.02, 0.006, 0.002, 0.0004
    ranking = sorted(((l, h) for l in range(L) for h in range(H)), key=lambda x: (-scores[x], x))
    variant = {"scores": scores.tolist(), "ranking": [list(h) for h in ranking]}
    _write(d, "head_scores.json", {"scorer": "out/sum/mean", "num_layers": L, "num_heads": H, "n_scored": 2,
                                   "scores": scores.tolist(), "ranking": [list(h) for h in ranking],
                                   "variants": {"out/sum/mean": variant, "in/sum/mean": variant}, "skipped": []})
    image = _image(root / "img.png")
    recs = [{"id": "s0", "task": "grounding", "image": image, "expression": "the red block", "gt_box": [20, 10, 44, 30],
             "pred_box": [18, 12, 40, 28], "iou": 0.7, "outcome": "correct"},
            {"id": "s1", "task": "grounding", "image": str(root / "missing.png"), "expression": "left thing",
             "gt_box": [0, 0, 16, 16], "pred_box": None, "iou": 0.0, "outcome": "parse_failure"}]
    (d / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    rects = np.array([[x, y, x + 16, y + 16] for y in range(0, 48, 16) for x in range(0, 64, 16)], dtype=float)
    rng = np.random.default_rng(0)
    np.savez(d / "overlays.npz", **{"s0": rng.random((L, H, len(rects))), "s0/rects": rects,
                                    "s1": rng.random((L, H, len(rects))), "s1/rects": rects})
    return d


def make_evaluate(root, name, k, random):
    d = root / name
    heads = {"source": "random", "seed": 1} if random else {"source": str(root / "det"), "scorer": "out/sum/mean"}
    _write(d, "config.json", _config("evaluate", heads=heads, masked_heads=[[0, 0]] * k))
    _write(d, "results.json", {"n": 3, "accuracy": 0.33, "counts": {}, "fractions": {
        "correct": 0.33, "mislocated": 0.34, "parse_failure": 0.33}, "parse_failure_rate": 0.33, "mean_iou": 0.4,
        "k": k, "heads": heads})
    return d


def make_sweep(root):
    d = root / "sweep"
    fr = {"correct": 0.5, "mislocated": 0.3, "parse_failure": 0.2}
    _write(d, "config.json", _config("sweep"))
    _write(d, "results.json", {
        "task": "grounding", "k": [0, 1, 3], "baseline_accuracy": 0.9,
        "vrh": {"accuracy": [0.9, 0.6, 0.1], "parse_failure_rate": [0.0, 0.1, 0.5], "fractions": [fr, fr, fr]},
        "random": {"seeds": [0, 1], "accuracy": [[0.9, 0.9], [0.88, 0.86], [0.85, 0.8]], "mean": [0.9, 0.87, 0.825],
                   "std": [0.0, 0.01, 0.025], "parse_failure_rate_mean": [0.0, 0.0, 0.05],
                   "fractions_mean": [fr, fr, fr]}})
    return d


def make_transfer(root):
    d = root / "transfer"
    _write(d, "config.json", {"command": "transfer"})
    _write(d, "results.json", {"model_a": "A", "model_b": "B", "k": 20, "baseline_accuracy": 0.9,
                               "own_heads_accuracy": 0.1, "transferred_heads_accuracy": 0.2,
                               "random_accuracy_mean": 0.88, "spearman": 0.6, "kendall": 0.45})  # no topk_overlap
    return d


def make_stability(root):
    d = root / "stab"
    _write(d, "config.json", {"command": "stability", "model": "tiny"})
    _write(d, "results.json", {"n_values": [5, 10, 50], "topk_overlap_mean": [0.5, 0.7, 0.95],
                               "topk_overlap_std": [0.1, 0.05, 0.01], "k": 20,
                               "token_choice": {"rand1_accuracy": 0.3, "out_accuracy": 0.1, "random_accuracy": 0.85}})
    return d


def make_compare(root):
    d = root / "cmp"
    _write(d, "config.json", {"command": "compare"})
    _write(d, "results.json", {"k": [5, 20], "methods": {"VRH (ours)": {"accuracy": [0.5, 0.1]},
                                                         "retrieval heads": {"accuracy": [0.85, 0.8]}},
                               "random": {"mean": [0.88, 0.87]}})
    return d


def make_demo(root):
    d = root / "demo"
    _write(d, "config.json", {"command": "demo"})
    _write(d, "results.json", {"baseline_accuracy": 0.93, "k": 3, "num_heads_total": 32,
                               "vrh_masked_accuracy": 0.21, "random_masked_accuracy_mean": 0.9,
                               "random_masked_accuracy_std": 0.01, "random_seeds": [0, 1, 2],
                               "vrh_parse_failure_rate": 0.02, "top_k_heads": [[2, 1], [2, 5], [3, 0]],
                               "vqa": {"baseline_accuracy": 0.8}, "sparsity": {"fraction_above": {"0.05": 0.1}}})
    return d


def make_unknown(root):
    d = root / "demo1"
    _write(d, "config.json", {"command": "mystery"})
    _write(d, "results.json", {"answer_unmasked": "a cat", "answer_masked": "a dog", "nested": {"x": 1}})
    return d


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    dirs = [make_detect(root), make_evaluate(root, "eval-vrh", 3, False), make_evaluate(root, "eval-rand", 3, True),
            make_sweep(root), make_transfer(root), make_stability(root), make_compare(root), make_demo(root), make_unknown(root)]
    out = root / "report"
    return dirs, out, build_report(dirs, out)


SECTIONS = ["Headline (vrh demo)", "Summary", "Provenance", "Head scores and sparsity", "k-curves", "Outcome breakdown",
            "Attention overlays", "Transfer", "Stability", "Method comparison", "Other runs"]


def test_html_is_self_contained_and_has_every_section(report):
    _, _, paths = report
    html = paths["html"].read_text()
    assert "http://" not in html and "https://" not in html and "<script" not in html.lower()
    assert "<link" not in html.lower() and "@import" not in html and "url(" not in html
    srcs = re.findall(r'src="([^"]*)"', html)
    assert srcs and all(s.startswith("data:image/png;base64,") for s in srcs)
    for title in SECTIONS:
        assert f">{title}</h" in html, title
    assert ">93.0<" in html and ">21.0<" in html and "(2,1) (2,5) (3,0)" in html  # demo headline
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
    assert "(2,3) (1,0) (3,5)" in html  # top-3 heads, 0-based (layer, head)
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
    """Guards against drift between sweep.py's results.json and the k-curve section."""
    from vrh.experiments.evaluate import summarize_records
    from vrh.experiments.sweep import curves
    from vrh.report.load import load_run
    from vrh.report.sections import kcurve_section, outcome_section

    recs = lambda *o: [{"outcome": x} for x in o]  # noqa: E731
    by_cond = [({"kind": "none", "k": 0}, summarize_records(recs("correct", "correct"))),
               ({"kind": "vrh", "k": 2}, summarize_records(recs("mislocated", "parse_failure"))),
               ({"kind": "random", "k": 2, "seed": 0}, summarize_records(recs("correct", "mislocated")))]
    d = tmp_path / "sw"
    _write(d, "config.json", {"command": "sweep"})
    _write(d, "results.json", curves(by_cond, [0]))
    run = load_run(d)
    secs = [kcurve_section([run]), outcome_section([run])]
    assert all(secs) and len(figures(secs)) == 2


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
    _write(tmp_path / "de", "head_scores.json", {"scores": [[0.0, 0.01], [0.002, 0.0]], "ranking": [[0, 1]]})
    dirs.append(tmp_path / "de")
    html = build_report(dirs, tmp_path / "out")["html"].read_text()
    for title in ["Transfer", "k-curves", "Stability", "Method comparison", "Head scores and sparsity"]:
        assert f">{title}</h" in html
    assert "Attention overlays" not in html  # no overlays.npz: no empty section
