"""The paper's reported numbers shipped as data (src/vrh/data/paper_numbers.py): every figure is
checked against the paper's text (``../shared/paper``; skipped where it is absent) by finding the table
row it was read from, and Tab. 3's differences in parentheses are checked against its own values."""

import re
from pathlib import Path

import pytest

from vrh.report.paper import paper_numbers

PAPER = Path(__file__).resolve().parents[2].parent / "shared" / "paper" / "visual-retrieval-heads.txt"
needs_paper = pytest.mark.skipif(not PAPER.is_file(), reason="the paper's text (../shared/paper) is absent")


def _num(field: str) -> float:
    return float(re.match(r"^\s*([-+]?\d+(?:\.\d+)?)", field).group(1))


@pytest.fixture(scope="module")
def lines():
    return PAPER.read_text().splitlines()


def _has_row(lines, label: str, values, start: int = 0, end: int | None = None) -> bool:
    """A tab-separated row of the paper (between lines start and end) whose first field is ``label`` and
    whose other fields read as ``values``."""
    for ln in lines[start:end]:
        f = ln.split("\t")
        if f[0] == label and len(f) == len(values) + 1 and all(_num(x) == v for x, v in zip(f[1:], values)):
            return True
    return False


def _after(lines, prefix: str) -> int:
    return next(i for i, ln in enumerate(lines) if ln.startswith(prefix))


@needs_paper
def test_tab_a1_k_curves_are_the_papers(lines):
    a1 = paper_numbers()["kcurves_A1"]
    start = _after(lines, "Table A1:")
    for bench, models in a1["benchmarks"].items():
        head = next(i for i in range(start, len(lines)) if re.sub(r"\s*\[\d+\]$", "", lines[i].strip()) == bench)
        for model, rows in models.items():
            i = next(j for j in range(head, len(lines)) if lines[j].startswith(model + "\tRandom\t"))
            assert [_num(x) for x in lines[i].split("\t")[2:]] == rows["random"], (bench, model)
            assert [_num(x) for x in lines[i + 1].split("\t")[2:]] == rows["vrh"], (bench, model)
            assert len(rows["vrh"]) == len(a1["ks"])


@needs_paper
def test_tab_3_cross_task_is_the_papers_and_its_differences_add_up(lines):
    t3 = paper_numbers()["crosstask_T3"]["models"]
    i = _after(lines, "Model\tCondition\tVAW")
    cols = lines[i].split("\t")[2:]
    assert set(cols) == set(next(iter(t3.values())))
    for model, sets in t3.items():
        j = next(n for n in range(i, len(lines)) if lines[n].startswith(model + "\tBaseline"))
        for row, cond in ((j, "baseline"), (j + 1, "random"), (j + 2, "vrh")):
            fields = lines[row].split("\t")[2:]
            for col, field in zip(cols, fields):
                assert _num(field) == sets[col][cond], (model, col, cond)
                if cond != "baseline":  # "63.7 (-0.1)": the difference to the baseline, as printed
                    diff = float(re.search(r"\(([-+]?\d+\.\d)\)", field).group(1))
                    assert abs(sets[col][cond] - sets[col]["baseline"] - diff) < 0.051, (model, col, cond)


@needs_paper
def test_tab_a9_a10_a12_a13_a7_are_the_papers(lines):
    p = paper_numbers()
    start = _after(lines, "\tRandom heads\tVRHs (Ours)")
    for model, ks in p["ablation_A9"]["models"].items():
        m = next(i for i in range(start, len(lines)) if lines[i].endswith(") " + model))
        for k, row in ks.items():
            label = next(ln.split("\t")[0] for ln in lines[m + 1:m + 6] if f"k{{=}}{k}$" in ln.split("\t")[0])
            assert _has_row(lines, label, list(row.values()), m + 1, m + 6), (model, k)
    i = _after(lines, "Evaluation set\t")
    names = lines[i].split("\t")[1:]
    for key, row in (("with_detection_samples", i + 1), ("without_detection_samples", i + 2)):
        assert [_num(x) for x in lines[row].split("\t")[1:]] == [p["heldout_A10"][key][n] for n in names]
    i = _after(lines, "Condition\tMagma-8B")
    a12 = p["all_models_A12"]["models"]
    for label, key in (("Baseline ($k{=}0$)", "baseline"), ("Random ($k{=}20$)", "random"), ("VRH ($k{=}20$)", "vrh")):
        assert _has_row(lines, label, [m[key] for m in a12.values()], i, i + 5), key
    i = _after(lines, "\tMagma-8B\tLLaVA-NeXT-Llama3-8B")
    a13 = p["transfer_A13"]["models"]
    for label, key in (("Original model", "baseline"), ("w/ Masking own top-20 VRHs", "own"),
                       ("w/ Cross-masking VRHs", "cross")):
        assert _has_row(lines, label, [a13["Magma-8B"][key], a13["LLaVA-NeXT-Llama3-8B"][key]], i, i + 4), key
    for model, m in p["models_A7"].items():
        row = next(ln for ln in lines if ln.startswith(model + "\t") and ln.split("\t")[4:5] == [m["backbone"]])
        assert [int(x) for x in row.split("\t")[1:4]] == [m["layers"], m["heads"], m["total_heads"]]
        assert m["layers"] * m["heads"] == m["total_heads"]


@needs_paper
def test_app_d_top20_lists_are_the_papers(lines):
    for bench, models in paper_numbers()["top20_D"].items():
        t = next(i for i, ln in enumerate(lines) if ln.startswith("Table A") and f"detected on {bench}" in ln)
        for model, heads in models.items():
            row = next(ln for ln in lines[t:t + 8] if ln.startswith(model + "\t"))
            assert row.split("\t")[1] == ", ".join(f"({l},{h})" for l, h in heads), (bench, model)
            assert len(heads) == 20 == len({tuple(x) for x in heads})


def test_every_paper_model_with_a_hub_id_is_in_some_table():
    p = paper_numbers()
    named = set(p["models_A7"]) | set(p["all_models_A12"]["models"])
    assert set(p["hub_ids"]) <= named
