"""Localization Heads (Kang et al., CVPR 2025), adapted to referring-expression grounding (paper Sec. 3.2,
Tab. 2): heads whose image attention is large (above an elbow) and spatially concentrated (low entropy).
Shared conventions: :mod:`vrh.scorers.retrieval_heads`."""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F

from vrh.scorers.registry import Option, register_scorer
from vrh.scoring import DEFAULT_M, AccumulatingScorer, Index, SampleInfo, _check_rows, _take, as_index

MIN_LAYER = 2  # layers 0 and 1 are excluded


def elbow_index(values: torch.Tensor) -> int:
    """Index of the elbow of the DESCENDING-sorted ``values``: the point farthest from the chord joining
    the first and last points, both axes scaled to [0, 1] (so the answer does not depend on how many heads
    or on the attention scale). Ties -> the earliest point; fewer than 3 points or a flat curve -> 0.

    >>> elbow_index(torch.tensor([1.0, 10.0, 0.0, 2.0]))  # sorted 10, 2, 1, 0 -> the point 2
    1
    """
    y = torch.sort(values.detach().double().reshape(-1), descending=True).values  # (n,)
    n = y.numel()
    if n < 3 or y[0] == y[-1]:
        return 0
    x = torch.arange(n, dtype=torch.float64) / (n - 1)
    yn = (y - y[-1]) / (y[0] - y[-1])
    dist = (1.0 - x - yn).abs()  # distance to the chord x + y = 1, up to the constant 1/sqrt(2)
    return int(dist.argmax())


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


def spatial_entropy(maps: torch.Tensor) -> torch.Tensor:
    """Spatial entropy of attention maps ``[B, R, C] -> [B]`` (Localization Heads' concentration measure).

    Binarize ``map - mean(map) > 0``, take 8-connected components, ``p_i`` = the component's attention
    mass (original values) / mass over all components, entropy ``-sum p_i log p_i`` (nats). One blob -> 0;
    scattered blobs -> high. A map with no cell above its mean (constant, incl. all-zero) has no component:
    +inf (treated as "not concentrated").

    >>> m = torch.tensor([[[0.4, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.2]],
    ...                   [[0.3, 0.3, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]])  # (2, 3, 3)
    >>> spatial_entropy(m)  # -(2/3 ln 2/3 + 1/3 ln 1/3) = 0.6365; one blob = 0
    tensor([0.6365, 0.0000])
    """
    if maps.dim() != 3:
        raise ValueError(f"maps must be [B, R, C], got {tuple(maps.shape)}")
    B, R, C = maps.shape
    m = maps.detach().double()
    fg = (m - m.mean(dim=(1, 2), keepdim=True)) > 0  # (B, R, C)
    lab = connected_components(fg).reshape(B, R * C)  # (B, R, C) -> (B, R*C)
    mass = torch.zeros(B, R * C + 1, dtype=torch.float64).scatter_add_(1, lab, m.reshape(B, R * C))[:, 1:]
    total = mass.sum(1, keepdim=True)  # (B, 1)
    p = mass / total.clamp_min(1e-300)  # (B, R*C)
    ent = torch.where(p > 0, p * (1.0 / p.clamp_min(1e-300)).log(), torch.zeros_like(p)).sum(1)  # (B,); >= +0
    return torch.where(fg.reshape(B, -1).any(1) & (total[:, 0] > 0), ent, torch.full_like(ent, float("inf"))).float()


