"""What a run's model card says about where its retrieval heads came from: planted, or not known to be.

The shipped organisms (:mod:`vrh.organism`, docs/organism.md) carry a card, ``vrh_organism.json``, next to
their ``config.json``: the training config and command they were built with. Organism A's retrieval heads
were *planted*: its training had terms that single out heads (a warm start on the model's own best head,
head dropout and a routing penalty that spare the heads the detector's statistic picks), and organism B
inherits A's language model. A report on them that does not say so reads as evidence that retrieval heads
emerge; it is a positive control of the pipeline. So the report reads the card of the model each run
recorded (``config.json``'s ``model.path``, like the dataset images a run names) and says so at the top.

A model without a card (any real checkpoint, or a card this machine cannot read) gets no line: the report
states only what the card records. The terms are the ones docs/organism.md ("Organism C") lists as
referring to particular heads, read from the card's ``train_config``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vrh import runs
from vrh.report.document import Text
from vrh.report.load import Run, is_num

CARD = runs.MODEL_CARD  # written by the lab's export beside the checkpoint's config.json

# train_config terms that single out heads, and what each does, in words for the page
HEAD_TERMS = {
    "box_warmstart": "a warm start on the model's own best head",
    "dropout_protect_top": "head dropout that spares the top heads",
    "route_spare_protected": "a routing penalty that spares them",
}


@dataclass(frozen=True)
class Planted:
    model: str  # the card's name (organism_a)
    terms: tuple[str, ...]  # "box_warmstart 0.3", ...: the head-specific training terms
    card: str  # whose card records those terms: the model's own, or that of the model whose LM it inherits
    via: str | None = None  # the model whose language model this one inherits (organism_a for organism_b)


def read_card(model_path: Any) -> dict[str, Any] | None:
    """The organism card beside the checkpoint at ``model_path``, or None (no card, not a folder, unreadable)."""
    if not isinstance(model_path, str) or not model_path:
        return None
    return runs.read_model_card(model_path)


def head_terms(card: dict[str, Any]) -> tuple[str, ...]:
    """The card's training terms that single out heads, as ``"name value"`` (empty: none)."""
    cfg = card.get("train_config") if isinstance(card.get("train_config"), dict) else {}
    on = []
    for key in HEAD_TERMS:
        value = cfg.get(key)
        if (value is True) or (is_num(value) and value > 0):
            on.append(f"{key} {str(value).lower() if isinstance(value, bool) else value}")
    return tuple(on)


def planted(model_path: Any) -> Planted | None:
    """Whether the model at ``model_path`` has planted retrieval heads, by its card: its own training singled
    out heads, or it inherits (``lm_init``) the language model of a card beside it that did (or both)."""
    card = read_card(model_path)
    if card is None:
        return None
    name = str(card.get("name") or Path(model_path).name)
    via = None
    if card.get("lm_init"):
        for other in card.get("shares_language_model_with") or []:
            sibling = read_card(str(Path(model_path).parent / str(other)))
            if sibling is not None and head_terms(sibling):
                via = (str(sibling.get("name") or other), head_terms(sibling))
                break
    if head_terms(card):
        return Planted(name, head_terms(card), name, via[0] if via else None)
    return Planted(name, via[1], via[0], via[0]) if via else None


def planted_notices(runs: list[Run]) -> list[Text]:
    """One line per model with planted heads among ``runs``' models, naming the runs on it."""
    found: dict[str, tuple[Planted, list[str]]] = {}
    for run in runs:
        model = run.config.get("model")
        path = model.get("path") if isinstance(model, dict) else model
        p = planted(path) if isinstance(path, str) else None
        if p is not None:
            found.setdefault(p.model, (p, []))[1].append(run.name)
    out = []
    for p, names in found.values():
        whose = (f"{p.model}'s" if p.card == p.model else f"its language model's ({p.via}'s)") + " retrieval heads"
        inherits = f"{p.model} inherits the language model of {p.via}; " if p.via else ""
        words = "; ".join(f"{HEAD_TERMS[t.split(' ')[0]]} ({t})" for t in p.terms)
        where = names[0] if len(names) == 1 else f"{names[0]} and {len(names) - 1} other run(s)"
        out.append(Text(f"Positive control: {inherits}{whose} were planted, by training that singled out "
                        f"heads: {words}, as {p.card}'s card {CARD} records (docs/organism.md). Read "
                        f"the findings of {where} on {p.model} as a check that vrh finds heads a model is known "
                        "to have, not as evidence that retrieval heads emerge.", warn=True))
    return out
