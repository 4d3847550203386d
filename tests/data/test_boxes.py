import math
import re

import pytest

from tests.support.adversarial_text import BOX_CASES, box_text
from tests.support.regex_work import Model, agrees, recorded, work
from vrh.data import boxes
from vrh.data.boxes import (
    Outcome,
    clip_box,
    from_normalized,
    from_resized,
    iou,
    judge,
    parse_box,
    strip_reasoning,
    summarize,
    to_normalized,
    to_resized,
    valid_box,
    xywh_to_xyxy,
)

BOX = (8.0, 12.0, 40.0, 44.0)

# --- parse_box: every format ------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    # JSON, clean / listed / fenced / pretty-printed / truncated / ill-formed
    ('{"bbox_2d": [8, 12, 40, 44], "label": "dog"}', ("json", BOX)),
    ('[{"bbox_2d": [8, 12, 40, 44], "label": "dog"}, {"bbox_2d": [1, 2, 3, 4], "label": "cat"}]',
     ("json", BOX)),
    ('```json\n[\n  {"bbox_2d": [8, 12, 40, 44], "label": "the dog"}\n]\n```', ("json", BOX)),
    ('```json\n{\n  "bbox_2d": [\n    8,\n    12,\n    40,\n    44\n  ]\n}\n```', ("json", BOX)),
    ('[{"bbox_2d": [8, 12, 40, 44], "label": "the d', ("json", BOX)),  # truncated generation
    ("{'bbox_2d': [8, 12, 40, 44], 'label': 'dog'}", ("json", BOX)),  # python-dict quotes
    ('{"bbox_2d": [8, 12, 40, 44], "label": "dog",,}}', ("json", BOX)),
    ('{"bbox_2d": ["8", "12", "40", "44"]}', ("json", BOX)),
    ('{"bbox_2d": [8.5, 12.25, 40.0, 44.75]}', ("json", (8.5, 12.25, 40.0, 44.75))),
    ('{"box_2d": ["8", "12", "40", "44"]}', ("json", BOX)),  # Gemini's key (vrh asks Gemma 3 for it)
    # bracket / parenthesis lists
    ("[8, 12, 40, 44]", ("list", BOX)),
    ("The box is (8,12,40,44).", ("list", BOX)),
    ("[ 8 , 12 , 40 , 44 ]", ("list", BOX)),
    ("[8 12 40 44]", ("list", BOX)),
    ("[0.1, 0.2, 0.5, 0.9]", ("list", (0.1, 0.2, 0.5, 0.9))),
    ("[.1, .2, 1e2, 2E2]", ("list", (0.1, 0.2, 100.0, 200.0))),
    ("[[8, 12, 40, 44], [50, 60, 70, 80]]", ("list", BOX)),
    ('{"box": [8, 12, 40, 44]}', ("list", BOX)),  # other keys: still a bare list
    # Qwen2-VL box tokens, with and without the special tokens
    ("<|object_ref_start|>dog<|object_ref_end|><|box_start|>(8,12),(40,44)<|box_end|>", ("box_tokens", BOX)),
    ("<|box_start|>(8, 12), (40, 44)<|box_end|>", ("box_tokens", BOX)),
    ("dog(8,12),(40,44)", ("box_tokens", BOX)),  # special tokens stripped by decode
    ("<|box_start|>(8,12),(40,44)", ("box_tokens", BOX)),  # truncated before <|box_end|>
])
def test_parse_formats(text, expected):
    assert parse_box(text) == expected


def test_parse_returns_first_valid_box_in_text_order():
    assert parse_box("first [1, 2, 3, 4] then {\"bbox_2d\": [8, 12, 40, 44]}") == ("list", (1, 2, 3, 4))
    assert parse_box("<|box_start|>(1,2),(3,4)<|box_end|> [8, 12, 40, 44]") == ("box_tokens", (1, 2, 3, 4))


