"""The condition runner: evaluate a list of masking conditions on one set of samples.

Every masking command (evaluate, sweep, compare, transfer, stability, dpo-pairs, demo) goes through
:func:`run_conditions`, so all of them share these properties:

* **each distinct head set is evaluated once**: greedy decoding is deterministic, so conditions with the
  same ``(heads, mask mode)`` (:attr:`vrh.experiments.conditions.Condition.key`) share one evaluation -- on small
  models many methods' top-k coincide;
* **every sample record is tagged** with its condition (:meth:`~vrh.experiments.conditions.Condition.tag`) and appended
  to ``samples.jsonl`` as soon as it is judged;
* **resume**: records already in the run folder (from an interrupted run with the same config) are reused,
  and only what is missing is generated;
* **several conditions per batch** (``batch_conditions=True``, the default): a batch row is a (sample,
  head set) pair, so the head sets of a batchable mask mode (:attr:`vrh.core.masking.MaskMode.batchable`: one
  that registered its own per-row application, as zero does) share left-padded, KV-cached greedy ``generate``
  calls (:func:`vrh.experiments.evaluation.evaluate_rows`, which masks each row through its mode's
  :attr:`~vrh.core.masking.MaskMode.apply_rows`; zero's is :func:`vrh.core.masking.mask_heads_per_row`).
  Rows go sample-major (a sample's rows sit next to each other: same prompt length, little padding). Head
  sets of a mode without a per-row application (uniform: it masks one head set per attention module) cannot
  share a batch and are evaluated one head set at a time, as everything is with ``batch_conditions=False``.
  Records, tags, resume, ``subsets`` and summaries are the same either way (tested); only the order of lines
  in ``samples.jsonl`` differs;
* **data-parallel** under ``torchrun`` / ``accelerate launch`` (:mod:`vrh.infra.distributed`): the plan (rows,
  or each group's samples still to do) is cut into the batches one process would run, and each rank
  runs every world-size-th batch, appending to its own shard; the ranks then exchange their records, so
  every rank returns the same :class:`ConditionResults`, and ``results.json`` merges the shards. A rerun
  after a crash counts the records of every shard as finished.

:func:`run_conditions` is two steps: :func:`plan_conditions` decides everything before a token is generated
(a :class:`ConditionPlan`: the :class:`ConditionGroup` of each key with what it still has to do, the
batchable rows in sample-major order, this rank's share), and :func:`execute_plan` generates that share,
writes the records and folds them into :class:`ConditionResults`. Whether a group's rows may share batches
is its mask mode's registry entry (:func:`vrh.core.masking.get_mask_mode`), asked in one place.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import partial
from typing import Any

from vrh.experiments.conditions import Condition
from vrh.infra.console import progress as progress_bar
from vrh.infra.console import progress_shown, report_skipped
from vrh.data import Sample
from vrh.infra.distributed import my_batches, world
from vrh.experiments.evaluation import evaluate_rows, evaluate_samples
from vrh.experiments.settings import take, with_options
from vrh.models.loading import LoadedModel
from vrh.models.generation import fit_context
from vrh.core.masking import get_mask_mode
from vrh.core.knockout import KnockoutSettings, knockout_settings
from vrh.options import GenerationOptions, KnockoutOptions, ShareOptions
from vrh.runs import RunFolder, SampleRecord
from vrh.tasks import Task

_TAG_KEYS = ("condition", "kind", "method", "k", "seed", "mask_mode")
_SHARE_FIELDS = tuple(f.name for f in fields(ShareOptions))  # accepted as run_conditions keywords too


@dataclass
class ConditionResults:
    """What :func:`run_conditions` measured: per condition label, its records and the task's summary."""

    conditions: list[Condition]
    records: dict[str, list[SampleRecord]] = field(default_factory=dict)  # label -> records, samples order
    summaries: dict[str, dict[str, Any]] = field(default_factory=dict)  # label -> task.summarize(records)
    n_evaluations: int = 0  # distinct (head set, mask mode) evaluated, generated or resumed
    n_generated: int = 0  # (head set, sample) rows answered in this call (resumed ones excluded)
    skipped: list[dict[str, str]] = field(default_factory=list)  # samples no condition ran: id, reason

    def summary(self, label: str) -> dict[str, Any]:
        return self.summaries[label]

    def by_condition(self) -> list[tuple[Condition, dict[str, Any]]]:
        return [(c, self.summaries[c.label]) for c in self.conditions]


