"""What a scorer is, on top of Eq. 1's pure functions (:mod:`vrh.scoring.functions`): the per-sample facts it
reads (:class:`SampleInfo`: key positions, named query sets, correctness), how a query set is chosen
(:func:`select_queries`), the named design-space variants ``"QUERY/PHI/OMEGA"`` (:class:`Variant`), and the
scorer protocol with its accumulating base class, which keeps per-sample ``[L, H]`` maps and aggregates
them on demand (so detection can combine batches and resume).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch

from vrh.scoring.functions import (QUERY_SETS, PHIS, OMEGAS, OMEGA_ALIASES, DEFAULT_VARIANT, DEFAULT_M,
                                   ZERO_RULES, DEFAULT_ZERO_RULE,
                                   Index, as_index, check_rows, per_sample_score,
                                   aggregate)


# ----------------------------------------------------------------------------------------------------------
# per-sample metadata
# ----------------------------------------------------------------------------------------------------------
@dataclass
class SampleInfo:
    """What a scorer needs to know about one sample besides its rows.

    ``key_positions`` (K) and ``visual_positions`` (V) index the key axis ``S``; ``queries`` maps a query
    kind in :data:`vrh.models.queries.QUERY_KINDS` (``out`` the rows that *produce* the answer tokens, one
    per answer token in answer order; ``out_own`` the rows AT the answer tokens' own positions, one per answer token in answer
    order -- the row OCR Heads' reference reads; ``in`` expression tokens, ``coord`` coordinate tokens of the
    answer, ``last_prompt`` the last prompt token, ``null_in`` / ``null_out`` the null-query tokens of the
    ``null_query`` extra pass, which index THAT pass's rows) to indices into the query axis ``Q``.
    ``grid`` is the visual token grid ``(rows, cols)``, V in row-major order (Localization Heads only).
    ``index`` seeds the ``rand1`` query set; when None the scorer uses its running sample count.
    ``null_key_positions``: K inside the null pass (defaults to ``key_positions``; the image precedes the
    expression in chat templates, so positions usually coincide).

    Optional fields only some reference variants read (a scorer that needs one and finds None raises,
    naming the option that avoids it):

    * ``prompt_positions``: positions in ``S`` of every prompt token (system, text and image; not the
      answer, not left padding), ascending -- OCR Heads' argmax over prompt keys (``keys=prompt``).
    * ``answer_lcs``: longest common contiguous run of token ids between the ground-truth answer and the
      output sequence (prompt + answer, or the answer alone for InternVL, as OCR Heads' reference has it per
      family), divided by the ground-truth answer's token count, in [0, 1] -- OCR Heads' correctness weight
      (``weight=lcs``; :func:`vrh.scoring.ocr_heads.hit_weight` computes it).
    * ``answer_in_gold``: which answer tokens (0-based, answer order; positions or a bool mask over the
      answer tokens) have a token id that occurs in the tokenized ground-truth answer -- the answer tokens
      OCR Heads' reference scores (``answer=gold``).
    """

    key_positions: Index
    visual_positions: Index
    queries: dict[str, Index] = field(default_factory=dict)
    correct: bool | None = None
    iou: float | None = None
    grid: tuple[int, int] | None = None
    index: int | None = None
    null_key_positions: Index | None = None
    prompt_positions: Index | None = None
    answer_lcs: float | None = None
    answer_in_gold: Index | None = None

    def query(self, kind: str) -> torch.Tensor:
        """Indices of query kind ``kind`` as an int64 tensor (may be empty); KeyError if never provided."""
        if kind not in self.queries or self.queries[kind] is None:
            raise KeyError(f"SampleInfo has no {kind!r} queries (has {sorted(self.queries)}); "
                           f"the scorer needs them")
        q = self.queries[kind]
        t = q if isinstance(q, torch.Tensor) else torch.as_tensor(list(q), dtype=torch.long)
        return t.reshape(-1)


def select_queries(info: SampleInfo, query_set: str, *, seed: int = 0, sample_index: int = 0) -> torch.Tensor:
    """Query indices (into ``Q``) of ``query_set`` in :data:`QUERY_SETS` for one sample.

    ``rand1`` draws one output token with ``random.Random(f"rand1:{seed}:{sample_index}")`` -- reproducible
    across runs and processes, independent of global RNG state, different per sample.

    >>> info = SampleInfo([0], [0], queries={"out": [4, 5, 6], "in": [1, 2], "coord": [5]})
    >>> select_queries(info, "in+out").tolist(), select_queries(info, "coord").tolist()
    ([1, 2, 4, 5, 6], [5])
    """
    if query_set in ("out", "in", "coord"):
        return info.query(query_set).long()
    if query_set == "in+out":
        return torch.unique(torch.cat([info.query("in").long(), info.query("out").long()]))
    if query_set == "rand1":
        out = info.query("out").long()
        if out.numel() == 0:
            return out
        pick = random.Random(f"rand1:{seed}:{sample_index}").randrange(out.numel())
        return out[pick : pick + 1]
    raise ValueError(f"unknown query set {query_set!r}; choose from {QUERY_SETS}")


# ----------------------------------------------------------------------------------------------------------
# variants
# ----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Variant:
    """One point ``(Q, Phi, Omega)`` of the design space; name grammar ``QUERY/PHI/OMEGA``.

    QUERY in ``out | in | in+out | rand1 | coord``, PHI in ``sum | argmax``, OMEGA in ``mean | freq``
    (``avg`` accepted for ``mean``). Case and surrounding spaces are ignored.

    >>> Variant.parse(" OUT/argmax/avg ").name
    'out/argmax/mean'
    """

    query: str = "out"
    phi: str = "sum"
    omega: str = "mean"

    def __post_init__(self):
        for what, val, allowed in (("query set", self.query, QUERY_SETS), ("key aggregation", self.phi, PHIS),
                                   ("sample aggregation", self.omega, OMEGAS)):
            if val not in allowed:
                raise ValueError(f"unknown {what} {val!r}; choose from {', '.join(allowed)}")

    @property
    def name(self) -> str:
        return f"{self.query}/{self.phi}/{self.omega}"

    @classmethod
    def parse(cls, name: str) -> Variant:
        parts = [p.strip().lower() for p in str(name).strip().split("/")]
        if len(parts) != 3 or not all(parts):
            raise ValueError(f"bad scoring variant {name!r}: expected QUERY/PHI/OMEGA, e.g. {DEFAULT_VARIANT!r}; "
                             f"QUERY in {QUERY_SETS}, PHI in {PHIS}, OMEGA in {OMEGAS}")
        q, phi, omega = parts
        return cls(q, phi, OMEGA_ALIASES.get(omega, omega))


VARIANT_NAMES = tuple(f"{q}/{p}/{o}" for q in QUERY_SETS for p in PHIS for o in OMEGAS)


def parse_variant(name: str) -> Variant:
    """:meth:`Variant.parse`."""
    return Variant.parse(name)


# ----------------------------------------------------------------------------------------------------------
# scorers: accumulate per-sample [L, H] maps, aggregate on demand
# ----------------------------------------------------------------------------------------------------------
@runtime_checkable
class Scorer(Protocol):
    name: str
    extra_passes: tuple[str, ...]

    def update(self, sample_rows: torch.Tensor, sample_info: SampleInfo,
               extra: Mapping[str, torch.Tensor] | None = None) -> None: ...
    def result(self) -> torch.Tensor: ...
    def per_sample(self) -> torch.Tensor: ...


class AccumulatingScorer:
    """Base: keeps every per-sample ``[L, H]`` map (for stability / bootstrap analyses) plus an inclusion
    flag (samples a method ignores, e.g. wrong answers for Retrieval Heads, are kept but not aggregated)."""

    name = "scorer"
    omega = "mean"
    # Names of the extra capture passes update() needs besides the main one (e.g. ``(NULL_QUERY_PASS,)``):
    # detection runs the union over its scorers, one more forward per batch each, and hands the rows of
    # every pass it ran to every scorer as ``extra[name]`` (``[L, H, Q', S']``, that pass's own positions).
    extra_passes: tuple[str, ...] = ()

    def __init__(self, *, m: int = DEFAULT_M, seed: int = 0, zeros: str = DEFAULT_ZERO_RULE):
        if zeros not in ZERO_RULES:
            raise ValueError(f"zeros must be one of {', '.join(ZERO_RULES)}, got {zeros!r}")
        self.m = m
        self.seed = seed
        self.zeros = zeros
        self._scores: list[torch.Tensor] = []
        self._include: list[bool] = []
        self.n_empty_keys = 0
        self.n_empty_queries = 0

    def __len__(self) -> int:
        return len(self._scores)

    def _sample_index(self, info: SampleInfo) -> int:
        return len(self._scores) if info.index is None else int(info.index)

    def _add(self, score: torch.Tensor, include: bool = True) -> None:
        if score.dim() != 2:
            raise ValueError(f"per-sample score must be [L, H], got {tuple(score.shape)}")
        if self._scores and score.shape != self._scores[0].shape:
            raise ValueError(f"sample has {tuple(score.shape)} heads, earlier samples {tuple(self._scores[0].shape)}")
        self._scores.append(torch.nan_to_num(score.detach().float().cpu(), nan=0.0))
        self._include.append(bool(include))

    def _count_empty(self, rows: torch.Tensor, keys: Index, queries: torch.Tensor) -> None:
        self.n_empty_keys += int(as_index(keys, rows.shape[-1]).numel() == 0)
        self.n_empty_queries += int(queries.numel() == 0)

    def per_sample(self) -> torch.Tensor:
        """``[N, L, H]`` per-sample scores of every sample seen, in update order."""
        if not self._scores:
            raise ValueError(f"{self.name}: no samples scored yet")
        return torch.stack(self._scores)  # N x (L, H) -> (N, L, H)

    def included(self) -> torch.Tensor:
        """``[N]`` bool: which samples enter :meth:`result`."""
        return torch.tensor(self._include, dtype=torch.bool)

    def result(self) -> torch.Tensor:
        """The ``[L, H]`` head scores over the included samples (zeros if none is included)."""
        return aggregate(self.per_sample(), self.omega, self.m, include=self.included(), zeros=self.zeros)

    def update(self, sample_rows: torch.Tensor, sample_info: SampleInfo,
               extra: Mapping[str, torch.Tensor] | None = None) -> None:  # pragma: no cover
        raise NotImplementedError

    def state(self) -> dict[str, Any]:
        """Everything :meth:`update` accumulated: the per-sample lists (maps, inclusion flags, and a
        subclass's own private lists such as OCR Heads' entry counts) and the ``n_*`` counters.

        Why: detection keeps one state per finished batch on disk and combines the batches of a resumed
        run or of several processes with :meth:`extend`, in sample order, into what one scorer that saw
        every sample holds (tensors, lists, ints: ``torch.save`` / ``torch.load(weights_only=True)`` safe).
        """
        lists = {k: list(v) for k, v in vars(self).items() if k.startswith("_") and isinstance(v, list)}
        counters = {k: v for k, v in vars(self).items()
                    if k.startswith("n_") and isinstance(v, int) and not isinstance(v, bool)}
        return {"lists": lists, "counters": counters}

    def extend(self, state: Mapping[str, Any]) -> None:
        """Append a :meth:`state` of a scorer of the same spec (its samples follow those held here)."""
        for key, tail in state["lists"].items():
            mine = getattr(self, key, None)
            if not isinstance(mine, list):
                raise ValueError(f"{self.name}: the state holds a list {key!r} this scorer does not have")
            mine.extend(tail)
        for key, value in state["counters"].items():
            setattr(self, key, getattr(self, key, 0) + int(value))


class VariantScorer(AccumulatingScorer):
    """Scorer for one named design-space variant, e.g. ``VariantScorer("out/sum/mean")``.

    >>> A = torch.tensor([[[[0.1, 0.6, 0.3, 0.0], [0.5, 0.1, 0.1, 0.3]]]])  # (1, 1, 2, 4)
    >>> sc = VariantScorer("out/sum/mean")
    >>> sc.update(A, SampleInfo([1, 2], [1, 2, 3], queries={"out": [0, 1]}))
    >>> sc.update(A, SampleInfo([3], [1, 2, 3], queries={"out": [1]}))
    >>> sc.per_sample().flatten().tolist(), sc.result()  # (0.9+0.2)/2 = 0.55; 0.3; mean 0.425
    ([0.550000011920929, 0.30000001192092896], tensor([[0.4250]]))
    """

    def __init__(self, variant: str | Variant = DEFAULT_VARIANT, *, m: int = DEFAULT_M, seed: int = 0,
                 zeros: str = DEFAULT_ZERO_RULE):
        super().__init__(m=m, seed=seed, zeros=zeros)
        self.variant = variant if isinstance(variant, Variant) else Variant.parse(variant)
        self.name = self.variant.name
        self.omega = self.variant.omega

    def update(self, sample_rows: torch.Tensor, sample_info: SampleInfo,
               extra: Mapping[str, torch.Tensor] | None = None) -> None:
        check_rows(sample_rows)
        q = select_queries(sample_info, self.variant.query, seed=self.seed,
                           sample_index=self._sample_index(sample_info))
        self._count_empty(sample_rows, sample_info.key_positions, q)
        self._add(per_sample_score(sample_rows, sample_info.key_positions, q, self.variant.phi))


