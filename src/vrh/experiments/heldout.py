"""Which samples an evaluation uses: the held-out rules of paper App. H, in one place.

Heads detected on some samples are evaluated on others. :func:`select_eval_samples` applies that rule for
every command that masks (evaluate, sweep, transfer, compare, stability, the demo) against the detection
runs it was given (their recorded split, :func:`vrh.runs.read_detection_split`), and records in the data
identity it returns how disjointness was established; :func:`load_task_samples` is the one loader of a
dataset's samples of one task, with an error that says what the dataset holds instead.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from vrh import runs
from vrh.data import Sample, dataset_hash, load_dataset
from vrh.infra.console import warn

GROUNDING_HINT = 'this command needs grounding samples ("task": "grounding", with an expression and a box)'


def load_task_samples(data: str | Path, task: str, hint: str = "choose --task accordingly", *,
                      keep: Callable[[dict[str, Any]], bool] | None = None, limit: int | None = None,
                      sha256: str | None = None) -> tuple[list[Sample], dict[str, Any]]:
    """The ``task`` samples of a dataset and its identity (path, sha256); an error lists what it has and ends
    with ``hint`` (what the calling command lets the user change). ``keep`` (a test on a line's JSON record)
    and ``limit``: only the first ``limit`` task samples it accepts, and the file is read no further."""
    if keep is None and limit is None:
        all_samples = load_dataset(data)
        samples = [s for s in all_samples if s.task == task]
    else:
        samples = list(load_dataset(data, limit=limit,
                                    keep=lambda r: r.get("task") == task and (keep is None or keep(r))))
        all_samples = samples
    if not samples:
        if keep is not None or limit is not None:
            return load_task_samples(data, task, hint)  # the whole file, to say what it holds
        have = dict(Counter(s.task for s in all_samples))
        raise ValueError(f"{data} has no {task} samples (it has {have or 'none'}); {hint}")
    return samples, {"path": str(data), "sha256": sha256 or dataset_hash(data), "task": task}


def _selection(task: str, splits: Sequence[Any], sha256: str, disjoint: bool
               ) -> Callable[[dict[str, Any]], bool] | None:
    """The test on a dataset line that :func:`select_eval_samples` applies, when it can be applied line by line
    (every detection run detected on this dataset, or ``disjoint`` off): then reading stops at ``--n``. None
    when it cannot: another dataset's ids are checked against every sample (an overlap anywhere is an error)."""
    if disjoint and any(split.data_sha256 != sha256 for split in splits):
        return None
    tests = []
    for split in splits if disjoint else ():
        if split.task == task:
            tests.append((set(split.eval_ids), True))
        else:
            tests.append((set(split.detect_ids), False))
    return lambda rec: all((isinstance(rec.get("id"), str) and rec["id"] in ids) == inside for ids, inside in tests)


def select_eval_samples(data: str | Path, task: str, n: int | None, heads_runs: Sequence[str | Path] = (),
                        disjoint: bool = True, other_dataset_expected: bool = False
                        ) -> tuple[list[Sample], dict[str, Any]]:
    """Evaluation samples of ``task`` in ``data`` that no detection run in ``heads_runs`` scored.

    Per detection run (a folder; anything else, e.g. a head list, is ignored):

    * same dataset, same task: the run's held-out split (``eval_ids``, detection's ``--n-eval``);
    * same dataset, another task (e.g. VQA samples of the detection dataset): every sample of the task
      whose id the run did not score;
    * another dataset: disjointness can only be checked by id -- recorded in the returned info and printed
      (unless ``other_dataset_expected``: a caller that wrote both datasets itself, as the demo does), and
      any id the run scored is an error (``--no-disjoint`` allows it).

    ``disjoint=False`` keeps every sample (recorded). ``n`` caps the result; asking for more samples than
    there are is an error naming ``--n``.
    """
    samples, info = None, None
    if n is not None and n >= 1:  # a prefix of the selection: read the file only as far as the n-th sample
        splits = [runs.read_detection_split(d) for d in heads_runs if d is not None and Path(d).is_dir()]
        sha256 = dataset_hash(data)
        keep = _selection(task, splits, sha256, disjoint)
        if keep is not None:
            samples, info = load_task_samples(data, task, keep=keep, limit=n, sha256=sha256)
            if len(samples) < n:  # too few: the whole file, for the counts the errors below give
                samples = None
    if samples is None:
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
            if not other_dataset_expected:
                warn(note, "note:")
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
