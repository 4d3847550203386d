"""Grounding answers: find the box in a model's text, score it against the ground truth.

Three steps, kept separate because the middle one is family-specific:

1. :func:`parse_box` finds the first valid box in the text, in the text's *own* coordinate frame
   (e.g. Qwen2-VL's 0-1000 grid, Qwen2.5-VL's absolute pixels of the resized image).
2. The adapter converts it to original-image pixels with :func:`from_normalized` or :func:`from_resized`.
3. :func:`judge` compares it with the ground truth: IoU >= ``tau`` (0.5) is correct.

>>> fmt, raw = parse_box('```json\\n[{"bbox_2d": [100, 50, 300, 250], "label": "cat"}]\\n```')
>>> fmt, raw
('json', (100.0, 50.0, 300.0, 250.0))
>>> box = from_resized(raw, resized_size=(400, 300), image_size=(800, 600))
>>> box
(200.0, 100.0, 600.0, 500.0)
>>> judge(box, (200, 100, 600, 520))
('correct', 0.9523809523809523)

What counts as a box is decided here, once, for every family (docs/adapters.md lists each family's
format). A text that fails it is no box: the adapter returns None and the grounding task counts a
``parse_failure``. The rule throughout: a loosely written box is read only when a human would read it
one way; when it could mean two boxes, or numbers in a unit the family does not answer in, it is no box,
never a guess.

* **Reasoning is not the answer.** :func:`strip_reasoning` drops ``<think>...</think>`` blocks (Qwen3-VL
  Thinking, GLM-4.1V/4.5V/4.6V, InternVL3.5), an unclosed ``<think>`` to the end of the text (generation
  stopped mid-thought: no answer yet) and everything before a lone ``</think>`` (a chat template that
  opens the block itself leaves only the closing tag in the answer). A box written while thinking is never
  returned; the answer after the block parses as usual.
* **Trailing comma**: ``[10, 20, 30, 40,]`` is ``[10, 20, 30, 40]`` (the list ends at its bracket; a 5th
  number after the comma would make it no box).
* **Units**: ``px`` is the unit a box is written in anyway and reads as if absent (``[10px, 20px, 30px,
  40px]``). ``%`` is no family's frame, so a candidate with any ``%`` is no box: it is never read as if the
  numbers were the family's own unit (a later valid box in the text still counts).
* **Thousands separators**: a comma always separates numbers, so ``[1,024, 20, 1,100, 40]`` is six numbers,
  no box. A 4-list where a comma could instead be a thousands separator is ambiguous and no box: a comma
  with no blank around it between a 1-3 digit integer and a 3-digit group, in a box that elsewhere puts a
  blank in its separators (``[1,100, 200, 300]``) or before a zero-padded group (``[1,024,20,30]``). Tight
  commas throughout (``[150,250,600,750]``, as GLM writes) are list commas.
* **Two points**: a box only in Qwen2-VL's own form, ``(x1,y1),(x2,y2)`` with or without the box tokens.
  Written any other way (``[10, 20] to [30, 40]``, ``[10, 20], [30, 40]``) they are no box: nothing says
  which corners they are, and a y-first family would read them in the other order.
"""

from __future__ import annotations

import heapq
import math
import re
from collections.abc import Iterable, Sequence

Box = tuple[float, float, float, float]  # (x1, y1, x2, y2)

# --- parsing ---------------------------------------------------------------------------------------

# Every pattern below runs in time linear in the text (a model's answer is untrusted input). Two rules
# keep it so: each number is an atomic group (``(?>...)``: once matched it is never re-split, which is
# safe because nothing that may follow a number can extend it), and each run of blanks is consumed by
# exactly one possessive quantifier (``\s*+``) next to a token that cannot be a blank. The earlier
# form, ``\s*`` on both sides of a number plus a ``\s`` separator, could split one gap of k blanks in
# O(k) ways per separator and took seconds on "[1  ...  2  ...  3  ...  4  ...  x".

