"""The query positions of a sample, and every query kind a scorer may read: their one home.

:class:`QuerySets` holds one sample's query positions (computed from its teacher-forced batch by
:func:`query_sets`); its fields are the main capture pass's query kinds. The null-query pass (QRHead's
calibration: the referring expression replaced by a content-free query) captures the same sets on its own
rows, named with :data:`NULL_PREFIX`: :data:`NULL_QUERY_KINDS` of them. :data:`QUERY_KINDS`, every kind
``SampleInfo.queries`` may hold, is derived from both, never listed by hand.
"""

from __future__ import annotations

import keyword
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import torch

from vrh.models.adapters import VisionBatch

NULL_QUERY_PASS = "null_query"  # the extra capture pass's name (a scorer's ``extra_passes`` entry)
NULL_PREFIX = "null_"  # the null-query pass's kinds are the main pass's, named with this prefix
NULL_QUERY_KINDS = ("out", "in")  # which of the main pass's kinds the null-query pass provides


@dataclass
class QuerySets:
    """Query positions of one sample, as indices into the captured row list ``positions``.

    ``out``: positions whose next-token prediction is an answer token (the query row that *produces*
    answer token i is the position of token i-1; the first is the last prompt token). ``in_``: the
    referring-expression tokens. ``coord``: the subset of ``out`` predicting tokens that contain a digit.
    ``last_prompt``: the last prompt token (a one-element index list). ``out_own``: the answer tokens' own
    positions, in answer order (OCR heads' reference reads the row at each answer token itself).

    Why the field names: they are the query kinds the scorers read (``SampleInfo.queries``, listed in
    :data:`QUERY_KINDS`, which is derived from them), ``in_`` for the kind ``in`` (a Python keyword), so
    :meth:`as_query_dict` derives the kinds from the fields and a new kind is one field here (computed in
    :func:`query_sets`).
    """

    positions: torch.Tensor  # LongTensor [Q] sequence positions captured, ascending
    out: torch.Tensor
    in_: torch.Tensor
    coord: torch.Tensor
    last_prompt: torch.Tensor
    out_own: torch.Tensor

    @classmethod
    def kinds(cls) -> dict[str, str]:
        """Query kind -> the field that holds it, in field order (a trailing ``_`` marks a keyword kind).

        >>> QuerySets.kinds()
        {'out': 'out', 'in': 'in_', 'coord': 'coord', 'last_prompt': 'last_prompt', 'out_own': 'out_own'}
        """
        names = [f.name for f in fields(cls) if f.name != "positions"]
        return {(n[:-1] if keyword.iskeyword(n[:-1]) else n): n for n in names}

    def as_query_dict(self, prefix: str = "", kinds: Sequence[str] | None = None) -> dict[str, torch.Tensor]:
        """Query kind -> indices into ``positions`` (``SampleInfo.queries``), each kind named ``prefix + kind``
        (an extra capture pass names its own, e.g. ``null_in``); ``kinds`` picks some (default: all).

        >>> t = lambda *xs: torch.tensor(xs)
        >>> qs = QuerySets(t(3, 4, 5), out=t(1, 2), in_=t(0), coord=t(2), last_prompt=t(1), out_own=t(2))
        >>> {k: v.tolist() for k, v in qs.as_query_dict("null_", kinds=("in", "out")).items()}
        {'null_in': [0], 'null_out': [1, 2]}
        """
        held = self.kinds()
        unknown = sorted(set(kinds or ()) - set(held))
        if unknown:
            raise ValueError(f"query kinds {unknown} are not query sets; they are {list(held)}")
        return {prefix + k: getattr(self, held[k]) for k in (held if kinds is None else kinds)}


def query_sets(batch: VisionBatch, b: int, processor: Any) -> QuerySets:
    if batch.answer_positions is None:
        raise ValueError("query sets need a teacher-forced batch (build_batch with answers)")
    ans = batch.answer_positions[b]  # (A,)
    if len(ans) == 0:
        raise ValueError("empty answer: nothing to score")
    producers = ans - 1  # (A,) row producing answer token i sits at position i-1
    expr = batch.expression_positions[b]
    positions = torch.unique(torch.cat([producers, ans, expr]))  # sorted
    index = {int(p): i for i, p in enumerate(positions.tolist())}
    ids = batch.inputs["input_ids"][b]
    tok = getattr(processor, "tokenizer", processor)
    is_coord = [any(ch.isdigit() for ch in tok.decode([int(ids[p])])) for p in ans.tolist()]
    idx = lambda ps: torch.tensor([index[int(p)] for p in ps], dtype=torch.long)
    return QuerySets(
        positions=positions,
        out=idx(producers.tolist()),
        in_=idx(expr.tolist()),
        coord=idx([p for p, c in zip(producers.tolist(), is_coord) if c]),
        last_prompt=idx([int(producers[0])]),
        out_own=idx(ans.tolist()),
    )


# Every query kind of SampleInfo.queries, as scorers name them: the main pass's, then the null-query pass's.
QUERY_KINDS = (*QuerySets.kinds(), *(NULL_PREFIX + k for k in NULL_QUERY_KINDS))
