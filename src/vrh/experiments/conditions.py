"""Masking conditions as values: what one masked evaluation knocks out, and how it is labelled.

A :class:`Condition` is frozen data: the ``kind`` of mask (``none``; ``top_k`` heads of a scoring
``method``; ``random`` heads drawn outside a set; an explicit ``list``), the resolved ``heads`` ((layer,
head), 0-based, sorted), ``k``, the ``seed`` of a random draw, the ``mask_mode`` (see
:func:`vrh.core.masking.mask_heads`) and a ``label`` unique within a run, which tags every sample record of the
condition in ``samples.jsonl``. One runner (:func:`vrh.experiments.runner.run_conditions`) evaluates a list of them.

Random controls (:func:`random_controls`) say what they could draw: a seed whose draw is impossible (fewer
eligible heads than k) is reported, not silently dropped, and when several seeds draw the same head set
(e.g. k = 16 of 32 heads with the top 16 excluded leaves exactly one set) the control is flagged as not
random, with the number of distinct sets.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from vrh.core.heads import Head, eligible_heads, random_heads, top_k as rank_top_k
from vrh.core.masking import get_mask_mode

KINDS = ("none", "top_k", "random", "list")


@dataclass(frozen=True)
class Condition:
    label: str
    kind: str
    heads: tuple[Head, ...] = ()
    k: int = 0
    method: str | None = None  # top_k: the scorer that ranked; random: the method whose top-k was avoided
    seed: int | None = None
    mask_mode: str = "zero"
    source: str | None = None  # where the ranking came from (a detection run folder), if anywhere
    excluded: tuple[Head, ...] = field(default=(), repr=False)  # random: heads that could not be drawn

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown condition kind {self.kind!r}; choose from {KINDS}")
        get_mask_mode(self.mask_mode)  # a registered mode, or ValueError naming the registered ones
        heads = tuple(sorted({(int(l), int(h)) for l, h in self.heads}))
        object.__setattr__(self, "heads", heads)
        object.__setattr__(self, "excluded", tuple(sorted({(int(l), int(h)) for l, h in self.excluded})))
        if self.kind == "none" and heads:
            raise ValueError("a 'none' condition masks no heads")

    @property
    def evaluated_mask_mode(self) -> str:
        """The mode the evaluation runs under: with no head to mask every mode leaves the model as it is, so
        the unmasked model counts as ``zero`` (one evaluation, batchable with the zero-mode head sets)."""
        return self.mask_mode if self.heads else "zero"

    @property
    def key(self) -> tuple[frozenset, str]:
        """Evaluation identity: greedy answers depend only on the masked set and how it is masked."""
        return frozenset(self.heads), self.evaluated_mask_mode

    def tag(self) -> dict[str, Any]:
        """The fields written on every sample record of this condition."""
        return {"condition": self.label, "kind": self.kind, "method": self.method, "k": self.k, "seed": self.seed,
                "mask_mode": self.mask_mode}

    def to_json(self) -> dict[str, Any]:
        return {**self.tag(), "heads": [list(h) for h in self.heads], "source": self.source}


def check_k(k: int, num_layers: int, num_heads: int, option: str = "--k") -> None:
    """Refuse k outside [0, L * H], naming the option and the model's head count."""
    total = num_layers * num_heads
    if not 0 <= k <= total:
        raise ValueError(f"{option} {k} is outside [0, {total}]: the model has {num_layers} layers x {num_heads} "
                         f"heads = {total} heads")


def random_room(k: int, num_layers: int, num_heads: int, *, outside: Iterable[Head] | None = None,
                exclude_layers: Sequence[int] = ()) -> int:
    """How many heads the random control of ``k`` may draw from: those not in ``outside`` (e.g. a detected
    top-k) and not in ``exclude_layers``. ``outside=None``: the top k of a ranking not made yet (an up-front
    check, before detection): any k heads leave ``L * H - k``; the excluded layers are counted when the
    draw is made.

    >>> random_room(3, 2, 4), random_room(3, 2, 4, outside=[(0, 0), (1, 1), (1, 2)], exclude_layers=[0])
    (5, 2)
    """
    if outside is None:
        return num_layers * num_heads - k
    return len(eligible_heads(num_layers, num_heads, outside, exclude_layers))