@dataclass
class ConditionGroup:
    """One distinct ``(head set, mask mode)`` (:attr:`~vrh.experiments.conditions.Condition.key`): the conditions
    that share its evaluation, the samples any of them sees, and what an interrupted run already finished."""

    conditions: list[Condition]
    members: dict[str, set[str]]  # label -> ids of the samples that condition sees
    samples: list[Sample]  # the samples any of its conditions sees, in samples order
    done: dict[str, SampleRecord]  # sample id -> untagged record finished under any of its labels
    resumed: dict[str, set[str]]  # label -> ids the run folder already holds under that very label
    batchable: bool  # its rows may share batches with other head sets' (its mask mode's registry entry)

    @property
    def lead(self) -> Condition:
        return self.conditions[0]

    @property
    def todo(self) -> list[Sample]:
        return [s for s in self.samples if s.id not in self.done]

    def tagged(self, rec: SampleRecord) -> list[SampleRecord]:
        """``rec`` as ``samples.jsonl`` keeps it: once per condition of the group that sees its sample."""
        return [{**c.tag(), **rec} for c in self.conditions if rec["id"] in self.members[c.label]]


@dataclass
class ConditionPlan:
    """What :func:`run_conditions` will generate, decided before anything is (every rank plans alike)."""

    conditions: list[Condition]
    groups: list[ConditionGroup]  # in the order of their first condition
    skipped: list[dict[str, str]]  # samples whose prompt does not fit the model's context: id, reason
    rows: list[tuple[int, Sample]]  # (group index, sample) still to do of the batchable groups, sample-major
    rank_rows: list[tuple[int, Sample]]  # this rank's share of ``rows`` (all of them in a one-process run)
    rank_samples: dict[int, list[Sample]]  # group index -> this rank's share of its todo (groups not batched)

    @property
    def n_rank_generations(self) -> int:
        """(head set, sample) rows this rank generates: what its progress bar counts."""
        return len(self.rank_rows) + sum(len(part) for part in self.rank_samples.values())


def run_conditions(lm: LoadedModel, task: Task, samples: Sequence[Sample], conditions: Sequence[Condition],
                   run: RunFolder | None = None, settings: GenerationOptions | None = None, *,
                   subsets: Mapping[str, Sequence[str]] | None = None, description: str = "evaluate",
                   batch_conditions: bool = True, progress: bool = True, **options: Any) -> ConditionResults:
    """Evaluate every condition on ``samples``; records go to ``run``'s ``samples.jsonl`` as they finish.
    ``settings``: how answers are generated (:class:`vrh.options.GenerationOptions`: ``batch_size``,
    ``max_new_tokens``; a command passes its own settings, which carry them); keyword ``options`` name its
    fields and replace them (``run_conditions(lm, task, samples, conds, batch_size=48)``).
    ``progress=False``: no progress on stderr (as ``VRH_NO_PROGRESS``); ``description`` labels the progress.

    ``subsets`` (label -> sample ids) restricts a condition to some of the samples (e.g. a fresh random head
    set per sample); by default every condition sees every sample.

    With a ``run`` that holds records of an interrupted run (opened with ``resume=True``), a sample already
    judged under any condition with the same key is not generated again; conditions sharing a key get the
    same records, each tagged with its own label.

    ``batch_conditions``: head sets of a batchable mask mode (zero, or any with a per-row application) share
    batches, ``batch_size`` (sample, head set) rows each (see the module docstring); ``False`` evaluates one
    head set at a time, ``batch_size`` samples per batch. Within a batch, a sample's rows share its vision
    features and the prompt below each row's first masked layer (:mod:`vrh.core.sharing`; ``share_vision`` /
    ``share_prefix``, from ``settings`` or as keywords, turn them off); the records are the same either way.
    The progress bar counts rows either way.
    """
    knocking = settings
    share = with_options(sharing(settings), {k: options.pop(k) for k in _SHARE_FIELDS if k in options},
                         "run_conditions")
    settings = with_options(generation(settings), options, "run_conditions")
    plan = plan_conditions(lm, task, samples, conditions, run, settings, description=description, subsets=subsets,
                           batch_conditions=batch_conditions)
    with progress_shown(progress), knockout_settings(knockouts(knocking)):
        return execute_plan(lm, task, plan, run, settings, description=description, share=share)


