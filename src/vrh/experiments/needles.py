"""Needle-in-a-haystack prompts for the text retrieval heads test (``vrh text-heads``), generated offline.

The Retrieval Heads protocol (Wu et al. 2024) hides a needle sentence at a chosen depth of a long natural
text and asks the model to repeat it; a head is a retrieval head when, while the model copies the needle,
its most attended key is the needle token being copied. vrh ships no corpus and downloads none, so the
haystack is generated, deterministically from ``(seed, index)``, in one of two styles:

* ``sentences``: natural English about the synthetic world's objects (``The large red circle lies left of
  the small blue square.``, ``Nobody has counted the green triangles yet.``), sentences drawn from
  :data:`TEMPLATES`. The needle is ``The secret code of the red circle is 41 7 93 12.``; the question asks
  for the code. Nothing in the haystack says "secret code", and the code is ``length`` numbers drawn
  uniformly from 0-99, so it cannot be guessed from the haystack: the model must find and copy it.
* ``items``: the list of items organism C was pretrained on (``large red circle [ 8 , 12 , 40 , 44 ]``,
  :mod:`vrh.organism`'s vocabulary): the needle is one item whose colour and shape no other item has, its
  box drawn as the world draws an object of its size word (side 14/22/30 +-2 px, placed uniformly in the
  112-px scene, snapped to 4 px; no other item has the same box); the question
  is ``where is the red circle ?``. The value is always 4 numbers (the organism's only answer format).

Answers are judged exactly: the numbers read from the answer, in order, must be the needle's values, no
more and no fewer. A model whose tokenizer lacks a word of the prompt is refused (:func:`unknown_words`):
a test with unknown tokens would not be a fair test of retrieval.

Depth ``d`` puts the needle after ``round(d * units)`` haystack units (sentences or items); the haystack is
filled up to ``context`` tokens of the whole prompt (as the model's tokenizer counts them).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from vrh.organism.world import COLOURS, PLURALS, RELATIONS, SHAPES, SIZES, seeded_rng

STYLES = ("sentences", "items")
ITEM_VALUES = 4  # an item's box: x1 , y1 , x2 , y2
SCENE_PX, BIN_PX = 112, 4  # the organism's scene size and coordinate grid
TEMPLATES = (
    "The {size} {colour} {shape} lies {relation} the {size2} {colour2} {shape2}.",
    "Nobody has counted the {colour} {plural} yet.",
    "A {size} {shape} painted {colour} was seen {relation} a {colour2} {shape2}.",
    "Most of the {plural} in this picture are {colour}.",
    "Somewhere {relation} the {colour} {shape} there is a {size2} {shape2}.",
    "The {colour2} {plural2} never touch the {size} {colour} {shape}.",
)
NEEDLE = "The secret code of the {colour} {shape} is {values}."
QUESTION = "What is the secret code of the {colour} {shape}? Answer with the numbers only."
ITEMS_QUESTION = "where is the {colour} {shape} ?"


@dataclass(frozen=True)
class NeedlePrompt:
    """One test: ``body`` is the user's text (haystack with the needle, then the question); ``needle`` the
    needle's text exactly as it appears in ``body``; ``values`` what a correct answer says."""

    id: str
    style: str
    body: str
    needle: str
    values: tuple[str, ...]
    depth: float
    length: int  # values in the needle
    context: int  # the requested prompt length, tokens
    units: int  # haystack units (sentences / items) around the needle
    question: str = ""  # the question, the end of ``body`` (QRHead's query: ``vrh text-heads --text-scorer qrhead``)

    @property
    def chance(self) -> float:
        """The recall of a model that copies the values of a random item without finding the named one
        (``items``: one item in ``units + 1``), or guesses the code (``sentences``: ``100 ** -length``)."""
        return 1 / (self.units + 1) if self.style == "items" else 100.0 ** -self.length

    def decoys(self) -> list[tuple[str, ...]]:
        """The values of every other item (``items``; none in ``sentences``, whose haystack has no numbers)."""
        if self.style != "items":
            return []
        boxes = [tuple(b.split(" , ")) for b in re.findall(r"\[ ([\d ,]+) \]", self.body)]
        return [b for b in boxes if b != tuple(self.values)]

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "values": list(self.values)}


def _sentence(rng) -> str:
    obj = lambda: (rng.choice(list(SIZES)), rng.choice(list(COLOURS)), rng.choice(SHAPES))  # noqa: E731
    (size, colour, shape), (size2, colour2, shape2) = obj(), obj()
    return rng.choice(TEMPLATES).format(size=size, colour=colour, shape=shape, plural=PLURALS[shape],
                                        relation=rng.choice(RELATIONS), size2=size2, colour2=colour2,
                                        shape2=shape2, plural2=PLURALS[shape2])


