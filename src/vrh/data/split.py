"""The held-out split: disjoint detection and evaluation sets of one dataset, by sample id (paper App. H)."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from pathlib import Path  # noqa: F401 (the doctest)

from vrh.data.jsonl import Sample


def split_detect_eval(samples: Sequence[Sample], n_detect: int, n_eval: int | None, seed: int
                      ) -> tuple[list[Sample], list[Sample]]:
    """Disjoint detection and evaluation sets (paper App. H), deterministic in ``seed``.

    Ids are sorted and shuffled with ``random.Random(seed)``; the first ``n_detect`` form the detection
    set and the next ``n_eval`` (``None``: all the rest) the evaluation set. So the result does not
    depend on the input order, and changing ``n_eval`` never changes the detection set. Each set keeps
    the input order.

    >>> s = [Sample(id=str(i), image_path=Path("x.png"), task="vqa") for i in range(6)]
    >>> det, ev = split_detect_eval(s, 2, 3, seed=0)
    >>> len(det), len(ev), {x.id for x in det} & {x.id for x in ev}
    (2, 3, set())
    """
    if n_detect < 0 or (n_eval is not None and n_eval < 0):
        raise ValueError(f"split sizes must be >= 0, got n_detect={n_detect}, n_eval={n_eval}")
    ids = [s.id for s in samples]
    if len(set(ids)) != len(ids):
        dup = sorted(i for i, c in Counter(ids).items() if c > 1)[:5]
        raise ValueError(f"sample ids must be unique to split by id; duplicates: {dup}")
    need = n_detect + (n_eval or 0)
    if need > len(ids):
        raise ValueError(f"cannot take n_detect={n_detect} + n_eval={n_eval} from {len(ids)} samples")
    order = sorted(ids)
    random.Random(seed).shuffle(order)
    det_ids = set(order[:n_detect])
    eval_ids = set(order[n_detect:] if n_eval is None else order[n_detect:n_detect + n_eval])
    return [s for s in samples if s.id in det_ids], [s for s in samples if s.id in eval_ids]
