"""The condition runner: evaluate a list of masking conditions on one set of samples.

Every masking command (evaluate, sweep, compare, transfer, stability, dpo-pairs, demo) goes through
:func:`run_conditions`, so all of them share three properties:

* **each distinct head set is evaluated once**: greedy decoding is deterministic, so conditions with the
  same ``(heads, mask mode)`` (:attr:`vrh.experiments.conditions.Condition.key`) share one evaluation -- on small
  models many methods' top-k coincide;
* **every sample record is tagged** with its condition (:meth:`~vrh.experiments.conditions.Condition.tag`) and appended
  to ``samples.jsonl`` as soon as it is judged;
* **resume**: records already in the run folder (from an interrupted run with the same config) are reused,
  and only what is missing is generated;
* **several conditions per batch** (``batch_conditions=True``, the default): a batch row is a (sample,
  head set) pair, so the head sets of a batchable mask mode (:attr:`vrh.core.masking.MaskMode.batchable`: zero)
  share left-padded, KV-cached greedy ``generate`` calls (:func:`vrh.experiments.evaluation.evaluate_rows`,
  :func:`vrh.core.masking.mask_heads_per_row`). Rows go sample-major (a sample's rows sit next to each other:
  same prompt length, little padding). Uniform-mode head sets cannot share a batch (the uniform ablation
  masks one head set per attention module) and are evaluated one head set at a time, as everything is
  with ``batch_conditions=False``. Records, tags, resume,
  ``subsets`` and summaries are the same either way (tested); only the order of lines in
  ``samples.jsonl`` differs;
* **data-parallel** under ``torchrun`` / ``accelerate launch`` (:mod:`vrh.infra.distributed`): the plan (rows,
  or each group's samples still to do) is cut into the batches one process would run, and each rank
  runs every world-size-th batch, appending to its own shard; the ranks then exchange their records, so
  every rank returns the same :class:`ConditionResults`, and ``results.json`` merges the shards. A rerun
  after a crash counts the records of every shard as finished.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vrh.experiments.conditions import Condition
from vrh.infra.console import progress, report_skipped
from vrh.data import Sample
from vrh.infra.distributed import my_batches, world
from vrh.experiments.evaluation import evaluate_rows, evaluate_samples
from vrh.models.loading import LoadedModel
from vrh.models.generation import fit_context
from vrh.core.masking import get_mask_mode
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
    n_generated: int = 0  # (head set, sample) rows answered in this call (resumed ones excluded)
    skipped: list[dict[str, str]] = field(default_factory=list)  # samples no condition ran: id, reason

    def summary(self, label: str) -> dict[str, Any]:
        return self.summaries[label]

    def by_condition(self) -> list[tuple[Condition, dict[str, Any]]]:
        return [(c, self.summaries[c.label]) for c in self.conditions]


@dataclass
class _Group:
    """One distinct ``(head set, mask mode)``: its conditions, the samples any of them needs, and what is done."""

    conditions: list[Condition]
    samples: list[Sample]
    done: dict[str, dict[str, Any]]  # sample id -> untagged record of an interrupted run

    @property
    def lead(self) -> Condition:
        return self.conditions[0]

    @property
    def todo(self) -> list[Sample]:
        return [s for s in self.samples if s.id not in self.done]


def run_conditions(lm: LoadedModel, task: Task, samples: Sequence[Sample], conditions: Sequence[Condition],
                   run: RunFolder | None = None, *, batch_size: int = 16, max_new_tokens: int = 64,
                   description: str = "evaluate", subsets: Mapping[str, Sequence[str]] | None = None,
                   batch_conditions: bool = True) -> ConditionResults:
    """Evaluate every condition on ``samples``; records go to ``run``'s ``samples.jsonl`` as they finish.

    ``subsets`` (label -> sample ids) restricts a condition to some of the samples (e.g. a fresh random head
    set per sample); by default every condition sees every sample.

    With a ``run`` that holds records of an interrupted run (opened with ``resume=True``), a sample already
    judged under any condition with the same key is not generated again; conditions sharing a key get the
    same records, each tagged with its own label.

    ``batch_conditions``: head sets of a batchable mask mode (zero) share batches, ``batch_size`` (sample,
    head set) rows each (see the module docstring); ``False`` evaluates one head set at a time,
    ``batch_size`` samples per batch.
    The progress bar counts rows either way.
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
    samples, too_long = fit_context(lm, task, samples, max_new_tokens)
    if too_long:  # counted, reported in results.json (RunFolder.note_skipped) and printed once
        report_skipped(too_long, description)
        if not samples:
            raise ValueError(f"every sample's prompt is too long for the model: {too_long[0]['reason']}")
        if run is not None:
            run.note_skipped(too_long)
        gone = {r["id"] for r in too_long}
        ids = [i for i in ids if i not in gone]
        members = {label: m - gone for label, m in members.items()}

    finished: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)  # label -> id -> record
    if run is not None:
        wanted = set(ids)
        for rec in run.finished_samples():
            if rec.get("condition") in labels and rec.get("id") in wanted:
                finished[rec["condition"]][rec["id"]] = rec
    dp = world()
    dp.barrier()  # every rank has read what is finished (so all plan alike) before any rank appends
    by_key: dict[tuple, list[Condition]] = {}
    for c in conditions:
        by_key.setdefault(c.key, []).append(c)

    groups = []
    for conds in by_key.values():
        wanted = set().union(*(members[c.label] for c in conds))
        done: dict[str, dict[str, Any]] = {}
        for c in conds:  # any condition of the group that finished a sample finished it for all
            for i, rec in finished[c.label].items():
                done.setdefault(i, _untagged(rec))
        groups.append(_Group(conds, [s for s in samples if s.id in wanted], done))

    out = ConditionResults(list(conditions), skipped=too_long)

    def write(group: _Group, rec: dict[str, Any]) -> None:  # to this rank's shard in a data-parallel run
        if run is not None:
            for c in group.conditions:
                if rec["id"] in members[c.label]:
                    run.append_sample({**c.tag(), **rec})

    def finish(group: _Group, new: Mapping[str, dict[str, Any]]) -> None:
        """The group's records in samples order, per label; resumed records a label lacks are appended."""
        records = [group.done[s.id] if s.id in group.done else new[s.id] for s in group.samples]
        out.n_generated += len(new)
        out.n_evaluations += 1
        for c in group.conditions:
            mine = [r for r in records if r["id"] in members[c.label]]
            if run is not None and dp.is_main:  # resumed records this label lacks (finished under another label)
                for rec in mine:
                    if rec["id"] in group.done and rec["id"] not in finished[c.label]:
                        run.append_sample({**c.tag(), **rec})
            out.records[c.label] = mine
            out.summaries[c.label] = task.summarize(mine)

    def mine(items: Sequence[Any]) -> list[Any]:
        """This rank's batches of ``items`` (all of them in a one-process run)."""
        return [x for _, start, stop in my_batches(len(items), batch_size, dp) for x in items[start:stop]]

    shared_ix = [i for i, g in enumerate(groups) if batch_conditions and get_mask_mode(g.lead.key[1]).batchable]
    new: dict[int, dict[str, dict[str, Any]]] = {i: {} for i in range(len(groups))}  # group -> id -> record
    todo = {i: {s.id for s in g.todo} for i, g in enumerate(groups)}
    rows = [(i, s) for s in samples for i in shared_ix if s.id in todo[i]]  # sample-major
    my_rows = mine(rows)
    my_todo = {i: mine(g.todo) for i, g in enumerate(groups) if i not in shared_ix}
    with progress(len(my_rows) + sum(len(t) for t in my_todo.values()), description, unit="generations") as advance:
        if my_rows:
            def on_row(j: int, rec: dict[str, Any]) -> None:
                i = my_rows[j][0]
                new[i][rec["id"]] = rec
                write(groups[i], rec)

            evaluate_rows(lm, task, [(s, groups[i].lead.heads) for i, s in my_rows], batch_size=batch_size,
                          max_new_tokens=max_new_tokens, on_record=on_row, advance=advance)
        for i, part in my_todo.items():
            lead = groups[i].lead
            records = evaluate_samples(lm, task, part, lead.heads, mask_mode=lead.mask_mode, batch_size=batch_size,
                                       max_new_tokens=max_new_tokens,
                                       on_record=lambda rec, g=groups[i]: write(g, rec), advance=advance,
                                       finished={})
            new[i].update({r["id"]: r for r in records})
    for theirs in dp.all_gather(new) if dp.active else ():  # every rank gets every rank's records
        for i, recs in theirs.items():
            new[i].update(recs)
    for i, group in enumerate(groups):  # plan order, so results list conditions the same way on both paths
        finish(group, new[i])
    return out


def _untagged(rec: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in rec.items() if k not in _TAG_KEYS}
