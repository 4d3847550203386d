"""Visual question answering: the model answers in words, scored by the rule its sample calls for.

The rules live in :mod:`vrh.tasks.answer_rules` (one per answer type, and each benchmark's own); every
caller that judges a VQA answer (this task, and the organism's training-time evaluation) uses them, so two
numbers called "VQA accuracy" are always measured the same way. The task's one option, ``answer_rule``
(``--answer-rule``), picks between the benchmarks' own rules (``official``, the default) and vrh's
(``lenient``); :meth:`Task.config` records it in the run's ``config.json`` and every record names the
rule that scored it, so a figure always says which rule produced it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from vrh.data import Sample
from vrh.tasks.answer_rules import (LENIENT, RULE_CHOICES, RULES, WRONG, judge_answer, normalize, parse_choice,
                                    parse_number, rule_name, score_answer)
from vrh.tasks.base import CORRECT, PARSE_FAILURE, Task, TaskAdapter, register_task

if TYPE_CHECKING:
    from vrh.runs import SampleRecord

__all__ = ["RULES", "WRONG", "VQATask", "judge_answer", "normalize", "parse_choice", "parse_number"]


@register_task
@dataclass(frozen=True)
class VQATask(Task):
    """Prompt: ``adapter.vqa_prompt(question)``. Record: the shared keys plus ``question``, ``answer``,
    ``answer_type``, ``answer_rule`` (the rule that scored it: a benchmark's name or ``lenient``), ``read``
    (what the rule read from the answer), ``outcome`` (correct / wrong / parse_failure) and, for lengths,
    ``rel_error``."""

    name: ClassVar[str] = "vqa"
    outcomes: ClassVar[tuple[str, ...]] = (CORRECT, WRONG, PARSE_FAILURE)
    answer_rule: str = "official"  # each benchmark's own rule; "lenient": vrh's rule for the answer type

    def __post_init__(self):
        if self.answer_rule not in RULE_CHOICES:
            raise ValueError(f"answer_rule must be one of {RULE_CHOICES}, got {self.answer_rule!r}")

    def prompt(self, adapter: TaskAdapter, sample: Sample) -> str:
        self.check_sample(sample)
        return adapter.vqa_prompt(sample.question)

    def judge(self, adapter: TaskAdapter, sample: Sample, text: str, meta: dict[str, Any] | None = None
              ) -> SampleRecord:
        rec = self.record(sample, text)
        verdict = score_answer(text, sample, self.answer_rule)
        rec.update(question=sample.question, answer=sample.answer, answer_type=sample.answer_type,
                   answer_rule=rule_name(sample, self.answer_rule), read=verdict.read, outcome=verdict.outcome)
        if verdict.rel_error is not None:
            rec["rel_error"] = verdict.rel_error
        return rec

    def summarize(self, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """The generic summary plus ``mean_rel_error``: the mean relative error of the length answers that
        were read (SpatialRGPT's error metric; ``None`` when there are none) and ``answer_rules``: how many
        records each rule scored."""
        out = super().summarize(records)
        errors = [r["rel_error"] for r in records if isinstance(r.get("rel_error"), (int, float))]
        out["mean_rel_error"] = sum(errors) / len(errors) if errors else None
        out["answer_rules"] = dict(Counter(str(r.get("answer_rule", LENIENT)) for r in records))
        return out
