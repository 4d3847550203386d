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

Two sets of different sizes (a published top-16 against a top-20, :func:`set_overlap`) are compared as wholes:
``X`` is hypergeometric with ``n`` heads, ``|A|`` marked and ``|B|`` drawn, its tail summed exactly in integers;
:func:`layer_matched_null` is the stricter null that keeps each set's heads in their own layers.

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


# --- two sets of different sizes ------------------------------------------------------------------------
def p_at_least_sets(x: int, size_a: int, size_b: int, n: int) -> float:
    """``P(X >= x)`` for ``X`` the intersection of a fixed ``size_a``-subset and an independent uniformly drawn
    ``size_b``-subset of ``n`` heads (hypergeometric upper tail), summed exactly in integers (a p of 1e-30 keeps
    its digits: the ratio of two integers is rounded once).

    >>> round(p_at_least_sets(1, 1, 2, 4), 4), p_at_least_sets(0, 3, 3, 9)  # 1 - C(3,2)/C(4,2) = 1/2
    (0.5, 1.0)
    >>> f"{p_at_least_sets(8, 20, 16, 784):.2g}"  # the paper's top-20 and a top-16 sharing 8 of 784 heads
    '4.2e-10'
    """
    if not (0 <= size_a <= n and 0 <= size_b <= n):
        raise ValueError(f"set sizes {size_a} and {size_b} must lie in [0, {n}] (the number of heads)")
    if x <= 0:
        return 1.0
    tail = sum(math.comb(size_a, i) * math.comb(n - size_a, size_b - i) for i in range(x, min(size_a, size_b) + 1))
    return tail / math.comb(n, size_b)


@dataclass(frozen=True)
class SetOverlap:
    """Two head sets of any sizes compared as wholes: what they share, and what chance alone would give."""

    n: int
    size_a: int
    size_b: int
    intersection: int
    jaccard: float  # |A & B| / |A | B|
    shared: tuple[Head, ...]  # in A's order
    chance: float  # E[X] = size_a * size_b / n
    p_value: float  # P(X >= intersection), hypergeometric

    def to_json(self) -> dict:
        d = asdict(self)
        d["shared"] = [list(h) for h in self.shared]
        return d


def set_overlap(a: Sequence[Head], b: Sequence[Head], n: int) -> SetOverlap:
    """Whole-list overlap of head sets ``a`` and ``b`` (any lengths, no ranking needed) among ``n`` heads.

    >>> o = set_overlap([(0, 0), (0, 1), (1, 0)], [(1, 0), (1, 1)], n=4)
    >>> o.intersection, o.shared, o.chance, round(o.jaccard, 4), o.p_value
    (1, ((1, 0),), 1.5, 0.25, 1.0)
    """
    ta = list(dict.fromkeys(tuple(map(int, h)) for h in a))
    tb = set(tuple(map(int, h)) for h in b)
    shared = tuple(h for h in ta if h in tb)
    x, na, nb = len(shared), len(ta), len(tb)
    union = na + nb - x
    return SetOverlap(n=n, size_a=na, size_b=nb, intersection=x, jaccard=x / union if union else 0.0, shared=shared,
                      chance=na * nb / n, p_value=p_at_least_sets(x, na, nb, n))


def layer_matched_null(a: Sequence[Head], b: Sequence[Head], num_heads: int) -> tuple[float, list[float]]:
    """The chance overlap when each set's heads are random *within their layers*: per layer ``l``, ``X_l`` is
    hypergeometric (``num_heads`` heads, ``a_l`` and ``b_l`` drawn), the layers independent. Returns the
    expected overlap and the pmf of the total (exact convolution). A stricter null than the uniform one: two
    kinds of heads that both sit in the middle layers share more by chance than two uniform draws.

    >>> e, pmf = layer_matched_null([(0, 0), (1, 0)], [(0, 1), (2, 0)], num_heads=2)
    >>> e, [round(p, 2) for p in pmf]  # layer 0: 1 of 2 against 1 of 2 -> 1/2; layers 1, 2: nothing in common
    (0.5, [0.5, 0.5])
    """
    from collections import Counter

    ca, cb = Counter(h[0] for h in a), Counter(h[0] for h in b)
    total = [1.0]
    expected = 0.0
    for layer in set(ca) & set(cb):
        na, nb = ca[layer], cb[layer]
        denom = math.comb(num_heads, nb)
        pmf = [math.comb(na, i) * math.comb(num_heads - na, nb - i) / denom for i in range(min(na, nb) + 1)]
        expected += na * nb / num_heads
        conv = [0.0] * (len(total) + len(pmf) - 1)
        for i, p in enumerate(total):
            for j, q in enumerate(pmf):
                conv[i + j] += p * q
        total = conv
    return expected, total


def untied_k(values: list[float] | None, k: int) -> int:
    """The largest k' <= k whose top-k' does not cut through tied scores (``values`` best first; None: a list,
    whose order is its own). 0 when every cut up to k is inside a tie (an all-zero map).

    >>> untied_k([3.0, 2.0, 1.0, 0.0, 0.0, 0.0], 5), untied_k([3.0, 2.0, 1.0, 0.0, 0.0, 0.0], 2)
    (3, 2)
    >>> untied_k([0.0, 0.0, 0.0], 2), untied_k([0.0, 0.0, 0.0], 3), untied_k(None, 4)
    (0, 3, 4)
    """
    if values is None:
        return k
    while 0 < k < len(values) and values[k - 1] == values[k]:
        k -= 1
    return k
