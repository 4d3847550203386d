"""The study report: every part from the cells' run folders, and the paper's figure beside the measured one
where the study's model and benchmark are the paper's."""

import json
import shutil

import pytest

from vrh import runs
from vrh.report.build import build_report
from vrh.report.document import Fig, Table, Text
from vrh.report.load import load_runs
from vrh.report.study import study_sections


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
    assert figs == ["study_grid", "study_one_k", "study_sparsity", "study_transfer"]
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
