"""Each benchmark's own scoring rule next to vrh's lenient one (issue 29 item 9), and the new answer types
(MathVista's integer / float, SpatialRGPT's lengths; items 5 and 7). The answer tables are scored both ways:
``official`` is the benchmark's rule, ``lenient`` vrh's rule for the answer type."""

import json
from pathlib import Path

import pytest

from vrh.data import ANSWER_TYPES, Sample, load_dataset, write_dataset
from vrh.data.answer_rule_registry import answer_rules
from vrh.tasks import get_task
from vrh.data.lengths import parse_length
from vrh.tasks.answer_rules import RULES, Gold, rule_name

IMG = Path("/nonexistent/x.png")


def sample(answer, answer_type="choice", answer_rule=None, **kw):
    return Sample(id="q", image_path=IMG, task="vqa", question="?", answer=answer, answer_type=answer_type,
                  answer_rule=answer_rule, **kw)


def outcome(text, s, rule="official"):
    return get_task("vqa", answer_rule=rule).judge(None, s, text, {})["outcome"]


def test_every_answer_type_has_its_rule_and_every_registered_rule_keeps_the_contract():
    """Whatever rules are registered: each names its benchmark, is a name the data format accepts, reads an
    empty answer as a parse failure and gives only outcomes the VQA task counts."""
    assert set(RULES) == set(ANSWER_TYPES)
    rules = answer_rules()
    assert rules and len({r.name for r in rules}) == len(rules)
    outcomes = get_task("vqa").outcomes
    for r in rules:
        assert r.benchmark.strip() and sample("A", answer_rule=r.name).answer_rule == r.name
        gold = Gold("A", "choice", choices=("a cat", "a dog"))
        assert r.score("", gold).outcome == "parse_failure", r.name
        assert {r.score(text, gold).outcome for text in ("A", "(b)", "The answer is A.")} <= set(outcomes), r.name


# MMStar (eval/vlmeval/evaluate/mmstar.py): the first character decides; gold A throughout
MMSTAR = [  # answer, MMStar's outcome, vrh's
    ("A", "correct", "correct"), ("(A)", "correct", "correct"), ("A.", "correct", "correct"),
    ("A) a cat", "correct", "correct"), ("a", "correct", "correct"), ("(a)", "correct", "correct"),
    ("Answer: A", "correct", "correct"), ("The answer is A", "correct", "correct"),
    ("The answer is (A).", "wrong", "correct"),  # MMStar reads the character after "the answer is ": "("
    ("Option A", "correct", "correct"), ("option a", "correct", "parse_failure"),
    ("B", "wrong", "wrong"), ("(B)", "wrong", "wrong"), ("B.", "wrong", "wrong"),
    ("Answer: B", "correct", "wrong"),  # "a" of "answer" is option A there
    ("The answer is B", "wrong", "wrong"),
    ("A cat", "correct", "parse_failure"), ("Above", "correct", "parse_failure"),  # first letters
    ("", "parse_failure", "parse_failure"), ("I think A", "wrong", "parse_failure"), ("  A  ", "correct", "correct"),
    ("A\nBecause the cat is on the mat.", "correct", "correct"),  # the letter alone on its line
    ("The correct option is A", "wrong", "correct"), ("C) a dog", "wrong", "wrong"),
    ("a cat", "correct", "parse_failure"), ("Neither", "wrong", "parse_failure"), ("D", "wrong", "wrong"),
    ("[A]", "wrong", "correct"),
]
# CV-Bench (lmms-eval cv_bench/utils.py): the first letter after blanks and "(", any case; gold B
CVBENCH = [
    ("B", "correct", "correct"), ("(B)", "correct", "correct"), ("b", "correct", "correct"), ("B.", "correct", "correct"),
    ("B) chair", "correct", "correct"), ("Answer: B", "wrong", "correct"), ("The answer is B", "wrong", "correct"),
    ("(b) chair", "correct", "parse_failure"), ("Both", "correct", "parse_failure"), ("A", "wrong", "wrong"),
    ("1", "parse_failure", "parse_failure"),
]
# CountBenchQA (lmms-eval countbenchqa/utils.py): the stripped answer is the count's digits; gold 3
COUNTBENCH = [
    ("3", "correct", "correct"), (" 3 ", "correct", "correct"), ("3.", "wrong", "correct"), ("three", "wrong", "correct"),
    ("There are 3 dogs.", "wrong", "correct"), ("3 dogs", "wrong", "correct"), ("4", "wrong", "wrong"),
    ("", "parse_failure", "parse_failure"), ("3.0", "wrong", "correct"),
]
# lmms-eval's second task on CountBenchQA (countbench/utils.py): answer and count lower-cased, a whole-answer
# number word ("none", "zero" .. "twenty") mapped to digits, then compared whole; gold 3
COUNTBENCH_WORDS = [
    ("3", "correct", "correct"), (" 3 ", "correct", "correct"), ("three", "correct", "correct"),
    ("Three", "correct", "correct"), (" THREE\n", "correct", "correct"), ("three.", "wrong", "correct"),
    ("3.", "wrong", "correct"), ("There are 3 dogs.", "wrong", "correct"), ("4", "wrong", "wrong"),
    ("four", "wrong", "wrong"), ("", "parse_failure", "parse_failure"),
]
TABLES = {"mmstar": (MMSTAR, "A", "choice"), "cvbench": (CVBENCH, "B", "choice"),
          "countbenchqa": (COUNTBENCH, "3", "number"), "countbench": (COUNTBENCH_WORDS, "3", "number")}


