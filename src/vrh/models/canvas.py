"""The LLaVA-style choice of an any-resolution canvas, shared by the families that port it (DeepSeek-VL2's
candidate resolutions, Magma's crop grids): the candidate that keeps the most image pixels, then wastes the least.
"""

from __future__ import annotations

from collections.abc import Sequence


def select_best_resolution(size: tuple[int, int], candidates: Sequence[Sequence[int]]) -> tuple[int, int] | None:
    """The ``(width, height)`` canvas among ``candidates`` a ``size = (width, height)`` image is resized onto (aspect
    kept): the most effective pixels, then the least waste, the first candidate winning ties; None when there is
    none. The order of ``candidates`` is the family's own (it decides ties).

    >>> select_best_resolution((1000, 500), [(512, 512), (1024, 512), (512, 1024)])
    (1024, 512)
    """
    w, h = size
    best, best_eff, best_waste = None, 0, float("inf")
    for cw, ch in candidates:
        s = min(cw / w, ch / h)
        eff = min(int(w * s) * int(h * s), w * h)
        waste = cw * ch - eff
        if eff > best_eff or (eff == best_eff and waste < best_waste):
            best, best_eff, best_waste = (cw, ch), eff, waste
    return best
