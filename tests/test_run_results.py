"""results.json as typed values (vrh.runs.results): one kind per command that writes results, keys in the
order written, unknown keys kept, optional keys left out, a reader that never raises on content, and every
field annotated with the type vrh writes there (real files are checked in tests/report/test_report_demo.py)."""

import json

import pytest

from tests.support.results_types import mismatches, untyped_fields
from vrh import runs
from vrh.runs.results import Block

# one results.json per kind, keys in the order its command writes them (values shortened)
RC = {"per_k": [{"k": 1, "seeds_requested": [0, 1], "seeds_drawn": [0, 1], "n_eligible_heads": 7,
                 "n_distinct_sets": 2, "warnings": []}], "warnings": []}
SUMMARY = {"n": 2, "accuracy": 0.5, "counts": {"correct": 1, "mislocated": 1}, "fractions": {"correct": 0.5},
           "parse_failure_rate": 0.0, "mean_iou": 0.4}
FILES = {
    "detect": {"n_scored": 4, "n_skipped": 0, "scorer": "out/sum/mean", "top_heads": [[0, 1]], "elapsed_seconds": 1.0},
    "evaluate": {**SUMMARY, "point_accuracy": 0.7, "k": 2, "mask_mode": "zero", "masked_heads": [[0, 1], [1, 0]],
                 "heads": {"source": "det"}, "condition": {"kind": "top_k", "k": 2}, "elapsed_seconds": 1.0},
    "sweep": {"task": "grounding", "num_heads_total": 8, "k": [0, 1], "baseline_accuracy": 0.9,
              "vrh": {"accuracy": [0.9, 0.5], "parse_failure_rate": [0.0, 0.1], "fractions": [{}, {}]},
              "random": {"seeds": [0, 1], "accuracy": [[0.9, 0.9], [0.8, 0.9]], "mean": [0.9, 0.85],
                         "std": [0.0, 0.05], "parse_failure_rate_mean": [0.0, 0.0], "fractions_mean": [{}, {}],
                         "n_distinct_sets": [1, 2]},
              "conditions": [{"label": "none"}], "random_control": RC, "elapsed_seconds": 1.0},
    "demo": {"baseline_accuracy": 0.92, "k": 3, "num_heads_total": 32, "vrh_masked_accuracy": 0.165,
             "random_masked_accuracy_mean": 0.9, "random_masked_accuracy_std": 0.01, "random_seeds": [0, 1, 2],
             "vrh_parse_failure_rate": 0.0, "random_parse_failure_rate_mean": 0.0, "top_k_heads": [[3, 3]],
             "sparsity": {"fraction_above": {"0.05": 0.1}}, "vqa": {"baseline_accuracy": 0.7,
             "vrh_masked_accuracy": 0.3, "random_masked_accuracy_mean": 0.7},
             "k_curve": {"k": [0, 3], "vrh": [0.9, 0.2], "random_mean": [0.9, 0.9]}, "n_detect": 200, "n_eval": 200,
             "random_control": {"grounding": RC, "vqa": RC}, "subruns": ["detect"], "mask_mode": "zero",
             "elapsed_seconds": 24.0, "report": "report/report.html"},
    "compare": {"k": [1, 2], "methods": {"out/sum/mean": {"accuracy": [0.5, 0.2], "parse_failure_rate": [0, 0],
                                                          "n_positive_heads": 8}},
                "random": {"mean": [0.9, 0.9], "std": [0, 0], "accuracy": [[0.9], [0.9]], "seeds": [0],
                           "n_distinct_sets": [1, 1]}, "baseline_accuracy": 0.9, "similarity": {},
                "best_method_by_k": {"1": ["out/sum/mean"]}, "default_method": "out/sum/mean", "conditions": [],
                "random_control": RC, "mask_mode": "zero", "n_eval": 3, "n_detect": 4, "num_heads_total": 8,
                "method_options": {}, "n_evaluations": 3, "capture_forwards": None, "extra_capture_forwards": None,
                "data": {"path": "d.jsonl"}, "elapsed_seconds": 1.0},
    "transfer": {"model_a": "a", "model_b": "b", "k": 2, "baseline_accuracy": 0.9, "own_heads_accuracy": None,
                 "transferred_heads_accuracy": 0.4, "random_accuracy_mean": 0.8, "random_accuracy_std": 0.0,
                 "random_accuracy": [0.8], "fractions": {}, "spearman": None, "kendall": None, "topk_overlap": None,
                 "similarity": None, "transferred_heads": [[0, 1]], "mask_mode": "zero", "conditions": [],
                 "random_control": RC, "n": 3, "elapsed_seconds": 1.0},
    "dpo-pairs": {"n_samples": 2, "n_pairs": 1, "n_dropped": 1, "dropped": {"chosen_incorrect": 1},
                  "chosen_accuracy": 0.5, "rejected_accuracy": 0.0, "chosen_outcomes": {}, "rejected_outcomes": {},
                  "kept_rejected_outcomes": {}, "negative_policy": "vrh", "k": 2, "mask_mode": "zero",
                  "pair_format": "trl", "pair_format_version": 1, "pairs_file": "pairs.jsonl", "conditions": [],
                  "decisions": [], "training_command": "...", "elapsed_seconds": 1.0, "random_control": RC},
    "emergence": {"n_records": 3, "k": 3, "n": 40, "threshold": 0.1, "phases": [], "final": None},
    "dpo-train": {"pairs": "p/pairs.jsonl", "n_pairs": 4, "base_model": "organism", "model_dir": "t/model", "steps": 2,
                  "epochs": 1.0, "train_loss": 0.69, "last_log": {"loss": 0.69}, "resumed_from": None,
                  "settings": {"lr": 2e-7}, "train_seconds": 1.0, "peak_memory_bytes": 10, "peak_memory_kind": "rss",
                  "trl_version": "1.16.0", "elapsed_seconds": 1.0},
    "dpo": {"models": ["base", "dpo-random", "dpo-vrh"], "benchmarks": {"b": {"n": 2}}, "average": {"n_benchmarks": 1},
            "pairs": {"vrh": {"n_pairs": 1}}, "training": {"vrh": {"steps": 2}}, "k": 3, "settings": {},
            "overlap_checked": {"train_samples": 2, "shared_with_evaluation": 0}, "subruns": ["pairs_vrh"],
            "stage_seconds": {"pairs_vrh": 1.0}, "elapsed_seconds": 2.0},
    "text-heads": {"model": "organism", "scorer": "copy_paste", "k": 3, "n": 4, "n_correct": 1, "recall": 0.25,
                   "recall_chance": 0.36, "copied_other_item": 0.5, "recall_by_depth": {"0.5": 0.25}, "recall_by_context": {"60": 0.25}, "recall_by_length": {"4": 0.25},
                   "text_heads_recall": 0.0, "cross_heads_recall": None, "cross_heads": None, "random_recall": [0.25],
                   "random_recall_mean": 0.25, "random_recall_std": 0.0, "conditions": [], "top_heads": [[2, 6]],
                   "random_warnings": [], "elapsed_seconds": 1.0},
    "compare-heads": {"num_layers": 4, "num_heads": 8, "n_heads": 32, "overlap": [{"k": 5, "intersection": 1}],
                      "lists": None, "rank_correlation": None, "warnings": [], "a": {"name": "a"}, "b": {"name": "b"}, "matrix": None,
                      "elapsed_seconds": 1.0},
}
CURVE = {"scorer": "out/sum/mean", "omega": "mean", "k": 2, "bootstrap": 2, "n_total": 4, "n_values": [1, 4],
         "n_values_dropped": [], "topk_overlap": [[0.5, 1.0], [1.0, 1.0]], "topk_overlap_mean": [0.75, 1.0],
         "topk_overlap_std": [0.25, 0.0], "notes": [], "mask_mode": "zero", "reference_heads": [[0, 1], [1, 0]],
         "reference_matches_head_scores": True}
