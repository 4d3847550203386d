"""``vrh compare-heads`` (vrh.analyses.compare_heads): overlap with chance levels, rank correlation, and the
cross-masking matrix on organism C."""

import json
import os

import pytest
import torch

from vrh import runs
from vrh.cli import main
from vrh.analyses.compare_heads import analysis as head_comparison
from vrh.analyses.compare_heads.settings import CompareHeadsSettings
from vrh.experiments import text_heads
from vrh.experiments.settings import TextHeadsSettings
from vrh.scoring import head_overlap
from vrh.scoring.head_overlap import chance


def _scores_run(path, scores, command="detect", model=None):
    """A finished run folder holding only a score map (what compare-heads reads of it)."""
    from vrh.core.heads import rank_heads

    run = runs.RunFolder(path)
    run.write_config({"command": command, "config": {}, "data": {"contexts": []},
                      **({"model": model} if model else {})})
    t = torch.as_tensor(scores, dtype=torch.float32)
    runs.write_head_scores(run, runs.HeadScores(scorer="s", num_layers=t.shape[0], num_heads=t.shape[1], n_scored=1,
                                                variants={"s": {"scores": t.tolist(),
                                                                "ranking": [list(h) for h in rank_heads(t)]}}))
    run.release()
    return str(path)


def test_overlap_figures_with_chance_and_rank_correlation(tmp_path):
    a = _scores_run(tmp_path / "a", torch.arange(32.0).reshape(4, 8))  # best head 3:7, then 3:6, ...
    b = _scores_run(tmp_path / "b", -torch.arange(32.0).reshape(4, 8))  # the reverse order
    res = head_comparison.run_compare_heads(CompareHeadsSettings(heads=a, heads_b=a, overlap_ks=(5, 10),
                                                                 out=str(tmp_path / "same")))
    assert [o["intersection"] for o in res["overlap"]] == [5, 10] and res["rank_correlation"]["spearman"] == 1.0
    assert res["overlap"][0]["chance"]["intersection"] == pytest.approx(chance(5, 32).intersection)
    res = head_comparison.run_compare_heads(CompareHeadsSettings(heads=a, heads_b=b, overlap_ks=(5, 20, 40),
                                                                 out=str(tmp_path / "rev")))
    assert [o["k"] for o in res["overlap"]] == [5, 20, 32]  # capped by the 32 heads
    assert res["overlap"][0]["intersection"] == 0 and res["overlap"][1]["intersection"] == 8  # 20 + 20 - 32
    assert res["rank_correlation"]["spearman"] == -1.0 and res["rank_correlation"]["spearman_null_sd"] > 0
    out = tmp_path / "rev"
    assert (out / "compare_heads.png").stat().st_size > 1000 and "| 5 | 0 | 0.78 |" in (out / "compare_heads.md").read_text()
    assert json.loads((out / "results.json").read_text())["a"]["kind"] == "visual" and res["warnings"] == []
    z = _scores_run(tmp_path / "z", torch.zeros(4, 8), command="text-heads")  # a text run that recalled nothing
    res = head_comparison.run_compare_heads(CompareHeadsSettings(heads=a, heads_b=z, out=str(tmp_path / "zero")))
    assert res["b"]["kind"] == "text" and "every head scores 0" in res["warnings"][0]
    assert "**Warning:**" in (tmp_path / "zero" / "compare_heads.md").read_text()


def test_rankings_of_two_models_are_named_in_one_line(tmp_path):
    """Issue 46 item 3: heads of one model met with another's were silent in compare-heads."""
    grid = torch.arange(32.0).reshape(4, 8)
    m1 = {"path": "org/model-one", "model_type": "llava", "num_layers": 4, "num_heads": 8}
    m2 = {**m1, "path": "org/model-two"}
    a = _scores_run(tmp_path / "a", grid, model=m1)
    b = _scores_run(tmp_path / "b", grid, model=m2)
    same = _scores_run(tmp_path / "c", grid, model=m1)
    res = head_comparison.run_compare_heads(CompareHeadsSettings(heads=a, heads_b=b, out=str(tmp_path / "two")))
    lines = [w for w in res["warnings"] if "two models" in w]
    assert len(lines) == 1 and "org/model-one" in lines[0] and "org/model-two" in lines[0]
    assert "vrh transfer" in lines[0] and "\n" not in lines[0]
    res = head_comparison.run_compare_heads(CompareHeadsSettings(heads=a, heads_b=same, out=str(tmp_path / "one")))
    assert res["warnings"] == []
    here = {**m1, "path": "org/model-three"}  # --model another checkpoint than the one a side was ranked on
    assert [n for n in head_comparison.model_notes({"name": "A", "model": m1}, {"name": "L"}, here)
            if "org/model-three" in n and "org/model-one" in n]


