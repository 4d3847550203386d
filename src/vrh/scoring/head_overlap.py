"""How much two head rankings agree at their top, and what chance alone would give.

Why chance levels: an overlap figure means nothing without its chance level for that many heads. Two top-5
sets of a 32-head model share 0.78 heads on average by chance alone (5 * 5 / 32); of a 784-head model,
0.03. Under the null, the two top-``k`` sets are independent uniformly drawn ``k``-subsets of the ``n``
heads, so their intersection ``X`` is hypergeometric (``n`` heads, ``k`` marked, ``k`` drawn):
``P(X = x) = C(k, x) C(n - k, k - x) / C(n, k)``. From it: the expected intersection ``k^2 / n``, the expected
fraction ``k / n``, the expected Jaccard index ``E[X / (2k - X)]`` (not ``k / (2n - k)``: Jaccard is not
linear in ``X``) and the one-sided p-value ``P(X >= x)`` of an observed intersection.

Rank correlations over all ``n`` heads have chance level 0; their null spread is reported as the standard
deviation under independence (Spearman ``1 / sqrt(n - 1)``, Kendall tau ``sqrt(2 (2n + 5) / (9 n (n - 1)))``),
so a reader can tell a correlation of 0.1 on 32 heads (noise) from one on 784 heads.

Pure functions of heads given as ``(layer, head)`` pairs, rank 1 first (ties broken upstream, by
:func:`vrh.core.heads.top_k`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

Head = tuple[int, int]


def _check(k: int, n: int) -> None:
    if not 1 <= k <= n:
        raise ValueError(f"k must lie in [1, {n}] (the number of heads), got {k}")


def intersection_pmf(k: int, n: int) -> list[float]:
    """``P(X = x)`` for ``x = 0 .. k``: the intersection of two independent random ``k``-subsets of ``n``.

    >>> [round(p, 4) for p in intersection_pmf(2, 4)]  # C(2,x) C(2,2-x) / C(4,2): 1/6, 4/6, 1/6
    [0.1667, 0.6667, 0.1667]
    """
    _check(k, n)
    total = math.comb(n, k)
    return [math.comb(k, x) * math.comb(n - k, k - x) / total for x in range(k + 1)]


def p_at_least(x: int, k: int, n: int) -> float:
    """One-sided p-value of an observed intersection: ``P(X >= x)`` under the null.

    >>> round(p_at_least(2, 2, 4), 4), p_at_least(0, 2, 4)
    (0.1667, 1.0)
    """
    return 1.0 if x <= 0 else min(1.0, sum(intersection_pmf(k, n)[x:]))


@dataclass(frozen=True)
class Chance:
    """What two independent random top-``k`` sets of ``n`` heads share on average."""

    k: int
    n: int
    intersection: float  # E[X] = k^2 / n
    fraction: float  # E[X / k] = k / n
    jaccard: float  # E[X / (2k - X)]


def chance(k: int, n: int) -> Chance:
    """The chance levels of the top-``k`` overlap figures for ``n`` heads.

    >>> c = chance(2, 4)
    >>> c.intersection, c.fraction, round(c.jaccard, 4)  # E[J] = 4/6 * 1/3 + 1/6 * 1
    (1.0, 0.5, 0.3889)
    """
    pmf = intersection_pmf(k, n)
    return Chance(k=k, n=n, intersection=k * k / n, fraction=k / n,
                  jaccard=sum(p * x / (2 * k - x) for x, p in enumerate(pmf)))


@dataclass(frozen=True)
class TopKOverlap:
    """The top-``k`` agreement of two rankings, with its chance level and p-value."""

    k: int
    n: int
    intersection: int  # |A & B|
    fraction: float  # |A & B| / k
    jaccard: float  # |A & B| / |A | B|
    shared: tuple[Head, ...]  # the heads in both, in A's rank order
    chance: Chance
    p_value: float  # P(X >= intersection) for two random k-sets

    def to_json(self) -> dict:
        d = asdict(self)
        d["shared"] = [list(h) for h in self.shared]
        return d


def topk_overlap(a: Sequence[Head], b: Sequence[Head], k: int, n: int) -> TopKOverlap:
    """Overlap of the first ``k`` heads of rankings ``a`` and ``b`` (each at least ``k`` long) of ``n`` heads.

    >>> o = topk_overlap([(0, 0), (0, 1), (1, 0)], [(0, 1), (1, 1), (0, 0)], k=2, n=4)
    >>> o.intersection, o.fraction, round(o.jaccard, 4), o.shared, o.chance.fraction, round(o.p_value, 4)
    (1, 0.5, 0.3333, ((0, 1),), 0.5, 0.8333)
    """
    _check(k, n)
    if len(a) < k or len(b) < k:
        raise ValueError(f"top-{k} overlap needs two rankings of at least {k} heads, got {len(a)} and {len(b)}")
    ta, tb = [tuple(map(int, h)) for h in a[:k]], {tuple(map(int, h)) for h in b[:k]}
    shared = tuple(h for h in ta if h in tb)
    x = len(shared)
    return TopKOverlap(k=k, n=n, intersection=x, fraction=x / k, jaccard=x / (2 * k - x), shared=shared,
                       chance=chance(k, n), p_value=p_at_least(x, k, n))


def spearman_null_sd(n: int) -> float:
    """Standard deviation of Spearman's rho between two independent rankings of ``n`` items (no ties).

    >>> round(spearman_null_sd(32), 4)
    0.1796
    """
    return 1 / math.sqrt(n - 1) if n > 1 else float("nan")


def kendall_null_sd(n: int) -> float:
    """Standard deviation of Kendall's tau between two independent rankings of ``n`` items (no ties).

    >>> round(kendall_null_sd(32), 4)
    0.1243
    """
    return math.sqrt(2 * (2 * n + 5) / (9 * n * (n - 1))) if n > 1 else float("nan")
