"""The report's DPO section (Fig. A3) from hand-written dpo / dpo-train results: the figure, the accuracy and
difference tables, the unequal-pairs warning, and a run with keys missing."""

from vrh import runs
from vrh.experiments import dpo_comparison as dc
from vrh.analyses.reporting import build_report, build_sections
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


def test_a_dpo_run_names_its_trained_models_and_draws_their_unmasked_evaluations_apart(tmp_path, monkeypatch):
    """Issue 37 item 6: the outcome chart of three unmasked models was titled "Masked evaluations", with a
    dashed "unmasked" line at one of them and its three x-labels printed over each other; the trained models
    were listed as "model (llava)", and the settings said "max_steps -1"."""
    from vrh.report import plots

    drawn = []
    real = plots.to_png
    monkeypatch.setattr(plots, "to_png", lambda fig: drawn.append(fig) or real(fig))
    root = tmp_path / "dpo"
    base = {"path": "/ckpt/organism_a", "model_type": "llava"}
    names = ["eval_grounding_base", "eval_grounding_dpo-random", "eval_grounding_dpo-vrh"]
    results = {**_comparison_results(), "subruns": ["train_vrh", "train_random", *names]}
    results["settings"] = {"lr": 1e-5, "epochs": 4.0, "max_steps": -1}
    _finished(root, {"command": "dpo", "model": base, "subruns": results["subruns"]}, results)
    for policy in ("vrh", "random"):
        _finished(root / f"train_{policy}", {"command": "dpo-train", "model": base},
                  {"steps": 4, "n_pairs": 8, "base_model": base["path"], "model_dir": str(root / f"train_{policy}" / "model")})
    for name, model in zip(names, [base["path"], root / "train_random" / "model", root / "train_vrh" / "model"]):
        _finished(root / name, {"command": "evaluate", "model": {"path": str(model), "model_type": "llava"},
                                "data": {"path": "/d/g.jsonl"}},
                  {"n": 8, "accuracy": 0.75, "k": 0, "fractions": {"correct": 0.75, "mislocated": 0.25},
                   "condition": {"kind": "none", "k": 0}})
    loaded = load_runs([root])
    assert {r.name: r.model for r in loaded if r.command == "evaluate"} == {
        "eval_grounding_base": "organism_a (llava)", "eval_grounding_dpo-random": "organism_a + DPO (train_random)",
        "eval_grounding_dpo-vrh": "organism_a + DPO (train_vrh)"}
    secs = build_sections(loaded, None)
    outcome = next(s for s in secs if s.title == "Outcome breakdown")
    fig_block = next(b for b in outcome.blocks if isinstance(b, Fig))
    assert "nothing is masked: the bars compare models" in fig_block.caption
    fig = next(f for f in drawn if f.axes and f.axes[0].get_title() == "Unmasked evaluations")
    ax = fig.axes[0]
    assert not ax.lines  # no "unmasked accuracy" line: every bar is an unmasked accuracy
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in ax.get_xticklabels()]
    assert len(boxes) == 3 and not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    assert all(b.x0 >= 0 and b.x1 <= fig.bbox.width and b.y0 >= 0 for b in boxes)
    md = build_report([root], tmp_path / "report")["md"].read_text()
    assert "max_steps -1" not in md and "no step limit (the epochs decide)" in md