def test_the_report_draws_compare_heads_runs(tmp_path):
    from vrh.analyses.reporting import build_report

    a = _scores_run(tmp_path / "a", torch.arange(32.0).reshape(4, 8))
    head_comparison.run_compare_heads(CompareHeadsSettings(heads=a, heads_b="3:7,0:0",
                                                           out=str(tmp_path / "c")))
    build_report([str(tmp_path / "c")], tmp_path / "rep")
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## Text retrieval heads and head-set comparisons" in md and "Other runs" not in md
    assert (tmp_path / "rep" / "figures" / "compare_heads_0.png").exists()
    (tmp_path / "c" / "results.json").write_text(json.dumps({"overlap": "x", "a": None}))  # hostile content
    build_report([str(tmp_path / "c")], tmp_path / "rep2")
    assert "no results to draw" in (tmp_path / "rep2" / "report.md").read_text()


def test_lists_and_paper_sets_and_refusals(tmp_path, capsys):
    res = head_comparison.run_compare_heads(CompareHeadsSettings(
        heads="paper:Qwen2.5-VL-7B/RefCOCO", heads_b="paper:Qwen2.5-VL-7B/RefCOCOg", out=str(tmp_path / "p")))
    assert res["n_heads"] == 784 and res["rank_correlation"] is None and [o["k"] for o in res["overlap"]] == [5, 10, 20]
    assert res["overlap"][-1]["p_value"] < 1e-6  # the paper's lists of one model agree far beyond chance
    assert main(["compare-heads", "--heads", "paper:Qwen2.5-VL-7B/RefCOCO", "--heads-b",
                 "paper:Qwen3-VL-8B/RefCOCO", "--out", str(tmp_path / "q")]) == 2
    assert "different grids" in capsys.readouterr().err
    assert main(["compare-heads", "--heads", "0:1,0:2", "--heads-b", "0:2", "--out", str(tmp_path / "r")]) == 2
    assert "pass --model" in capsys.readouterr().err
    assert main(["compare-heads", "--heads", str(tmp_path / "nope"), "--heads-b", "0:2", "--out",
                 str(tmp_path / "s")]) == 2
    assert "no such run folder" in capsys.readouterr().err


@pytest.fixture(scope="module")
def organism_c():
    from vrh.models.loading import load_model

    os.environ.setdefault("VRH_NO_PROGRESS", "1")
    return load_model("organism:organism_c")


def test_cross_masking_matrix_on_organism_c(tmp_path, organism_c):
    from vrh.organism.world import write_split

    data = write_split(tmp_path / "world", 6, seed=20_000)
    text = tmp_path / "text"
    text_heads.run_text_heads(TextHeadsSettings(model="organism:organism_c", haystack="items", contexts=(40,),
                                                depths=(0.5,), needles=3, seeds=(0,), k=2, max_new_tokens=12,
                                                out=str(text)), organism_c)
    res = head_comparison.run_compare_heads(CompareHeadsSettings(
        model="organism:organism_c", heads=str(text), heads_b="0:5,1:1,1:2", data=str(data), k=2, seeds=(0, 1),
        max_new_tokens=24, out=str(tmp_path / "cmp")), organism_c)
    m = res["matrix"]
    assert m["grounding"]["n"] == 6 and m["needle"]["n"] == 3 and len(m["needle"]["random"]) == 2
    conds = {c["condition"]: c for c in m["conditions"]}
    assert conds["top2:B"]["heads"] == [[0, 5], [1, 1]]
    top_text = [list(h) for h in runs.read_head_scores(text).ranking()[:2]]
    assert sorted(conds["top2:A"]["heads"]) == sorted(top_text)
    banned = {tuple(h) for c in ("top2:A", "top2:B") for h in conds[c]["heads"]}
    assert not {tuple(h) for c in m["conditions"] if c["kind"] == "random" for h in c["heads"]} & banned
    # the needle column's unmasked recall is the text run's own (the same prompts, regenerated)
    assert m["needle"]["none"] == runs.read_results(text)["recall"]
    recs = runs.read_samples(tmp_path / "cmp")
    n_cond = len(m["conditions"])  # none, A, B and two random sets
    assert n_cond == 5 and sum(r["task"] == "needle" for r in recs) == 3 * n_cond
    assert sum(r["task"] == "grounding" for r in recs) == 6 * n_cond