@pytest.mark.parametrize("bench, answer, official, lenient",
                         [(b, *row) for b, (rows, _, _) in TABLES.items() for row in rows])
def test_answer_tables_scored_both_ways(bench, answer, official, lenient):
    _, gold, answer_type = TABLES[bench]
    s = sample(gold, answer_type, bench)
    assert outcome(answer, s) == official
    assert outcome(answer, s, "lenient") == lenient


@pytest.mark.parametrize("bench, n, disagree", [("mmstar", 28, 8), ("cvbench", 11, 4), ("countbenchqa", 9, 5),
                                                 ("countbench", 11, 3)])
def test_how_often_the_rules_disagree_on_the_tables(bench, n, disagree):
    rows = TABLES[bench][0]
    assert len(rows) == n and sum((o == "correct") != (v == "correct") for _, o, v in rows) == disagree


def test_the_two_countbenchqa_rules_differ_only_on_number_words():
    """lmms-eval holds both on the same data (issue 37 item 15); "none" is its word for 0."""
    for answer, gold in (("three", "3"), ("Twenty", "20"), ("none", "0"), ("Zero", "0")):
        assert outcome(answer, sample(gold, "number", "countbench")) == "correct"
        assert outcome(answer, sample(gold, "number", "countbenchqa")) == "wrong"
    for answer in ("3", "3.", "3 dogs", "twenty-one", "0"):
        assert outcome(answer, sample("3", "number", "countbench")) == outcome(answer, sample("3", "number",
                                                                                              "countbenchqa"))


def test_mathvista_reads_digits_past_a_floats_range_as_wrong():
    """A 400-digit answer is inf as a float: MathVista's own try/except reads no number there (wrong); it raised
    OverflowError (found by benchmarks/parsers.py's 10,000-digit answer)."""
    for answer_type, precision in (("integer", None), ("float", 1)):
        s = sample("3" if answer_type == "integer" else "1.5", answer_type, "mathvista", precision=precision)
        assert outcome("1" * 400, s) == "wrong"
        assert outcome("-" + "9" * 400, s) == "wrong"


def test_the_record_names_the_rule_and_the_config_the_option():
    s = sample("A", "choice", "mmstar")
    rec = get_task("vqa").judge(None, s, "Above", {})
    assert (rec["answer_rule"], rec["read"], rec["outcome"]) == ("mmstar", "A", "correct")
    rec = get_task("vqa", answer_rule="lenient").judge(None, s, "Above", {})
    assert (rec["answer_rule"], rec["outcome"]) == ("lenient", "parse_failure")
    assert get_task("vqa", answer_rule="lenient").config() == {"name": "vqa", "answer_rule": "lenient"}
    plain = sample("red", "exact")  # a sample without a benchmark rule (VAW, own data): vrh's, either way
    assert rule_name(plain) == rule_name(plain, "lenient") == "lenient"
    with pytest.raises(ValueError, match="answer_rule must be one of"):
        get_task("vqa", answer_rule="strict")


def test_summary_counts_the_rules_and_the_relative_error():
    task = get_task("vqa")
    recs = [task.judge(None, sample("A", "choice", "mmstar"), "A", {}),
            task.judge(None, sample("2", "length"), "2.4 meters", {}),  # |2.4 - 2| / (2 + 1e-4)
            task.judge(None, sample("2", "length"), "1 m", {}),
            task.judge(None, sample("2", "length"), "tall", {})]  # not read: no error (SpatialRGPT: unmatched)
    s = task.summarize(recs)
    assert [r["outcome"] for r in recs] == ["correct", "correct", "wrong", "parse_failure"]
    assert s["answer_rules"] == {"mmstar": 1, "lenient": 3}
    assert s["mean_rel_error"] == pytest.approx((0.4 / 2.0001 + 1.0 / 2.0001) / 2)
    json.dumps(s)