def test_parse_skips_invalid_candidates():
    assert parse_box("[40, 12, 8, 44] no, [8, 12, 40, 44]") == ("list", BOX)  # swapped x rejected
    assert parse_box('{"bbox_2d": [8, 44, 40, 12]} {"bbox_2d": [8, 12, 40, 44]}') == ("json", BOX)
    assert parse_box("[nan, 12, 40, 44] [8, 12, 40, 44]") == ("list", BOX)
    assert parse_box("<|box_start|>(5,5),(5,9)<|box_end|> (8,12),(40,44)") == ("box_tokens", BOX)


@pytest.mark.parametrize("text", [
    "",
    "   ",
    "I cannot see a dog in this image.",
    "[8, 12, 40]",  # 3 numbers
    "[8, 12, 40, 44, 50]",  # 5 numbers
    "[8, 12, 40, ",  # truncated
    '{"bbox_2d": [8, 12, 40',  # truncated JSON
    '{"bbox_2d": [NaN, 12, 40, 44]}',
    "[8, 12, inf, 44]",
    "[40, 12, 8, 44]",  # negative width (swapped corners are rejected, not reordered)
    "[8, 44, 40, 12]",  # negative height
    "[8, 12, 8, 44]",  # zero width
    "{{[[((]]))}} [a, b, c, d] {\"bbox_2d\": {\"x\": 1}} [[[]]]",  # nested junk
    "<|box_start|>(8,12)<|box_end|>",  # one point only
    "8, 12, 40, 44",  # no brackets: too ambiguous to accept
])
def test_parse_rejects(text):
    assert parse_box(text) is None


def test_parse_non_string():
    assert parse_box(None) is None  # type: ignore[arg-type]


def test_negative_coordinates_are_valid_if_ordered():
    # off-image coordinates are the converter's job (clipping), not the parser's
    assert parse_box("[-5, -3, 10, 10]") == ("list", (-5.0, -3.0, 10.0, 10.0))


# --- parse_box: reasoning blocks ------------------------------------------------------------------


@pytest.mark.parametrize("text, answer", [
    ("<think>maybe [10,20,30,40]? no</think> There is no such object.", " There is no such object."),
    ("<think>maybe [10,20,30,40]", ""),  # unclosed: generation stopped mid-thought
    ("maybe [10,20,30,40]? no</think> None.", " None."),  # the chat template opened the block itself
    ("<think>a</think>x<think>b</think>y", "xy"),
    ("<think>a</think>x<think>b", "x"),
    ("<think>a <think>b</think>c", "c"),  # a nested opening is part of the reasoning
    ("x</think>y</think>z", "z"),  # everything before a lone closing tag is reasoning
    ("<THINK>a</Think>b", "b"),
    ("<think>\n\n</think>\n\n[8, 12, 40, 44]", "\n\n[8, 12, 40, 44]"),  # the empty block of a non-thinking turn
    ("no reasoning [8, 12, 40, 44]", "no reasoning [8, 12, 40, 44]"),
    ("<thinking>is not a reasoning tag</thinking>", "<thinking>is not a reasoning tag</thinking>"),
])
def test_strip_reasoning(text, answer):
    assert strip_reasoning(text) == answer
    assert strip_reasoning(answer) == answer  # what is left holds no reasoning tag


@pytest.mark.parametrize("text", [
    "<think>maybe [10,20,30,40]? no</think> There is no such object.",
    "<think>maybe [10,20,30,40]",
    "<think>maybe {\"bbox_2d\": [10, 20, 30, 40]}",
    "<think>maybe <|box_start|>(10,20),(30,40)<|box_end|>",
    "maybe [10,20,30,40]? no</think> There is no such object.",
    "<think>x</think> None. <think>or [10,20,30,40]",
])
def test_a_box_in_reasoning_is_no_answer(text):
    assert parse_box(text) is None


