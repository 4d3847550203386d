"""One rule per VQA answer type (vrh.tasks.vqa.judge_answer)."""

import pytest

from tests.support.adversarial_text import ANSWER_CASES, answer_text
from tests.support.regex_work import agrees, recorded, work
from vrh.data import ANSWER_TYPES, lengths
from vrh.data.answer_rule_registry import get_answer_rule
from vrh.tasks import answer_rules
from vrh.tasks.answer_rules import Gold
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


_RULES = [(RULES["exact"], Gold("red")), (RULES["choice"], Gold("B", "choice")), (RULES["number"], Gold("3", "number")),
          (RULES["length"], Gold("0.7", "length"))] + [
    (get_answer_rule(name).score, gold) for name, gold in (
        ("mmstar", Gold("A", "choice")), ("cvbench", Gold("B", "choice")), ("countbench", Gold("3", "number")),
        ("mathvista", Gold("3", "integer")), ("mathvista", Gold("B", "choice", choices=("x", "y"))))]


def _counted(rule, gold, text: str, check: bool = False) -> int:
    """The regex steps ``rule`` takes on ``text`` (tests/support/regex_work.py), every regex it calls included."""
    with recorded(answer_rules, lengths) as calls:
        rule(text, gold)
    assert not check or all(agrees(c) for c in set(calls))
    return work(calls)


@pytest.mark.parametrize("name", list(ANSWER_CASES))
def test_readers_are_linear_on_long_answers(name):
    """At 8x the answer (10,000 characters) every rule's regex steps per character are those at 1x, within 5%
    (backtracking: 8x or more); counted, not timed (benchmarks/parsers.py has the clock's figures; see
    tests/data/test_boxes.py::test_parse_is_linear_on_adversarial_text)."""
    short, long = answer_text(name, 1 / 8), answer_text(name, 1)
    for rule, gold in _RULES:
        per_char_short = _counted(rule, gold, short, check=True) / len(short)
        per_char_long = _counted(rule, gold, long) / len(long)
        assert per_char_long <= 1.05 * per_char_short + 1e-9, (rule.__name__, gold, per_char_short, per_char_long)
