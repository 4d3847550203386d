"""``results.json``: one typed value per kind of run, with its one writer and its one reader.

Every command's ``results.json`` is a :class:`RunResults` subclass (the kind is the config's ``command``,
:func:`results_kind`): a frozen dataclass whose fields are the file's keys, in the order they are written.
The command builds its value and writes ``value.to_json()`` through :meth:`vrh.runs.RunFolder.write_results`,
which adds the envelope every kind shares: ``schema_version`` first (:data:`vrh.runs.SCHEMA_VERSION`; a file
without it is version 1) and, when the run left samples out, ``skipped_samples`` (``{"n", "samples"}``) last.
The report reads a file back with ``from_json``, which never raises on content:

* a missing key, or one holding ``null``, reads as ``None`` (the report shows an en dash), and so does a
  nested block (a ``vqa``, a ``random``) that is not a JSON object: older and partial files still render;
* values are kept as written, not coerced: a number the report cannot show is its problem to tolerate
  (:mod:`vrh.report.load`'s ``pct`` / ``num``), not a reason to drop the run;
* keys this version does not know are kept in ``extra`` (after the known ones when written again), so a
  run of a newer vrh still reads;
* an *optional* key (:func:`optional`) is left out of the file when its value is ``None``; every other key
  is always written, ``null`` included (``own_heads_accuracy`` of a transfer without B's own heads).

Accuracies are fractions in [0, 1]; heads are ``[layer, head]``, 0-based; ``conditions`` is one entry per
masking condition (:meth:`vrh.experiments.conditions.Condition.to_json` and the task's summary of it).

Each field is annotated with the JSON type vrh writes there (the aliases below: :data:`HeadList`,
:data:`Counts`, :data:`Fractions`, ...), ``| None`` because a missing key reads as None (and where vrh itself
writes ``null``, a comment says when). The annotations document the writers; the reader neither checks nor
coerces them (a hand-edited file keeps its ``"three"``), and ``tests/support/results_types.py`` checks the
files vrh writes against them. As in Python's typing, an integer is a ``float``.

The kinds: ``detect`` :class:`DetectResults`, ``evaluate`` :class:`EvaluateResults`, ``sweep``
:class:`SweepResults` (its k-curves :class:`KCurves`), ``demo`` :class:`DemoResults`, ``dpo-pairs``
:class:`DpoPairsResults`, ``emergence`` :class:`EmergenceResults`, and in :mod:`vrh.runs.results_characterize`
``compare`` :class:`CompareResults`, ``transfer`` :class:`TransferResults`, ``stability``
:class:`StabilityResults`. A command without a kind reads as a bare :class:`RunResults` (every key in
``extra``): the report then lists its keys under "Other runs".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, TypeVar

T = TypeVar("T", bound="Block")

# --- the types of the values (JSON as vrh writes it) --------------------------------------------------
HeadList = list[list[int]]  # [[layer, head], ...], 0-based
Counts = dict[str, int]  # outcome (or drop reason) -> number of samples
Fractions = dict[str, float]  # outcome -> fraction of the samples
ConditionEntry = dict[str, Any]  # Condition.to_json() and the task's summary of it (TaskSummary's keys)
JsonObject = dict[str, Any]  # an object whose keys this module leaves untyped (settings, a record, ...)

ENVELOPE = ("schema_version", "skipped_samples")  # keys RunFolder.write_results adds to every kind
_BASE = {"extra", *ENVELOPE}  # fields of Block / RunResults that are not a kind's own keys


# --- how a field is declared --------------------------------------------------------------------------
def optional() -> Any:
    """A key a writer leaves out when it has no value (``None`` in the value: absent from the file)."""
    return field(default=None, metadata={"optional": True})


def block(cls: type[Block], *, optional: bool = False) -> Any:
    """A nested JSON object read as the typed value ``cls`` (anything but an object reads as None)."""
    meta = {"block": cls, "optional": optional}
    return field(default=None, metadata=meta) if optional else field(metadata=meta)


def block_map(cls: type[Block]) -> Any:
    """A JSON object of named nested objects (``{"grounding": {...}, "vqa": {...}}``), each read as ``cls``."""
    return field(metadata={"block_map": cls})


def inline(cls: type[Block]) -> Any:
    """A block whose keys are the outer object's own (a task's summary spread into an evaluation's
    results): it takes every key the outer kind does not know, so the outer keeps no ``extra``."""
    return field(metadata={"inline": cls})


@dataclass(frozen=True, kw_only=True)
class Block:
    """A JSON object with known keys (the dataclass fields, in file order) and the unknown ones in ``extra``."""

    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    _ENVELOPE: ClassVar[tuple[str, ...]] = ()  # keys read into fields of a base class, not the kind's own

    @classmethod
    def _own(cls) -> list:
        return [f for f in fields(cls) if f.name not in _BASE]

    @classmethod
    def from_json(cls: type[T], obj: Any) -> T:
        """The value of ``obj`` as written (see the module docstring: never raises on content)."""
        return cls(**cls._keywords(obj if isinstance(obj, Mapping) else {}))

    @classmethod
    def _keywords(cls, obj: Mapping[str, Any]) -> dict[str, Any]:
        """The constructor's keywords for ``obj``: each field's value, the rest as ``extra``."""
        own = cls._own()
        known = {f.name for f in own if "inline" not in f.metadata} | set(cls._ENVELOPE)
        rest = {k: v for k, v in obj.items() if k not in known}
        kw: dict[str, Any] = {}
        for f in own:
            if "inline" in f.metadata:
                kw[f.name], rest = f.metadata["inline"].from_json(rest), {}
            else:
                kw[f.name] = _read(f.metadata, obj.get(f.name))
        return {**kw, "extra": rest}

    @classmethod
    def coerce(cls: type[T], value: Any) -> T | None:
        """A nested value as this block: an object is read, anything else is None."""
        return cls.from_json(value) if isinstance(value, Mapping) else None

    @classmethod
    def empty(cls: type[T]) -> T:
        """The value of a file without any key (what the report reads for a run without results)."""
        return cls.from_json({})

    def is_empty(self) -> bool:
        """Nothing was written (an empty object): every key None and no unknown one."""
        return not self.extra and all(getattr(self, f.name) is None for f in self._own())

    def value(self, key: str) -> Any:
        """``key`` whatever the kind: its field (or an inline block's) when the kind declares it, else as
        written (``extra``); None when absent. For the few keys read across kinds (``n``, ``accuracy``,
        ``random_control``, ``subruns``, ...), including kinds that have no type."""
        for f in self._own():
            if f.name == key and "inline" not in f.metadata:
                return getattr(self, key)
            if "inline" in f.metadata and getattr(self, f.name) is not None:
                found = getattr(self, f.name).value(key)
                if found is not None:
                    return found
        return self.extra.get(key)

    def to_json(self) -> dict[str, Any]:
        """The JSON object, keys in field order, then ``extra``."""
        out: dict[str, Any] = {}
        for f in self._own():
            value = getattr(self, f.name)
            if "inline" in f.metadata:
                out.update(value.to_json() if value is not None else {})
            elif value is not None or not f.metadata.get("optional"):
                out[f.name] = _write(value)
        out.update(self.extra)
        return out


def _read(meta: Mapping[str, Any], value: Any) -> Any:
    if "block" in meta:
        return meta["block"].coerce(value)
    if "block_map" in meta:
        cls = meta["block_map"]
        return {k: cls.coerce(v) for k, v in value.items()} if isinstance(value, Mapping) else None
    return value


def _write(value: Any) -> Any:
    if isinstance(value, Block):
        return value.to_json()
    if isinstance(value, Mapping) and any(isinstance(v, Block) for v in value.values()):
        return {k: _write(v) for k, v in value.items()}
    if isinstance(value, list) and any(isinstance(v, Block) for v in value):
        return [_write(v) for v in value]
    return value


@dataclass(frozen=True, kw_only=True)
class RunResults(Block):
    """The ``results.json`` of one run; the envelope keys are read here and written by ``write_results``."""

    COMMAND: ClassVar[str | None] = None
    _ENVELOPE: ClassVar[tuple[str, ...]] = ENVELOPE
    schema_version: int | None = field(default=None, repr=False)  # as written; None: version 1
    skipped_samples: JsonObject | None = field(default=None, repr=False)  # {"n", "samples": [{"id", "reason"}]}

    @classmethod
    def _keywords(cls, obj: Mapping[str, Any]) -> dict[str, Any]:
        return {**super()._keywords(obj), **{key: obj.get(key) for key in ENVELOPE}}


_KINDS: dict[str, type[RunResults]] = {}


def results_kind(cls: type[RunResults]) -> type[RunResults]:
    """Register ``cls`` as the results of the command ``cls.COMMAND``."""
    _KINDS[cls.COMMAND] = cls
    return cls


def results_type(command: str | None) -> type[RunResults]:
    """The results type of ``command``; a command without one gets :class:`RunResults` (keys in ``extra``).
    Every kind registers itself on import (:mod:`vrh.runs` imports every module of kinds)."""
    return _KINDS.get(str(command), RunResults)


def results_from_json(command: str | None, obj: Any) -> RunResults:
    """``results.json`` of a run of ``command``, typed (:meth:`Block.from_json`: never raises on content)."""
    return results_type(command).from_json(obj)


# --- blocks several kinds share -----------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class TaskSummary(Block):
    """A task's aggregate of judged records (:meth:`vrh.tasks.Task.summarize`): ``n``, ``accuracy``, per
    outcome ``counts`` and ``fractions``, ``parse_failure_rate``, ``mean_iou`` (None for tasks without an
    IoU); a task's own metrics (``point_accuracy``) are in ``extra``. Runs before ``fractions`` existed
    wrote each outcome's fraction as a key of its own (``"correct": 0.5``): :meth:`outcome_fractions`."""

    n: int | None
    accuracy: float | None
    counts: Counts | None
    fractions: Fractions | None
    parse_failure_rate: float | None
    mean_iou: float | None  # null: a task without an IoU, or no sample

    OLD_OUTCOMES: ClassVar[tuple[str, ...]] = ("correct", "mislocated", "parse_failure")

    def outcome_fractions(self) -> dict[str, Any] | None:
        """Outcome -> fraction: ``fractions``, else the old per-outcome keys; None when neither is there."""
        if isinstance(self.fractions, dict):
            return self.fractions
        old = {o: self.extra[o] for o in self.OLD_OUTCOMES if _is_num(self.extra.get(o))}
        return old or None


@dataclass(frozen=True, kw_only=True)
class ControlEntry(Block):
    """What the random control could draw at one k (:meth:`vrh.experiments.conditions.RandomControl.to_json`):
    the seeds asked for and those that could be drawn, how many heads were eligible, how many distinct
    head sets the seeds drew (1 of several seeds: the control is not random) and its warnings."""

    k: int | None
    seeds_requested: list[int] | None
    seeds_drawn: list[int] | None
    n_eligible_heads: int | None
    n_distinct_sets: int | None
    warnings: list[str] | None


@dataclass(frozen=True, kw_only=True)
class RandomControlReport(Block):
    """``random_control`` (:func:`vrh.experiments.kcurves.random_control_report`): one :class:`ControlEntry`
    per k and every warning. Runs that wrote the bare per-k list read as its entries, with their warnings."""

    per_k: list[ControlEntry | None] | None
    warnings: list[str] | None

    @classmethod
    def from_json(cls, obj: Any) -> RandomControlReport:
        if isinstance(obj, list):  # the bare per-k list of early sweeps
            entries = [ControlEntry.coerce(e) for e in obj]
            return cls(per_k=entries, warnings=[w for e in entries if e is not None for w in e.warnings or []])
        rc = super().from_json(obj)
        per_k = [ControlEntry.coerce(e) for e in rc.per_k] if isinstance(rc.per_k, list) else rc.per_k
        return cls(per_k=per_k, warnings=rc.warnings, extra=rc.extra)

    @classmethod
    def coerce(cls, value: Any) -> RandomControlReport | None:
        return cls.from_json(value) if isinstance(value, (Mapping, list)) else None

    def entries(self) -> list[ControlEntry]:
        """The per-k entries that are entries (a hand-edited list may hold anything)."""
        return [e for e in self.per_k if isinstance(e, ControlEntry)] if isinstance(self.per_k, list) else []

    def warning_lines(self) -> list[str]:
        return [str(w) for w in self.warnings or []] if isinstance(self.warnings, list) else []


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


# --- detect, evaluate, dpo-pairs, emergence -----------------------------------------------------------
@results_kind
@dataclass(frozen=True, kw_only=True)
class DetectResults(RunResults):
    """``vrh detect``: how many samples were scored and skipped, the primary scorer and its top-20 heads (the
    maps themselves are in ``head_scores.json``, :class:`vrh.runs.HeadScores`)."""

    COMMAND: ClassVar[str] = "detect"
    n_scored: int | None
    n_skipped: int | None
    scorer: str | None
    top_heads: HeadList | None
    elapsed_seconds: float | None


@results_kind
@dataclass(frozen=True, kw_only=True)
class EvaluateResults(RunResults):
    """``vrh evaluate``: the task's summary of its one condition (its keys first), then the condition: ``k``,
    ``mask_mode``, the ``masked_heads``, where they came from (``heads``: ``source``, ``scorer``, ``random``,
    ``seed``, ``detected``) and the ``condition`` itself."""

    COMMAND: ClassVar[str] = "evaluate"
    summary: TaskSummary = inline(TaskSummary)
    k: int | None
    mask_mode: str | None
    masked_heads: HeadList | None
    heads: JsonObject | None
    condition: JsonObject | None  # Condition.to_json()
    elapsed_seconds: float | None  # null in the evaluations of vrh dpo


@results_kind
@dataclass(frozen=True, kw_only=True)
class DpoPairsResults(RunResults):
    """``vrh dpo-pairs``: samples, pairs kept and dropped (by reason), accuracy and outcome counts of the chosen
    (unmasked) and rejected (masked) answers, the negative policy (``vrh`` or ``random``), the pair format,
    one ``decisions`` entry per sample (kept, or its drop reason, with both answers), the rule on rejected
    answers (``rejected_rule``: ``any`` / ``wrong``) and the pair cap (``max_pairs``), the training command;
    ``random_control`` only with ``--random-negatives``."""

    COMMAND: ClassVar[str] = "dpo-pairs"
    n_samples: int | None
    n_pairs: int | None
    n_dropped: int | None
    dropped: Counts | None  # drop reason -> samples
    chosen_accuracy: float | None
    rejected_accuracy: float | None
    chosen_outcomes: Counts | None
    rejected_outcomes: Counts | None
    kept_rejected_outcomes: Counts | None
    negative_policy: str | None
    k: int | None
    mask_mode: str | None
    pair_format: str | None
    pair_format_version: int | None
    pairs_file: str | None
    conditions: list[ConditionEntry] | None
    decisions: list[JsonObject] | None
    rejected_rule: str | None = optional()
    max_pairs: int | None = optional()
    training_command: str | None
    elapsed_seconds: float | None
    random_control: RandomControlReport | None = block(RandomControlReport, optional=True)


@results_kind
@dataclass(frozen=True, kw_only=True)
class EmergenceResults(RunResults):
    """``vrh organism emergence``: a training log's summary (``vrh_lab.organism.emergence.summarize``): per
    phase its step range, tasks and last record's causal test (``final``: step, task, top-k heads, accuracy
    unmasked / top-k zeroed / random mean, heads above ``threshold``), and the last phase's as ``final``."""

    COMMAND: ClassVar[str] = "emergence"
    n_records: int | None
    k: int | None
    n: int | None
    threshold: float | None
    phases: list[JsonObject] | None
    final: JsonObject | None  # null: no phase


# --- sweep and demo -----------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class VrhCurve(Block):
    """The top-k conditions of a sweep, one entry per k (None where none ran): accuracy, parse-failure rate
    and outcome fractions."""

    accuracy: list[float | None] | None
    parse_failure_rate: list[float | None] | None
    fractions: list[Fractions | None] | None


@dataclass(frozen=True, kw_only=True)
class RandomCurve(Block):
    """The random controls of a sweep per k: the ``seeds``, ``accuracy`` per seed (``[[per seed] per k]``), its
    ``mean`` and ``std``, the mean parse-failure rate and outcome fractions, and how many distinct head sets
    the seeds drew (1 at k = 0, the unmasked model)."""

    seeds: list[int] | None
    accuracy: list[list[float]] | None
    mean: list[float | None] | None  # null at a k where no seed could draw
    std: list[float | None] | None
    parse_failure_rate_mean: list[float | None] | None
    fractions_mean: list[Fractions | None] | None
    n_distinct_sets: list[int] | None


@dataclass(frozen=True, kw_only=True)
class KCurves(Block):
    """k-curves (:func:`vrh.experiments.kcurves.fold_curves`): ``k`` ascending, the unmasked accuracy, and per k
    the top-k and random conditions (k = 0 is the unmasked model for both)."""

    k: list[int] | None
    baseline_accuracy: float | None
    vrh: VrhCurve | None = block(VrhCurve)
    random: RandomCurve | None = block(RandomCurve)


@results_kind
@dataclass(frozen=True, kw_only=True)
class SweepResults(RunResults):
    """``vrh sweep`` (and the demo's sweep sub-runs): the task, the model's head count, the k-curves
    (:class:`KCurves`' keys), every condition and the random control::

        {"task": "grounding", "num_heads_total": 32, "k": [0, 1, 3], "baseline_accuracy": 0.92,
         "vrh": {"accuracy": [...], "parse_failure_rate": [...], "fractions": [...]},
         "random": {"seeds": [0, 1], "accuracy": [[...], ...], "mean": [...], "std": [...], ...},
         "conditions": [...], "random_control": {"per_k": [...], "warnings": [...]}}
    """

    COMMAND: ClassVar[str] = "sweep"
    task: str | None
    num_heads_total: int | None
    k: list[int] | None
    baseline_accuracy: float | None
    vrh: VrhCurve | None = block(VrhCurve)
    random: RandomCurve | None = block(RandomCurve)
    conditions: list[ConditionEntry] | None
    random_control: RandomControlReport | None = block(RandomControlReport)
    elapsed_seconds: float | None

    @property
    def curves(self) -> KCurves:
        return KCurves(k=self.k, baseline_accuracy=self.baseline_accuracy, vrh=self.vrh, random=self.random)


@dataclass(frozen=True, kw_only=True)
class DemoVqa(Block):
    """The demo's cross-task figures: VQA accuracy unmasked, with the headline top-k and with k random heads."""

    baseline_accuracy: float | None
    vrh_masked_accuracy: float | None
    random_masked_accuracy_mean: float | None
    random_masked_accuracy_std: float | None = optional()  # over the random seeds (np.std), as grounding's


@dataclass(frozen=True, kw_only=True)
class DemoKCurve(Block):
    """The grounding k-curve in short: ``k``, top-k accuracy (``vrh``) and random mean per k."""

    k: list[int] | None
    vrh: list[float | None] | None
    random_mean: list[float | None] | None


@results_kind
@dataclass(frozen=True, kw_only=True)
class DemoResults(RunResults):
    """``vrh demo``'s headline (:func:`vrh.analyses.demo.headline.headline`), every figure from its sweeps:
    grounding accuracy unmasked, with the top-``k`` VRHs masked and with k random heads (mean, std, seeds),
    parse-failure rates, the top-k heads, ``sparsity`` (:func:`vrh.scoring.sparsity.sparsity_summary` at
    the demo's thresholds), the ``vqa`` figures, the ``k_curve``, the split sizes, one random control per
    task (``{"grounding": ..., "vqa": ...}``), the ``subruns``; ``report`` once the report is built."""

    COMMAND: ClassVar[str] = "demo"
    baseline_accuracy: float | None
    k: int | None
    num_heads_total: int | None
    vrh_masked_accuracy: float | None
    random_masked_accuracy_mean: float | None
    random_masked_accuracy_std: float | None
    random_seeds: list[int] | None
    vrh_parse_failure_rate: float | None
    random_parse_failure_rate_mean: float | None
    top_k_heads: HeadList | None
    sparsity: JsonObject | None  # sparsity_summary's keys; its thresholds are keys written as text ("0.001")
    vqa: DemoVqa | None = block(DemoVqa)
    k_curve: DemoKCurve | None = block(DemoKCurve)
    n_detect: int | None
    n_eval: int | None
    random_control: dict[str, RandomControlReport | None] | None = block_map(RandomControlReport)
    subruns: list[str] | None
    mask_mode: str | None
    elapsed_seconds: float | None
    report: str | None = optional()  # the report's page, once built


__all__ = ["Block", "ConditionEntry", "ControlEntry", "Counts", "DemoKCurve", "DemoResults", "DemoVqa", "DetectResults",
           "DpoPairsResults", "ENVELOPE", "EmergenceResults", "EvaluateResults", "Fractions", "HeadList", "JsonObject",
           "KCurves", "RandomControlReport", "RandomCurve", "RunResults", "SweepResults", "TaskSummary", "VrhCurve",
           "block", "block_map", "inline", "optional", "results_from_json", "results_kind", "results_type"]
