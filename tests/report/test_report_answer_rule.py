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
