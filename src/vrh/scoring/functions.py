"""Head scoring in the unified design space of the paper (Sec. 3.2, Eq. 1, Tab. 2).

Eq. 1 writes every retrieval-head score as

    Theta_{l,h}(s) = 1/|Q_s| * sum_{t in Q_s} Phi_{j in K_s}[ alpha_{l,h}(t, j) ]      (per sample)
    bar Theta_{l,h} = Omega_{s in S}[ Theta_{l,h}(s) ]                                  (over samples)

and methods differ only in the query set ``Q`` ("out" answer tokens vs "in" expression tokens), the key
aggregation ``Phi`` (``sum`` of attention on the region vs ``argmax`` indicator) and the sample aggregation
``Omega`` (``mean`` vs selection ``freq``). This module keeps the three axes as separate pure functions on
tensors, so every variant (and the prior methods in :mod:`vrh.scoring`) is a composition of the same
checked pieces; :mod:`vrh.scoring.base` names the variants ``"QUERY/PHI/OMEGA"`` (default
``"out/sum/mean"``, the paper's VRH score) and holds what a scorer is (its per-sample input
:class:`~vrh.scoring.base.SampleInfo`, the query sets, the accumulating base class). This module imports
nothing else of :mod:`vrh.scoring`: the registry entry for the variants lives in
:mod:`vrh.scoring.design_space`, and :func:`vrh.scoring.make_scorer` builds scorers.

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

from collections.abc import Sequence

import torch

# The query kinds of SampleInfo.queries, and the extra capture pass QRHead calibrates against (same images and
# answers, the expression replaced by a content-free query; a scorer lists the passes it needs in
# ``extra_passes``, its rows arrive in ``update(..., extra={NULL_QUERY_PASS: rows})``): defined where the query
# sets are computed.
from vrh.models.queries import NULL_QUERY_PASS, QUERY_KINDS  # noqa: F401 - the scorers read them here

Index = torch.Tensor | Sequence[int] | Sequence[bool]

QUERY_SETS = ("out", "in", "in+out", "rand1", "coord")
PHIS = ("sum", "argmax")
OMEGAS = ("mean", "freq")
OMEGA_ALIASES = {"avg": "mean"}  # the paper writes both Omega^avg and Omega^mean
DEFAULT_VARIANT = "out/sum/mean"
DEFAULT_M = 20
# What Omega^freq's per-sample top-m does with heads scoring <= 0 (see :func:`top_m_mask`).
ZERO_RULES = ("exclude", "include")
DEFAULT_ZERO_RULE = "exclude"


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
    omega = OMEGA_ALIASES.get(omega, omega)
    if omega == "mean":
        return omega_mean(per_sample, include)
    if omega == "freq":
        return selection_frequency(per_sample, m, include, zeros)
    raise ValueError(f"unknown sample aggregation {omega!r}; choose from {OMEGAS}")


def lcs_ratio(gold: Sequence[int], pred: Sequence[int]) -> float:
    """Length of the longest common contiguous run of ``gold`` and ``pred`` over ``len(gold)``; 0 if
    ``gold`` is empty (the reference's ``compute_score``, ``utils/metrics.py`` L17-43). Detection fills
    ``SampleInfo.answer_lcs`` with it through :func:`vrh.scoring.ocr_heads.hit_weight` (gold: the tokenized
    ground-truth answer; pred: the output sequence the reference scores for the model's family).

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
