"""The report says which rule scored a run's VQA answers (issue 29 item 9): the answer rule the run's
config records (``task.answer_rule``) is in the summary's notes, so a figure always names its rule."""

from vrh import runs
from vrh.report.load import load_run
from vrh.report.sections import summary_row


def _evaluate(folder, task):
    with runs.RunFolder(folder) as run:
        run.write_config({"command": "evaluate", "task": task, "conditions": [{"kind": "none", "k": 0}]})
        run.write_results({"n": 4, "accuracy": 0.5, "condition": {"kind": "none", "k": 0}})
    return folder


def test_summary_notes_name_the_answer_rule(tmp_path):
    notes = [summary_row(load_run(_evaluate(tmp_path / name, task)))[-1] for name, task in (
        ("official", {"name": "vqa", "answer_rule": "official"}), ("lenient", {"name": "vqa", "answer_rule": "lenient"}),
        ("grounding", {"name": "grounding", "tau": 0.5, "clip": False}), ("old", {"name": "vqa"}))]
    assert notes[0] == "no masking; answer rule: official" and notes[1] == "no masking; answer rule: lenient"
    assert notes[2] == notes[3] == "no masking"  # no VQA rule to name (a run from before the option: no claim)


def test_summary_notes_name_the_benchmark_rule_that_scored_the_run(tmp_path):
    """Under 'official' the notes also name the rule of the benchmark (issue 37 item 15: CountBenchQA has two
    in lmms-eval, countbenchqa and countbench), as the results record it per condition."""
    d = tmp_path / "cb"
    with runs.RunFolder(d) as run:
        run.write_config({"command": "evaluate", "task": {"name": "vqa", "answer_rule": "official"},
                          "conditions": [{"kind": "none", "k": 0}]})
        run.write_results({"n": 4, "accuracy": 0.5, "answer_rules": {"countbench": 4},
                           "condition": {"kind": "none", "k": 0}})
    assert summary_row(load_run(d))[-1] == "no masking; answer rule: official (countbench)"
    s = tmp_path / "sweep"
    with runs.RunFolder(s) as run:
        run.write_config({"command": "sweep", "task": {"name": "vqa", "answer_rule": "official"}})
        run.write_results({"conditions": [{"condition": "none", "answer_rules": {"countbenchqa": 3, "lenient": 1}},
                                          {"condition": "top_k:2", "answer_rules": {"countbenchqa": 4}}]})
    assert summary_row(load_run(s))[-1].endswith("answer rule: official (countbenchqa, lenient)")