@pytest.mark.parametrize("text, expected", [
    ("<think>maybe [1,2,3,4]? no</think>[8, 12, 40, 44]", ("list", BOX)),
    ("maybe [1,2,3,4]</think>\n{\"bbox_2d\": [8, 12, 40, 44]}", ("json", BOX)),
    ("<think>\n</think>\n<|box_start|>(8,12),(40,44)<|box_end|>", ("box_tokens", BOX)),
    ("<think>a</think>[8, 12, 40, 44]<think>or [1,2,3,4]", ("list", BOX)),
])
def test_the_answer_after_reasoning_parses(text, expected):
    assert parse_box(text) == expected


# --- parse_box: the policy for boxes written loosely (module docstring, docs/adapters.md) -------------


@pytest.mark.parametrize("text, expected", [
    # a trailing comma ends the list, as in Python or JavaScript
    ("[8, 12, 40, 44,]", ("list", BOX)),
    ("[8, 12, 40, 44 , ]", ("list", BOX)),
    ('{"bbox_2d": [8, 12, 40, 44,], "label": "dog"}', ("json", BOX)),
    # px is the unit a pixel box is written in anyway: read as if absent
    ("[8px, 12px, 40px, 44px]", ("list", BOX)),
    ("[8 px, 12 px, 40 px, 44 px]", ("list", BOX)),
    ("(8PX,12PX,40PX,44PX)", ("list", BOX)),
    ('{"bbox_2d": ["8px", "12px", "40px", "44px"]}', ("json", BOX)),
    ("<|box_start|>(8px,12px),(40px,44px)<|box_end|>", ("box_tokens", BOX)),
    # a comma always separates: tight commas throughout are list commas (GLM writes [150,250,600,750])
    ("[8,12,40,44]", ("list", BOX)),
    ("[1,100,200,300]", ("list", (1.0, 100.0, 200.0, 300.0))),
    ("[0.1,0.250, 0.5, 0.9]", ("list", (0.1, 0.25, 0.5, 0.9))),  # decimals are no thousands groups
    ("[1,024, 20, 30] or rather [8, 12, 40, 44]", ("list", BOX)),  # an ambiguous candidate is skipped
    ("[10%, 20%, 30%, 40%] i.e. [8, 12, 40, 44]", ("list", BOX)),
    # two points are a box only in Qwen2-VL's own form, (x1,y1),(x2,y2)
    ("(8, 12), (40, 44)", ("box_tokens", BOX)),
])
def test_policy_reads(text, expected):
    assert parse_box(text) == expected


@pytest.mark.parametrize("text", [
    # thousands separators: read as list commas they give too many numbers...
    "[1,024, 20, 1,100, 40]",
    "[1,024, 20, 30, 40]",
    # ... or a 4-list of numbers other than the ones meant: ambiguous, so no box
    "[1,024, 20, 30]",  # a tight comma before 3 digits, blanks after the other commas
    "[1,100, 200, 300]",
    "[0, 20, 1,300]",
    "[1,024 20 30]",
    "[1,024,20,30]",  # a zero-padded group is a thousands group
    '{"bbox_2d": [1,024, 20, 30]}',
    '{"bbox_2d": [1,100, 200, 300]}',
    "<|box_start|>(1,024),(20,30)<|box_end|>",
    "(1,100), (200, 300)",
    # percentages are not the frame of any family: never read as if they were
    "[10%, 20%, 30%, 40%]",
    "[10%, 20, 30, 40]",
    "[10 %, 20 %, 30 %, 40 %]",
    "(10%,20%,30%,40%)",
    '{"bbox_2d": ["10%", "20%", "30%", "40%"]}',
    '{"bbox_2d": [10%, 20%, 30%, 40%]}',
    "<|box_start|>(10%,20%),(30%,40%)<|box_end|>",
    # two points written any other way than Qwen2-VL's
    "[10, 20] to [30, 40]",
    "[10, 20], [30, 40]",
    "from (10, 20) to (30, 40)",
    "[[10, 20], [30, 40]]",
])
def test_policy_rejects(text):
    assert parse_box(text) is None


# Model output is untrusted text: parsing must stay linear in its length. The first case took seconds
# (quartic in the gap) when blanks could be split between neighbouring quantifiers. The cases are in
# tests/support/adversarial_text.py (benchmarks/parsers.py times them at 1x, 8x and 64x).


