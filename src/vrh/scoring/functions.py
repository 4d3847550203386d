"""Head scoring in the unified design space of the paper (Sec. 3.2, Eq. 1, Tab. 2).

Eq. 1 writes every retrieval-head score as

    Theta_{l,h}(s) = 1/|Q_s| * sum_{t in Q_s} Phi_{j in K_s}[ alpha_{l,h}(t, j) ]      (per sample)
    bar Theta_{l,h} = Omega_{s in S}[ Theta_{l,h}(s) ]                                  (over samples)

and methods differ only in the query set ``Q`` ("out" answer tokens vs "in" expression tokens), the key
aggregation ``Phi`` (``sum`` of attention on the region vs ``argmax`` indicator) and the sample aggregation
``Omega`` (``mean`` vs selection ``freq``). This module keeps the three axes as separate pure functions on
tensors, so every variant (and the prior methods in :mod:`vrh.scoring`) is a composition of the same
checked pieces, and exposes them as named *variants* ``"QUERY/PHI/OMEGA"`` (default ``"out/sum/mean"``,
the paper's VRH score). This module imports nothing from :mod:`vrh.scoring`: the registry entry for the
variants lives in :mod:`vrh.scoring.design_space`, and :func:`vrh.scoring.make_scorer` builds scorers.

Inputs, per sample: ``rows`` ``[L, H, Q, S]`` softmax attention rows (captured once for the union of all
query tokens any scorer needs); key index sets (``K`` = visual tokens overlapping the GT box, ``V`` = all
visual tokens) are positions into ``S``; query sets are indices into ``Q``. Index sets may be integer
positions or boolean masks.

Edge-case policy (all scorers): an empty ``K`` or an empty query set gives a per-sample score of 0 for
every head; the sample is still *counted* (it stays in ``per_sample()`` and in the mean) and the scorer
tallies it in ``n_empty_keys`` / ``n_empty_queries``. An all-zero attention row contributes 0 to both
``Phi`` (argmax of an all-zero row is "no hit"). Nothing here produces NaN.

``Omega^freq`` (m = :data:`DEFAULT_M` = 20): each sample votes for its top-m heads. Heads scoring <= 0 get
no vote by default (``zeros="exclude"``), so a sample with fewer than m positive heads selects fewer than
m -- with ``Phi^argmax`` most heads score exactly 0 and this changes the ranking against a plain top-m;
``zeros="include"`` always fills m slots (ties by (layer, head)). Both m and the rule are scorer options
(``out/argmax/freq:m=10:zeros=include``); see :func:`top_m_mask`.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch

Index = torch.Tensor | Sequence[int] | Sequence[bool]

QUERY_SETS = ("out", "in", "in+out", "rand1", "coord")
PHIS = ("sum", "argmax")
OMEGAS = ("mean", "freq")
_OMEGA_ALIASES = {"avg": "mean"}  # the paper writes both Omega^avg and Omega^mean
QUERY_KINDS = ("out", "in", "coord", "last_prompt", "out_own", "null_out", "null_in")
DEFAULT_VARIANT = "out/sum/mean"
DEFAULT_M = 20
# What Omega^freq's per-sample top-m does with heads scoring <= 0 (see :func:`top_m_mask`).
ZERO_RULES = ("exclude", "include")
DEFAULT_ZERO_RULE = "exclude"
# The extra capture pass QRHead calibrates against: same images and answers, the expression replaced by a
# content-free query. A scorer lists the passes it needs in ``extra_passes``; its rows arrive in
# ``update(..., extra={NULL_QUERY_PASS: rows})``.
NULL_QUERY_PASS = "null_query"


# ----------------------------------------------------------------------------------------------------------
# index helpers
# ----------------------------------------------------------------------------------------------------------
def as_index(sel: Index, size: int) -> torch.Tensor:
    """Sorted unique int64 positions in ``[0, size)`` from integer positions or a length-``size`` bool mask.

    >>> as_index([3, 1, 3], 5).tolist(), as_index(torch.tensor([True, False, True]), 3).tolist()
    ([1, 3], [0, 2])
    """
    t = sel if isinstance(sel, torch.Tensor) else torch.as_tensor(list(sel))
    t = t.detach().cpu().reshape(-1)
    if t.dtype == torch.bool:
        if t.numel() != size:
            raise ValueError(f"boolean index has {t.numel()} entries, expected {size}")
        return t.nonzero().reshape(-1)  # (n,)
    if t.is_floating_point() and t.numel() and not torch.equal(t, t.round()):
        raise TypeError("index positions must be integers")
    t = t.long()
    if t.numel() and (int(t.min()) < 0 or int(t.max()) >= size):
        raise IndexError(f"index positions must lie in [0, {size}), got [{int(t.min())}, {int(t.max())}]")
    return torch.unique(t)  # sorted


def take(t: torch.Tensor, dim: int, idx: torch.Tensor) -> torch.Tensor:
    """``index_select`` with a CPU index moved to ``t``'s device (rows may live on an accelerator)."""
    return t.index_select(dim, idx.to(t.device))