STABILITY = {  # the three shapes vrh stability writes
    "with token choice": {**CURVE, "n_eval": 3, "baseline_accuracy": 0.9, "conditions": [],
                          "token_choice": {"rand1_accuracy": 0.5, "out_accuracy": 0.2, "random_accuracy": 0.9,
                                           "random_accuracy_std": 0.0, "baseline_accuracy": 0.9,
                                           "rand1_out_topk_overlap": 0.5, "rand1_heads": [], "out_heads": [],
                                           "random_seeds": [0], "random_heads": [], "fractions": {}},
                          "random_control": RC, "accuracy_mean": [0.4, 0.2], "accuracy_std": [0, 0],
                          "accuracy_draws": 1, "elapsed_seconds": 1.0},
    "draws without token choice": {**CURVE, "n_eval": 3, "baseline_accuracy": 0.9, "conditions": [],
                                   "accuracy_mean": [0.4, 0.2], "accuracy_std": [0, 0], "accuracy_draws": 1,
                                   "token_choice": None, "token_choice_skipped": "no rand1", "elapsed_seconds": 1.0},
    "no model": {**CURVE, "token_choice": None, "token_choice_skipped": "no --model given", "elapsed_seconds": 1.0},
}


def files() -> dict:
    """:data:`FILES` and each registered analysis' own example (its registration's ``example_results``)."""
    from vrh.analyses.registry import analyses

    return {**FILES, **{a.name: dict(a.example_results) for a in analyses().values() if a.example_results is not None}}


