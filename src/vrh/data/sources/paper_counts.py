"""The sample counts the paper evaluates (App. E.2), per benchmark and subset, and the check that puts a
conversion's count next to them and says why the two differ.

``vrh data convert`` ends with that line and ``vrh data inspect`` prints it for every (benchmark, split)
in the file, so a user sees before any GPU time is spent whether the set is the paper's. The reasons come
from what the conversion did (``--limit``, skipped rows, rows outside the subset, a snapshot whose row
count is not the published one, a count-changing option) and from what is known about the source (the
``note`` of its entry: RefCOCO+'s extra row, the refer release's other val split, VAW's hand-built set).

What each count is, from the real files: RefCOCO/+/g are counted in **rows of the lmms-lab snapshots**,
one per referred object with its list of expressions (lmms-lab/RefCOCO's README @ e15256e: val 8,811,
testA 1,975, testB 1,810, test 5,000; the real test row 469306 holds 3 expressions). The refer release's
refcoco (unc) val has 3,811 refs (its 3,785 test refs are lmms-lab's testA + testB, 1,975 + 1,810), and
its expressions are more again, so neither a refer ref count nor an expression count is the paper's
8,811: the ``refcoco`` source (one sample per lmms-lab row) reproduces it, ``refcoco-refer`` does not.

A leaf: imports nothing from :mod:`vrh.data.sources`, so the converter and the inspector both read it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

WHERE = "App. E.2"
# options that never change how many samples a conversion gives (the others are named when counts differ)
COUNT_NEUTRAL_OPTIONS = frozenset({"images", "allow_pickle", "refs", "regions", "expression", "task", "seed"})
_CONFIG_RE = re.compile(r"L\d_\w+")  # Spatial457's config folder names: L1_single, L2_objects, ...

_REFER_NOTE = ("the paper counts rows of the lmms-lab snapshot, one per object; the refer release's val split is "
               "another set, e.g. refcoco unc val has 3,811 refs against lmms-lab's 8,811 rows: convert the lmms-lab "
               "snapshot with `{name}` for the paper's set")


@dataclass(frozen=True)
class PaperCount:
    """What the paper evaluates on one benchmark split. ``split`` None: the paper names no split (VAW).
    ``exact`` False: the paper built the set by hand, so a conversion can only come close. ``note``: a
    known reason a faithful conversion differs, said whenever the counts differ. ``config``: the config
    folder the count is for (Spatial457), checked against the snapshot's path when it names one."""

    source: str
    split: str | None
    n: int
    subset: str  # the paper's words and what they are in the published files
    exact: bool = True
    note: str = ""
    config: str | None = None


PAPER_COUNTS: tuple[PaperCount, ...] = (
    PaperCount("refcoco", "val", 8811, "RefCOCO val, lmms-lab/RefCOCO's val rows, one per object"),
    PaperCount("refcoco+", "val", 3804, "RefCOCO+ val, lmms-lab/RefCOCOplus's val rows, one per object",
               note="lmms-lab's RefCOCO+ val has 3,805 rows, one more than the paper's 3,804; the paper does not say "
                    "which row it left out"),
    PaperCount("refcocog", "val", 7573, "RefCOCOg val, lmms-lab/RefCOCOg's val rows, one per object"),
    PaperCount("refcoco-refer", "val", 8811, "RefCOCO val, counted in lmms-lab/RefCOCO rows",
               note=_REFER_NOTE.format(name="refcoco")),
    PaperCount("refcoco+-refer", "val", 3804, "RefCOCO+ val, counted in lmms-lab/RefCOCOplus rows",
               note=_REFER_NOTE.format(name="refcoco+")),
    PaperCount("refcocog-refer", "val", 7573, "RefCOCOg val, counted in lmms-lab/RefCOCOg rows",
               note=_REFER_NOTE.format(name="refcocog")),
    PaperCount("refspatial", "location", 100,
               "RefSpatialBench, 100 examples, 'full set', read as the location split: placement also has 100 rows, "
               "unseen 77, and the paper names none"),
    PaperCount("toloka", "test_public", 1705, "Toloka VQA, the full set: test_public"),
    PaperCount("vaw", None, 6309, "VAW converted by hand into 4-way multiple choice, any split: the paper names none",
               exact=False, note="the paper's multiple-choice set is hand-built and vrh's generator is its own, so "
                                 "the counts can only be close"),
    PaperCount("spatial457", "validation", 670, "Spatial457, the L1 single-object portion: config L1_single",
               config="L1_single"),
    PaperCount("spatialrgpt", "val", 266,
               "SpatialRGPT, the quantitative object-size subset: width_data 133 + height_data 133"),
    PaperCount("cvbench", "test", 2638, "CV-Bench, the full benchmark: test_2d 1,438 + test_3d 1,200"),
    PaperCount("mmstar", "val", 1500, "MMStar, 1,500 samples, 'minitest' in the paper: MMStar publishes them as val"),
    PaperCount("countbenchqa", "test", 491, "CountBenchQA, the full set"),
    PaperCount("mathvista", "testmini", 1000,
               "MathVista testmini, all 1,000 rows: the paper says 'the MCQ split', but 1,000 is testmini's whole "
               "size and 540 of its rows are multiple choice"),
)


def paper_counts_for(source: str) -> tuple[PaperCount, ...]:
    """Every entry of ``source`` (usually one)."""
    return tuple(p for p in PAPER_COUNTS if p.source == source)


