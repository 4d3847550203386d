"""One rule per VQA answer type (vrh.tasks.vqa.judge_answer)."""

import time

import pytest

from vrh.data import ANSWER_TYPES
from vrh.tasks.vqa import RULES, judge_answer, normalize, parse_choice, parse_number


def test_every_answer_type_has_a_rule():
    assert set(RULES) == set(ANSWER_TYPES)


@pytest.mark.parametrize("pred, gold, outcome", [
    ("red", "red", "correct"),
    ("Red.", "red", "correct"),
    ("  RED  ", "red", "correct"),
    ("light-blue", "light blue", "correct"),  # punctuation -> blank
    ("light   blue", "light blue", "correct"),  # blanks collapsed
    ("red, no: blue", "red", "wrong"),  # the trap: a first-word match would call this correct
    ("red circle", "red", "wrong"),
    ("red", "red circle", "wrong"),
    ("blue", "red", "wrong"),
    ("", "red", "parse_failure"),
    ("  ...  ", "red", "parse_failure"),  # nothing left after normalising
    ("Café", "café", "correct"),  # letters outside ASCII are kept, not dropped
])
def test_exact(pred, gold, outcome):
    assert judge_answer(pred, gold, "exact") == outcome


def test_exact_is_the_default():
    assert judge_answer("red, no: blue", "red") == "wrong"
    assert judge_answer("Red!", "red") == "correct"


@pytest.mark.parametrize("pred, letter", [
    ("B", "B"),
    ("(B)", "B"),
    ("[B]", "B"),
    ("B.", "B"),
    ("B) cat", "B"),
    ("B: the cat", "B"),
    ("  B  ", "B"),
    ("b", "B"),
    ("(b)", "B"),
    ("Answer: B", "B"),
    ("answer - B", "B"),
    ("The answer is B", "B"),
    ("The answer is (B).", "B"),
    ("The correct option is B because it is red.", "B"),
    ("I pick choice B", "B"),
    ("A cat.", None),  # an article, not option A
    ("The answer is a cat", None),  # lower-case after the keyword is a word, not a letter
    ("The answer is Blue", None),
    ("b) cat", None),  # lower-case counts only as the whole answer
    ("", None),
    ("none of them", None),
])
def test_parse_choice(pred, letter):
    assert parse_choice(pred) == letter


@pytest.mark.parametrize("pred, gold, outcome", [
    ("(B)", "B", "correct"),
    ("The answer is B.", "B", "correct"),
    ("C", "B", "wrong"),
    ("A cat", "A", "parse_failure"),
    ("", "A", "parse_failure"),
    ("B", " B ", "correct"),
])
def test_choice(pred, gold, outcome):
    assert judge_answer(pred, gold, "choice") == outcome


@pytest.mark.parametrize("pred, value", [
    ("3", 3.0),
    ("There are 3 cats.", 3.0),
    ("3.", 3.0),
    ("-2.50", -2.5),
    (".5", 0.5),
    ("Two", 2.0),
    ("I see twelve, maybe 13", 12.0),  # the first number, whether word or digits
    ("seventeen", 17.0),
    ("twenty", 20.0),
    ("x2 and v1.5 are names; 4 is the count", 4.0),
    ("someone", None),  # "one" only as a whole word
    ("1,000", 1.0),  # no thousands separators
    ("many", None),
    ("", None),
])
def test_parse_number(pred, value):
    assert parse_number(pred) == value


@pytest.mark.parametrize("pred, gold, outcome", [
    ("3", "3", "correct"),
    ("3.0", "3", "correct"),  # compared as numbers, not strings
    ("three", "3", "correct"),
    ("-2.5 degrees", "-2.50", "correct"),
    ("4", "3", "wrong"),
    ("3.5", "3", "wrong"),
    ("a few", "3", "parse_failure"),
])
def test_number(pred, gold, outcome):
    assert judge_answer(pred, gold, "number") == outcome


@pytest.mark.parametrize("gold, answer_type, message", [
    ("two", "number", "must be a number in digits"),
    ("AB", "choice", "one option letter"),
    ("b", "choice", "one option letter"),
    ("?!", "exact", "letter or digit"),
])
def test_gold_that_does_not_fit_its_type_is_an_error(gold, answer_type, message):
    with pytest.raises(ValueError, match=message):
        judge_answer("x", gold, answer_type)


def test_unknown_answer_type():
    with pytest.raises(ValueError, match=r"unknown answer_type 'fuzzy'.*exact"):
        judge_answer("red", "red", "fuzzy")


def test_normalize():
    assert normalize(" Hello,   World!! ") == "hello world"
    assert normalize("snake_case") == "snake case"


@pytest.mark.parametrize("pred", ["answer" + " " * 9990 + "x", "answer is" * 1100, "(" * 10000, "1" * 10000,
                                  "-." * 5000, "Answer:" + " " * 4000 + "-" + " " * 4000])
def test_readers_are_linear_on_long_answers(pred):
    """8x the answer takes about 8x the time (backtracking: 64x or more), measured side by side; see
    tests/data/test_boxes.py::test_parse_is_linear_on_adversarial_text."""
    short = pred[: len(pred) // 8]
    for answer_type, gold in (("exact", "red"), ("choice", "B"), ("number", "3")):
        best_long = best_short = float("inf")
        for _ in range(5):  # interleaved, the best of 5 each
            best_long = min(best_long, _timed(judge_answer, pred, gold, answer_type))
            best_short = min(best_short, _timed(judge_answer, short, gold, answer_type))
        assert best_long < 20 * best_short + 5e-4, (answer_type, best_long, best_short)


def _timed(fn, *args):
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t