def check_room(k: int, num_layers: int, num_heads: int, option: str = "--k", *, outside: Iterable[Head] | None = None,
               exclude_layers: Sequence[int] = ()) -> int:
    """Refuse a ``k`` that leaves no room for ``k`` random heads (:func:`random_room`, same arguments);
    return the room. The error names ``option`` (``--k``, ``--ks``). Refuses k outside ``[0, L * H]``
    first (:func:`check_k`).

    >>> check_room(2, 2, 2)
    2
    >>> check_room(2, 2, 2, outside=[(0, 0)], exclude_layers=[1])
    Traceback (most recent call last):
    ValueError: --k 2: only 1 heads are eligible for the random control (2 x 2 heads minus 1 excluded heads and
    layers [1]); use a smaller k (or fewer --exclude-layers)
    """
    check_k(k, num_layers, num_heads, option)
    outside = None if outside is None else {tuple(h) for h in outside}
    room = random_room(k, num_layers, num_heads, outside=outside, exclude_layers=exclude_layers)
    if k <= room:
        return room
    total = num_layers * num_heads
    if outside is None:
        raise ValueError(f"{option} {k}: no room for {k} random heads outside the top {k} of {total} heads; "
                         f"use k <= {total // 2}")
    layers = f" and layers {list(exclude_layers)}" if exclude_layers else ""
    fewer = " (or fewer --exclude-layers)" if exclude_layers else ""
    raise ValueError(f"{option} {k}: only {room} heads are eligible for the random control ({num_layers} x "
                     f"{num_heads} heads minus {len(outside)} excluded heads{layers}); use a smaller k{fewer}")


def none(mask_mode: str = "zero", label: str = "none") -> Condition:
    """The unmasked model."""
    return Condition(label=label, kind="none", mask_mode=mask_mode)


def top_k(scores: torch.Tensor, k: int, *, method: str, mask_mode: str = "zero", label: str | None = None,
          source: str | None = None) -> Condition:
    """The ``k`` best heads of an ``[L, H]`` score map (ties by (layer, head), :func:`vrh.core.heads.top_k`)."""
    L, H = scores.shape
    check_k(k, L, H)
    if k == 0:
        return none(mask_mode, label or "none")
    return Condition(label=label or f"top{k}:{method}", kind="top_k", heads=tuple(rank_top_k(scores, k)), k=k,
                     method=method, mask_mode=mask_mode, source=source)


def explicit(heads: Iterable[Head], *, mask_mode: str = "zero", label: str | None = None) -> Condition:
    """A given head list (e.g. ``--mask-heads 3:1,10:4``)."""
    hs = tuple(sorted({tuple(h) for h in heads}))
    if not hs:
        return none(mask_mode, label or "none")
    return Condition(label=label or "list:" + ",".join(f"{l}:{h}" for l, h in hs), kind="list", heads=hs,
                     k=len(hs), mask_mode=mask_mode)


def random_outside(num_layers: int, num_heads: int, k: int, seed: int, *, outside: Iterable[Head] = (),
                   exclude_layers: Sequence[int] = (), method: str | None = None, mask_mode: str = "zero",
                   label: str | None = None) -> Condition:
    """``k`` heads drawn uniformly (seeded) among those not in ``outside`` and not in ``exclude_layers``.

    Raises ValueError naming ``--k`` when fewer than ``k`` heads are eligible (:func:`check_room`)."""
    banned = tuple(sorted({tuple(h) for h in outside}))
    check_room(k, num_layers, num_heads, outside=banned, exclude_layers=exclude_layers)
    heads = random_heads(num_layers, num_heads, k, seed, exclude=banned, exclude_layers=exclude_layers)
    return Condition(label=label or f"random{k}:s{seed}", kind="random", heads=tuple(heads), k=k, method=method,
                     seed=seed, mask_mode=mask_mode, excluded=banned)


@dataclass
class RandomControl:
    """The random conditions of one k, and what could be drawn."""

    k: int
    conditions: list[Condition]
    seeds_requested: tuple[int, ...]
    n_eligible: int
    n_distinct: int  # distinct head sets among the drawn conditions
    warnings: list[str]

    def to_json(self) -> dict[str, Any]:
        return {"k": self.k, "seeds_requested": list(self.seeds_requested),
                "seeds_drawn": [c.seed for c in self.conditions], "n_eligible_heads": self.n_eligible,
                "n_distinct_sets": self.n_distinct, "warnings": list(self.warnings)}