def _counted(text: str, check: bool = False) -> int:
    """The regex steps parse_box takes on ``text`` (tests/support/regex_work.py); ``check``: first check that
    the counting model reads each pattern it used as re does, on this text."""
    with recorded(boxes) as calls:
        parse_box(text)
    assert calls and (not check or all(agrees(c) for c in set(calls)))
    return work(calls)


@pytest.mark.parametrize("name", list(BOX_CASES))
def test_parse_is_linear_on_adversarial_text(name):
    """The regex work grows linearly with the length of an adversarial text: at 8x the text (10,000
    characters) the steps per character are those at 1x, within 5% (backtracking would multiply them by 8
    or more). Steps of the engine counted, not seconds: a busy machine cannot fail it."""
    short, long = box_text(name, 1 / 8), box_text(name, 1)
    assert len(long) <= 10_000 and len(long) >= 7 * len(short)
    per_char_short, per_char_long = _counted(short, check=True) / len(short), _counted(long) / len(long)
    assert per_char_long <= 1.05 * per_char_short, (name, per_char_short, per_char_long)


def test_the_step_count_sees_backtracking():
    """The count is not blind: the pattern parse_box had before (``\\s*`` on both sides of a number and a
    ``\\s`` separator) splits a gap of k blanks in O(k) ways per separator, and doubling the gap multiplies
    its steps per character many times over."""
    old = re.compile(r"[\[(]\s*(\d+)\s*(?:,|\s)\s*(\d+)\s*(?:,|\s)\s*(\d+)\s*(?:,|\s)\s*(\d+)\s*[\])]")
    gapped = BOX_CASES["whitespace gaps, no closing bracket"][0]
    per_char = [Model(old).steps_of("finditer", gapped(n)) / len(gapped(n)) for n in (8, 16)]
    assert per_char[1] > 4 * per_char[0]
    assert _counted(gapped(16)) / len(gapped(16)) <= 1.05 * _counted(gapped(8)) / len(gapped(8))


def test_long_gaps_still_parse():
    gap = " " * 2000
    assert parse_box("[8" + gap + "12" + gap + "40" + gap + "44" + gap + "]") == ("list", BOX)
    assert parse_box("[8" + gap + "," + gap + "12, 40, 44]") == ("list", BOX)
    assert parse_box('"bbox_2d":' + gap + "[" + gap + "8,12,40,44" + gap + "]") == ("json", BOX)
    assert parse_box("[8, 12, 40, " + gap + "x") is None


def test_valid_box():
    assert valid_box((0, 0, 1, 1))
    assert not valid_box((0, 0, 1))
    assert not valid_box((0, 0, math.inf, 1))


# --- iou --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("a, b, expected", [
    ((0, 0, 10, 10), (0, 0, 10, 10), 1.0),  # identical
    ((0, 0, 10, 10), (10, 0, 20, 10), 0.0),  # touching edge
    ((0, 0, 10, 10), (10, 10, 20, 20), 0.0),  # touching corner
    ((0, 0, 10, 10), (20, 20, 30, 30), 0.0),  # disjoint
    ((0, 0, 10, 10), (2, 2, 7, 7), 0.25),  # contained
    ((2, 2, 7, 7), (0, 0, 10, 10), 0.25),  # symmetric
    ((0, 0, 10, 10), (5, 0, 15, 10), 1 / 3),  # half overlap
    ((0, 0, 10, 10), (0, 0, 10, 20), 0.5),
    ((5, 5, 5, 5), (5, 5, 5, 5), 0.0),  # degenerate point vs itself
    ((0, 0, 0, 10), (0, 0, 10, 10), 0.0),  # zero width
    ((10, 0, 0, 10), (0, 0, 10, 10), 0.0),  # inverted
    ((0, 0, math.nan, 10), (0, 0, 10, 10), 0.0),
    ((0, 0, math.inf, 10), (0, 0, 10, 10), 0.0),
    ((0.5, 0.5, 1.5, 1.5), (1.0, 1.0, 2.0, 2.0), 0.25 / 1.75),
])
def test_iou(a, b, expected):
    v = iou(a, b)
    assert not math.isnan(v)
    assert v == pytest.approx(expected)
    assert iou(b, a) == pytest.approx(expected)