def check_rows(rows: torch.Tensor) -> None:
    """Refuse attention rows that are not ``[L, H, Q, S]`` (every scorer's input)."""
    if rows.dim() != 4:
        raise ValueError(f"rows must be [L, H, Q, S], got shape {tuple(rows.shape)}")


# ----------------------------------------------------------------------------------------------------------
# Phi: key aggregation, one value per (layer, head, query)
# ----------------------------------------------------------------------------------------------------------
def region_sum(rows: torch.Tensor, keys: Index) -> torch.Tensor:
    """``Phi^sum``: attention mass each query puts on the key set ``K``; ``[L, H, Q, S] -> [L, H, Q]``.

    Why: a graded measure -- a head that splits its attention over the whole referent still scores fully,
    which the argmax indicator would miss when the peak falls on one background token.

    >>> A = torch.tensor([[[[0.1, 0.6, 0.3, 0.0], [0.5, 0.1, 0.1, 0.3]]]])  # (1, 1, 2, 4)
    >>> region_sum(A, [1, 2])
    tensor([[[0.9000, 0.2000]]])
    """
    check_rows(rows)
    k = as_index(keys, rows.shape[-1])
    return take(rows, 3, k).float().sum(-1)  # (L, H, Q, |K|) -> (L, H, Q)


def argmax_in_region(rows: torch.Tensor, keys: Index, among: Index | None = None) -> torch.Tensor:
    """``Phi^argmax``: 1 where the most-attended key lies in ``K``; ``[L, H, Q, S] -> [L, H, Q]`` of 0/1.

    "Visible" keys: with ``among=None`` (the paper's variant, following Retrieval Heads) the argmax runs
    over ALL ``S`` key positions of the row -- text, system and visual tokens alike (future positions are
    exactly 0 in a causal softmax row, so this is the set of keys the query can see). Pass
    ``among=V`` to restrict the competition to visual tokens (OCR Heads). Ties: the lowest key position
    among the maxima wins (deterministic). A row whose maximum is 0 (all-zero / padded row) scores 0.

    >>> A = torch.tensor([[[[0.1, 0.6, 0.3, 0.0], [0.5, 0.1, 0.1, 0.3]]]])  # (1, 1, 2, 4)
    >>> argmax_in_region(A, [1, 2]), argmax_in_region(A, [1, 2], among=[1, 2, 3])
    (tensor([[[1., 0.]]]), tensor([[[1., 0.]]]))
    """
    check_rows(rows)
    S = rows.shape[-1]
    k = as_index(keys, S)
    cand = torch.arange(S) if among is None else as_index(among, S)
    if cand.numel() == 0 or k.numel() == 0:
        return torch.zeros(rows.shape[:3], device=rows.device)  # (L, H, Q)
    in_k = torch.zeros(S, dtype=torch.bool)
    in_k[k] = True
    sub = take(rows, 3, cand)  # (L, H, Q, |C|)
    pos = sub.argmax(-1)  # (L, H, Q); first maximum on ties
    peak = sub.gather(-1, pos.unsqueeze(-1)).squeeze(-1)  # (L, H, Q)
    hit = in_k.to(rows.device)[cand.to(rows.device)[pos]] & (peak > 0)  # (L, H, Q)
    return hit.float()


PHI_FUNCS = {"sum": region_sum, "argmax": argmax_in_region}


# ----------------------------------------------------------------------------------------------------------
# Theta: mean over the selected queries
# ----------------------------------------------------------------------------------------------------------
def query_mean(phi: torch.Tensor, queries: Index | None = None) -> torch.Tensor:
    """Mean over the selected queries of per-query values ``[L, H, Q] -> [L, H]``; 0 if none selected.

    >>> query_mean(torch.tensor([[[0.9, 0.2, 0.4]]]), [0, 1])
    tensor([[0.5500]])
    """
    if phi.dim() != 3:
        raise ValueError(f"per-query values must be [L, H, Q], got shape {tuple(phi.shape)}")
    q = torch.arange(phi.shape[2]) if queries is None else as_index(queries, phi.shape[2])
    if q.numel() == 0:
        return torch.zeros(phi.shape[:2], device=phi.device)  # (L, H)
    return take(phi, 2, q).float().mean(-1)  # (L, H, |Q_s|) -> (L, H)


