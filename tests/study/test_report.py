"""The study report: every part from the cells' run folders, and the paper's figure beside the measured one
where the study's model and benchmark are the paper's."""

import json
import re
import shutil

import numpy as np
import pytest
from matplotlib.colors import to_rgb

from vrh import runs
from vrh.analyses.reporting import build_report, build_sections
from vrh.report.document import Fig, Table, Text
from vrh.report.load import load_run, load_runs
from vrh.report.study import study_sections
from vrh.report.style import RANDOM_COLOR, VRH_COLOR


def _text(sections) -> str:
    """The study sections as plain text: titles, paragraphs and table rows as Markdown would show them."""
    out = []
    for s in sections:
        out.append(f"## {s.title}")
        for b in s.blocks:
            if isinstance(b, Text):
                out.append(b.text)
            elif isinstance(b, Table):
                out += ["| " + " | ".join(r) + " |" for r in b.rows]
    return "\n".join(out)


def test_the_study_sections_show_each_figure(small_study):
    _, out = small_study
    sections = study_sections(load_runs([out]))
    md = _text(sections)
    figs = [b.name for s in sections for b in s.blocks if isinstance(b, Fig)]
    assert figs == ["study_grid", "study_one_k", "study_sparsity", "study_transfer", "study_methods_A_world",
                    "study_failures", "study_stability"]
    for title in ("Universality: k-curves", "All models at k = 2", "Cross-task", "Sparsity per model",
                  "Transfer between models", "Design space and methods: A on world", "Top heads per model",
                  "Failure decomposition", "Stability"):
        assert f"## {title}" in md, title
    assert "No model of this study is one of the paper's" in md
    assert "| A | world_refcoco | world / world_refcoco |" not in md and "| A | world / world_refcoco |" in md


def test_a_paper_model_and_benchmark_get_the_papers_figure_and_the_difference(small_study, tmp_path):
    _, reference = small_study
    out = tmp_path / "study"
    shutil.copytree(reference, out)
    cfg = runs.read_json(out / "config.json")
    cfg["models"]["A"] = "Qwen/Qwen2.5-VL-7B-Instruct"  # as if A were the paper's model, on RefCOCO val
    cfg["datasets"]["world"] = {"name": "world", "task": "grounding", "kind": "source", "source": "refcoco",
                                "snapshot": "/x", "split": "val"}
    (out / "config.json").write_text(json.dumps(cfg))
    md = _text(study_sections(load_runs([out])))
    assert "Paper models among them (by hub id): A = Qwen2.5-VL-7B" in md and "detection on 6 samples (paper: 200)" in md
    assert "Head counts: A: 4 x 8 = 32 heads (paper Tab. A7: 784)." in md
    base = runs.read_results(out / "A" / "sweep_world")["baseline_accuracy"]
    row = f"| A | world | 0 | {100 * base:.1f} | 86.2 | {100 * base - 86.2:+.1f} |"  # Tab. A1, RefCOCO, k = 0
    assert row in md, md[md.index("## Universality"):][:1500]


@pytest.mark.slow
def test_vrh_report_on_a_study_folder_writes_the_study_sections_first(small_study, tmp_path):
    _, out = small_study
    md = build_report([out], tmp_path / "rep")["md"].read_text()
    assert md.index("## Universality") < md.index("## Summary") and "figures/study_grid.png" in md


def _as_paper_study(reference, out, *, k=None, a="microsoft/Magma-8B"):
    """A copy of the small study whose A and B are the paper's Magma-8B and LLaVA-NeXT-Llama3-8B (Tab. A12's
    models and Tab. A13's pair), ``world`` is RefCOCO val and ``world_vqa`` is VAW; with ``k``, the cells'
    masked k of 2 reads as ``k`` (as if they had been run there)."""
    shutil.copytree(reference, out)
    cfg = runs.read_json(out / "config.json")
    cfg["models"].update(A=a, B="llava-hf/llama3-llava-next-8b-hf")
    cfg["datasets"]["world"] = {"name": "world", "task": "grounding", "kind": "source", "source": "refcoco",
                                "snapshot": "/x", "split": "val"}
    cfg["datasets"]["world_vqa"] = {"name": "world_vqa", "task": "vqa", "kind": "source", "source": "vaw",
                                    "snapshot": "/x"}
    if k is not None:
        for table in ("crosstask", "transfer", "stability"):
            cfg["protocol"][table]["k"] = k
        for c in cfg["cells"]:
            res_path = out / c["folder"] / "results.json"
            if c["kind"] in ("sweep", "crosstask", "transfer") and res_path.exists():
                res = json.loads(res_path.read_text())
                res["k"] = [k if x == 2 else x for x in res["k"]] if isinstance(res["k"], list) else k
                res_path.write_text(json.dumps(res))
    (out / "config.json").write_text(json.dumps(cfg))
    return _text(study_sections(load_runs([out])))


