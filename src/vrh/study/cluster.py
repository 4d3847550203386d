"""Running a study's cells as jobs through submitit (``vrh study run --executor slurm|local|debug``).

Jobs: one per dataset to prepare, one per model (every cell of that model whose dependencies are datasets
or the model's own cells: its detections, sweeps, cross-task sweeps, comparison, stability -- so the model
is loaded once in that job), and one per remaining cell (a transfer, which needs two models' detections).
Each job runs :func:`vrh.study.execute.run_cells` on its cells -- the same code as a sequential run, so
the folders are the same -- after the jobs it depends on finished.

Dependencies: submitit has no dependency API. On Slurm a job is submitted with
``--dependency=afterok:<ids>`` (``slurm_dependency``), so it does not hold an allocation while it waits;
on every executor the job is also given its dependencies' Job objects and waits on their ``result()``
first (what makes the local and debug executors, which ignore ``dependency``, respect the order). A job
that fails makes its dependents fail with its error; a rerun of ``vrh study run`` resumes from what finished.

The driver (the ``vrh study run`` process) checks the study, clears changed cells, submits, waits for
every job and writes ``DIR/results.json``. Slurm parameters come as ``--slurm KEY=VALUE`` (submitit's names:
``slurm_partition=gpu``, ``timeout_min=240``, ``gpus_per_node=1``, ``slurm_array_parallelism=...``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from vrh.study.cells import STATE_DIR, Cell

DEFAULT_PARAMETERS = {"timeout_min": 24 * 60}  # submitit's local executor would stop a job after 2 minutes


def parse_parameters(items: Sequence[str]) -> dict[str, Any]:
    """``["timeout_min=60", "slurm_partition=gpu"]`` -> ``{"timeout_min": 60, "slurm_partition": "gpu"}``
    (values read as JSON when they parse, else as text).

    >>> parse_parameters(["timeout_min=60", "slurm_partition=gpu", "slurm_setup=[\\"module load cuda\\"]"])
    {'timeout_min': 60, 'slurm_partition': 'gpu', 'slurm_setup': ['module load cuda']}
    """
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--slurm {item!r}: expected KEY=VALUE")
        try:
            out[key.strip()] = json.loads(value)
        except ValueError:
            out[key.strip()] = value
    return out


def group_jobs(cells: Sequence[Cell]) -> list[list[Cell]]:
    """The study's cells to run, as jobs in submission order (see the module docstring)."""
    jobs: list[list[Cell]] = []
    job_of: dict[str, int] = {}
    by_model: dict[str, int] = {}
    for c in cells:  # cells come in plan order: a dependency before its dependents
        mine = by_model.get(c.model) if c.model is not None else None
        # a model's job takes the cell when what it needs is a dataset or that job's own cells
        joinable = c.model is not None and all(jobs[job_of[d]][0].model is None or job_of[d] == mine
                                               for d in c.deps if d in job_of)
        if joinable and mine is not None:
            jobs[mine].append(c)
        else:
            jobs.append([c])
            if joinable:
                by_model[c.model] = len(jobs) - 1
        job_of[c.id] = mine if joinable and mine is not None else len(jobs) - 1
    return jobs


def run_job(study_path: str, out: str, cell_ids: list[str], wait_for: Sequence[Any] = ()) -> dict[str, Any]:
    """One job: wait for the jobs it depends on, then run its cells (in this process, one model load)."""
    from vrh.study.execute import StudyRun, run_cells
    from vrh.study.kinds import build_cells
    from vrh.study.spec import load_study

    for job in wait_for:
        _wait(job)
    cells = build_cells(load_study(study_path))
    mine = [c for c in cells if c.id in set(cell_ids)]
    report = StudyRun()
    run_cells(mine, Path(out), report, done={c.id for c in cells if c.id not in set(cell_ids)}, log=print)
    return report.to_json()


def _wait(job: Any, poll_s: float = 1.0) -> None:
    """Wait for a dependency's job and raise its failure. Another process's local job cannot be asked for
    its state (submitit knows a local job's process only in the process that started it), so the job's
    result file, which submitit writes on success and on failure alike, is what is waited for. A debug job
    runs when its result is asked for."""
    import submitit

    if not isinstance(job, submitit.DebugJob):
        while not job.paths.result_pickle.exists():
            time.sleep(poll_s)
    job.result()  # the dependency's failure is raised here: this job's cells cannot run


def submit_study(study: Any, out: str | Path, *, cluster: str = "slurm", folder: str | Path | None = None,
                 parameters: dict[str, Any] | None = None, log: Callable[[str], None] = print):
    """Run what is not done of ``study`` in ``out`` as submitit jobs on ``cluster`` (slurm, local or debug)."""
    try:
        import submitit
    except ImportError:
        raise ValueError("--executor needs submitit: pip install 'vrh[cluster]'") from None
    from vrh.study.execute import study_session

    out = Path(out)
    with study_session(study, out, log, executor=cluster) as (todo, report):
        if not todo:
            log("study: nothing to do, every cell is done")
        if folder is None:  # submitit writes its job files there: no link on the way out of the study folder
            from vrh.runs import safe_paths

            safe_paths.check(out, out / STATE_DIR / "jobs")
        ex = submitit.AutoExecutor(folder=str(folder or out / STATE_DIR / "jobs" / "%j"), cluster=cluster)
        ex.update_parameters(**{**DEFAULT_PARAMETERS, "name": job_name(study.name), **(parameters or {})})
        submitted: dict[str, Any] = {}  # cell id -> its job
        jobs = []
        for group in group_jobs(todo):
            deps = list(dict.fromkeys(submitted[d] for c in group for d in c.deps if d in submitted))
            if deps and cluster == "slurm":
                ex.update_parameters(slurm_dependency="afterok:" + ":".join(str(j.job_id) for j in deps))
            job = ex.submit(run_job, str(study.path), str(out), [c.id for c in group], deps)
            if cluster == "slurm":
                ex.update_parameters(slurm_dependency=None)
            log(f"study: job {job.job_id}: {', '.join(c.id for c in group)}")
            jobs.append(job)
            submitted.update({c.id: job for c in group})
        for job in jobs:
            part = job.result()
            report.ran += part["ran"]
            report.seconds.update(part["seconds"])
            for name, n in part["model_loads"].items():
                report.model_loads[name] = report.model_loads.get(name, 0) + n
    return report


def job_name(study_name: str) -> str:
    """The jobs' name: ``vrh-study-`` and the study's name in letters, digits, ``_.-`` only (it is written
    into sbatch files, where a newline would start a directive of its own).

    >>> job_name("organisms"), job_name("a b\\n#SBATCH --x\\x1b")
    ('vrh-study-organisms', 'vrh-study-a_b_SBATCH_--x_')
    """
    import re

    return "vrh-study-" + re.sub(r"[^A-Za-z0-9_.-]+", "_", study_name)[:64]
