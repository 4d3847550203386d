"""Which k the report marks: the k the runs were made with, not a guess.

Heat maps ring the top-k heads and overlays average them; drawing "top-4" next to runs that masked 3
heads shows a head set nobody evaluated. So the report takes k from what its runs recorded:

* ``--k`` when the user gives one;
* else a demo's headline ``k`` (the report's headline);
* else a study's protocol k (:func:`study_k`: its cross-task, transfer or stability k, else its sweep's
  largest), the k every figure of the study's own sections uses;
* else the single-k runs (``evaluate``'s masked top-k, ``transfer``, ``stability``): their most common k;
* else the sweeps (``sweep``, ``compare``; ``k`` is a list there): the largest k they masked, whose
  top-k contains every smaller top-k;
* else no run recorded a k: :func:`fallback_k` (the paper's 20, at most an eighth of a small model's
  heads), and the page says so.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from vrh.report.load import Run, is_num, sample_kind

SINGLE_K = ("evaluate", "transfer", "stability")
K_LISTS = ("sweep", "compare")


@dataclass(frozen=True)
class KChoice:
    k: int | None  # None: no run recorded one (each detection run then uses fallback_k of its own size)
    source: str  # where k came from, in words, for captions: "--k", "the demo run demo_r", "ev-a, ev-b", ...
    others: tuple[str, ...] = ()  # runs that used other ks, "5 (eval-b)", "1, 3 (sweep)": their head sets differ

    def for_heads(self, n_heads: int) -> int:
        """The k to mark on a model with ``n_heads`` heads (at most all but one, so "all but the top-k"
        is never empty)."""
        if self.k is None:
            return fallback_k(n_heads)
        return max(1, min(self.k, n_heads - 1)) if n_heads > 1 else 1

    def caption(self, n_heads: int) -> str:
        """``top-3 heads (k = 3 from the demo run demo_r)``: which k, and where it came from."""
        kk = self.for_heads(n_heads)
        if self.k is None:
            return f"top-{kk} heads (no run records a k: default for {n_heads} heads; pass --k to choose)"
        capped = f", capped to {kk} for {n_heads} heads" if kk != self.k else ""
        return f"top-{kk} heads (k = {self.k} from {self.source}{capped})"


def fallback_k(n_heads: int) -> int:
    """The paper's k = 20, but at most an eighth of the heads (so small models keep most heads unmarked)."""
    return max(1, min(20, n_heads // 8))


def _int_k(x: Any) -> int | None:
    return int(x) if is_num(x) and float(x).is_integer() and x > 0 else None


def run_k(run: Run) -> int | list[int] | None:
    """The k a run was made with: an int (demo, evaluate's top-k, transfer, stability), the list of a
    sweep or comparison, or None (detection, unmasked or random-only evaluations, unfinished runs)."""
    r, cmd = run.res, run.command
    raw = r.value("k")  # every kind that masks records its k
    raw = run.config.get("k") if raw is None else raw
    if cmd == "evaluate":
        cond = r.condition if isinstance(r.condition, dict) else {}
        if sample_kind(cond) not in (None, "top_k"):
            return None  # a random or listed head set is not "the top-k"
        heads = run.config.get("heads") or r.heads or {}
        if isinstance(heads, dict) and (heads.get("random") or heads.get("source") in ("random", "none", "list")):
            return None
    if cmd in K_LISTS:
        ks = raw if isinstance(raw, list) else [raw]
        ks = sorted({k for k in map(_int_k, ks) if k is not None})
        return ks or None
    if cmd in SINGLE_K or cmd == "demo":
        if isinstance(raw, list):  # a per-k transfer: its largest k
            raw = max((k for k in map(_int_k, raw) if k is not None), default=None)
        return _int_k(raw)
    return None


def study_k(config: dict) -> int | None:
    """The k a study's figures mark: its cross-task, transfer or stability table's k (the first that has
    one), else the largest k its sweep masks; None when its protocol records none."""
    prot = config.get("protocol") if isinstance(config.get("protocol"), dict) else {}
    for table in ("crosstask", "transfer", "stability"):
        k = _int_k((prot.get(table) or {}).get("k"))
        if k is not None:
            return k
    ks = [k for k in map(_int_k, (prot.get("sweep") or {}).get("ks") or []) if k is not None]
    return max(ks) if ks else None


MAX_NAMED = 3  # runs a caption names as the source of k; more are counted ("and 5 other runs")


def _named(names: list[str]) -> str:
    """``a, b, c and 5 other runs``: a caption under every overlay must not be a wall of folder names."""
    if len(names) <= MAX_NAMED:
        return ", ".join(names)
    rest = len(names) - MAX_NAMED
    return f"{', '.join(names[:MAX_NAMED])} and {rest} other run{'s' if rest > 1 else ''}"


def report_k(runs: list[Run], k: int | None = None) -> KChoice:
    """The report's k (see the module docstring for the order of precedence); ``others`` lists what runs
    recorded a different k, so the page can say that their head sets differ from the marked one."""
    recorded = [(run, run_k(run)) for run in runs if run.finished]
    scalar = [(run, kk) for run, kk in recorded if isinstance(kk, int)]
    lists = [(run, max(kk)) for run, kk in recorded if isinstance(kk, list)]
    entries = [({kk}, f"{kk} ({run.name})") for run, kk in scalar]
    entries += [(set(kk), f"{', '.join(map(str, kk))} ({run.name})") for run, kk in recorded if isinstance(kk, list)]

    def choice(value: int, source: str) -> KChoice:  # others: runs that never masked this k
        return KChoice(value, source, tuple(label for ks, label in entries if value not in ks))

    if k is not None:
        return choice(k, "--k")
    demos = [(run, kk) for run, kk in scalar if run.command == "demo"]
    if demos:
        return choice(demos[0][1], f"the demo run {demos[0][0].name}")
    studies = [(run, study_k(run.config)) for run in runs if run.command == "study" and run.finished]
    studies = [(run, kk) for run, kk in studies if kk is not None]
    if studies:
        run, value = studies[0]
        return choice(value, f"the protocol of the study {run.config.get('name') or run.name}")
    if scalar:
        counts = Counter(kk for _, kk in scalar)
        value = next(kk for _, kk in scalar if counts[kk] == max(counts.values()))  # ties: the first run given
        return choice(value, _named([run.name for run, kk in scalar if kk == value]))
    if lists:
        run, value = max(lists, key=lambda e: e[1])
        return choice(value, f"the largest k of {run.name}")
    return KChoice(None, "default")
