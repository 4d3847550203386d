"""Every family reads a loosely written box the same way: one policy, decided once in :mod:`vrh.data.boxes`.

Parsing needs only the adapter objects (no model): each test runs over every registered adapter. A box
inside a reasoning block (``<think>...</think>``, closed, unclosed, or opened by the chat template) is
never the answer; the answer after it still parses. The loosely written boxes of the policy (module
docstring of :mod:`vrh.data.boxes`, docs/adapters.md) give the same decision in every family: the box of
the clean text a human reads them as, or no box (``parse_failure``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from vrh.models.adapters import get_adapter, registered_adapters

DOC = Path(__file__).resolve().parents[3] / "docs" / "adapters.md"
NAMES = sorted(registered_adapters())
SIZE = (150, 100)  # original image (width, height)
META = {"resized_size": (140, 84)}  # what build_batch records; only Qwen2.5-VL's frame reads it
GT, OTHER = (15.0, 25.0, 90.0, 75.0), (30.0, 10.0, 120.0, 60.0)  # original pixels

# hostile text -> the clean text a human reads it as, or None: no box in any family
LOOSE = {
    "[10, 20, 30, 40,]": "[10, 20, 30, 40]",
    "[10, 20, 30, 40 , ]": "[10, 20, 30, 40]",
    '{"bbox_2d": [10, 20, 30, 40,]}': "[10, 20, 30, 40]",
    "[10px, 20px, 30px, 40px]": "[10, 20, 30, 40]",
    "[10 px, 20 px, 30 px, 40 px]": "[10, 20, 30, 40]",
    "[100,200,300,400]": "[100, 200, 300, 400]",
    "[1,024, 20, 1,100, 40]": None,
    "[1,024, 20, 30]": None,
    "[1,100, 200, 300]": None,
    "[1,024,20,30]": None,
    '{"bbox_2d": [1,024, 20, 30]}': None,
    "[10%, 20%, 30%, 40%]": None,
    "[10%, 20, 30, 40]": None,
    '{"box_2d": ["10%", "20%", "30%", "40%"]}': None,
    "[10, 20] to [30, 40]": None,
    "[10, 20], [30, 40]": None,
    "from (10, 20) to (30, 40)": None,
    "<think>maybe [10,20,30,40]? no</think> There is no such object.": None,
    "<think>maybe [10,20,30,40]": None,
    "maybe [10,20,30,40]? no</think> There is no such object.": None,
}


def test_every_family_but_paligemma_reads_number_boxes():
    """PaliGemma answers in location tokens only (big_vision reads nothing else), so a number list is never its
    box and the loose lists below are vacuous for it; every other family must read them."""
    readers = {n for n in NAMES if get_adapter(n).parse_box("[10, 20, 30, 40]", META, SIZE) is not None}
    assert set(NAMES) - readers == {"paligemma"}


@pytest.mark.parametrize("text", list(LOOSE))
@pytest.mark.parametrize("name", NAMES)
def test_loose_boxes_decide_alike_in_every_family(name, text):
    adapter = get_adapter(name)
    clean = LOOSE[text]
    got = adapter.parse_box(text, META, SIZE)
    if clean is None:
        assert got is None, (name, text, got)
    else:
        assert got == adapter.parse_box(clean, META, SIZE), (name, text, got)


@pytest.mark.parametrize("name", NAMES)
def test_a_box_inside_reasoning_is_never_the_answer(name):
    adapter = get_adapter(name)
    box = adapter.format_box(GT, META, SIZE)  # the family's own answer format
    assert adapter.parse_box(box, META, SIZE) is not None
    for text in [f"<think>maybe {box}? no</think> There is no such object.",
                 f"<think>maybe {box}",  # generation stopped mid-thought
                 f"maybe {box}? no</think> There is no such object.",  # the chat template opened the block
                 f"<think>\n</think>\nThere is none. <think>unless {box}"]:
        assert adapter.parse_box(text, META, SIZE) is None, (name, text)


@pytest.mark.parametrize("name", NAMES)
def test_the_answer_after_reasoning_parses(name):
    adapter = get_adapter(name)
    decoy, answer = (adapter.format_box(b, META, SIZE) for b in (GT, OTHER))
    want = adapter.parse_box(answer, META, SIZE)
    assert want is not None
    for text in [f"<think>maybe {decoy}? no</think>{answer}",
                 f"<think>maybe {decoy}? no</think>\n\nThe object: {answer}",
                 f"maybe {decoy}</think>\n{answer}",  # the chat template opened the block
                 f"<think>\n\n</think>\n\n{answer}",  # the empty block of a non-thinking turn
                 f"<think>a</think>{answer}<think>or {decoy}"]:
        assert adapter.parse_box(text, META, SIZE) == want, (name, text)


def _doc_section() -> str:
    return DOC.read_text().split("## Box formats and how answers are read")[1].split("\n## ")[0]


def _doc_policy() -> list[tuple[str, str | None]]:
    """(answer, what it reads as or None) for every answer in the page's policy table."""
    table = _doc_section().split("| Answer | Read as | Why |")[1].split("\n\n")[0]
    rows = []
    for line in table.strip().splitlines()[1:]:  # below the |---| rule
        answers, read_as = line.strip("|").split(" | ")[:2]
        clean = None if read_as.strip() == "no box" else re.fullmatch(r"\s*`([^`]+)`\s*", read_as).group(1)
        rows += [(text, clean) for text in re.findall(r"`([^`]+)`", answers)]
    return rows


def test_the_doc_lists_every_family():
    formats = _doc_section().split("| Answer |")[0]
    assert set(NAMES) <= set(re.findall(r"`(\w+)`", formats))


@pytest.mark.parametrize("text, clean", _doc_policy())
@pytest.mark.parametrize("name", NAMES)
def test_the_doc_policy_holds_in_every_family(name, text, clean):
    """docs/adapters.md's policy table, row by row, in every family (so the page cannot drift from the code)."""
    adapter = get_adapter(name)
    got = adapter.parse_box(text, META, SIZE)
    assert got == (None if clean is None else adapter.parse_box(clean, META, SIZE)), (name, text, got)