def paper_count(source: str, split: str) -> PaperCount | None:
    """The paper's count for ``source``'s ``split``, or None (a split the paper does not evaluate).

    >>> paper_count("refcoco", "val").n, paper_count("refcoco", "testA"), paper_count("vaw", "test").n
    (8811, None, 6309)
    """
    return next((p for p in paper_counts_for(source) if p.split in (split, None)), None)


@dataclass(frozen=True)
class ConversionFacts:
    """What a conversion did, as far as it changes the count (``convert.json`` holds the same keys)."""

    complete: bool = True
    limit: int | None = None
    rows_read: int | None = None
    expected_rows: int | None = None
    n_skipped: int = 0
    excluded: Mapping[str, int] | None = None
    options: Mapping[str, Any] | None = None
    src: str | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ConversionFacts:
        """From a ``convert.json`` (its ``to_json`` keys); absent keys keep their defaults."""
        return cls(complete=bool(d.get("complete", True)), limit=d.get("limit"), rows_read=d.get("rows_read"),
                   expected_rows=d.get("expected_rows"), n_skipped=int(d.get("n_skipped") or 0),
                   excluded=d.get("excluded") or {}, options=d.get("options") or {}, src=d.get("src"))


@dataclass(frozen=True)
class CountCheck:
    """A sample count next to the paper's. ``status``: ``same``, ``differs``, ``close`` (a hand-built
    set: never exactly comparable) or ``none`` (the paper evaluates no such split); ``why``: the reasons,
    when it is not ``same``."""

    source: str
    split: str
    n: int
    paper: PaperCount | None
    status: str
    why: tuple[str, ...] = ()
    other: tuple[PaperCount, ...] = ()  # the source's entries for other splits, when ``paper`` is None

    def line(self) -> str:
        """One line for a terminal.

        >>> print(check_count("refcoco", "val", 8811).line())
        paper count 8,811, here 8,811: the same (App. E.2: RefCOCO val, lmms-lab/RefCOCO's val rows, one per object)
        >>> print(check_count("refcoco", "testA", 1975).line())
        paper count: none for this split (App. E.2 evaluates val: 8,811)
        """
        if self.paper is None:
            evaluated = ", ".join(f"{p.split}: {p.n:,}" for p in self.other)
            return ("paper count: none for this split "
                    + (f"({WHERE} evaluates {evaluated})" if evaluated else "(the paper does not evaluate it)"))
        head = f"paper count {self.paper.n:,}, here {self.n:,}"
        where = f"({WHERE}: {self.paper.subset})"
        if self.status == "same":
            return f"{head}: the same {where}"
        return f"{head}: {self.status} by {self.n - self.paper.n:+,} {where}; why: " + "; ".join(self.why)

    def to_json(self) -> dict[str, Any]:
        return {"n": self.n, "paper_n": None if self.paper is None else self.paper.n, "status": self.status,
                "paper_subset": None if self.paper is None else self.paper.subset, "why": list(self.why),
                "where": WHERE}


def check_count(source: str, split: str, n: int, facts: ConversionFacts | None = None) -> CountCheck:
    """``n`` samples of ``source``'s ``split`` against the paper's count, with the reasons they differ.

    >>> c = check_count("refcoco", "val", 100, ConversionFacts(complete=False, limit=100))
    >>> c.status, c.why
    ('differs', ('the conversion stopped at --limit 100',))
    """
    paper = paper_count(source, split)
    if paper is None:
        return CountCheck(source, split, n, None, "none", other=paper_counts_for(source))
    facts = facts or ConversionFacts()
    other_config = _other_config(paper, facts.src)
    if n == paper.n and paper.exact and other_config is None:
        return CountCheck(source, split, n, paper, "same")
    why = _reasons(paper, facts)
    if other_config:
        why.append(f"the snapshot is config {other_config}; the paper's count is for {paper.config}")
    if paper.note:
        why.append(paper.note)
    if not why:
        why.append("no known reason: compare the snapshot with the published one")
    return CountCheck(source, split, n, paper, "differs" if paper.exact else "close", tuple(why))


def _reasons(paper: PaperCount, f: ConversionFacts) -> list[str]:
    """What the conversion did that changes its count, in the order a user would check it."""
    why = []
    if not f.complete:
        why.append(f"the conversion stopped at --limit {f.limit}")
    elif f.rows_read is not None and f.expected_rows is not None and f.rows_read != f.expected_rows:
        why.append(f"this snapshot has {_rows(f.rows_read)} where the published split has {f.expected_rows:,}")
    options = {k: v for k, v in (f.options or {}).items() if k not in COUNT_NEUTRAL_OPTIONS}
    if options.get("all_expressions"):
        why.append("one sample per expression (--all-expressions); the paper counts one per object")
    rest = {k: v for k, v in options.items() if k != "all_expressions"}
    if rest:
        why.append("converted with " + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in sorted(rest.items())))
    if f.n_skipped:
        why.append(f"{_rows(f.n_skipped)} skipped, each with its reason in skipped.jsonl")
    for reason, k in (f.excluded or {}).items():
        why.append(f"{_rows(k)} outside the converted subset: {reason}")
    return why


def _rows(n: int) -> str:
    return f"{n:,} row" + ("" if n == 1 else "s")


def _other_config(paper: PaperCount, src: str | None) -> str | None:
    """The config folder ``src`` names when it is not the one the paper counted (None: it is, or unknown)."""
    if not paper.config or not src:
        return None
    configs = [part for part in Path(src).parts if _CONFIG_RE.fullmatch(part)]
    return configs[-1] if configs and paper.config not in configs else None