def knockouts(settings: Any) -> KnockoutSettings:
    """The knockout modes' settings of ``settings`` (a command's settings carry them), or the defaults."""
    if not isinstance(settings, KnockoutOptions):
        return KnockoutSettings()
    return KnockoutSettings(settings.blocked_queries, settings.referent_min_overlap)


def generation(settings: GenerationOptions | None) -> GenerationOptions:
    """The generation options of ``settings`` (any value carrying them, e.g. a command's settings), or the
    defaults."""
    return GenerationOptions() if settings is None else take(GenerationOptions, settings)


def sharing(settings: Any) -> ShareOptions:
    """The work-sharing options of ``settings`` (a command's settings carry them), or the defaults (both on)."""
    return take(ShareOptions, settings) if isinstance(settings, ShareOptions) else ShareOptions()


def plan_conditions(lm: LoadedModel, task: Task, samples: Sequence[Sample], conditions: Sequence[Condition],
                    run: RunFolder | None = None, settings: GenerationOptions | None = None, *,
                    description: str = "evaluate", subsets: Mapping[str, Sequence[str]] | None = None,
                    batch_conditions: bool = True) -> ConditionPlan:
    """The plan of :func:`run_conditions` (same arguments): conditions grouped by key, what each group still
    has to do after what ``run`` finished, and this rank's share. Samples whose prompt does not fit the
    context are reported, noted in ``run`` and left out."""
    settings = generation(settings)
    members = _members(conditions, samples, subsets or {})
    kept, too_long = fit_context(lm, task, samples, settings.max_new_tokens)
    if too_long:  # counted, reported in results.json (RunFolder.note_skipped) and printed once
        report_skipped(too_long, description)
        if not kept:
            raise ValueError(f"every sample's prompt is too long for the model: {too_long[0]['reason']}")
        if run is not None:
            run.note_skipped(too_long)
        gone = {r["id"] for r in too_long}
        members = {label: m - gone for label, m in members.items()}
    finished: dict[str, dict[str, SampleRecord]] = defaultdict(dict)  # label -> id -> record
    if run is not None:
        wanted = {s.id for s in kept}
        for rec in run.finished_samples():
            if rec.get("condition") in members and rec.get("id") in wanted:
                finished[rec["condition"]][rec["id"]] = rec
    dp = world()
    dp.barrier()  # every rank has read what is finished (so all plan alike) before any rank appends
    by_key: dict[tuple, list[Condition]] = {}
    for c in conditions:
        by_key.setdefault(c.key, []).append(c)
    groups = [_group(conds, kept, members, finished, batch_conditions) for conds in by_key.values()]
    todo = [{s.id for s in g.todo} for g in groups]
    rows = [(i, s) for s in kept for i, g in enumerate(groups) if g.batchable and s.id in todo[i]]  # sample-major
    batch_size = settings.batch_size
    return ConditionPlan(list(conditions), groups, too_long, rows, rank_rows=_rank_share(rows, batch_size),
                         rank_samples={i: _rank_share(g.todo, batch_size) for i, g in enumerate(groups)
                                       if not g.batchable})


def execute_plan(lm: LoadedModel, task: Task, plan: ConditionPlan, run: RunFolder | None = None,
                 settings: GenerationOptions | None = None, *, description: str = "evaluate",
                 share: ShareOptions | None = None) -> ConditionResults:
    """Generate this rank's share of ``plan`` (each record appended to ``run`` as it is judged), gather every
    rank's records, and return the results of every condition (on every rank alike). ``share``: what a batch's
    rows of one sample compute once (default: ``settings``' own, or both shares on); the records are the same."""
    share = sharing(settings) if share is None else share
    settings = generation(settings)
    gen = dict(batch_size=settings.batch_size, max_new_tokens=settings.max_new_tokens)
    dp = world()
    new = _NewRecords(plan.groups, run)
    with progress_bar(plan.n_rank_generations, description, unit="generations") as advance:
        if plan.rank_rows:
            evaluate_rows(lm, task, [(s, plan.groups[i].lead.heads) for i, s in plan.rank_rows],
                          mask_modes=[plan.groups[i].lead.evaluated_mask_mode for i, _ in plan.rank_rows],
                          on_record=lambda j, rec: new.add(plan.rank_rows[j][0], rec), advance=advance,
                          share_vision=share.share_vision, share_prefix=share.share_prefix, **gen)
        for i, part in plan.rank_samples.items():
            lead = plan.groups[i].lead
            evaluate_samples(lm, task, part, lead.heads, mask_mode=lead.mask_mode, on_record=partial(new.add, i),
                             advance=advance, finished={}, **gen)
    for theirs in dp.all_gather(new.by_group) if dp.active else ():  # every rank gets every rank's records
        for i, recs in theirs.items():
            new.by_group[i].update(recs)
    out = ConditionResults(list(plan.conditions), skipped=plan.skipped)
    for i, group in enumerate(plan.groups):  # plan order, so results list conditions the same way on both paths
        _add_group_results(out, group, new.by_group[i], task, run if dp.is_main else None)
    return out