def test_the_papers_figure_is_shown_only_at_its_own_k_and_benchmark(small_study, tmp_path):
    _, reference = small_study
    md = _as_paper_study(reference, tmp_path / "at2")  # measured at k = 2: Tab. A12, A13 and 3 are at k = 20
    one_k = md[md.index("## All models at k = 2"):md.index("## Cross-task")]
    assert "| A | " in one_k and "68.8" not in one_k and "7.8" not in one_k, one_k  # Magma's k = 20 figures
    transfer = md[md.index("## Transfer"):md.index("## Design space")]
    assert "5.8" not in transfer, transfer  # LLaVA-NeXT's cross accuracy at k = 20
    md20 = _as_paper_study(reference, tmp_path / "at20", k=20)
    base = runs.read_results(reference / "A" / "sweep_world")["baseline_accuracy"]
    assert f"| A | {100 * base:.1f} | " in md20 and "| 68.8 | 64.0 | 7.8 |" in md20  # Tab. A12, Magma-8B
    cross = runs.read_results(reference / "transfer" / "A_to_B_world")["transferred_heads_accuracy"]
    assert f"| 5.8 | {100 * cross - 5.8:+.1f} |" in md20  # Tab. A13: Magma's heads in LLaVA-NeXT
    qwen = "Qwen/Qwen2.5-VL-7B-Instruct"  # Tab. 3's model: VAW 63.8 unmasked, at k = 20 with RefCOCO's heads
    assert "(paper 63.8)" not in _as_paper_study(reference, tmp_path / "q2", a=qwen)
    assert "(paper 63.8)" in _as_paper_study(reference, tmp_path / "q20", k=20, a=qwen)


def test_the_study_folder_itself_is_no_other_run(small_study):
    _, out = small_study
    secs = build_sections([load_run(out)], None)  # the study folder alone: its bookkeeping results only
    titles = [s.title for s in secs]
    assert "Other runs" not in titles and titles[0].startswith("Study small") and "Summary" in titles