def _cases():
    yield from files().items()
    yield from (("stability", obj) for obj in STABILITY.values())


@pytest.mark.parametrize("command,obj", list(_cases()), ids=[*files(), *STABILITY])
def test_every_kind_writes_back_what_it_read_key_for_key_in_order(command, obj):
    value = runs.results_from_json(command, {"schema_version": 2, **obj})
    assert type(value) is runs.results_type(command) is not runs.RunResults and value.COMMAND == command
    assert not value.extra, value.extra  # every key written today is known
    assert value.schema_version == 2
    assert json.dumps(value.to_json()) == json.dumps(obj)  # the envelope is write_results'


def test_every_command_that_writes_results_has_a_kind():
    from vrh.analyses.registry import analyses

    writing = {a.name for a in analyses().values() if a.writes_run_folder()}  # settings with an --out run folder
    assert {"detect", "evaluate", "sweep"} <= writing
    assert all(analyses()[c].results_type() is runs.results_type(c) is not runs.RunResults for c in writing)
    assert writing <= {*files(), "stability"}


def test_unknown_keys_are_kept_after_the_known_ones():
    value = runs.results_from_json("transfer", {**FILES["transfer"], "new_key": [1], "model_a": "x"})
    assert value.model_a == "x" and value.extra == {"new_key": [1]}
    assert list(value.to_json())[-1] == "new_key"
    ev = runs.results_from_json("evaluate", FILES["evaluate"])  # a task's own metric stays in its summary
    assert ev.summary.accuracy == 0.5 and ev.summary.extra == {"point_accuracy": 0.7}
    assert ev.value("point_accuracy") == 0.7 and ev.value("k") == 2 and ev.value("nothing") is None


def test_missing_keys_and_blocks_of_the_wrong_shape_read_as_none():
    empty = runs.results_from_json("sweep", {})
    assert empty.k is None and empty.vrh is None and empty.random_control is None and empty.schema_version is None
    odd = runs.results_from_json("demo", {"vqa": "n/a", "k_curve": [1], "random_control": 3, "k": "three"})
    assert odd.vqa is None and odd.k_curve is None and odd.random_control is None and odd.k == "three"
    for junk in (None, [], "text", 3, {"vrh": {"accuracy": "x"}, "random": None}):
        for command in (*FILES, "stability", "mystery"):
            runs.results_from_json(command, junk).to_json()  # never raises