@dataclass
class _NewRecords:
    """The records generated in this call, per group index; each goes to this rank's shard as it is judged."""

    groups: list[ConditionGroup]
    run: RunFolder | None
    by_group: dict[int, dict[str, SampleRecord]] = field(init=False)  # group index -> id -> record

    def __post_init__(self):
        self.by_group = {i: {} for i in range(len(self.groups))}

    def add(self, i: int, rec: SampleRecord) -> None:
        self.by_group[i][rec["id"]] = rec
        if self.run is not None:
            for line in self.groups[i].tagged(rec):
                self.run.append_sample(line)


def _members(conditions: Sequence[Condition], samples: Sequence[Sample], subsets: Mapping[str, Sequence[str]]
             ) -> dict[str, set[str]]:
    """Label -> ids of the samples the condition sees (its subset, or every sample); the inputs checked."""
    labels = [c.label for c in conditions]
    dupes = sorted({l for l in labels if labels.count(l) > 1})
    if dupes:
        raise ValueError(f"condition labels must be unique within a run: {dupes}")
    ids = [s.id for s in samples]
    if len(set(ids)) != len(ids):
        raise ValueError("sample ids must be unique")
    unknown = sorted(set(subsets) - set(labels))
    if unknown:
        raise ValueError(f"subsets name conditions that are not run: {unknown}")
    members = {c.label: (set(subsets[c.label]) if c.label in subsets else set(ids)) for c in conditions}
    missing = sorted({i for m in members.values() for i in m} - set(ids))
    if missing:
        raise ValueError(f"subsets name samples that are not given: {missing[:5]}")
    return members


def _group(conds: list[Condition], samples: Sequence[Sample], members: Mapping[str, set[str]],
           finished: Mapping[str, Mapping[str, SampleRecord]], batch_conditions: bool) -> ConditionGroup:
    """The group of the conditions ``conds`` (one key); what any of them finished counts as done for all."""
    wanted = set().union(*(members[c.label] for c in conds))
    done: dict[str, SampleRecord] = {}
    for c in conds:
        for i, rec in finished[c.label].items():
            done.setdefault(i, _untagged(rec))
    batchable = batch_conditions and get_mask_mode(conds[0].evaluated_mask_mode).batchable
    return ConditionGroup(conds, {c.label: members[c.label] for c in conds}, [s for s in samples if s.id in wanted],
                          done, {c.label: set(finished[c.label]) for c in conds}, batchable)


def _rank_share(items: Sequence[Any], batch_size: int) -> list[Any]:
    """This rank's batches of ``items`` (all of them in a one-process run)."""
    return [x for _, start, stop in my_batches(len(items), batch_size, world()) for x in items[start:stop]]


def _add_group_results(out: ConditionResults, group: ConditionGroup, new: Mapping[str, SampleRecord], task: Task,
                       run: RunFolder | None) -> None:
    """The group's records in samples order, per label, into ``out``; a resumed record a label lacks in the
    run folder (finished under another label of the group) is appended to ``run`` (None: not this rank's)."""
    records = [group.done[s.id] if s.id in group.done else new[s.id] for s in group.samples]
    out.n_generated += len(new)
    out.n_evaluations += 1
    for c in group.conditions:
        seen = [r for r in records if r["id"] in group.members[c.label]]
        if run is not None:
            for rec in seen:
                if rec["id"] in group.done and rec["id"] not in group.resumed[c.label]:
                    run.append_sample({**c.tag(), **rec})
        out.records[c.label] = seen
        out.summaries[c.label] = task.summarize(seen)


def _untagged(rec: SampleRecord) -> SampleRecord:
    return {k: v for k, v in rec.items() if k not in _TAG_KEYS}
