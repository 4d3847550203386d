"""Head identities and rankings: ``(layer, head)``, 0-based (see :mod:`vrh`)."""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

import torch

Head = tuple[int, int]


def check_grid(shape: Sequence[int], num_layers: int, num_heads: int, what: str, model: str = "this model") -> None:
    """Refuse scores from a model with another decoder grid: a ``(layer, head)`` names the same head only on
    the same layer x head grid. ``shape``: the scores' ``(L, H)``; ``what`` names where they came from
    (``--heads runs/det``), ``model`` the model they are applied to.

    >>> check_grid((2, 4), 2, 4, "--heads det")
    >>> check_grid((3, 4), 2, 4, "--heads det")
    Traceback (most recent call last):
    ValueError: --heads det scored a model with (3, 4) (layers, heads); this model has (2, 4): heads carry over
    only between models with the same layer x head grid (the same language backbone)
    """
    if tuple(shape) != (num_layers, num_heads):
        raise ValueError(f"{what} scored a model with {tuple(shape)} (layers, heads); {model} has ({num_layers}, "
                         f"{num_heads}): heads carry over only between models with the same layer x head grid (the "
                         "same language backbone)")


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


def eligible_heads(num_layers: int, num_heads: int, exclude: Iterable[Head] = (),
                   exclude_layers: Sequence[int] = ()) -> list[Head]:
    """The heads a random draw may pick: every head not in ``exclude`` and not in ``exclude_layers``.

    >>> eligible_heads(2, 2, exclude=[(1, 0)], exclude_layers=[0])
    [(1, 1)]
    """
    outside = sorted({int(layer) for layer in exclude_layers if not 0 <= int(layer) < num_layers})
    if outside:
        raise ValueError(f"--exclude-layers {','.join(map(str, outside))}: this model has {num_layers} layers "
                         f"(0-{num_layers - 1}); an excluded layer must be one of them")
    banned, banned_layers = {tuple(h) for h in exclude}, set(exclude_layers)
    return [(l, h) for l in range(num_layers) if l not in banned_layers for h in range(num_heads)
            if (l, h) not in banned]


def random_heads(
    num_layers: int,
    num_heads: int,
    k: int,
    seed: int,
    exclude: Iterable[Head] = (),
    exclude_layers: Sequence[int] = (),
) -> list[Head]:
    """``k`` heads drawn uniformly without replacement from those not in ``exclude`` (paper's control)."""
    pool = eligible_heads(num_layers, num_heads, exclude, exclude_layers)
    if k > len(pool):
        raise ValueError(f"cannot draw {k} random heads from {len(pool)} eligible heads")
    return sorted(random.Random(seed).sample(pool, k))


class DuplicateHead(ValueError):
    """A head list that names one head twice (it would count as two heads)."""


def parse_head_list(text: str) -> list[Head]:
    """Parse ``"3:1,10:4"`` (layer:head pairs) into ``[(3, 1), (10, 4)]``; a head named twice is refused
    (:class:`DuplicateHead`): the list would count it twice.

    >>> parse_head_list("3:1,3:1")
    Traceback (most recent call last):
    ...
    vrh.core.heads.DuplicateHead: head 3:1 is listed twice in '3:1,3:1'; a head list names each head once
    """
    heads: list[Head] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            l, h = part.split(":")
            head = (int(l), int(h))
        except ValueError:
            raise ValueError(f"bad head {part!r}: expected LAYER:HEAD, e.g. 3:1") from None
        if head in heads:
            raise DuplicateHead(f"head {head[0]}:{head[1]} is listed twice in {text!r}; a head list names each head "
                                "once")
        heads.append(head)
    return heads