# A number as models write it, plus nan/inf so such boxes are *seen* and rejected rather than skipped
# over into a later partial match.
_NUM = r"(?>[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf(?:inity)?))"
# Each number is captured with its unit, px or %, so a % box is seen and rejected (module docstring). The
# unit's blanks are tried once and given back when no unit follows: the run is read at most twice.
_UNIT = r"(?>\s*+(px|%))?"
_N = rf"\s*+({_NUM}){_UNIT}\s*+"  # one captured number (and unit) with surrounding blanks
_QN = rf"\s*+\"?({_NUM}){_UNIT}\"?\s*+"  # same, optionally quoted ("bbox_2d": ["12", ...] happens)
# list items split by a comma (blanks around it allowed) or by blanks alone:
# [8, 12, 40, 44] / [ 8 12 40 44 ]
_SEP = r"(?:\s*+,\s*+|\s++)"
_LN = rf"({_NUM}){_UNIT}"  # a list item: blanks belong to the separators and brackets, never to the number
_END = r"(?:\s*+,)?\s*+"  # before the closing bracket: blanks and at most one trailing comma

# JSON: the "bbox_2d" key (Gemini's "box_2d" too) and its 4-list, matched directly so fenced, listed,
# truncated or otherwise ill-formed JSON (single quotes, unquoted key) parses the same as a clean object.
_JSON_RE = re.compile(rf"[\"']?b?box_2d[\"']?\s*+:\s*+\[{_QN},{_QN},{_QN},{_QN}(?:,\s*+)?\]", re.IGNORECASE)
# Qwen2-VL: <|box_start|>(x1,y1),(x2,y2)<|box_end|>; the tokens are optional because decoding with
# skip_special_tokens=True strips them and leaves the bare point pair.
_BOX_TOKENS_RE = re.compile(
    rf"(?:<\|box_start\|>\s*+)?\({_N},{_N}\)\s*+,\s*+\({_N},{_N}\)(?:\s*+<\|box_end\|>)?", re.IGNORECASE)
# A bare 4-list in brackets or parentheses. The closing bracket must follow the 4th number, so
# "[1, 2, 3, 4, 5]" is not a box; a 4-list nested in a longer list still matches on its own brackets.
_LIST_RE = re.compile(rf"[\[(]\s*+{_LN}{_SEP}{_LN}{_SEP}{_LN}{_SEP}{_LN}{_END}[\])]", re.IGNORECASE)

# At equal start positions the more specific format wins.
_PATTERNS = (("json", _JSON_RE), ("box_tokens", _BOX_TOKENS_RE), ("list", _LIST_RE))
# Which of the three gaps between the four numbers separate numbers inside one bracket (Qwen2-VL's middle
# gap is between its two points, "),(", and says nothing about how the numbers are written).
_INNER_GAPS = {"json": (0, 1, 2), "box_tokens": (0, 2), "list": (0, 1, 2)}
_THOUSANDS_HEAD = re.compile(r"[-+]?\d{1,3}")  # what may stand before a thousands separator
_THOUSANDS_GROUP = re.compile(r"\d{3}")  # and what after it

# Reasoning markers; an opening tag inside a block is part of the reasoning (blocks do not nest).
_THINK_RE = re.compile(r"<(/?)think>", re.IGNORECASE)


def strip_reasoning(text: str) -> str:
    """``text`` without its reasoning: ``<think>...</think>`` blocks, an unclosed ``<think>`` to the end,
    and everything before a lone ``</think>`` (the chat template opened the block). What is left is joined.

    >>> strip_reasoning("<think>is it [1,2,3,4]? no</think>There is none.")
    'There is none.'
    >>> strip_reasoning("The cat: [8, 12, 40, 44] <think>or is it [1,2,3,4]")
    'The cat: [8, 12, 40, 44] '
    >>> strip_reasoning("is it [1,2,3,4]? no</think>\\n[8, 12, 40, 44]")
    '\\n[8, 12, 40, 44]'
    """
    kept: list[str] = []
    start, inside = 0, False  # start: where the current stretch of answer text began
    for m in _THINK_RE.finditer(text):
        closing = bool(m.group(1))
        if closing and not inside:  # a lone closing tag: all before it was reasoning
            kept, start = [], m.end()
        elif closing:
            inside, start = False, m.end()
        elif not inside:
            kept.append(text[start:m.start()])
            inside = True
    if not inside:
        kept.append(text[start:])
    return "".join(kept)


