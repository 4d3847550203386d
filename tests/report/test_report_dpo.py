"""The report's DPO section (Fig. A3) from hand-written dpo / dpo-train results: the figure, the accuracy and
difference tables, the unequal-pairs warning, and a run with keys missing."""

from vrh import runs
from vrh.experiments import dpo_comparison as dc
from vrh.report.build import build_report, build_sections
from vrh.report.document import Fig, Table, Text
from vrh.report.load import load_runs


def _finished(folder, config, results):
    with runs.RunFolder(folder) as run:
        run.write_config(config)
        run.write_results(results)
    return folder


def _comparison_results(n_random_pairs=30):
    a = {"base": [True, True, False, False], "dpo-random": [True, True, False, False],
         "dpo-vrh": [True, True, True, False]}
    b = {"base": [True, False], "dpo-random": [False, False], "dpo-vrh": [True, True]}
    blocks = {"refcoco": dc.benchmark_block(a, {"path": "r.jsonl"}), "refcocog": dc.benchmark_block(b, {"path": "g"})}
    return {"models": list(dc.MODELS), "benchmarks": blocks, "average": dc.average_block(list(blocks.values())),
            "pairs": {"vrh": {"n_samples": 200, "n_pairs": 172, "dropped": {"chosen_incorrect": 28}},
                      "random": {"n_samples": 200, "n_pairs": n_random_pairs,
                                 "dropped": {"rejected_same_as_chosen": 170}}},
            "training": {"vrh": {"steps": 44, "train_loss": 0.61}, "random": {"steps": 8, "train_loss": 0.68}},
            "k": 3, "settings": {"lr": 1e-5, "epochs": 2.0}, "subruns": []}


def test_fig_a3_with_accuracies_differences_and_pair_counts(tmp_path):
    run = _finished(tmp_path / "dpo", {"command": "dpo"}, _comparison_results())
    sec = next(s for s in build_sections(load_runs([run]), None) if s.title == "DPO with retrieval heads (Fig. A3)")
    blocks = sec.blocks[1].blocks
    assert any(isinstance(b, Fig) and b.png.startswith(b"\x89PNG") for b in blocks)
    acc, diffs, pairs = [b for b in blocks if isinstance(b, Table)]
    assert acc.columns == ["benchmark", "n", "base", "dpo-random", "dpo-vrh"]
    assert acc.rows[0] == ["refcoco", "4", "50.0 ± 25.0", "50.0 ± 25.0", "75.0 ± 21.7"]
    assert acc.rows[-1][0] == "average" and acc.rows[-1][4] == "87.5 ± 10.8"
    assert diffs.rows[0] == ["refcoco", "dpo-vrh - base", "+25.00", "25.00"]
    assert ["average", "dpo-vrh - base", "+37.50", "27.95"] in diffs.rows  # se: sqrt(25^2 + 50^2) / 2
    assert pairs.rows[1][:3] == ["random", "200", "30"]
    assert any(isinstance(b, Text) and b.warn and "172 VRH vs 30 random" in b.text for b in blocks)


def test_equal_pair_counts_give_no_warning_and_a_bare_run_renders(tmp_path):
    even = _finished(tmp_path / "even", {"command": "dpo"}, _comparison_results(n_random_pairs=172))
    bare = _finished(tmp_path / "bare", {"command": "dpo"}, {"models": "x", "benchmarks": [1]})
    train = _finished(tmp_path / "t", {"command": "dpo-train"}, {"steps": 3, "n_pairs": 5, "last_log": {"loss": 0.69}})
    md = build_report([even, bare, train], tmp_path / "report")["md"].read_text()
    assert "very different numbers of pairs" not in md
    assert "bare records no accuracies." in md
    assert "| optimizer steps | 3 |" in md and "| last loss | 0.69 |" in md
    assert "Other runs" not in md