def test_old_shapes_still_read():
    bare = runs.results_from_json("sweep", {"random_control": RC["per_k"]})  # the bare per-k list of early sweeps
    assert [e.k for e in bare.random_control.entries()] == [1]
    cm = runs.results_from_json("compare", {"methods": {"ours": [0.5, 0.1], "x": 0.2, "y": None}})
    assert cm.methods["ours"].accuracy == [0.5, 0.1] and cm.methods["x"].accuracy == 0.2 and cm.methods["y"] is None
    old = runs.results_from_json("evaluate", {"n": 2, "accuracy": 0.5, "correct": 0.5, "wrong": 0.5})
    assert old.summary.fractions is None and old.summary.outcome_fractions() == {"correct": 0.5}


def test_optional_keys_are_left_out_and_a_command_without_a_kind_keeps_everything():
    demo = runs.results_from_json("demo", {k: v for k, v in FILES["demo"].items() if k != "report"})
    assert "report" not in demo.to_json()
    other = runs.results_from_json("study", {"schema_version": 2, "subruns": ["a"], "n": 3})
    assert type(other) is runs.RunResults and other.to_json() == {"subruns": ["a"], "n": 3}
    assert other.value("subruns") == ["a"]


def test_blocks_are_empty_only_when_nothing_was_written():
    assert runs.TokenChoice.from_json({}).is_empty() and runs.TokenChoice.empty().is_empty()
    assert not runs.TokenChoice.from_json({"out_accuracy": 0.1}).is_empty()
    assert not runs.TokenChoice.from_json({"other": 1}).is_empty()
    assert isinstance(runs.TokenChoice.empty(), Block)


def test_a_written_value_reads_back_equal(tmp_path):
    with runs.RunFolder(tmp_path / "sw") as run:
        run.write_config({"command": "sweep"})
        value = runs.SweepResults.from_json(FILES["sweep"])
        run.write_results(value.to_json())
    raw = runs.read_results(tmp_path / "sw")
    assert list(raw)[0] == "schema_version" and runs.results_from_json("sweep", raw) == \
        runs.SweepResults.from_json({"schema_version": runs.SCHEMA_VERSION, **FILES["sweep"]})


# --- every field has the type vrh writes (tests/support/results_types.py checks a value against it) -------------
def _blocks(cls=Block):
    for sub in cls.__subclasses__():
        if sub.__module__.startswith("vrh.runs."):
            yield sub
        yield from _blocks(sub)


def test_every_field_of_every_kind_and_block_has_a_type():
    blocks = set(_blocks())
    assert {runs.results_type(c) for c in (*FILES, "stability")} | {runs.TaskSummary, runs.TokenChoice} <= blocks
    assert {b.__name__: untyped_fields(b) for b in blocks if untyped_fields(b)} == {}


@pytest.mark.parametrize("command,obj", list(_cases()), ids=[*files(), *STABILITY])
def test_every_example_holds_the_annotated_types(command, obj):
    assert mismatches(runs.results_from_json(command, {"schema_version": 2, **obj})) == []


def test_the_type_check_names_each_value_that_does_not_match():
    odd = runs.results_from_json("demo", {"k": "three", "top_k_heads": [[1, 2.0]], "vqa": {"baseline_accuracy": True},
                                          "random_control": {"grounding": {"per_k": [{"warnings": [3]}, None]}}})
    assert mismatches(odd) == ["k: 'three' is not int", "top_k_heads[0][1]: 2.0 is not int",
                               "vqa.baseline_accuracy: True is not float",
                               "random_control['grounding'].per_k[0].warnings[0]: 3 is not str"]
    assert odd.k == "three" and odd.to_json()["k"] == "three"  # the reader keeps it as written all the same
    assert mismatches(runs.results_from_json("sweep", {})) == []  # absent keys read as None: always allowed


def test_emergence_results_of_a_real_training_log_hold_the_annotated_types():
    from pathlib import Path

    emergence = pytest.importorskip("vrh_lab.organism.emergence")
    logs = sorted(Path(__file__).resolve().parents[1].glob("lab/organism_runs/*/*/" + runs.EMERGENCE))
    if not logs:
        pytest.skip("no organism training log in lab/organism_runs")
    written = json.loads(json.dumps(emergence.summarize(emergence.read(logs[0]))))  # as results.json holds it
    value = runs.results_from_json("emergence", written)
    assert not value.extra and value.final is not None and mismatches(value) == []