def localization_heads_sample(rows: torch.Tensor, visual: Index, grid: tuple[int, int], queries: Index, *,
                              min_layer: int = MIN_LAYER) -> torch.Tensor:
    """Per-sample Localization Heads ranking score ``[L, H]``: ``1 / (1 + entropy)`` for eligible heads, else 0.

    Original (training-free grounding): from the last input token, (1) each head's attention sum over the
    image; keep heads above the elbow of the descending-sorted sums; (2) among them, rank by LOW spatial
    entropy of the head's image attention map; layers 0-1 excluded; heads picked most often over samples
    win. Adaptation / details: several query rows are averaged into one map; the elbow runs over all
    ``L*H`` heads and keeps the heads whose sum is >= the elbow point's; eligible = above elbow AND layer
    >= ``min_layer`` AND a finite entropy. The score is a monotone stand-in for -entropy in (0, 1] so the
    scorer's top-``m`` selection frequency reproduces "top-m lowest entropy among eligible heads" (ineligible
    heads score 0 and are never selected). Needs no box: ``K`` is unused.

    >>> A = torch.zeros(3, 1, 1, 5)                       # (3 layers, 1 head, 1 query, 1 text + 2x2 grid)
    >>> A[2, 0, 0] = torch.tensor([0.2, 0.8, 0.0, 0.0, 0.0])  # one blob -> entropy 0 -> score 1
    >>> A[1, 0, 0] = torch.tensor([0.0, 1.0, 0.0, 0.0, 0.0])  # layer 1: excluded
    >>> A[0, 0, 0] = torch.tensor([0.9, 0.1, 0.0, 0.0, 0.0])  # below the elbow
    >>> localization_heads_sample(A, visual=[1, 2, 3, 4], grid=(2, 2), queries=[0]).flatten().tolist()
    [0.0, 0.0, 1.0]
    """
    _check_rows(rows)
    L, H = rows.shape[:2]
    v = as_index(visual, rows.shape[-1])
    R, C = grid
    if R * C != v.numel():
        raise ValueError(f"grid {grid} has {R * C} cells but there are {v.numel()} visual tokens")
    q = as_index(queries, rows.shape[2])
    if q.numel() == 0 or v.numel() == 0:
        return torch.zeros(L, H)
    img = _take(_take(rows, 2, q), 3, v).double().mean(2).cpu()  # (L, H, |Q|, V) -> (L, H, V)
    sums = img.sum(-1)  # (L, H)
    cut = torch.sort(sums.reshape(-1), descending=True).values[elbow_index(sums)]
    ent = spatial_entropy(img.reshape(L * H, R, C)).reshape(L, H).double()  # (L*H, R, C) -> (L, H)
    layer_ok = (torch.arange(L) >= min_layer).unsqueeze(1)  # (L, 1)
    eligible = (sums >= cut) & (sums > 0) & layer_ok & torch.isfinite(ent)  # (L, H)
    return torch.where(eligible, 1.0 / (1.0 + ent.clamp_min(0).nan_to_num(posinf=0.0)), torch.zeros_like(ent)).float()


@register_scorer("localization_heads",
                 help="Localization Heads: how often a head is among a sample's m most concentrated (lowest "
                      "spatial entropy) heads with large image attention",
                 options=(Option("m", int, DEFAULT_M, "heads selected per sample"),
                          Option("query", str, "last_prompt", "query kind whose rows form the map: last_prompt, "
                                                              "out, in or coord",
                                 choices=("last_prompt", "out", "in", "coord")),
                          Option("min_layer", int, MIN_LAYER, "first eligible layer (0-based)")))
class LocalizationHeadsScorer(AccumulatingScorer):
    """Selection frequency (top-``m`` per sample, ties by (layer, head)) of :func:`localization_heads_sample`.

    Needs ``info.grid`` and the ``last_prompt`` query (``query`` option to change it).
    """

    name = "localization_heads"
    omega = "freq"

    def __init__(self, *, query: str = "last_prompt", min_layer: int = MIN_LAYER, **kw):
        super().__init__(**kw)
        self.query = query
        self.min_layer = min_layer

    def update(self, sample_rows: torch.Tensor, sample_info: SampleInfo,
               extra: Mapping[str, torch.Tensor] | None = None) -> None:
        if sample_info.grid is None:
            raise ValueError("localization_heads needs SampleInfo.grid = (rows, cols) of the visual tokens")
        q = sample_info.query(self.query)
        self._count_empty(sample_rows, sample_info.key_positions, q)
        self._add(localization_heads_sample(sample_rows, sample_info.visual_positions, tuple(sample_info.grid), q,
                                            min_layer=self.min_layer))