def per_sample_score(rows: torch.Tensor, keys: Index, queries: Index, phi: str = "sum",
                     among: Index | None = None) -> torch.Tensor:
    """``Theta(s)`` of Eq. 1: ``Phi`` over ``K`` for each selected query, averaged; ``[L, H]``.

    Queries are selected before ``Phi`` runs, so cost scales with the selected rows only.

    >>> A = torch.tensor([[[[0.1, 0.6, 0.3, 0.0], [0.5, 0.1, 0.1, 0.3]]]])  # (1, 1, 2, 4)
    >>> per_sample_score(A, [1, 2], [0, 1], "sum"), per_sample_score(A, [1, 2], [0, 1], "argmax")
    (tensor([[0.5500]]), tensor([[0.5000]]))
    """
    check_rows(rows)
    if phi not in PHI_FUNCS:
        raise ValueError(f"unknown key aggregation {phi!r}; choose from {PHIS}")
    q = as_index(queries, rows.shape[2])
    sel = take(rows, 2, q)  # (L, H, |Q_s|, S)
    vals = region_sum(sel, keys) if phi == "sum" else argmax_in_region(sel, keys, among)  # (L, H, |Q_s|)
    return query_mean(vals)


# ----------------------------------------------------------------------------------------------------------
# Omega: sample aggregation over per-sample maps [N, L, H]
# ----------------------------------------------------------------------------------------------------------
def _check_stack(per_sample: torch.Tensor, include: Index | None) -> torch.Tensor:
    if per_sample.dim() != 3:
        raise ValueError(f"per-sample scores must be [N, L, H], got shape {tuple(per_sample.shape)}")
    if include is None:
        return per_sample.float()
    return per_sample.index_select(0, as_index(include, per_sample.shape[0])).float()  # (N', L, H)


def top_m_mask(scores: torch.Tensor, m: int = DEFAULT_M, zeros: str = DEFAULT_ZERO_RULE) -> torch.Tensor:
    """Boolean mask of the ``m`` best heads of each ``[L, H]`` map (``[L, H]`` or ``[N, L, H]`` input).

    Ties are broken by ``(layer, head)`` order (lower first), as in :func:`vrh.core.heads.rank_heads`.
    ``zeros`` is the rule for heads scoring <= 0 when fewer than ``m`` heads of a sample are positive:

    * ``"exclude"`` (default): they are never selected -- a sample with no signal votes for nobody, so an
      all-zero sample does not hand its votes to the first heads of layer 0. A sample then selects
      ``min(m, #positive)`` heads, which is what makes ``argmax``/``freq`` rankings differ from a plain
      top-m when many heads score exactly 0 (argmax indicators often do).
    * ``"include"``: always ``m`` heads per sample (the plain top-m of the paper's wording): the remaining
      slots go to the best non-positive heads, ties in ``(layer, head)`` order.

    NaN never counts as a score: it sorts last and is never selected.

    >>> top_m_mask(torch.tensor([[0.5, 0.2], [0.5, 0.0]]), m=2).tolist()
    [[True, False], [True, False]]
    >>> top_m_mask(torch.tensor([[0.5, 0.0], [0.0, 0.0]]), m=2, zeros="include").tolist()  # (0, 1) fills slot 2
    [[True, True], [False, False]]
    """
    if m < 0:
        raise ValueError(f"m must be >= 0, got {m}")
    if zeros not in ZERO_RULES:
        raise ValueError(f"zeros must be one of {', '.join(ZERO_RULES)}, got {zeros!r}")
    single = scores.dim() == 2
    s = scores.unsqueeze(0) if single else scores  # (N, L, H)
    if s.dim() != 3:
        raise ValueError(f"scores must be [L, H] or [N, L, H], got shape {tuple(scores.shape)}")
    N, L, H = s.shape
    raw = s.reshape(N, L * H).double()  # (N, L*H)
    flat = torch.nan_to_num(raw, nan=float("-inf"))  # (N, L*H)
    order = torch.sort(-flat, dim=1, stable=True).indices[:, : min(m, L * H)]  # (N, m); stable = (l, h) order
    keep = (flat > 0) if zeros == "exclude" else ~torch.isnan(raw)  # (N, L*H)
    mask = torch.zeros(N, L * H, dtype=torch.bool).scatter_(1, order, True) & keep  # (N, L*H)
    mask = mask.reshape(N, L, H)  # (N, L*H) -> (N, L, H)
    return mask[0] if single else mask