def _box(rng, size: str) -> tuple[int, int, int, int]:
    """A box as the world draws an object of ``size`` (nominal side +-2 px), snapped to the 4-px grid."""
    w, h = (BIN_PX * max(1, round((SIZES[size] + rng.randint(-2, 2)) / BIN_PX)) for _ in range(2))
    x1, y1 = BIN_PX * rng.randint(0, (SCENE_PX - w) // BIN_PX), BIN_PX * rng.randint(0, (SCENE_PX - h) // BIN_PX)
    return x1, y1, x1 + w, y1 + h


def _item(size: str, colour: str, shape: str, box: Sequence[int]) -> str:
    return f"{size} {colour} {shape} [ {' , '.join(str(v) for v in box)} ]"


def _needle_and_units(style: str, rng, length: int):
    """(needle text, values, question, unit maker) of one test."""
    colour, shape = rng.choice(list(COLOURS)), rng.choice(SHAPES)
    if style == "sentences":
        values = tuple(str(rng.randrange(100)) for _ in range(length))
        needle = NEEDLE.format(colour=colour, shape=shape, values=" ".join(values))
        return needle, values, QUESTION.format(colour=colour, shape=shape), lambda: _sentence(rng)
    size = rng.choice(list(SIZES))
    box = _box(rng, size)
    needle = _item(size, colour, shape, box)

    def distractor() -> str:
        while True:  # never the needle's colour and shape (the question must name one item), never its box
            c, s, z = rng.choice(list(COLOURS)), rng.choice(SHAPES), rng.choice(list(SIZES))
            b = _box(rng, z)
            if (c, s) != (colour, shape) and b != box:
                return _item(z, c, s, b)

    return needle, tuple(str(v) for v in box), ITEMS_QUESTION.format(colour=colour, shape=shape), distractor


def build_prompts(count_tokens: Callable[[str], int], *, style: str, contexts: Sequence[int],
                  depths: Sequence[float], lengths: Sequence[int], needles: int, seed: int = 0,
                  wrap: Callable[[str], str] = lambda body: body) -> list[NeedlePrompt]:
    """Every (context, depth, length) cell times ``needles`` tests, ids ``needle-{i:05d}`` in that order.

    ``count_tokens(text)``: the model's token count of a prompt; ``wrap(body)``: the prompt the model reads
    (e.g. its chat template around the user's text). The haystack grows by whole units while the wrapped
    prompt stays within ``context`` tokens; a context with no room for one haystack unit beside the needle and the
    question is an error (a needle alone would be a copy task, not a retrieval).
    """
    if style not in STYLES:
        raise ValueError(f"--haystack must be one of {', '.join(STYLES)}, got {style!r}")
    if style == "items" and set(lengths) != {ITEM_VALUES}:
        raise ValueError(f"--needle-lengths: an 'items' needle is a box of {ITEM_VALUES} numbers (the organism's only "
                         f"answer format), got {','.join(map(str, lengths))}")
    if needles < 1 or not contexts or not depths or not lengths:
        raise ValueError("--needles must be >= 1 and --contexts, --depths, --needle-lengths non-empty")
    bad = [d for d in depths if not 0.0 <= d <= 1.0]
    if bad or any(n < 1 for n in lengths):
        raise ValueError(f"--depths must lie in [0, 1] and --needle-lengths be >= 1 (got depths {list(depths)}, "
                         f"lengths {list(lengths)})")
    out: list[NeedlePrompt] = []
    for context in contexts:
        for depth in depths:
            for length in lengths:
                for _ in range(needles):
                    i = len(out)
                    rng = seeded_rng(seed, i, "needle")
                    needle, values, question, unit = _needle_and_units(style, rng, length)
                    compose = lambda hay: " ".join(  # noqa: E731
                        [*hay[:round(depth * len(hay))], needle, *hay[round(depth * len(hay)):], question])
                    if count_tokens(wrap(compose([]))) > context:
                        raise ValueError(f"--contexts {context}: the needle and the question alone take "
                                         f"{count_tokens(wrap(compose([])))} tokens; use a longer context")
                    hay: list[str] = []
                    while True:
                        more = hay + [unit()]
                        if count_tokens(wrap(compose(more))) > context:
                            break
                        hay = more
                    if not hay:  # a needle alone is a copy task, not a retrieval among distractors
                        raise ValueError(f"--contexts {context}: no haystack fits beside the needle and the question "
                                         f"({count_tokens(wrap(compose([])))} tokens); use a longer context")
                    out.append(NeedlePrompt(id=f"needle-{i:05d}", style=style, body=compose(hay), needle=needle,
                                            values=values, depth=float(depth), length=length, context=int(context),
                                            units=len(hay), question=question))
    return out


def answer_values(text: str) -> tuple[str, ...]:
    """The numbers an answer says, in order (``[ 8 , 12 , 40 , 44 ]`` -> ``('8', '12', '40', '44')``).

    >>> answer_values("The code is 41 7 93 12."), answer_values("[ 08 , 12 ]")
    (('41', '7', '93', '12'), ('8', '12'))
    """
    return tuple(str(int(v)) for v in re.findall(r"\d+", text))


def judge(prompt: NeedlePrompt, answer: str) -> bool:
    """Exact: the answer's numbers are the needle's values, in order, no more and no fewer.

    >>> p = NeedlePrompt("x", "sentences", "", "", ("41", "7"), 0.5, 2, 64, 3)
    >>> judge(p, "41 7"), judge(p, "41 7 3"), judge(p, "7 41"), judge(p, "The code is 41 7.")
    (True, False, False, True)
    """
    return answer_values(answer) == tuple(prompt.values)


def unknown_words(tokenize: Callable[[str], list[int]], unk_id: int | None, text: str) -> list[str]:
    """Words of ``text`` that the tokenizer maps to its unknown token (none for a byte-level tokenizer)."""
    if unk_id is None:
        return []
    return sorted({w for w in re.findall(r"\S+", text) if unk_id in tokenize(w)})
