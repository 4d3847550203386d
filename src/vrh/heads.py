"""Head identities and rankings: ``(layer, head)``, 0-based (see :mod:`vrh`)."""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

import torch

Head = tuple[int, int]


def rank_heads(scores: torch.Tensor) -> list[Head]:
    """All heads of a ``[L, H]`` score map, best first; ties broken by (layer, head) ascending.

    >>> rank_heads(torch.tensor([[0.1, 0.5], [0.5, 0.0]]))
    [(0, 1), (1, 0), (0, 0), (1, 1)]
    """
    if scores.dim() != 2:
        raise ValueError(f"score map must be [L, H], got shape {tuple(scores.shape)}")
    L, H = scores.shape
    flat = torch.nan_to_num(scores.detach().double().reshape(-1), nan=float("-inf"))  # (L*H,)
    # stable sort on -score keeps the (layer, head) order among ties
    order = torch.sort(-flat, stable=True).indices.tolist()
    return [(i // H, i % H) for i in order]


def top_k(scores: torch.Tensor, k: int) -> list[Head]:
    """The ``k`` best heads of a ``[L, H]`` score map."""
    return rank_heads(scores)[:k]


def random_heads(
    num_layers: int,
    num_heads: int,
    k: int,
    seed: int,
    exclude: Iterable[Head] = (),
    exclude_layers: Sequence[int] = (),
) -> list[Head]:
    """``k`` heads drawn uniformly without replacement from those not in ``exclude`` (paper's control)."""
    banned = {tuple(h) for h in exclude}
    pool = [
        (l, h)
        for l in range(num_layers)
        if l not in set(exclude_layers)
        for h in range(num_heads)
        if (l, h) not in banned
    ]
    if k > len(pool):
        raise ValueError(f"cannot draw {k} random heads from {len(pool)} eligible heads")
    return sorted(random.Random(seed).sample(pool, k))


def parse_head_list(text: str) -> list[Head]:
    """Parse ``"3:1,10:4"`` (layer:head pairs) into ``[(3, 1), (10, 4)]``."""
    heads: list[Head] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            l, h = part.split(":")
            heads.append((int(l), int(h)))
        except ValueError:
            raise ValueError(f"bad head {part!r}: expected LAYER:HEAD, e.g. 3:1") from None
    return heads