def omega_mean(per_sample: torch.Tensor, include: Index | None = None) -> torch.Tensor:
    """``Omega^mean``: mean of per-sample maps ``[N, L, H] -> [L, H]`` (0 if no sample is included).

    >>> omega_mean(torch.tensor([[[1.0, 0.0]], [[0.5, 0.5]], [[9.0, 9.0]]]), include=[0, 1])
    tensor([[0.7500, 0.2500]])
    """
    s = _check_stack(per_sample, include)
    return s.mean(0) if s.shape[0] else torch.zeros(s.shape[1:])


def selection_frequency(per_sample: torch.Tensor, m: int = DEFAULT_M, include: Index | None = None,
                        zeros: str = DEFAULT_ZERO_RULE) -> torch.Tensor:
    """``Omega^freq``: fraction of samples whose top-``m`` set (:func:`top_m_mask`, rule ``zeros``) holds
    the head.

    >>> ps = torch.tensor([[[0.9, 0.1, 0.0]], [[0.2, 0.8, 0.0]], [[0.7, 0.7, 0.1]]])  # (3, 1, 3)
    >>> selection_frequency(ps, m=1)  # sample 3 ties -> (0, 0) wins by (layer, head) order
    tensor([[0.6667, 0.3333, 0.0000]])
    """
    s = _check_stack(per_sample, include)
    if s.shape[0] == 0:
        return torch.zeros(s.shape[1:])
    return top_m_mask(s, m, zeros).float().mean(0)  # (N, L, H) -> (L, H)


def aggregate(per_sample: torch.Tensor, omega: str, m: int = DEFAULT_M, include: Index | None = None,
              zeros: str = DEFAULT_ZERO_RULE) -> torch.Tensor:
    """Dispatch on ``omega`` in :data:`OMEGAS` (``m`` and ``zeros`` only matter for ``freq``)."""
    omega = _OMEGA_ALIASES.get(omega, omega)
    if omega == "mean":
        return omega_mean(per_sample, include)
    if omega == "freq":
        return selection_frequency(per_sample, m, include, zeros)
    raise ValueError(f"unknown sample aggregation {omega!r}; choose from {OMEGAS}")


# ----------------------------------------------------------------------------------------------------------
# per-sample metadata
# ----------------------------------------------------------------------------------------------------------
@dataclass
class SampleInfo:
    """What a scorer needs to know about one sample besides its rows.

    ``key_positions`` (K) and ``visual_positions`` (V) index the key axis ``S``; ``queries`` maps a query
    kind in :data:`QUERY_KINDS` (``out`` the rows that *produce* the answer tokens, one per answer token in
    answer order; ``out_own`` the rows AT the answer tokens' own positions, one per answer token in answer
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
      generated sequence, divided by the ground-truth answer's token count, in [0, 1] -- OCR Heads'
      correctness weight (``weight=lcs``; :func:`lcs_ratio` computes it).
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
        return cls(q, phi, _OMEGA_ALIASES.get(omega, omega))


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


def lcs_ratio(gold: Sequence[int], pred: Sequence[int]) -> float:
    """Length of the longest common contiguous run of ``gold`` and ``pred`` over ``len(gold)``; 0 if
    ``gold`` is empty (the reference's ``compute_score``, ``utils/metrics.py`` L17-43). Detection fills
    ``SampleInfo.answer_lcs`` with it (gold: the tokenized ground-truth answer; pred: the generated ids).

    >>> lcs_ratio([5, 6, 7, 8], [1, 6, 7, 2, 5])  # [6, 7]: 2 of 4
    0.5
    """
    gold, pred = list(gold), list(pred)
    if not gold:
        return 0.0
    best, prev = 0, [0] * (len(pred) + 1)
    for g in gold:
        cur = [0] * (len(pred) + 1)
        for j, p in enumerate(pred):
            if g == p:
                cur[j + 1] = prev[j] + 1
                best = max(best, cur[j + 1])
        prev = cur
    return best / len(gold)
