"""What the reader must not miss: unfinished runs, results written by a newer vrh, random controls that
are not random.

These are the ways a report can mislead without looking broken (plus one muted line on a folder given
twice, so that the reader knows why it shows once): a half-written run whose partial numbers read like
final ones, a schema whose keys this version misreads, and a "random heads" baseline whose seeds
all drew the same heads (e.g. k = 16 of 32 heads with the top 16 excluded leaves exactly one set), which
then is one more fixed head set, not a control. Each becomes a warning block placed where the affected
numbers are shown.
"""

from __future__ import annotations

from vrh import runs as run_contract
from vrh.report.document import Text
from vrh.report.load import Control, Run, or_missing


def report_notices(runs: list[Run]) -> list[Text]:
    """Warnings for the top of the report: unfinished runs and runs of a newer results schema; and, muted,
    folders given more than once (reported once)."""
    out = []
    unfinished = [r for r in runs if not r.finished]
    if unfinished:
        out.append(Text(f"{len(unfinished)} of {len(runs)} runs did not finish (no {run_contract.RESULTS}: still "
                        "running, interrupted or crashed); their numbers are missing or partial: "
                        + "; ".join(f"{r.name} ({r.progress()})" for r in unfinished) + ".", warn=True))
    newer = [r for r in runs if r.newer_schema]
    if newer:
        out.append(Text("results written by a newer vrh (schema_version above "
                        f"{run_contract.SCHEMA_VERSION}, which this report reads): "
                        + ", ".join(f"{r.name} (version {r.schema_version})" for r in newer)
                        + "; some values may be missing or misread: upgrade vrh to report them.", warn=True))
    out += [Text(f"{r.name} was given {r.times_given} times and is reported once.", muted=True)
            for r in runs if r.times_given > 1]
    return out


def distinct_sets_line(rc: Control) -> str:
    """``k=1: 3 distinct random head sets from 3 seeds; ...`` from a run's random control; entries of a run of
    several tasks (:attr:`Run.random_control`) start with their task: ``grounding k=1: ...``."""
    parts = []
    for task, e in rc.per_k:
        drawn = e.seeds_drawn or []
        requested = e.seeds_requested or drawn
        n = e.n_distinct_sets
        part = (f"{task + ' ' if task else ''}k={or_missing(e.k, '?')}: "
                f"{n if n is not None else '?'} distinct random head set(s) from {len(drawn)} seed(s)")
        if len(drawn) < len(requested):
            part += f" ({len(requested) - len(drawn)} of {len(requested)} requested seeds not drawable)"
        if e.n_eligible_heads is not None:
            part += f", {e.n_eligible_heads} eligible heads"
        parts.append(part)
    return "; ".join(parts)


def random_control_blocks(run: Run) -> list[Text]:
    """Blocks to place next to a figure that uses the run's random control: how many distinct random sets
    were evaluated, and every warning of the control, prominently."""
    rc = run.random_control
    if rc is None:
        return []
    out = [Text(f"{run.name}: random control used " + (distinct_sets_line(rc) or "no random head sets") + ".")]
    out += [Text(f"{run.name}: random control: {w}", warn=True) for w in rc.warnings]
    return out
