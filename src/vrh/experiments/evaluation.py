"""Evaluation: greedy answers judged by a task, optionally with heads masked, and the held-out selection.

:func:`evaluate_samples` is the one evaluation loop (greedy answers under :func:`vrh.core.masking.mask_heads`,
each judged by the sample's :class:`vrh.tasks.Task`); :func:`evaluate_rows` is its batched-conditions twin,
where each batch row is a (sample, head set) pair zeroed by :func:`vrh.core.masking.mask_heads_per_row`, so
several conditions share one ``generate``. :func:`vrh.experiments.runner.run_conditions` drives both for a list of
masking conditions. :func:`select_eval_samples` applies the disjointness rule of paper App. H:
heads detected on some samples are evaluated on others.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from vrh import runs
from vrh.infra.console import console
from vrh.infra.oom import halving_on_oom
from vrh.data import Sample, dataset_hash, load_dataset
from vrh.core.heads import Head
from vrh.models.loading import LoadedModel
from vrh.models.generation import generate_answers
from vrh.core.masking import mask_heads, mask_heads_per_row, validate_heads
from vrh.tasks import Task


def answer_and_judge(lm: LoadedModel, task: Task, samples: Sequence[Sample], max_new_tokens: int
                     ) -> list[dict[str, Any]]:
    """One batch: greedy answers of the model as it is now (masks are the caller's), one record each."""
    loaded: dict[str, Any] = {}  # batched conditions put one sample in several rows: read its image once
    images = [loaded[s.id] if s.id in loaded else loaded.setdefault(s.id, s.load_image()) for s in samples]
    prompts = [task.prompt(lm.adapter, s) for s in samples]
    texts, metas = generate_answers(lm, images, prompts, max_new_tokens=max_new_tokens)
    return [task.judge(lm.adapter, s, t, m) for s, t, m in zip(samples, texts, metas)]


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
                  advance: Callable[[int], None] | None = None) -> list[dict[str, Any]]:
    """Answer every ``(sample, heads)`` row with its own ``heads`` zeroed, ``batch_size`` rows per batch.

    Why: the rows of several masking conditions (the same sample under k = 1, 2, 4, random seeds, ...)
    share one left-padded, KV-cached greedy ``generate``, which costs about as much per decode step as
    one condition's batch; a row's answer is the one :func:`evaluate_samples` gives it (tested). Zero mode
    only (see :func:`vrh.core.masking.mask_heads_per_row`). Returns one record per row, in ``rows`` order, and
    hands each to ``on_record(row index, record)`` as its batch is judged; ``advance`` counts rows. Every
    head set is validated before anything is generated.
    """
    wrong = [s.id for s, _ in rows if s.task != task.name]
    if wrong:
        raise ValueError(f"{len(wrong)} rows are not {task.name} samples (e.g. {wrong[:3]})")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    for heads in {tuple(map(tuple, hs)) for _, hs in rows}:
        validate_heads(heads, lm.adapter.num_layers(lm.model), lm.adapter.num_heads(lm.model))
    out: list[dict[str, Any]] = []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start:start + batch_size]

        def answer(part: Sequence[tuple[Sample, Sequence[Head]]]) -> list[dict[str, Any]]:
            with mask_heads_per_row(lm.model, lm.adapter, [hs for _, hs in part]):
                return answer_and_judge(lm, task, [s for s, _ in part], max_new_tokens)

        recs = [r for piece in halving_on_oom(answer, chunk, "evaluate") for r in piece]
        for i, rec in enumerate(recs, start):
            out.append(rec)
            if on_record is not None:
                on_record(i, rec)
        if advance is not None:
            advance(len(chunk))
    return out


# --- which samples to evaluate ------------------------------------------------------------------------
GROUNDING_HINT = 'this command needs grounding samples ("task": "grounding", with an expression and a box)'

def load_task_samples(data: str | Path, task: str, hint: str = "choose --task accordingly"
                      ) -> tuple[list[Sample], dict[str, Any]]:
    """The ``task`` samples of a dataset and its identity (path, sha256); an error lists what it has and ends
    with ``hint`` (what the calling command lets the user change)."""
    all_samples = load_dataset(data)
    samples = [s for s in all_samples if s.task == task]
    if not samples:
        have = dict(Counter(s.task for s in all_samples))
        raise ValueError(f"{data} has no {task} samples (it has {have or 'none'}); {hint}")
    return samples, {"path": str(data), "sha256": dataset_hash(data), "task": task}


def select_eval_samples(data: str | Path, task: str, n: int | None, heads_runs: Sequence[str | Path] = (),
                        disjoint: bool = True) -> tuple[list[Sample], dict[str, Any]]:
    """Evaluation samples of ``task`` in ``data`` that no detection run in ``heads_runs`` scored.

    Per detection run (a folder; anything else, e.g. a head list, is ignored):

    * same dataset, same task: the run's held-out split (``eval_ids``, detection's ``--n-eval``);
    * same dataset, another task (e.g. VQA samples of the detection dataset): every sample of the task
      whose id the run did not score;
    * another dataset: disjointness can only be checked by id -- recorded in the returned info and printed,
      and any id the run scored is an error (``--no-disjoint`` allows it).

    ``disjoint=False`` keeps every sample (recorded). ``n`` caps the result; asking for more samples than
    there are is an error naming ``--n``.
    """
    samples, info = load_task_samples(data, task)
    notes: list[str] = []
    runs_seen: list[str] = []
    for run_dir in heads_runs:
        if run_dir is None or not Path(run_dir).is_dir():
            continue
        split = runs.read_detection_split(run_dir)
        runs_seen.append(str(run_dir))
        if not disjoint:
            continue
        if split.data_sha256 == info["sha256"]:
            if split.task == task:
                keep = set(split.eval_ids)
                samples = [s for s in samples if s.id in keep]
                notes.append(f"held-out split of {run_dir}")
            else:
                scored = set(split.detect_ids)
                samples = [s for s in samples if s.id not in scored]
                notes.append(f"ids scored by {run_dir} removed")
        else:
            scored = set(split.detect_ids)
            overlap = sorted(s.id for s in samples if s.id in scored)
            note = (f"{data} is not the dataset {run_dir} detected on ({split.data_path}): disjointness checked by "
                    f"sample id only")
            console.print(f"[yellow]note:[/yellow] {note}")
            notes.append(note)
            if overlap:
                raise ValueError(f"{len(overlap)} evaluation samples have ids that {run_dir} scored during detection "
                                 f"(e.g. {overlap[:3]}); evaluating on them would not be held out. Use other samples, "
                                 "or pass --no-disjoint to allow it")
    if runs_seen:
        info["detection_runs"] = runs_seen
        info["disjointness"] = "; ".join(notes) if disjoint else "off (--no-disjoint)"
    if not samples:
        raise ValueError(f"no {task} samples of {data} are left to evaluate after removing those the detection "
                         f"run scored ({info.get('disjointness')}); pass --no-disjoint to allow overlap")
    if n is not None:
        if n < 1:
            raise ValueError(f"--n must be >= 1, got {n}")
        if n > len(samples):
            raise ValueError(f"--n {n} asks for more samples than there are: {len(samples)} {task} samples to "
                             f"evaluate in {data}; lower --n (or omit it to use all {len(samples)})")
        samples = samples[:n]
    info["n"] = len(samples)
    info["ids_sha"] = _ids_digest([s.id for s in samples])
    return samples, info


def _ids_digest(ids: Sequence[str]) -> str:
    import hashlib

    return hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16]