MAX_COORDINATE = 1e12  # no image is this many pixels wide; beyond it, scaling to pixels could overflow to inf


def valid_box(box: Sequence[float]) -> bool:
    """Four finite numbers of magnitude at most :data:`MAX_COORDINATE` with ``x2 > x1`` and ``y2 > y1``.

    Swapped corners (``x2 < x1``) are *rejected*, not reordered: a model that writes them has not
    produced the box format it was asked for, and silently fixing it would inflate accuracy.

    >>> valid_box((0, 0, 10, 5)), valid_box((10, 0, 0, 5)), valid_box((0, 0, 0, 5))
    (True, False, False)
    """
    if len(box) != 4 or not all(math.isfinite(v) and abs(v) <= MAX_COORDINATE for v in box):
        return False
    x1, y1, x2, y2 = box
    return x2 > x1 and y2 > y1


def parse_box(text: str) -> tuple[str, Box] | None:
    """The first valid box in ``text`` outside its reasoning, as ``(format, (x1, y1, x2, y2))``, or ``None``.

    Coordinates are returned as written (floats), in the text's own frame. ``format`` is ``"json"``
    (a ``"bbox_2d"`` or ``"box_2d"`` key), ``"box_tokens"`` (Qwen2-VL ``(x1,y1),(x2,y2)``, with or without
    ``<|box_start|>``/``<|box_end|>``) or ``"list"`` (``[x1, y1, x2, y2]`` / ``(x1,y1,x2,y2)``).
    Reasoning is dropped first (:func:`strip_reasoning`); then candidates are tried in order of position,
    and invalid ones are skipped: see :func:`valid_box` and the policy in the module docstring (``%``
    units, commas that could be thousands separators).

    >>> parse_box("The dog is at [ 8 , 12 , 40 , 44 ].")
    ('list', (8.0, 12.0, 40.0, 44.0))
    >>> parse_box("<|box_start|>(10,20),(30,40)<|box_end|>")
    ('box_tokens', (10.0, 20.0, 30.0, 40.0))
    >>> parse_box("[40, 12, 8, 44] or rather [8, 12, 40, 44]")
    ('list', (8.0, 12.0, 40.0, 44.0))
    >>> parse_box("<think>maybe [1, 2, 3, 4]? no</think> [8px, 12px, 40px, 44px,]")
    ('list', (8.0, 12.0, 40.0, 44.0))
    >>> parse_box("[1,024, 20, 30]"), parse_box("[10%, 20%, 30%, 40%]"), parse_box("[10, 20] to [30, 40]")
    (None, None, None)
    >>> parse_box("no box here") is None
    True
    """
    if not isinstance(text, str) or not text:
        return None
    text = strip_reasoning(text)
    # every pattern's matches in one stream ordered by (position, rank), read lazily: a valid box early in a
    # long answer ends the search, and a hostile one never holds all its candidates in memory at once
    streams = [_candidates(text, rank, fmt, pattern) for rank, (fmt, pattern) in enumerate(_PATTERNS)]
    for _, _, fmt, m in heapq.merge(*streams, key=lambda c: (c[0], c[1])):
        box = _read(m, fmt)
        if box is not None and valid_box(box):
            return fmt, box
    return None


def _candidates(text: str, rank: int, fmt: str, pattern: re.Pattern):
    """``(start, rank, format, match)`` of each match of one pattern, in text order."""
    for m in pattern.finditer(text):
        yield m.start(), rank, fmt, m