def test_topk_never_cuts_through_tied_or_zero_scores(tmp_path):
    """Issue 46 item 4: a text-heads run whose map scores 24 of 32 heads exactly 0; its "top-10" and "top-20"
    would be its 8 scored heads plus zeros picked by (layer, head) order."""
    a = _scores_run(tmp_path / "a", torch.arange(32.0).reshape(4, 8))
    z = torch.zeros(32)
    z[torch.tensor([31, 29, 27, 25, 23, 21, 19, 17])] = torch.arange(8.0, 0.0, -1.0)  # 8 distinct, 24 zeros
    b = _scores_run(tmp_path / "b", z.reshape(4, 8), command="text-heads")
    res = head_comparison.run_compare_heads(CompareHeadsSettings(heads=a, heads_b=b, overlap_ks=(5, 10, 20),
                                                                 out=str(tmp_path / "c")))
    assert [o["k"] for o in res["overlap"]] == [5, 8]  # capped at the 8 heads scored above the tie
    assert len(res["warnings"]) == 1 and "24 of its 32 heads tie at score 0" in res["warnings"][0]
    assert "capped at k = 8" in res["warnings"][0] and res["lists"] is None  # two score maps: no whole lists
    assert head_overlap.untied_k([2.0, 1.0, 1.0, 0.5], 2) == 1  # a tie among non-zero scores too
    side = head_comparison.head_side(b, None, "--heads-b")  # the cross-masking's --k through the same tie
    assert "--k 10: " in head_comparison.masked_cut_note(side, 10) and "2 of the masked heads" in \
        head_comparison.masked_cut_note(side, 10)
    assert head_comparison.masked_cut_note(side, 8) is None and head_comparison.masked_cut_note(side, 32) is None


def test_lists_of_different_lengths_are_compared_whole_with_hypergeometric_chance(tmp_path, capsys):
    res = head_comparison.run_compare_heads(CompareHeadsSettings(
        heads="paper:Qwen2.5-VL-7B/RefCOCO", heads_b="qrhead:Qwen2.5-7B-Instruct/NQ", out=str(tmp_path / "q")))
    w = res["lists"]
    assert res["overlap"] == [] and res["b"]["kind"] == "text"  # QRHead's list is a set: no top-k
    assert res["b"]["map_kind"] == "member" and {v for row in res["b"]["map"] for v in row} == {0.0, 1.0}
    assert res["a"]["map_kind"] == "rank"  # the paper's list is drawn by rank
    assert (w["size_a"], w["size_b"], w["n"], w["intersection"]) == (20, 16, 784, 8)
    assert sorted(map(tuple, w["shared"])) == [(16, 0), (16, 1), (16, 17), (16, 20), (17, 18), (18, 16), (19, 17),
                                               (19, 19)]
    assert round(w["chance"], 2) == 0.41 and f"{w['p_value']:.2g}" == "4.2e-10"
    assert round(w["layer_chance"], 2) == 2.86 and 1e-4 < w["layer_p_value"] < 1e-3  # the atlas's stricter null
    assert "share **8** (chance 0.41, hypergeometric p 4.2e-10" in (tmp_path / "q" / "compare_heads.md").read_text()
    assert "8 of 20 and 16 heads shared" in capsys.readouterr().out
    # two ranked lists of different lengths: top-k up to the shorter, and the whole lists
    res = head_comparison.run_compare_heads(CompareHeadsSettings(
        heads="paper:Qwen3-VL-8B/RefCOCO", heads_b="21:31,21:18,0:0", out=str(tmp_path / "r")))
    assert [o["k"] for o in res["overlap"]] == [3] and res["lists"]["size_b"] == 3
    # a score map against a list: the map's top-m, m the list's length
    a = _scores_run(tmp_path / "a", torch.arange(32.0).reshape(4, 8))
    res = head_comparison.run_compare_heads(CompareHeadsSettings(heads=a, heads_b="3:7,3:6,0:0",
                                                                 out=str(tmp_path / "s")))
    assert res["lists"]["a_from"] == "top 3 of its scores" and res["lists"]["intersection"] == 2


def test_a_named_list_on_another_grid_is_refused_in_one_line(tmp_path, capsys):
    assert main(["compare-heads", "--heads", "paper:Qwen3-VL-8B/RefCOCO", "--heads-b", "qrhead:Qwen2.5-7B-Instruct/NQ",
                 "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "different grids" in err and len(err.strip().splitlines()) == 1
    assert main(["compare-heads", "--heads", "paper:Qwen2.5-VL-7B/RefCOCO", "--heads-b", "qrhead:Gemma-3-4B-it/mid",
                 "--out", str(tmp_path / "y")]) == 2
    err = capsys.readouterr().err
    assert "does not fit its model; refused" in err and len(err.strip().splitlines()) == 1