def random_controls(num_layers: int, num_heads: int, k: int, seeds: Sequence[int], *, outside: Iterable[Head] = (),
                    exclude_layers: Sequence[int] = (), method: str | None = None, mask_mode: str = "zero",
                    label: str = "random{k}:s{seed}") -> RandomControl:
    """One random condition per seed, plus a report: undrawable k gives no conditions and a warning; several
    seeds drawing one set are kept but flagged (the control is then not random)."""
    banned = {tuple(h) for h in outside}
    eligible = random_room(k, num_layers, num_heads, outside=banned, exclude_layers=exclude_layers)
    warnings: list[str] = []
    conds: list[Condition] = []
    if k > eligible:
        warnings.append(f"k={k}: no random control: only {eligible} heads lie outside the {len(banned)} excluded "
                        f"heads{f' and layers {list(exclude_layers)}' if exclude_layers else ''}")
    else:
        conds = [random_outside(num_layers, num_heads, k, s, outside=banned, exclude_layers=exclude_layers,
                                method=method, mask_mode=mask_mode, label=label.format(k=k, seed=s)) for s in seeds]
    distinct = len({c.heads for c in conds})
    if conds and distinct < len(conds):
        msg = (f"k={k}: the {len(conds)} random seeds drew only {distinct} distinct head set(s) from {eligible} "
               "eligible heads")
        if distinct == 1:
            msg += " -- the control is not random (every seed masks the same heads)"
        warnings.append(msg)
    return RandomControl(k, conds, tuple(seeds), eligible, distinct, warnings)


# --- where heads come from ----------------------------------------------------------------------------
@dataclass
class HeadSource:
    """A ``--mask-heads`` / ``--heads`` value resolved: nothing, a detection run's score map, or a list."""

    kind: str  # "none" | "run" | "list"
    path: str | None = None
    scorer: str | None = None
    scores: torch.Tensor | None = None  # (L, H), kind "run"
    heads: tuple[Head, ...] = ()  # kind "list"


def head_source(spec: str | None, scorer: str | None, num_layers: int | None = None, num_heads: int | None = None,
                option: str = "--mask-heads") -> HeadSource:
    """Resolve a detection run folder, a ``LAYER:HEAD,...`` list or a named list (``paper:MODEL/BENCHMARK``,
    ``qrhead:MODEL/DATA``: :mod:`vrh.data.published_heads`),
    checked against the model's grid when ``num_layers``/``num_heads`` are given. A missing folder is reported
    as a missing folder."""
    import re
    from pathlib import Path

    from vrh import runs
    from vrh.core.heads import check_grid, parse_head_list
    from vrh.data.published_heads import is_named_spec, named_heads

    if spec is None or str(spec).strip() == "":
        return HeadSource("none")
    spec = str(spec)
    if is_named_spec(spec):  # paper:MODEL/BENCHMARK, qrhead:MODEL/DATA, ...: published (vrh.data.published_heads)
        named = named_heads(spec, num_layers, num_heads, option)
        if named.scores is not None:  # a published score map: its top --k, as a detection run's
            return HeadSource("run", path=spec, scorer=spec.split(":")[0], scores=torch.tensor(named.scores))
        return HeadSource("list", path=spec, heads=named.heads)
    if Path(spec).is_dir():
        hs = runs.read_head_scores(spec)
        name = scorer or hs.scorer
        scores = hs.scores(name)
        if num_layers is not None:
            check_grid(scores.shape, num_layers, num_heads, f"{option} {spec}")
        return HeadSource("run", path=spec, scorer=name, scores=scores)
    if not re.fullmatch(r"\s*-?\d+\s*:\s*-?\d+\s*(,\s*-?\d+\s*:\s*-?\d+\s*)*,?\s*", spec):
        raise FileNotFoundError(f"{option} {spec}: no such detection run folder (and not a head list "
                                "LAYER:HEAD,..., e.g. 3:1,10:4)")
    heads = tuple(parse_head_list(spec))
    if num_layers is not None:
        for l, h in heads:
            if not (0 <= l < num_layers and 0 <= h < num_heads):
                raise ValueError(f"{option}: head {l}:{h} is outside this model's {num_layers} layers x {num_heads} "
                                 "heads (0-based)")
    return HeadSource("list", scorer=None, heads=heads)