def _read(m: re.Match, fmt: str) -> Box | None:
    """The four numbers of a candidate match, or None when the policy makes it no box (``%``, a comma that
    could be a thousands separator). Groups come in pairs: (number, unit) x 4."""
    numbers = [m.group(2 * k + 1) for k in range(4)]
    if any(m.group(2 * k + 2) == "%" for k in range(4)):
        return None
    gaps = [m.string[m.end(2 * k + 1):m.start(2 * k + 3)] for k in range(3)]  # text between numbers k, k+1
    inner = [gaps[k] for k in _INNER_GAPS[fmt]]
    thousands_like = [k for k in _INNER_GAPS[fmt] if gaps[k] == "," and _THOUSANDS_HEAD.fullmatch(numbers[k])
                      and _THOUSANDS_GROUP.fullmatch(numbers[k + 1])]
    if thousands_like and (any(any(c.isspace() for c in g) for g in inner)
                           or any(numbers[k + 1].startswith("0") for k in thousands_like)):
        return None
    return tuple(float(v) for v in numbers)  # type: ignore[return-value]


# --- geometry --------------------------------------------------------------------------------------


def area(box: Sequence[float]) -> float:
    """Area of an xyxy box; 0 for degenerate, inverted or non-finite boxes."""
    x1, y1, x2, y2 = (float(v) for v in box)
    w, h = x2 - x1, y2 - y1
    if not (math.isfinite(w) and math.isfinite(h)) or w <= 0 or h <= 0:
        return 0.0
    return w * h


def iou(a: Sequence[float], b: Sequence[float]) -> float:
    """Intersection over union of two xyxy boxes, in ``[0, 1]``, never NaN.

    Boxes that only touch, are disjoint, or have zero area (or non-finite coordinates) give 0.

    >>> iou((0, 0, 10, 10), (5, 0, 15, 10))
    0.3333333333333333
    >>> iou((0, 0, 10, 10), (10, 0, 20, 10)), iou((0, 0, 10, 10), (0, 0, 10, 10))
    (0.0, 1.0)
    """
    area_a, area_b = area(a), area(b)
    if area_a == 0.0 or area_b == 0.0:
        return 0.0
    ax1, ay1, ax2, ay2 = (float(v) for v in a)
    bx1, by1, bx2, by2 = (float(v) for v in b)
    iw = min(ax2, bx2) - max(ax1, bx1)
    ih = min(ay2, by2) - max(ay1, by1)
    if iw <= 0 or ih <= 0:
        return 0.0
    inter = iw * ih
    # clamp guards the last ulp of rounding
    return min(1.0, max(0.0, inter / (area_a + area_b - inter)))


def clip_box(box: Sequence[float], image_size: tuple[int, int]) -> Box:
    """Clip an xyxy box to ``[0, W] x [0, H]`` (the result may be degenerate; IoU then gives 0). Used only
    when the grounding task's ``clip`` option asks for it: clipping a prediction that overflows the image
    shrinks its area and so raises its IoU, which lmms-eval's RefCOCO scoring does not do."""
    W, H = image_size
    x1, y1, x2, y2 = (float(v) for v in box)
    return (min(max(x1, 0.0), W), min(max(y1, 0.0), H), min(max(x2, 0.0), W), min(max(y2, 0.0), H))


def xywh_to_xyxy(box: Sequence[float]) -> Box:
    """``(x, y, w, h)`` -> ``(x1, y1, x2, y2)``.

    >>> xywh_to_xyxy((10, 20, 5, 5))
    (10.0, 20.0, 15.0, 25.0)
    """
    x, y, w, h = (float(v) for v in box)
    return (x, y, x + w, y + h)


def _scale(box: Sequence[float], sx: float, sy: float) -> Box:
    x1, y1, x2, y2 = (float(v) for v in box)
    return (x1 * sx, y1 * sy, x2 * sx, y2 * sy)


