"""Localization Heads (Kang et al., CVPR 2025): the authors' two public selections and their adaptation.
Heads whose image attention is large (past an elbow) and spatially concentrated (low spatial entropy).
Shared conventions: :mod:`vrh.scoring.retrieval_heads`.

Both selections read, per sample, the attention of the last prompt token to the visual tokens
(``[:, :, -1:, visual]``) -- vrh's ``last_prompt`` query kind -- and rank heads by spatial entropy.

**Current (the defaults)**: ``liu-hanyu-97/LocalizationHeads`` @ c910d443, ``analyze.py`` (introduced by
the commit "updates: overhauled", 9ffe219; unchanged since but for a manual override):

* L45-63 ``elbow_chord``: head sums sorted ascending, points ``(rank, sum)`` in raw units, the point farthest
  from the chord; it returns that point's VALUE (2 or fewer heads: the minimum), and L111/L120 keep the
  heads whose sum is ``>=`` it (``elbow="value"``);
* L20-42 ``spatial_entropy``: ``B = relu(S - 2 * mean(S))`` (``shift=2``), binarised ``B > 0.001``,
  8-connected components, ``p_i`` over the sum of ``B`` over ALL cells; ``sum(B) <= 0`` -> ``inf``; no
  component -> 0;
* L127: a head past the elbow with any cell of the map's bottom row ``> 0.05`` is dropped (``bottom_row``);
* L145: kept = finite entropy, past the elbow, not bottom-row, ``layer > 1`` (``min_layer=2``);
* L146-149: fewer than ``min_keep`` (1, ``conf/logic/selection_v1.yaml``) kept -> the ``min_keep`` heads
  with the largest sums that are not bottom-row (any layer) instead;
* L151: kept heads sorted by entropy, ascending (stable).

**Original**: ``aysanaghazadeh/LocalizationHeads`` @ 57114e1f (a fork carrying the first author's first
code), ``localization_heads_finder.py``, the spec :data:`ORIGINAL`: the elbow (L249-293) returns the elbow
head's FLAT INDEX ``l * H + h`` and L391-392 keep the heads whose flat index is ``>=`` it -- a cut by layer
position, which the authors replaced by the value cut above (``elbow="index"``); ``relu(S - mean(S))``
(L214-217, ``shift=1``); no bottom-row rule, no layer rule, no fallback.

Across samples vrh counts how often a head is among a sample's ``m`` lowest-entropy heads: the paper's
selection frequency over 1,000 RefCOCO samples (``m`` = 20); the current code's batch stage counts the same
thing with its ``top_k`` = 5 (``pipeline.py`` L212-234; ``localization_heads:m=5``). Both reshape the
visual tokens to ``sqrt(V) x sqrt(V)``; vrh takes the grid from the processor (identical on square grids).
Entropies are computed in float32 and accumulated in float64, and an entropy below 0 (a single blob's
``p`` rounding above 1) is 0: heads whose whole mass is one blob tie and are ranked in (layer, head) order,
where the reference's float32 sums order them by their rounding error (-1.2e-7 vs +6e-8).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F

from vrh.scoring.registry import Option, register_scorer
from vrh.scoring.functions import DEFAULT_M, DEFAULT_ZERO_RULE, ZERO_RULES, Index, as_index, check_rows, take
from vrh.scoring.base import AccumulatingScorer, SampleInfo

ELBOW_CUTS = ("index", "value")
MASSES = ("shifted", "raw")
EMPTY = ("zero", "inf")
THRESHOLD = 0.001
# The first author's original selection (aysanaghazadeh/LocalizationHeads localization_heads_finder.py) as a spec;
# the bare name is the current one (liu-hanyu-97/LocalizationHeads analyze.py).
ORIGINAL = "localization_heads:bottom_row=inf:elbow=index:min_keep=0:min_layer=0:shift=1.0"


def elbow_point(values: torch.Tensor) -> tuple[torch.Tensor, int]:
    """``(order, i)``: ``order`` sorts ``values`` ascending (stable), ``i`` is the elbow's rank in it.

    The elbow is the point ``(rank, value)`` farthest from the chord joining the first and last points
    (first maximum on ties), ranks and values in raw units (both references). Rescaling either axis does
    not move it (every distance to the chord scales by the same factor). One point, or a flat curve ->
    rank 0 (the original's NaN / all-zero distances give ``argmax`` 0; the current code returns the
    minimum). ``np.argsort`` is not stable; sums tie with probability 0 on real attention.

    >>> order, i = elbow_point(torch.tensor([0.0, 10.0, 1.0, 2.0]))  # sorted 0, 1, 2, 10
    >>> order.tolist(), i  # chord (0, 0) -> (3, 10): the point (2, 2) is farthest
    ([0, 2, 3, 1], 2)
    """
    v = values.detach().double().reshape(-1).cpu()  # (n,)
    order = torch.sort(v, stable=True).indices  # (n,) ascending
    y = v[order]  # (n,)
    n = y.numel()
    if n < 2 or y[-1] == y[0]:
        return order, 0
    x = torch.arange(n, dtype=torch.float64)  # (n,)
    dx, dy = x[-1] - x[0], y[-1] - y[0]
    dist = ((x - x[0]) * dy - (y - y[0]) * dx).abs() / torch.hypot(dx, dy)  # (n,) distance to the chord
    return order, int(dist.argmax())


def connected_components(mask: torch.Tensor) -> torch.Tensor:
    """8-connected component labels of boolean maps ``[B, R, C]``; 0 = background, each component carries
    (1 + the largest row-major index among its cells). Max-label propagation over 3x3 neighbourhoods until
    stable: at most one step per cell of the longest path inside a component, cheap for token grids.

    >>> m = torch.tensor([[[1, 0, 0], [0, 1, 0], [0, 0, 0]], [[1, 0, 1], [0, 0, 0], [1, 1, 0]]]).bool()
    >>> connected_components(m)
    tensor([[[5, 0, 0],
             [0, 5, 0],
             [0, 0, 0]],
    <BLANKLINE>
            [[1, 0, 3],
             [0, 0, 0],
             [8, 8, 0]]])
    """
    if mask.dim() != 3:
        raise ValueError(f"mask must be [B, R, C], got {tuple(mask.shape)}")
    B, R, C = mask.shape
    ids = torch.arange(1, R * C + 1, dtype=torch.float64).reshape(1, R, C)  # (1, R, C)
    lab = torch.where(mask, ids, torch.zeros(()))  # (B, R, C)
    while True:
        grown = F.max_pool2d(lab.unsqueeze(1), 3, stride=1, padding=1).squeeze(1)  # (B,1,R,C) -> (B, R, C)
        grown = torch.where(mask, grown, torch.zeros(()))
        if torch.equal(grown, lab):
            return lab.long()
        lab = grown


def spatial_entropy(maps: torch.Tensor, threshold: float = THRESHOLD, mass: str = "shifted",
                    empty: str = "zero", shift: float = 2.0) -> torch.Tensor:
    """Spatial entropy of attention maps ``[B, R, C] -> [B]`` (nats; low = one concentrated blob).

    Both references (defaults): ``Bm = relu(S - shift * mean S)`` (float32; ``shift`` 2 in the current code,
    1 in the original), cells ``Bm > threshold`` form 8-connected components, ``p_i = sum_{c in i} Bm /
    sum_{all cells} Bm`` (cells in ``(0, threshold]`` count in the total, so the ``p_i`` may sum to < 1),
    entropy ``-sum p_i ln p_i``. ``sum Bm <= 0`` (no cell above ``shift`` x the mean) -> ``inf``; no
    component -> ``empty`` (``"zero"``: 0, the references, i.e. "most focused"; ``"inf"``: vrh's earlier
    "not concentrated"). ``mass="raw"`` (vrh's earlier choice): ``p_i`` from the original values ``S``, over
    the components only; the same ``inf`` and ``empty`` rules.

    >>> m = torch.tensor([[[0.4, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.2]],
    ...                   [[0.3, 0.3, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]])  # (2, 3, 3)
    >>> spatial_entropy(m, shift=1.0)  # means 2/30, 2/30: Bm blobs 1/3, 2/15 -> p 5/7, 2/7; one blob -> 0
    tensor([0.5983, 0.0000])
    >>> spatial_entropy(m, threshold=0.0, mass="raw", shift=1.0)  # p 2/3, 1/3
    tensor([0.6365, 0.0000])
    """
    if maps.dim() != 3:
        raise ValueError(f"maps must be [B, R, C], got {tuple(maps.shape)}")
    if mass not in MASSES or empty not in EMPTY:
        raise ValueError(f"mass must be one of {MASSES} and empty one of {EMPTY}, got {mass!r}, {empty!r}")
    B, R, C = maps.shape
    s = maps.detach().float().cpu()  # (B, R, C); the references work in float32
    shifted = torch.relu(s - float(shift) * s.mean(dim=(1, 2), keepdim=True))  # (B, R, C)
    fg = shifted > threshold  # (B, R, C)
    lab = connected_components(fg).reshape(B, R * C)  # (B, R, C) -> (B, R*C)
    vals = (shifted if mass == "shifted" else s).double().reshape(B, R * C)  # (B, R*C)
    comp = torch.zeros(B, R * C + 1, dtype=torch.float64).scatter_add_(1, lab, vals)[:, 1:]  # (B, R*C)
    total = shifted.double().sum((1, 2)) if mass == "shifted" else comp.sum(1)  # (B,)
    p = comp / total.clamp_min(1e-300)[:, None]  # (B, R*C)
    ent = -torch.where(p > 0, p * p.clamp_min(1e-300).log(), torch.zeros_like(p)).sum(1)  # (B,)
    ent = torch.where(fg.reshape(B, -1).any(1), ent, torch.full_like(ent, 0.0 if empty == "zero" else float("inf")))
    no_mass = shifted.double().sum((1, 2)) <= 0  # (B,) the references' sum(B) <= 0, for either mass
    ent = torch.where(ent > 0, ent, torch.zeros_like(ent))  # -0.0 and rounding below 0 -> 0
    return torch.where(no_mass, torch.full_like(ent, float("inf")), ent).float()


def localization_heads_sample(rows: torch.Tensor, visual: Index, grid: tuple[int, int], queries: Index, *,
                              min_layer: int = 2, elbow: str = "value", threshold: float = THRESHOLD,
                              shift: float = 2.0, bottom_row: float = 0.05, min_keep: int = 1,
                              mass: str = "shifted", empty: str = "zero") -> torch.Tensor:
    """Per-sample ranking score ``[L, H]``: ``1 / (1 + entropy)`` for kept heads, else 0.

    Kept (defaults: the current code): past the elbow (``elbow="value"``: visual attention sum >= the elbow
    head's; ``"index"``, the original: flat index ``l * H + h`` >= the elbow head's), no bottom-row cell of
    the map above ``bottom_row`` (checked past the elbow only, as in the reference; ``inf``: no such rule),
    layer >= ``min_layer`` and a finite entropy. Fewer than ``min_keep`` kept -> the ``min_keep`` heads with
    the largest sums (ties in (layer, head) order) that are not bottom-row, any layer, instead; such a head
    with an infinite entropy scores the smallest positive float32 (ranked last among the kept). The score
    falls as entropy rises and keeps the references' stable order, so ranking it (ties by (layer, head)) is
    their ascending-entropy sort. Several query rows are averaged into one map (the references have one
    row). ``K`` is unused.

    >>> A = torch.zeros(3, 1, 1, 5)                           # (3 layers, 1 head, 1 query, 1 text + 2x2 grid)
    >>> A[0, 0, 0] = torch.tensor([0.0, 0.5, 0.0, 0.0, 0.5])  # sum 1, two diagonal cells: one 8-blob
    >>> A[1, 0, 0] = torch.tensor([0.9, 0.1, 0.0, 0.0, 0.0])  # sum .1
    >>> A[2, 0, 0] = torch.tensor([0.8, 0.1, 0.1, 0.0, 0.0])  # sum .2: the elbow (rank 1 of .1, .2, 1)
    >>> orig = dict(elbow="index", min_layer=0, shift=1.0, bottom_row=float("inf"), min_keep=0)
    >>> localization_heads_sample(A, [1, 2, 3, 4], (2, 2), [0], **orig).flatten().tolist()  # flat index >= 2
    [0.0, 0.0, 1.0]
    >>> localization_heads_sample(A, [1, 2, 3, 4], (2, 2), [0], **{**orig, "elbow": "value"}).flatten().tolist()
    [1.0, 0.0, 1.0]
    >>> cur = localization_heads_sample(A, [1, 2, 3, 4], (2, 2), [0])  # current: nothing kept -> the fallback
    >>> (cur > 0).flatten().tolist()  # layer 0 is on the bottom row; layer 2 (no cell > 2 x mean: inf) is kept
    [False, False, True]
    """
    check_rows(rows)
    if elbow not in ELBOW_CUTS:
        raise ValueError(f"localization_heads option 'elbow' must be one of {', '.join(ELBOW_CUTS)}, got {elbow!r}")
    L, H = rows.shape[:2]
    v = as_index(visual, rows.shape[-1])
    R, C = grid
    if R * C != v.numel():
        raise ValueError(f"grid {grid} has {R * C} cells but there are {v.numel()} visual tokens")
    q = as_index(queries, rows.shape[2])
    if q.numel() == 0 or v.numel() == 0:
        return torch.zeros(L, H)
    img = take(take(rows, 2, q), 3, v).float().mean(2).cpu()  # (L, H, |Q|, V) -> (L, H, V)
    maps = img.reshape(L * H, R, C)  # (L, H, V) -> (L*H, R, C), flat head order l * H + h, V row-major
    sums = img.double().sum(-1).reshape(L * H)  # (L*H,)
    order, i = elbow_point(sums)
    if elbow == "index":
        past = torch.arange(L * H) >= int(order[i])  # (L*H,)
    else:
        past = sums >= sums[order[i]]  # (L*H,)
    ent = spatial_entropy(maps, threshold, mass, empty, shift).double()  # (L*H, R, C) -> (L*H,)
    bottom = past & (maps[:, -1, :] > bottom_row).any(-1)  # (L*H,) the reference checks heads past the elbow
    layer_ok = torch.arange(L * H) // H >= min_layer  # (L*H,)
    kept = past & layer_ok & torch.isfinite(ent) & ~bottom  # (L*H,)
    if int(kept.sum()) < min_keep:
        by_sum = torch.sort(sums, descending=True, stable=True).indices  # (L*H,)
        kept = torch.zeros(L * H, dtype=torch.bool)
        kept[by_sum[~bottom[by_sum]][:min_keep]] = True
    tiny = torch.finfo(torch.float32).tiny
    score = torch.where(torch.isfinite(ent), 1.0 / (1.0 + ent.nan_to_num(posinf=0.0)), torch.full_like(ent, tiny))
    return torch.where(kept, score, torch.zeros_like(score)).reshape(L, H).float()  # (L*H,) -> (L, H)


@register_scorer(
    "localization_heads", compare_order=5,
    help="Localization Heads: how often a head is among a sample's m lowest-spatial-entropy heads past the "
         "attention-sum elbow (defaults: the authors' current code per sample, the paper's frequency across "
         f"samples; the original code: {ORIGINAL})",
    options=(Option("m", int, DEFAULT_M, "heads selected per sample"),
             Option("zeros", str, DEFAULT_ZERO_RULE, "per-sample top-m and ineligible heads (score 0): exclude "
                                                     "or include", choices=ZERO_RULES),
             Option("query", str, "last_prompt", "query kind whose rows form the map: last_prompt (the reference), "
                                                 "out, in or coord", choices=("last_prompt", "out", "in", "coord")),
             Option("min_layer", int, 2, "first eligible layer, 0-based (2: the current code's layer > 1; 0: the "
                                         "original)"),
             Option("elbow", str, "value", "cut at the elbow by attention sum (value, the current code) or by flat "
                                           "head index l*H+h (index, the original)", choices=ELBOW_CUTS),
             Option("shift", float, 2.0, "binarise relu(map - shift x mean): 2 (the current code) or 1 (the "
                                         "original)"),
             Option("bottom_row", float, 0.05, "drop heads past the elbow with a bottom-row cell above this (the "
                                               "current code; inf: no such rule, the original)"),
             Option("min_keep", int, 1, "fewer heads kept -> this many largest-sum heads instead (1: the current "
                                        "code; 0: none, the original)"),
             Option("threshold", float, THRESHOLD, "binarise relu(map - shift x mean) > threshold (reference 0.001)"),
             Option("mass", str, "shifted", "component mass: shifted (relu(map - shift x mean) over all cells, the "
                                            "references) or raw (map values over the components)", choices=MASSES),
             Option("empty", str, "zero", "entropy when no cell passes the threshold: zero (the references) or inf "
                                          "(the head is ineligible)", choices=EMPTY)))
class LocalizationHeadsScorer(AccumulatingScorer):
    """Selection frequency (top-``m`` per sample, ties by (layer, head)) of :func:`localization_heads_sample`.

    Needs ``info.grid`` and the ``last_prompt`` query (``query`` option to change it). The bare name is the
    authors' current code; :data:`ORIGINAL` their first; vrh's earlier adaptation is
    ``localization_heads:bottom_row=inf:empty=inf:mass=raw:min_keep=0:shift=1.0:threshold=0.0``.
    """

    name = "localization_heads"
    omega = "freq"

    def __init__(self, *, query: str = "last_prompt", min_layer: int = 2, elbow: str = "value",
                 shift: float = 2.0, bottom_row: float = 0.05, min_keep: int = 1, threshold: float = THRESHOLD,
                 mass: str = "shifted", empty: str = "zero", **kw):
        super().__init__(**kw)
        for opt, value, allowed in (("elbow", elbow, ELBOW_CUTS), ("mass", mass, MASSES), ("empty", empty, EMPTY)):
            if value not in allowed:
                raise ValueError(f"localization_heads option {opt!r} must be one of {', '.join(allowed)}, "
                                 f"got {value!r}")
        if min_keep < 0:
            raise ValueError(f"localization_heads option 'min_keep' must be >= 0, got {min_keep}")
        self.query = query
        self.settings = dict(min_layer=min_layer, elbow=elbow, threshold=threshold, shift=shift,
                             bottom_row=bottom_row, min_keep=min_keep, mass=mass, empty=empty)
        self.min_layer = min_layer

    def update(self, sample_rows: torch.Tensor, sample_info: SampleInfo,
               extra: Mapping[str, torch.Tensor] | None = None) -> None:
        if sample_info.grid is None:
            raise ValueError("localization_heads needs SampleInfo.grid = (rows, cols) of the visual tokens")
        q = sample_info.query(self.query)
        self._count_empty(sample_rows, sample_info.key_positions, q)
        self._add(localization_heads_sample(sample_rows, sample_info.visual_positions, tuple(sample_info.grid), q,
                                            **self.settings))
