"""Evaluation: greedy answers judged by a task, optionally with heads masked.

:func:`evaluate_samples` is the one evaluation loop (greedy answers under :func:`vrh.core.masking.mask_heads`,
each judged by the sample's :class:`vrh.tasks.Task`); :func:`evaluate_rows` is its batched-conditions twin,
where each batch row is a (sample, head set) pair masked by its mask mode's own per-row application
(:attr:`vrh.core.masking.MaskMode.apply_rows`; zero: :func:`vrh.core.masking.mask_heads_per_row`), so several
conditions share one ``generate``. :func:`vrh.experiments.runner.run_conditions` drives both for a list of
masking conditions. Which samples are evaluated (held out from detection, paper App. H) is
:mod:`vrh.experiments.heldout`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from typing import Any

from vrh.infra.oom import halving_on_oom
from vrh.data import Sample
from vrh.core.heads import Head
from vrh.models.loading import LoadedModel
from vrh.models.generation import generate_answers
from vrh.core.masking import RowSubset, get_mask_mode, mask_heads, validate_heads
from vrh.core.knockout import knockout_batch
from vrh.core.layout import VISION, visual_key_space
from vrh.core.sharing import shared_prefill
from vrh.tasks import Task


def answer_and_judge(lm: LoadedModel, task: Task, samples: Sequence[Sample], max_new_tokens: int
                     ) -> list[dict[str, Any]]:
    """One batch: greedy answers of the model as it is now (masks are the caller's), one record each."""
    loaded: dict[str, Any] = {}  # batched conditions put one sample in several rows: read its image once
    images = [loaded[s.id] if s.id in loaded else loaded.setdefault(s.id, s.load_image()) for s in samples]
    prompts = [task.prompt(lm.adapter, s) for s in samples]
    texts, metas = generate_answers(lm, images, prompts, max_new_tokens=max_new_tokens,
                                    while_generating=lambda batch: _announce(lm, batch, samples))
    return [task.judge(lm.adapter, s, t, m) for s, t, m in zip(samples, texts, metas)]


def _announce(lm: LoadedModel, batch: Any, samples: Sequence[Sample]) -> Any:
    """The batch and its samples' boxes, for the knockout mask modes (:func:`vrh.core.knockout.knockout_batch`)."""
    return knockout_batch(batch, [s.box for s in samples], in_text=visual_key_space(lm.adapter, lm.model) != VISION)


def evaluate_samples(lm: LoadedModel, task: Task, samples: Sequence[Sample], heads: Sequence[Head] = (), *,
                     mask_mode: str = "zero", batch_size: int = 16, max_new_tokens: int = 64,
                     on_record: Callable[[dict[str, Any]], None] | None = None,
                     advance: Callable[[int], None] | None = None,
                     finished: Mapping[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Answer every sample with ``heads`` masked (``mask_mode`` "zero" or "uniform"); return (and hand to
    ``on_record``) one record each, in ``samples`` order.

    ``finished`` maps sample ids to records of an interrupted run: those are returned as they are (not
    handed to ``on_record`` again, not counted by ``advance``) and only the rest is generated."""
    wrong = [s.id for s in samples if s.task != task.name]
    if wrong:
        raise ValueError(f"{len(wrong)} samples are not {task.name} samples (e.g. {wrong[:3]})")
    finished = finished or {}
    todo = [s for s in samples if s.id not in finished]
    new: dict[str, dict[str, Any]] = {}
    with mask_heads(lm.model, lm.adapter, heads, mode=mask_mode):
        for start in range(0, len(todo), batch_size):
            pieces = halving_on_oom(lambda part: answer_and_judge(lm, task, part, max_new_tokens),
                                    todo[start:start + batch_size], "evaluate")
            for rec in (r for piece in pieces for r in piece):
                new[rec["id"]] = rec
                if on_record is not None:
                    on_record(rec)
            if advance is not None:
                advance(len(todo[start:start + batch_size]))
    return [finished[s.id] if s.id in finished else new[s.id] for s in samples]


def evaluate_rows(lm: LoadedModel, task: Task, rows: Sequence[tuple[Sample, Sequence[Head]]], *,
                  batch_size: int = 16, max_new_tokens: int = 64,
                  on_record: Callable[[int, dict[str, Any]], None] | None = None,
                  advance: Callable[[int], None] | None = None, share_vision: bool = True,
                  share_prefix: bool = True, mask_modes: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Answer every ``(sample, heads)`` row with its own ``heads`` masked, ``batch_size`` rows per batch.

    Why: the rows of several masking conditions (the same sample under k = 1, 2, 4, random seeds, ...)
    share one left-padded, KV-cached greedy ``generate``, which costs about as much per decode step as
    one condition's batch; a row's answer is the one :func:`evaluate_samples` gives it (tested).
    ``mask_modes``: row b's mask mode (default: every row ``zero``); each must be batchable, and a batch's rows
    of mode m are masked by m's own per-row application (:attr:`vrh.core.masking.MaskMode.apply_rows`; the
    other rows get no heads from it, so the modes' masks add up row by row). Returns one record per row, in
    ``rows`` order, and hands each to ``on_record(row index, record)`` as its batch is judged; ``advance``
    counts rows. Every head set and mode is validated before anything is generated.

    ``share_vision`` / ``share_prefix``: the rows of one sample in a batch compute its vision features / the
    prompt below each row's first masked layer once (:mod:`vrh.core.sharing`); exact, so the records are the
    same with them off.
    """
    wrong = [s.id for s, _ in rows if s.task != task.name]
    if wrong:
        raise ValueError(f"{len(wrong)} rows are not {task.name} samples (e.g. {wrong[:3]})")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    modes = ["zero"] * len(rows) if mask_modes is None else list(mask_modes)
    if len(modes) != len(rows):
        raise ValueError(f"{len(modes)} mask modes for {len(rows)} rows")
    per_row = {}
    for name in dict.fromkeys(modes):
        mode = get_mask_mode(name)
        if not mode.batchable:
            raise ValueError(f"mask mode {name!r} has no per-row application: its head sets run one at a time "
                             "(evaluate_samples)")
        per_row[name] = mode.apply_rows
    for heads in {tuple(map(tuple, hs)) for _, hs in rows}:
        validate_heads(heads, lm.adapter.num_layers(lm.model), lm.adapter.num_heads(lm.model))
    triples = [(s, hs, m) for (s, hs), m in zip(rows, modes)]
    out: list[dict[str, Any]] = []
    for start in range(0, len(triples), batch_size):
        chunk = triples[start:start + batch_size]

        def answer(part: Sequence[tuple[Sample, Sequence[Head], str]]) -> list[dict[str, Any]]:
            heads, subset = [list(hs) for _, hs, _ in part], RowSubset()
            with ExitStack() as stack:
                for name in dict.fromkeys(m for _, _, m in part):  # each mode masks its own rows only
                    stack.enter_context(per_row[name](lm.model, lm.adapter,
                                                      [hs if m == name else [] for hs, (_, _, m) in zip(heads, part)],
                                                      subset))
                stack.enter_context(shared_prefill(lm.model, lm.adapter, [s.id for s, _, _ in part], heads, subset,
                                                   vision=share_vision, prefix=share_prefix))
                return answer_and_judge(lm, task, [s for s, _, _ in part], max_new_tokens)

        recs = [r for piece in halving_on_oom(answer, chunk, "evaluate") for r in piece]
        for i, rec in enumerate(recs, start):
            out.append(rec)
            if on_record is not None:
                on_record(i, rec)
        if advance is not None:
            advance(len(chunk))
    return out
