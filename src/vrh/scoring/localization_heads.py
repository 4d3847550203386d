"""Localization Heads (Kang et al., CVPR 2025): its reference implementation and its adaptation.
Heads whose image attention is large (past an elbow) and spatially concentrated (low spatial entropy).
Shared conventions: :mod:`vrh.scoring.retrieval_heads`.

Reference: ``aysanaghazadeh/LocalizationHeads`` @ 57114e1f (the authors' repository),
``localization_heads_finder.py``; per sample, from the attention of the last prompt token
(``[:, :, -1:, visual]``, L174) -- vrh's ``last_prompt`` query kind:

* L296-309 / L353-368: each head's attention sum over the visual tokens, heads in flat order
  ``l * H + h``;
* L249-293 ``find_elbow_point``: sums sorted ascending (``np.argsort``), points ``(rank, sum)`` in raw
  units, the point farthest from the chord joining the first and last points; it returns that head's
  FLAT INDEX, and L391-392 keeps the heads whose flat index is ``>=`` it -- a cut by layer position, not
  by attention sum;
* L195-246 ``spatial_entropy``: ``B = relu(S - mean(S))``, binarised ``B > 0.001`` (float32),
  8-connected components (``scipy.ndimage.label``), ``p_i`` = component's sum of ``B`` over the sum of
  ``B`` over ALL cells; entropy ``-sum p_i ln p_i``; ``sum(B) <= 0`` -> ``inf``; no component -> 0;
* L404-424: heads below the cut get entropy ``inf``; heads sorted by entropy, ascending (stable).

The reference ends at one sample's ranking. Across samples vrh counts how often a head is among a
sample's ``m`` lowest-entropy heads (the paper's selection frequency over 1,000 RefCOCO samples; the
code has none). It has no early-layer exclusion either (``min_layer=0``); ``min_layer=2`` is vrh's earlier
choice (a later re-implementation, ``liu-hanyu-97/LocalizationHeads`` ``analyze.py`` L145, keeps
``layer > 1``). The reference reshapes the visual tokens to ``sqrt(V) x sqrt(V)`` (L351); vrh takes the
grid from the processor (identical for square grids).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F

from vrh.scoring.registry import Option, register_scorer
from vrh.scoring.functions import DEFAULT_M, DEFAULT_ZERO_RULE, ZERO_RULES, Index, as_index, check_rows, take
from vrh.scoring.base import AccumulatingScorer, SampleInfo

ELBOW_CUTS = ("index", "value")
ELBOW_AXES = ("raw", "scaled")
MASSES = ("shifted", "raw")
EMPTY = ("zero", "inf")
THRESHOLD = 0.001


def elbow_point(values: torch.Tensor, axes: str = "raw") -> tuple[torch.Tensor, int]:
    """``(order, i)``: ``order`` sorts ``values`` ascending (stable), ``i`` is the elbow's rank in it.

    The elbow is the point ``(rank, value)`` farthest from the chord joining the first and last points
    (first maximum on ties). ``axes="raw"`` (reference L270-289): ranks and values as they are;
    ``"scaled"`` (vrh's earlier choice): both axes scaled to [0, 1]. One point, or a flat curve -> rank 0
    (the reference's NaN / all-zero distances give ``argmax`` 0). ``np.argsort`` is not stable; sums tie
    with probability 0 on real attention.

    >>> order, i = elbow_point(torch.tensor([0.0, 10.0, 1.0, 2.0]))  # sorted 0, 1, 2, 10
    >>> order.tolist(), i  # chord (0, 0) -> (3, 10): the point (2, 2) is farthest
    ([0, 2, 3, 1], 2)
    """
    if axes not in ELBOW_AXES:
        raise ValueError(f"elbow axes must be one of {', '.join(ELBOW_AXES)}, got {axes!r}")
    v = values.detach().double().reshape(-1).cpu()  # (n,)
    order = torch.sort(v, stable=True).indices  # (n,) ascending
    y = v[order]  # (n,)
    n = y.numel()
    if n < 2 or y[-1] == y[0]:
        return order, 0
    x = torch.arange(n, dtype=torch.float64)  # (n,)
    if axes == "scaled":
        x, y = x / (n - 1), (y - y[0]) / (y[-1] - y[0])
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
                    empty: str = "zero") -> torch.Tensor:
    """Spatial entropy of attention maps ``[B, R, C] -> [B]`` (nats; low = one concentrated blob).

    Reference (defaults, L195-246): ``Bm = relu(S - mean S)`` (float32), cells ``Bm > threshold`` form
    8-connected components, ``p_i = sum_{c in i} Bm / sum_{all cells} Bm`` (cells in ``(0, threshold]``
    count in the total, so the ``p_i`` may sum to < 1), entropy ``-sum p_i ln p_i``. ``sum Bm <= 0`` (a
    constant map) -> ``inf``; no component -> ``empty`` (``"zero"``: 0, the reference, i.e. "most
    focused"; ``"inf"``: vrh's earlier "not concentrated"). ``mass="raw"`` (vrh's earlier choice):
    ``p_i`` from the original values ``S``, over the components only.

    >>> m = torch.tensor([[[0.4, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.2]],
    ...                   [[0.3, 0.3, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]])  # (2, 3, 3)
    >>> spatial_entropy(m)  # means 2/30, 2/30: Bm blobs 1/3, 2/15 -> p 5/7, 2/7; one blob -> 0
    tensor([0.5983, 0.0000])
    >>> spatial_entropy(m, threshold=0.0, mass="raw")  # p 2/3, 1/3
    tensor([0.6365, 0.0000])
    """
    if maps.dim() != 3:
        raise ValueError(f"maps must be [B, R, C], got {tuple(maps.shape)}")
    if mass not in MASSES or empty not in EMPTY:
        raise ValueError(f"mass must be one of {MASSES} and empty one of {EMPTY}, got {mass!r}, {empty!r}")
    B, R, C = maps.shape
    s = maps.detach().float().cpu()  # (B, R, C); the reference works in float32 (L216)
    shifted = torch.relu(s - s.mean(dim=(1, 2), keepdim=True))  # (B, R, C)
    fg = shifted > threshold  # (B, R, C)
    lab = connected_components(fg).reshape(B, R * C)  # (B, R, C) -> (B, R*C)
    vals = (shifted if mass == "shifted" else s).double().reshape(B, R * C)  # (B, R*C)
    comp = torch.zeros(B, R * C + 1, dtype=torch.float64).scatter_add_(1, lab, vals)[:, 1:]  # (B, R*C)
    total = shifted.double().sum((1, 2)) if mass == "shifted" else comp.sum(1)  # (B,)
    p = comp / total.clamp_min(1e-300)[:, None]  # (B, R*C)
    ent = -torch.where(p > 0, p * p.clamp_min(1e-300).log(), torch.zeros_like(p)).sum(1)  # (B,)
    ent = torch.where(fg.reshape(B, -1).any(1), ent, torch.full_like(ent, 0.0 if empty == "zero" else float("inf")))
    no_mass = shifted.double().sum((1, 2)) <= 0 if mass == "shifted" else total <= 0
    ent = torch.where(ent > 0, ent, torch.zeros_like(ent))  # -0.0 and rounding below 0 -> 0
    return torch.where(no_mass, torch.full_like(ent, float("inf")), ent).float()


def localization_heads_sample(rows: torch.Tensor, visual: Index, grid: tuple[int, int], queries: Index, *,
                              min_layer: int = 0, elbow: str = "index", elbow_axes: str = "raw",
                              threshold: float = THRESHOLD, mass: str = "shifted", empty: str = "zero"
                              ) -> torch.Tensor:
    """Per-sample ranking score ``[L, H]``: ``1 / (1 + entropy)`` for eligible heads, else 0.

    Eligible: past the elbow (``elbow="index"``, the reference: flat index ``l * H + h`` >= the elbow
    head's; ``"value"``: visual attention sum >= the elbow head's), layer >= ``min_layer`` and a finite
    entropy. The score falls as entropy rises and keeps the reference's stable order, so ranking it
    (ties by (layer, head)) is the reference's ascending-entropy sort, ineligible (``inf``) heads last.
    Several query rows are averaged into one map (the reference has one row). ``K`` is unused.

    >>> A = torch.zeros(3, 1, 1, 5)                           # (3 layers, 1 head, 1 query, 1 text + 2x2 grid)
    >>> A[0, 0, 0] = torch.tensor([0.0, 0.5, 0.0, 0.0, 0.5])  # sum 1, two diagonal cells: one 8-blob
    >>> A[1, 0, 0] = torch.tensor([0.9, 0.1, 0.0, 0.0, 0.0])  # sum .1
    >>> A[2, 0, 0] = torch.tensor([0.8, 0.1, 0.1, 0.0, 0.0])  # sum .2: the elbow (rank 1 of .1, .2, 1)
    >>> localization_heads_sample(A, [1, 2, 3, 4], (2, 2), [0]).flatten().tolist()  # flat index >= 2 only
    [0.0, 0.0, 1.0]
    >>> localization_heads_sample(A, [1, 2, 3, 4], (2, 2), [0], elbow="value").flatten().tolist()  # sum >= .2
    [1.0, 0.0, 1.0]
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
    sums = img.double().sum(-1).reshape(L * H)  # (L*H,) flat head order l * H + h
    order, i = elbow_point(sums, elbow_axes)
    if elbow == "index":
        past = torch.arange(L * H) >= int(order[i])  # (L*H,)
    else:
        past = sums >= sums[order[i]]  # (L*H,)
    ent = spatial_entropy(img.reshape(L * H, R, C), threshold, mass, empty).double()  # (L*H, R, C) -> (L*H,)
    layer_ok = torch.arange(L * H) // H >= min_layer  # (L*H,)
    eligible = past & layer_ok & torch.isfinite(ent)  # (L*H,)
    score = torch.where(eligible, 1.0 / (1.0 + ent.nan_to_num(posinf=0.0)), torch.zeros_like(ent))  # (L*H,)
    return score.reshape(L, H).float()  # (L*H,) -> (L, H)


@register_scorer(
    "localization_heads",
    help="Localization Heads: how often a head is among a sample's m lowest-spatial-entropy heads past the "
         "attention-sum elbow (defaults: the authors' code per sample, the paper's frequency across samples)",
    options=(Option("m", int, DEFAULT_M, "heads selected per sample"),
             Option("zeros", str, DEFAULT_ZERO_RULE, "per-sample top-m and ineligible heads (score 0): exclude "
                                                     "or include", choices=ZERO_RULES),
             Option("query", str, "last_prompt", "query kind whose rows form the map: last_prompt (the reference), "
                                                 "out, in or coord", choices=("last_prompt", "out", "in", "coord")),
             Option("min_layer", int, 0, "first eligible layer, 0-based (0: the reference code; 2: vrh's earlier "
                                         "choice)"),
             Option("elbow", str, "index", "cut at the elbow by flat head index l*H+h (the reference) or by "
                                           "attention sum (value)", choices=ELBOW_CUTS),
             Option("elbow_axes", str, "raw", "elbow geometry: raw (rank, sum) points (the reference) or both axes "
                                              "scaled to [0, 1]", choices=ELBOW_AXES),
             Option("threshold", float, THRESHOLD, "binarise relu(map - mean) > threshold (reference 0.001)"),
             Option("mass", str, "shifted", "component mass: shifted (relu(map - mean) over all cells, the "
                                            "reference) or raw (map values over the components)", choices=MASSES),
             Option("empty", str, "zero", "entropy when no cell passes the threshold: zero (the reference) or inf "
                                          "(the head is ineligible)", choices=EMPTY)))
class LocalizationHeadsScorer(AccumulatingScorer):
    """Selection frequency (top-``m`` per sample, ties by (layer, head)) of :func:`localization_heads_sample`.

    Needs ``info.grid`` and the ``last_prompt`` query (``query`` option to change it). vrh's earlier
    adaptation is ``localization_heads:elbow=value:elbow_axes=scaled:empty=inf:mass=raw:min_layer=2:
    threshold=0``.
    """

    name = "localization_heads"
    omega = "freq"

    def __init__(self, *, query: str = "last_prompt", min_layer: int = 0, elbow: str = "index",
                 elbow_axes: str = "raw", threshold: float = THRESHOLD, mass: str = "shifted", empty: str = "zero",
                 **kw):
        super().__init__(**kw)
        for opt, value, allowed in (("elbow", elbow, ELBOW_CUTS), ("elbow_axes", elbow_axes, ELBOW_AXES),
                                    ("mass", mass, MASSES), ("empty", empty, EMPTY)):
            if value not in allowed:
                raise ValueError(f"localization_heads option {opt!r} must be one of {', '.join(allowed)}, "
                                 f"got {value!r}")
        self.query = query
        self.settings = dict(min_layer=min_layer, elbow=elbow, elbow_axes=elbow_axes, threshold=threshold,
                             mass=mass, empty=empty)
        self.min_layer = min_layer

    def update(self, sample_rows: torch.Tensor, sample_info: SampleInfo,
               extra: Mapping[str, torch.Tensor] | None = None) -> None:
        if sample_info.grid is None:
            raise ValueError("localization_heads needs SampleInfo.grid = (rows, cols) of the visual tokens")
        q = sample_info.query(self.query)
        self._count_empty(sample_rows, sample_info.key_positions, q)
        self._add(localization_heads_sample(sample_rows, sample_info.visual_positions, tuple(sample_info.grid), q,
                                            **self.settings))