def from_normalized(box: Sequence[float], scale: float, image_size: tuple[int, int]) -> Box:
    """A box on a ``[0, scale]`` grid (Qwen2-VL: 1000) -> original pixels. Not clipped: a box that sticks
    out of the image is scored as written (lmms-eval's RefCOCO protocol); clipping is the grounding task's
    ``clip`` option.

    >>> from_normalized((250, 500, 750, 1000), 1000, (640, 480))
    (160.0, 240.0, 480.0, 480.0)
    >>> from_normalized((-10, 0, 1100, 500), 1000, (200, 100))
    (-2.0, 0.0, 220.0, 50.0)
    """
    W, H = image_size
    return _scale(box, W / scale, H / scale)


def to_normalized(box: Sequence[float], scale: float, image_size: tuple[int, int]) -> Box:
    """Original pixels -> ``[0, scale]`` grid (inverse of :func:`from_normalized`, no clipping)."""
    W, H = image_size
    return _scale(box, scale / W, scale / H)


def from_resized(box: Sequence[float], resized_size: tuple[int, int], image_size: tuple[int, int]) -> Box:
    """Pixels of the resized image the model saw (``(W', H')``) -> original pixels (not clipped, see
    :func:`from_normalized`).

    >>> from_resized((28, 28, 56, 56), resized_size=(112, 56), image_size=(200, 100))
    (50.0, 50.0, 100.0, 100.0)
    """
    (rW, rH), (W, H) = resized_size, image_size
    return _scale(box, W / rW, H / rH)


def to_resized(box: Sequence[float], resized_size: tuple[int, int], image_size: tuple[int, int]) -> Box:
    """Original pixels -> pixels of the resized image (inverse of :func:`from_resized`, no clipping)."""
    (rW, rH), (W, H) = resized_size, image_size
    return _scale(box, rW / W, rH / H)


# --- judging ---------------------------------------------------------------------------------------


class Outcome:
    """How one grounding answer went. Plain strings so they serialize to JSON as they are."""

    CORRECT = "correct"  # parsed, IoU >= tau
    MISLOCATED = "mislocated"  # parsed, IoU < tau
    PARSE_FAILURE = "parse_failure"  # no valid box in the text
    ALL = (CORRECT, MISLOCATED, PARSE_FAILURE)


# module-level aliases: ``grounding.CORRECT`` reads as well as ``grounding.Outcome.CORRECT``
CORRECT, MISLOCATED, PARSE_FAILURE = Outcome.CORRECT, Outcome.MISLOCATED, Outcome.PARSE_FAILURE


def judge(pred_box: Sequence[float] | None, gt_box: Sequence[float], tau: float = 0.5) -> tuple[str, float]:
    """``(outcome, iou)`` for a predicted box (original pixels, or ``None`` if none was parsed).

    >>> judge(None, (0, 0, 1, 1))
    ('parse_failure', 0.0)
    >>> judge((0, 0, 10, 10), (0, 0, 10, 20))
    ('correct', 0.5)
    """
    if pred_box is None:
        return Outcome.PARSE_FAILURE, 0.0
    v = iou(pred_box, gt_box)
    return (Outcome.CORRECT if v >= tau else Outcome.MISLOCATED), v


def summarize(outcomes: Iterable[str]) -> dict:
    """Accuracy, the fraction of each outcome, and counts.

    An empty list gives ``n = 0`` and zero fractions (not NaN, so the result stays valid JSON).

    >>> summarize(["correct", "mislocated", "correct", "parse_failure"])["accuracy"]
    0.5
    """
    outcomes = list(outcomes)
    counts = {o: 0 for o in Outcome.ALL}
    for o in outcomes:
        if o not in counts:
            raise ValueError(f"unknown outcome {o!r}; expected one of {Outcome.ALL}")
        counts[o] += 1
    n = len(outcomes)
    frac = {o: (c / n if n else 0.0) for o, c in counts.items()}
    return {"n": n, "accuracy": frac[Outcome.CORRECT], **frac, "counts": counts}