def test_study_figures_read_at_a_glance(small_study, monkeypatch, tmp_path):
    import vrh.report.plots as plots
    import vrh.report.study as study

    drawn = {}
    for mod in (study, plots):
        real = mod.to_png
        monkeypatch.setattr(mod, "to_png", lambda fig, real=real: drawn.setdefault(len(drawn), fig) and real(fig))
    out = tmp_path / "study"
    shutil.copytree(small_study[1], out)
    cfg = runs.read_json(out / "config.json")
    for i in range(3):  # four transfer pairs, as the example study has, so that their labels sit side by side
        shutil.copytree(out / "transfer" / "A_to_B_world", out / "transfer" / f"copy{i}")
        cfg["cells"].append({"id": f"transfer/copy{i}", "kind": "transfer", "model": "B", "benchmark": f"w{i}",
                             "folder": f"transfer/copy{i}", "source": "A"})
        cfg["subruns"].append(f"transfer/copy{i}")
    hs_path = out / "A" / "detect_world" / "head_scores.json"
    hs = json.loads(hs_path.read_text())
    spread = [[float(x) for x in row] for row in np.geomspace(1e-6, 1.0, 32).reshape(4, 8)]  # 1-2 heads a bin
    hs["scores"] = hs["variants"][hs["scorer"]]["scores"] = spread
    hs_path.write_text(json.dumps(hs))
    shutil.copytree(out / "B" / "stability_world", out / "A" / "stability_copy")  # the same curve twice
    cfg["cells"].append({"id": "stability/A/world", "kind": "stability", "model": "A", "benchmark": "world",
                         "folder": "A/stability_copy", "source": None})
    cfg["subruns"].append("A/stability_copy")
    (out / "config.json").write_text(json.dumps(cfg))
    sections = study_sections(load_runs([out]))
    figs = [b.name for s in sections for b in s.blocks if isinstance(b, Fig)]
    by_name = dict(zip(figs, drawn.values()))
    sparsity = by_name["study_sparsity"]
    sparsity.canvas.draw()
    for ax in sparsity.axes:
        assert all(float(t).is_integer() for t in ax.get_yticks()), ax.get_yticks()  # whole heads
    assert sparsity.get_supylabel() == "heads per bin"
    transfer = by_name["study_transfer"]
    transfer.canvas.draw()
    labels = transfer.axes[0].get_xticklabels()
    assert labels and all("Spearman" in t.get_text() for t in labels), labels  # score-map similarity per pair
    boxes = [t.get_window_extent(transfer.canvas.get_renderer()) for t in labels]
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])  # labels apart
    methods = by_name["study_methods_A_world"]  # compare ran at one k: bars, the default red, random grey
    bars = [b for b in methods.axes[0].patches]
    names = [t.get_text() for t in methods.axes[0].get_xticklabels()]
    assert names == ["out/sum/mean", "in/sum/mean", "retrieval_heads", "random"] and len(bars) == 4
    assert [b.get_facecolor()[:3] for b in bars][::3] == [to_rgb(VRH_COLOR), to_rgb(RANDOM_COLOR)]
    stability = by_name["study_stability"].axes[0]
    assert [line.get_label() for line in stability.lines] == ["B / world, A / world (k = 2)"]  # none hidden
    assert stability.get_ylabel().endswith("(%)") and stability.get_ylim()[1] > 100  # in %, as the run charts
    assert max(stability.lines[0].get_ydata()) <= 100 and max(stability.lines[0].get_ydata()) > 1
    captions = [b.caption for s in sections for b in s.blocks if isinstance(b, Table)]
    assert any(c.startswith("the top 4 heads by descending score") for c in captions), captions  # 4 x 8 heads


def test_the_failure_table_has_one_column_per_outcome_whatever_cell_lacks_one(small_study, tmp_path):
    out = tmp_path / "study"
    shutil.copytree(small_study[1], out)
    path = out / "A" / "sweep_world" / "results.json"
    res = json.loads(path.read_text())
    for f in [*res["vrh"]["fractions"], *res["random"]["fractions_mean"]]:
        f.pop("parse_failure")  # as a sweep written before parse failures were counted
    path.write_text(json.dumps(res))
    failures = next(s for s in study_sections(load_runs([out])) if s.title.startswith("Failure decomposition"))
    table = next(b for b in failures.blocks if isinstance(b, Table))
    assert table.columns[3:] == ["correct", "mislocated", "parse_failure"]
    assert all(len(row) == len(table.columns) for row in table.rows), table.rows
    assert table.rows[0][:3] == ["A", "world", "VRH"] and table.rows[0][-1] == "–"


def test_the_study_report_opens_with_the_studys_name_a_short_line_and_its_protocol_k(small_study, tmp_path):
    """Issue 37 item 12: the title was the folder's name ("Study report: out"), the opening a wall of every
    cell's folder, and each overlay caption named every single-k cell as the source of k."""
    from vrh.commands.study import _report

    _report(small_study[1], tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text()
    assert md.startswith("# Study report: small\n")  # the study file's name, not the folder's ("out")
    opening = next(p for p in md.split("\n\n") if "run folders" in p)  # after the planted-heads caveats
    assert opening.startswith("14 run folders: out (the study small), with 13 sub-runs (4 detect, 6 sweep, ")
    assert "A/detect_world" not in opening and len(opening) < 400
    captions = re.findall(r"\*Sample [^*]*\*", md)
    assert captions and all("k = 2 from the protocol of the study small" in c for c in captions), captions[:1]
