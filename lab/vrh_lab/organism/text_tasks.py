"""Text-only retrieval jobs: the grounding task with the scene written out as a list of items instead of
drawn as an image (organism C's language-model pretraining and task mixture, docs/organism.md).

``USER: large red circle [ 8 , 12 , 40 , 44 ] small blue square [ ... ] ... where is the red circle ?
ASSISTANT: [ 8 , 12 , 40 , 44 ]``. The answer is a copy of the named item's box, so the job is
"copy the attribute of a named item from a list" (associative recall): heads that find an item by its
content and copy what sits there are what solves it. Scenes and expressions are the world's own
(:func:`vrh.organism.world.grounding_sample`), so attribute, relation and comparison expressions appear
with the same frequencies as in the image task; relations and comparisons must be read from the listed
coordinates and size words. Nothing here refers to particular heads.
"""

from __future__ import annotations

from typing import Any

from vrh.organism import world
from vrh_lab.organism.processor import ImageSpec, format_box

TEXT_PROMPT = "USER: {items} where is {expression} ? ASSISTANT:"
ITEM_TOKENS = 12  # size colour shape [ x1 , y1 , x2 , y2 ]


def describe(o: world.Obj, spec: ImageSpec = ImageSpec()) -> str:
    """One list item: ``large red circle [ 8 , 12 , 40 , 44 ]`` (box snapped as answers are)."""
    return f"{o.size} {o.colour} {o.shape} {format_box(o.box, spec)}"


def text_sample(seed: int, index: int, size: int = world.IMAGE_SIZE, level: str = "full") -> dict[str, Any]:
    """The grounding sample ``(seed, index, level)`` with its scene written as text (``task`` "text").

    ``target_words``: (first, end) word offsets of the referent's item inside ``items`` (one token per
    word under the organism's word-level tokenizer), so the batch can mark the referent's key positions
    as the image task marks its patches."""
    s = world.grounding_sample(seed, index, size, level=level)
    spec = ImageSpec(image_size=size)
    items = [describe(o, spec) for o in s["scene"].objects]
    first = ITEM_TOKENS * s["target"]
    return {**s, "task": "text", "items": " ".join(items), "target_words": (first, first + ITEM_TOKENS)}


def text_prompt(sample: dict[str, Any]) -> str:
    return TEXT_PROMPT.format(items=sample["items"], expression=sample["expression"])


def items_offset(tok) -> int:
    """Token position of the first item word in a tokenized text prompt (after ``<s> USER :``)."""
    return len(tok("USER:", add_special_tokens=True)["input_ids"])