# --- SpatialRGPT lengths ---------------------------------------------------------------------------------

@pytest.mark.parametrize("text, meters", [
    ("Region [0] is 30.05 inches in height.", 30.05 * 0.0254), ("Region [0] is 6.91 feet in height.", 6.91 * 0.3048),
    ("It is 25.0 centimeters.", 0.25), ("The height of Region [0] is 2.16 meters.", 2.16), ("1.5m", 1.5),
    ("about 80 cm, i.e. 0.8 m", 0.8), ("5 feet 6 inches", 5 * 0.3048 + 6 * 0.0254), ("12 mm", 0.012),
    ("1 foot", 0.3048), ("2 metres", 2.0),
    ("2 in height", None), ("3", None), ("Region [0] is tall.", None), ("5 minutes", None), ("", None),
])
def test_parse_length(text, meters):
    got = parse_length(text)
    assert got == (None if meters is None else pytest.approx(meters))


@pytest.mark.parametrize("answer, outcome_", [
    ("0.75 m", "correct"), ("1.25 m", "correct"), ("125 cm", "correct"),  # the bounds are inside (<=)
    ("0.74 m", "wrong"), ("1.26 m", "wrong"), ("1", "parse_failure")])
def test_length_success_is_within_25_percent(answer, outcome_):
    s = sample("1", "length")
    rec = get_task("vqa").judge(None, s, answer, {})
    assert rec["outcome"] == outcome_
    if outcome_ != "parse_failure":
        assert rec["rel_error"] == pytest.approx(abs(parse_length(answer) - 1) / (1 + 1e-4))


# --- the answer schema (vrh.data.jsonl) ------------------------------------------------------------------

def test_new_fields_round_trip(tmp_path):
    samples = [sample("1.45", "float", "mathvista", precision=2), sample("12", "integer", "mathvista"),
               sample("0.76327", "length")]
    samples = [Sample(**{**s.__dict__, "id": f"q{i}"}) for i, s in enumerate(samples)]
    back = load_dataset(write_dataset(samples, tmp_path / "d.jsonl"), check_images=False)
    assert [(s.answer_type, s.precision, s.answer_rule) for s in back] == [
        ("float", 2, "mathvista"), ("integer", None, "mathvista"), ("length", None, None)]


@pytest.mark.parametrize("line, message", [
    ({"answer": "1.5", "answer_type": "float"}, "'precision' .* goes with answer_type 'float'"),
    ({"answer": "1.5", "answer_type": "float", "precision": "1"}, "'precision'"),
    ({"answer": "2", "answer_type": "integer", "precision": 1}, "'precision'"),
    ({"answer": "1.5", "answer_type": "integer"}, "whole number"),
    ({"answer": "0", "answer_type": "length"}, "positive length in meters"),
    ({"answer": "A", "answer_type": "choice", "answer_rule": "gpt4"}, "unknown answer_rule 'gpt4'"),
])
def test_bad_answer_schema_is_refused_with_the_line(tmp_path, line, message):
    (tmp_path / "d.jsonl").write_text(json.dumps({"id": "q", "image": "x.png", "task": "vqa", "question": "?", **line}))
    with pytest.raises(ValueError, match=r"d\.jsonl:1: .*" + message):
        load_dataset(tmp_path / "d.jsonl", check_images=False)


def test_grounding_lines_refuse_vqa_fields(tmp_path):
    (tmp_path / "d.jsonl").write_text(json.dumps({"id": "g", "image": "x.png", "task": "grounding", "expression": "a",
                                                  "box": [1, 1, 2, 2], "box_format": "xyxy", "answer_rule": "mmstar"}))
    with pytest.raises(ValueError, match="'answer_rule' applies to vqa samples only"):
        load_dataset(tmp_path / "d.jsonl", check_images=False)


def test_answer_rule_option_reaches_the_task():
    import argparse

    from vrh.analyses.evaluate import Config
    from vrh.options import add_options, parse_config

    p = argparse.ArgumentParser()
    add_options(p, Config)
    base = ["--model", "m", "--data", "d.jsonl", "--out", "o", "--task", "vqa"]
    assert parse_config(Config, p.parse_args(base)).task_settings()["answer_rule"] == "official"
    cfg = parse_config(Config, p.parse_args([*base, "--answer-rule", "lenient"]))
    from vrh.tasks import task_from_settings
    assert task_from_settings(cfg.task, cfg.task_settings()).config() == {"name": "vqa", "answer_rule": "lenient"}
    with pytest.raises(SystemExit):
        p.parse_args([*base, "--answer-rule", "strict"])
