"""Bad input at scale: box parsers fed >= 10,000 generated answers, and no implicit ``trust_remote_code``.

A model's answer is untrusted text. Whatever it says, every parser (``vrh.data.boxes.parse_box`` and each
registered adapter's ``parse_box``) must return None or one valid, finite box, raise nothing, and do regex work
linear in the answer's length (steps of the engine counted by tests/support/regex_work.py, not seconds: a busy
machine cannot fail it); and none may return a box from the model's reasoning. Examples are derandomized so CI sees the
same 10,000 strings every run.
"""

import ast
import importlib
import math
import pkgutil
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vrh.models.adapters
from tests.support.regex_work import agrees, recorded, work
from vrh.data import boxes as grounding
from vrh.models.adapters import registered_adapters

N_EXAMPLES = 10_000
IMAGE_SIZES = [(1, 1), (56, 56), (640, 480), (10_000, 7)]
ADAPTERS = {name: cls() for name, cls in sorted(registered_adapters().items())}
# where the parsers' patterns live: the grounding module and every adapter file
PARSER_MODULES = [grounding] + [importlib.import_module(f"vrh.models.adapters.{m.name}")
                                for m in pkgutil.iter_modules(vrh.models.adapters.__path__)]

# --- near-miss answers: the pieces box formats are made of, put together wrongly ------------------------
_numbers = st.one_of(
    st.integers(-10**30, 10**30).map(str),
    st.integers(0, 1100).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["1e400", "-1e400", "1e308", "1.7976931348623157e308", "4.9e-324", "nan", "-inf", "Infinity",
                     "0", "-0", ".5", "5.", "1e", "e5", "+", "--1", "1.2.3", "0x1F", "١٢٣", "１２", "9" * 400]),
)
_opens = st.sampled_from(["[", "(", "[[", "((", "{", '{"bbox_2d": [', "'bbox_2d':[", "bbox_2d : [",
                          '{"box_2d": [', "<|box_start|>(", "<|box_start|>", "<ref>", "<box>", "<loc",
                          "<think>", "</think>", ""])
_seps = st.sampled_from([",", ", ", " ", "  ", ",,", ";", "\n", "\t", "\u3000", "，", " , ", "),(", ") , (", ""])
_closes = st.sampled_from(["]", ")", "]]", ")]", "}", "]}", "<|box_end|>", ")<|box_end|>", ">", "</box>", "</think>",
                           "<think>", ""])
_noise = st.text(max_size=20)


@st.composite
def near_miss_boxes(draw) -> str:
    numbers = draw(st.lists(_numbers, min_size=0, max_size=7))
    body = ""
    for i, n in enumerate(numbers):
        body += (draw(_seps) if i else "") + (f'"{n}"' if draw(st.booleans()) and i % 3 == 0 else n)
    return draw(_noise) + draw(_opens) + body + draw(_closes) + draw(_noise)


_FORMATS = ["[{}, {}, {}, {}]", "({},{},{},{})", "[ {} {} {} {} ]", '{{"bbox_2d": [{}, {}, {}, {}]}}',
            "<|box_start|>({},{}),({},{})<|box_end|>", '```json\n[{{"bbox_2d": [{}, {}, {}, {}], "label": "a"}}]\n```',
            "[[{}, {}, {}, {}]]", '{{"box_2d": [{}, {}, {}, {}]}}', "<ref>a</ref><box>[[{}, {}, {}, {}]]</box>"]
# well-formed boxes of any numbers: huge, tiny, negative, swapped, nan
well_formed = st.tuples(st.sampled_from(_FORMATS), st.lists(_numbers, min_size=4, max_size=4)).map(
    lambda t: t[0].format(*t[1]))


