"""The condition runner: evaluate a list of masking conditions on one set of samples.

Every masking command (evaluate, sweep, compare, transfer, stability, dpo-pairs, demo) goes through
:func:`run_conditions`, so all of them share three properties:

* **each distinct head set is evaluated once**: greedy decoding is deterministic, so conditions with the
  same ``(heads, mask mode)`` (:attr:`vrh.conditions.Condition.key`) share one evaluation -- on small
  models many methods' top-k coincide;
* **every sample record is tagged** with its condition (:meth:`~vrh.conditions.Condition.tag`) and appended
  to ``samples.jsonl`` as soon as it is judged;
* **resume**: records already in the run folder (from an interrupted run with the same config) are reused,
  and only what is missing is generated.

This is also the one place where several conditions could later share a forward (batching head sets).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vrh.conditions import Condition
from vrh.console import progress
from vrh.data import Sample
from vrh.evaluation import evaluate_samples
from vrh.inference import LoadedModel
from vrh.runs import RunFolder
from vrh.tasks import Task

_TAG_KEYS = ("condition", "kind", "method", "k", "seed", "mask_mode")


@dataclass
class ConditionResults:
    """What :func:`run_conditions` measured: per condition label, its records and the task's summary."""

    conditions: list[Condition]
    records: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # label -> records, samples order
    summaries: dict[str, dict[str, Any]] = field(default_factory=dict)  # label -> task.summarize(records)
    n_evaluations: int = 0  # distinct (head set, mask mode) evaluated, generated or resumed
    n_generated: int = 0  # samples answered in this call (resumed ones excluded)

    def summary(self, label: str) -> dict[str, Any]:
        return self.summaries[label]

    def by_condition(self) -> list[tuple[Condition, dict[str, Any]]]:
        return [(c, self.summaries[c.label]) for c in self.conditions]


def run_conditions(lm: LoadedModel, task: Task, samples: Sequence[Sample], conditions: Sequence[Condition],
                   run: RunFolder | None = None, *, batch_size: int = 16, max_new_tokens: int = 64,
                   description: str = "evaluate", subsets: Mapping[str, Sequence[str]] | None = None
                   ) -> ConditionResults:
    """Evaluate every condition on ``samples``; records go to ``run``'s ``samples.jsonl`` as they finish.

    ``subsets`` (label -> sample ids) restricts a condition to some of the samples (e.g. a fresh random head
    set per sample); by default every condition sees every sample.

    With a ``run`` that holds records of an interrupted run (opened with ``resume=True``), a sample already
    judged under any condition with the same key is not generated again; conditions sharing a key get the
    same records, each tagged with its own label.
    """
    labels = [c.label for c in conditions]
    dupes = sorted({l for l in labels if labels.count(l) > 1})
    if dupes:
        raise ValueError(f"condition labels must be unique within a run: {dupes}")
    ids = [s.id for s in samples]
    if len(set(ids)) != len(ids):
        raise ValueError("sample ids must be unique")
    subsets = subsets or {}
    unknown = sorted(set(subsets) - set(labels))
    if unknown:
        raise ValueError(f"subsets name conditions that are not run: {unknown}")
    members = {c.label: (set(subsets[c.label]) if c.label in subsets else set(ids)) for c in conditions}
    missing = sorted({i for m in members.values() for i in m} - set(ids))
    if missing:
        raise ValueError(f"subsets name samples that are not given: {missing[:5]}")

    finished: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)  # label -> id -> record
    if run is not None:
        wanted = set(ids)
        for rec in run.finished_samples():
            if rec.get("condition") in labels and rec.get("id") in wanted:
                finished[rec["condition"]][rec["id"]] = rec
    groups: dict[tuple, list[Condition]] = {}
    for c in conditions:
        groups.setdefault(c.key, []).append(c)

    out = ConditionResults(list(conditions))
    todo_total = 0
    plans = []
    for key, conds in groups.items():
        wanted = set().union(*(members[c.label] for c in conds))
        group_samples = [s for s in samples if s.id in wanted]
        done: dict[str, dict[str, Any]] = {}
        for c in conds:  # any condition of the group that finished a sample finished it for all
            for i, rec in finished[c.label].items():
                done.setdefault(i, _untagged(rec))
        plans.append((conds, group_samples, done))
        todo_total += sum(1 for s in group_samples if s.id not in done)

    with progress(todo_total, description) as advance:
        for conds, group_samples, done in plans:
            def write(rec: dict[str, Any], conds=conds) -> None:
                if run is not None:
                    for c in conds:
                        if rec["id"] in members[c.label]:
                            run.append_sample({**c.tag(), **rec})

            lead = conds[0]
            records = evaluate_samples(lm, task, group_samples, lead.heads, mask_mode=lead.mask_mode,
                                       batch_size=batch_size, max_new_tokens=max_new_tokens, on_record=write,
                                       advance=advance, finished=done)
            out.n_generated += sum(1 for s in group_samples if s.id not in done)
            out.n_evaluations += 1
            for c in conds:
                mine = [r for r in records if r["id"] in members[c.label]]
                if run is not None:  # resumed records this label lacks (finished under another label of the group)
                    for rec in mine:
                        if rec["id"] in done and rec["id"] not in finished[c.label]:
                            run.append_sample({**c.tag(), **rec})
                out.records[c.label] = mine
                out.summaries[c.label] = task.summarize(mine)
    return out


def _untagged(rec: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in rec.items() if k not in _TAG_KEYS}