# --- coordinate frames ---------------------------------------------------------------------------------


def test_from_normalized_and_back():
    assert from_normalized((0, 0, 1000, 1000), 1000, (640, 480)) == (0, 0, 640, 480)
    assert from_normalized((0.25, 0.5, 0.75, 1.0), 1, (640, 480)) == (160, 240, 480, 480)
    box = (100.0, 40.0, 300.0, 200.0)
    assert from_normalized(to_normalized(box, 1000, (640, 480)), 1000, (640, 480)) == pytest.approx(box)


def test_from_resized_and_back():
    assert from_resized((28, 28, 56, 56), (112, 56), (200, 100)) == (50, 50, 100, 100)
    box = (10.0, 20.0, 150.0, 90.0)
    assert from_resized(to_resized(box, (448, 336), (640, 480)), (448, 336), (640, 480)) == pytest.approx(box)


def test_converters_do_not_clip():
    # lmms-eval's RefCOCO protocol scores a box as written; clipping is GroundingTask's `clip` option
    assert from_normalized((-10, -10, 1100, 500), 1000, (200, 100)) == (-2, -1, 220, 50)
    assert from_resized((-4, 10, 120, 60), (112, 56), (224, 112)) == (-8, 20, 240, 120)
    assert clip_box((-1, 5, 300, 400), (100, 200)) == (0, 5, 100, 200)
    # fully off-image collapses to zero area, which scores IoU 0
    assert iou(clip_box((150, 0, 180, 10), (100, 100)), (0, 0, 100, 100)) == 0.0


def test_xywh_to_xyxy():
    assert xywh_to_xyxy((10, 20, 30, 40)) == (10, 20, 40, 60)


# --- judge / summarize ---------------------------------------------------------------------------------


def test_judge():
    assert judge(None, (0, 0, 10, 10)) == (Outcome.PARSE_FAILURE, 0.0)
    assert judge((0, 0, 10, 10), (0, 0, 10, 10)) == (Outcome.CORRECT, 1.0)
    assert judge((0, 0, 10, 10), (0, 0, 10, 20)) == (Outcome.CORRECT, 0.5)  # tau is inclusive
    outcome, v = judge((0, 0, 10, 10), (5, 0, 15, 10))
    assert outcome == Outcome.MISLOCATED and v == pytest.approx(1 / 3)
    assert judge((0, 0, 10, 10), (5, 0, 15, 10), tau=0.3)[0] == Outcome.CORRECT
    assert judge((0, 0, 10, 10), (50, 50, 60, 60)) == (Outcome.MISLOCATED, 0.0)


def test_outcomes_are_plain_strings():
    import vrh.data.boxes as g

    assert (g.CORRECT, g.MISLOCATED, g.PARSE_FAILURE) == Outcome.ALL
    assert (Outcome.CORRECT, Outcome.MISLOCATED, Outcome.PARSE_FAILURE) == (
        "correct", "mislocated", "parse_failure")


def test_summarize():
    s = summarize(["correct", "mislocated", "correct", "parse_failure"])
    assert s["n"] == 4
    assert s["accuracy"] == s["correct"] == 0.5
    assert s["mislocated"] == s["parse_failure"] == 0.25
    assert s["counts"] == {"correct": 2, "mislocated": 1, "parse_failure": 1}
    assert sum(s[o] for o in Outcome.ALL) == pytest.approx(1.0)


def test_summarize_empty_and_unknown():
    s = summarize([])
    assert s["n"] == 0 and s["accuracy"] == 0.0 and s["counts"] == dict.fromkeys(Outcome.ALL, 0)
    with pytest.raises(ValueError, match="unknown outcome"):
        summarize(["correct", "wrong"])