def _nest(children: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(children.map(lambda s: f"[{s}]"), children.map(lambda s: f"({s})"),
                     st.lists(children, max_size=4).map(", ".join))


nested = st.recursive(st.one_of(_numbers, near_miss_boxes()), _nest, max_leaves=12)
loc_tokens = st.lists(st.integers(-5, 99_999).map(lambda n: f"<loc{n:04d}>"), max_size=6).map("".join)
answers = st.one_of(
    st.text(max_size=200),  # any unicode, surrogates excluded by hypothesis' default alphabet
    near_miss_boxes(),
    well_formed,
    nested,
    st.tuples(loc_tokens, _noise).map("".join),
    st.tuples(near_miss_boxes(), st.integers(0, 2000)).map(lambda t: t[0].replace(" ", " " * t[1], 1)),
)


def _check_box(box, who: str, text: str) -> None:
    assert isinstance(box, tuple) and len(box) == 4, (who, text, box)
    x1, y1, x2, y2 = box
    assert all(isinstance(v, float) and math.isfinite(v) for v in box), (who, text, box)
    assert x1 <= x2 and y1 <= y2, (who, text, box)


def _every_parser(text: str, meta: dict | None = None, size: tuple[int, int] = (640, 480)) -> list:
    """What grounding.parse_box and each adapter's parse_box make of ``text``."""
    return [grounding.parse_box(text)] + [a.parse_box(text, meta or {}, size) for a in ADAPTERS.values()]


def _counted(text: str, check: bool = False) -> int:
    """The regex steps every parser takes on ``text``, summed (``check``: the model agrees with re first)."""
    with recorded(*PARSER_MODULES) as calls:
        _every_parser(text)
    assert not check or all(agrees(c) for c in set(calls))
    return work(calls)


PER_EXAMPLE = 10  # strings per hypothesis example: its per-example overhead, not parsing, dominates the time
parsed: list[int] = []  # strings parsed by _fuzz_every_parser, counted so the scale itself is tested


@settings(max_examples=N_EXAMPLES // PER_EXAMPLE, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(texts=st.lists(answers, min_size=PER_EXAMPLE, max_size=PER_EXAMPLE), size=st.sampled_from(IMAGE_SIZES),
       resized=st.sampled_from([None, (28, 28), (1204, 812)]))
def _fuzz_every_parser(texts, size, resized):
    meta = {} if resized is None else {"resized_size": resized}
    for text in texts:
        found = grounding.parse_box(text)
        if found is not None:
            fmt, box = found
            assert fmt in {"json", "box_tokens", "list"}
            _check_box(box, "grounding", text)
        for name, adapter in ADAPTERS.items():
            box = adapter.parse_box(text, meta, size)
            if box is not None:
                _check_box(tuple(float(v) for v in box), name, text)
        parsed.append(1)


def test_every_parser_survives_generated_answers():
    parsed.clear()
    _fuzz_every_parser()
    assert len(parsed) >= N_EXAMPLES


_REASONING_TAG = re.compile(r"</?think>", re.IGNORECASE)


@settings(max_examples=1_000, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
@given(text=answers.filter(lambda t: not _REASONING_TAG.search(t)), size=st.sampled_from(IMAGE_SIZES))
def test_no_parser_returns_a_box_from_reasoning(text, size):
    """Whatever the answer, wrapped as reasoning (closed, unclosed, or before a lone closing tag: the chat
    template opened the block) it gives no box; followed by itself outside the block, the box it gives alone."""
    meta = {"resized_size": (28, 28)}
    parsers = {"grounding": grounding.parse_box,
               **{name: (lambda t, a=adapter: a.parse_box(t, meta, size)) for name, adapter in ADAPTERS.items()}}
    for who, parse in parsers.items():
        for wrapped in ("<think>" + text, text + "</think>", "<think>" + text + "</think>"):
            assert parse(wrapped) is None, (who, wrapped)
        assert parse("<think>" + text + "</think>" + text) == parse(text), (who, text)


STEPS_PER_CALL, STEPS_PER_CHAR = 500, 40  # twice the most seen on the first 300 generated answers (~250, ~20)


@settings(max_examples=400, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(text=answers)
def test_every_parser_does_linear_work_on_generated_answers(text):
    """On generated answers (up to ~2,000 characters: a backtracking pattern there takes millions of steps)
    each parser's regex steps stay within a fixed cost per call plus a fixed cost per character."""
    bound = (1 + len(ADAPTERS)) * (STEPS_PER_CALL + STEPS_PER_CHAR * len(text))
    assert _counted(text) <= bound, text[:200]


# hostile shapes at two lengths, 8x apart (each was once parsed at 100,000+ characters against a clock)
HUGE = {
    "blank-runs": lambda n: "[1" + " " * n + "2" + " " * n + "3" + " " * n + "4" + " " * n + "x",
    "deep-parens": lambda n: "(" * n + "1, 2, 3, 4" + ")" * n,
    "long-list": lambda n: "[" + ", ".join(["1"] * n) + "]",
    "repeated-key": lambda n: '"bbox_2d": [' * n,
    "many-locs": lambda n: "<loc0001>" * n,
    "huge-number": lambda n: "9" * n,
    "open-tags": lambda n: "<think>" * n,
    "close-tags": lambda n: "</think>[1, 2, 3, 4]" * n,
    "thousands-like": lambda n: "[1,024, 2, 3]" * n,
}
HUGE_N = {"blank-runs": 64, "deep-parens": 128, "long-list": 96, "repeated-key": 24, "many-locs": 32,
          "huge-number": 256, "open-tags": 40, "close-tags": 16, "thousands-like": 24}  # ~250-300 characters


@pytest.mark.parametrize("name", list(HUGE))
def test_adversarial_answers_take_linear_work(name):
    """8x the text, the same regex steps per character (within 5%) for every parser together."""
    short, long = HUGE[name](HUGE_N[name]), HUGE[name](8 * HUGE_N[name])
    per_char_short, per_char_long = _counted(short, check=True) / len(short), _counted(long) / len(long)
    assert per_char_long <= 1.05 * per_char_short, (name, per_char_short, per_char_long)
    for found in _every_parser(long):
        assert found is None or len(found) in (2, 4)


def test_huge_but_finite_coordinates_never_overflow_into_a_box():
    """1e308 is a float, but scaled to pixels it overflows: such a box must not come back as inf."""
    for name, adapter in ADAPTERS.items():
        for text in ["[0, 0, 1e308, 1e308]", "[0.0, 0.0, 1.7976931348623157e308, 5.0]",
                     '{"bbox_2d": [0, 0, 1e308, 1e308]}']:
            box = adapter.parse_box(text, {"resized_size": (2, 2)}, (10_000, 10_000))
            if box is not None:
                _check_box(tuple(float(v) for v in box), name, text)


# --- trust_remote_code: never implied ---------------------------------------------------------------------
SRC = Path(__file__).resolve().parents[2] / "src" / "vrh"


def _remote_code_keywords(tree: ast.AST):
    """Every ``trust_remote_code=...`` keyword, and every ``**{...: ...}`` dict that names it."""
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "trust_remote_code":
            yield node.lineno, node.value
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if isinstance(key, ast.Constant) and key.value == "trust_remote_code":
                    yield node.lineno, value


def test_no_code_path_enables_trust_remote_code():
    """vrh refuses remote-code checkpoints (:mod:`vrh.models.adapters.refusals`); nothing may pass True, a
    non-literal (a value that could be True), or set the HF environment switch for it."""
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text, filename=str(path))
        for line, value in _remote_code_keywords(tree):
            if not (isinstance(value, ast.Constant) and value.value is False):
                offenders.append(f"{path.relative_to(SRC)}:{line}: trust_remote_code={ast.unparse(value)}")
        if "HF_TRUST_REMOTE_CODE" in text:
            offenders.append(f"{path.relative_to(SRC)}: sets HF_TRUST_REMOTE_CODE")
    assert not offenders, "trust_remote_code must never be enabled implicitly:\n" + "\n".join(offenders)


def test_the_ast_check_catches_an_implicit_true():
    bad = ast.parse("AutoModel.from_pretrained(p, trust_remote_code=True)\nf(**{'trust_remote_code': flag})")
    assert [ast.unparse(v) for _, v in _remote_code_keywords(bad)] == ["True", "flag"]
