"""The README's times, measured: each job the README times, run as the README writes it, in a fresh folder.

Per run: wall seconds, CPU seconds (user + system of the job and every process it waited for:
``RUSAGE_CHILDREN``), and the machine's load average before, during (sampled every few seconds) and after,
so a time quoted from a busy machine says so. CPU seconds stay close on a busy machine where wall seconds
do not: quote both, and the load. With ``--repeat N`` each job runs N times (min / median / max).

    python benchmarks/readme_times.py demo dpo study          # the README's jobs (suite: the whole test suite)
    python benchmarks/readme_times.py --repeat 3 demo         # the range a user should expect
    python benchmarks/readme_times.py --command "x=sleep 1"   # any shell command, timed the same way

Jobs run from the repository root (the README's commands are written for it) with ``{tmp}`` in a command
replaced by the run's own fresh folder (``--work``, default a new temporary folder; kept, with each run's
log), so nothing lands in the tree. A job that needs another job's output (``dpo`` reads the demo's
detection) runs that one first, untimed. The table goes to stdout; the last line is the JSON of every run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOAD_EVERY_S = 5.0  # how often the load average is sampled while a job runs


@dataclass(frozen=True)
class Job:
    """A job the README times: its shell ``command`` (``{tmp}``: the run's folder), the README's words for
    it (``what``), the job whose output it needs (``needs``: run first, untimed), an untimed ``setup`` line,
    the folder it runs in (``cwd``, default the repository root; ``{root}``: the repository) and ``env``."""

    command: str
    what: str
    needs: str | None = None
    setup: str | None = None
    cwd: str = "{root}"
    env: tuple[tuple[str, str], ...] = ()


# A user's fresh clone, of this working tree as it is (committed or not): git's clone, then the files that
# differ from HEAD laid over it and the ones deleted removed. It sits in {tmp}, so ../shared (the real
# configs some tests read) is absent, as in a user's clone, and those tests skip.
CLONE = ("git clone -q {root} {tmp}/vrh && cd {root} && git ls-files -z -co --exclude-standard "
         "| tar -c --ignore-failed-read --null -T - 2>/dev/null | tar -x -C {tmp}/vrh "  # deleted files: next
         "&& git ls-files -z -d | (cd {tmp}/vrh && xargs -0r rm -f)")


# As the README writes each command, with runs/ replaced by {tmp} (tests/test_benchmark_readme_times.py
# checks that the README still holds each of them).
JOBS = {
    "demo": Job("vrh demo --out {tmp}/demo --overwrite", "the main job: the whole method on the shipped organism"),
    "suite": Job("python -m ruff check && python -m pytest", "the linter and the tests, as CI runs them, in a "
                 "fresh clone without ../shared", setup=CLONE, cwd="{tmp}/vrh",
                 # the clone's own code, not this checkout's editable install; -rs lists each skip's reason
                 env=(("PYTHONPATH", "{tmp}/vrh/src:{tmp}/vrh/lab"), ("PYTEST_ADDOPTS", "-rs"))),
    "dpo": Job("vrh dpo --model organism --heads {tmp}/demo/detect --out {tmp}/dpo_loop --lr 1e-5 "
               "--train-batch-size 4 --grad-accum 2 --batch-size 64 --max-new-tokens 24",
               "the DPO loop on organism A (App. B)", needs="demo"),
    "study": Job("vrh study run examples/organism_study.toml --out {tmp}/study --report",
                 "the example study: four organisms, two grounding benchmarks, one VQA set"),
    "findings": Job("bash lab/scripts/organism_findings.sh {tmp}/findings",
                    "every finding on the shipped organisms (lab)"),
}


@dataclass
class Run:
    job: str
    command: str
    folder: str
    wall_s: float
    cpu_s: float  # user + system seconds of the job and the processes it waited for
    load_before: float  # 1-minute load average
    load_during_mean: float
    load_during_max: float
    load_after: float
    returncode: int
    log: str
    tests: dict[str, int] | None = None  # a pytest run's counts (passed, skipped, ...; needs_shared: skips for ../shared)
    samples: list[float] = field(default_factory=list, repr=False)  # the load averages sampled


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _fill(text: str, folder: Path, quote=shlex.quote) -> str:
    """``text`` with its ``{tmp}`` and ``{root}`` filled in (quoted for a shell line; ``quote=str``: as paths)."""
    return text.replace("{tmp}", quote(str(folder))).replace("{root}", quote(str(ROOT)))


def pytest_counts(log: str) -> dict[str, int] | None:
    """The counts of pytest's last summary line (``2 failed, 1,914 passed, 51 skipped, 9 deselected in ...``),
    and ``needs_shared``: the skips whose reason (``-rs``) names ``../shared`` (or "the shared real configs");
    None without a summary.

    >>> pytest_counts("SKIPPED [3] tests/a.py:9: the real files (../shared/real) are absent\\n"
    ...               "SKIPPED [1] tests/b.py:2: no trl\\n== 7 passed, 4 skipped, 2 deselected in 9.1s ==")
    {'passed': 7, 'skipped': 4, 'deselected': 2, 'needs_shared': 3}
    """
    import re

    lines = [ln for ln in log.splitlines() if re.search(r"\d+ (passed|failed|skipped).* in [\d.]+s", ln)]
    if not lines:
        return None
    counts = {what: int(n) for n, what in re.findall(r"(\d+) (passed|failed|skipped|deselected|errors?|xfailed|xpassed)",
                                                     lines[-1])}
    counts["needs_shared"] = sum(int(n) for n in re.findall(r"^SKIPPED \[(\d+)\] .*\bshared\b", log, re.MULTILINE))
    return counts


def run_job(name: str, command: str, folder: Path, *, every_s: float = LOAD_EVERY_S, cwd: str = "{root}",
            env: tuple[tuple[str, str], ...] = ()) -> Run:
    """Run ``command`` (a shell line, ``{tmp}`` -> ``folder``, ``{root}`` -> the repository) in ``cwd``, its
    output in ``folder/NAME.log``; time it and sample the load while it runs."""
    folder.mkdir(parents=True, exist_ok=True)
    line = _fill(command, folder)
    log = folder / f"{name}.log"
    samples: list[float] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(every_s):
            samples.append(os.getloadavg()[0])

    sampler = threading.Thread(target=sample, daemon=True)
    before, cpu0, t0 = os.getloadavg()[0], _children_cpu(), time.monotonic()
    sampler.start()
    try:
        with open(log, "w") as out:
            rc = subprocess.run(["bash", "-c", line], cwd=_fill(cwd, folder, str), stdout=out,
                                stderr=subprocess.STDOUT,
                                env={**os.environ, **{k: _fill(v, folder, str) for k, v in env}}).returncode
    finally:
        done.set()
        sampler.join()
    wall, cpu, after = time.monotonic() - t0, _children_cpu() - cpu0, os.getloadavg()[0]
    during = samples or [before, after]
    return Run(name, line, str(folder), round(wall, 2), round(cpu, 2), round(before, 2),
               round(statistics.mean(during), 2), round(max(during), 2), round(after, 2), rc, str(log),
               pytest_counts(log.read_text(errors="replace")) if "pytest" in line else None, samples)


def summary(runs: list[Run]) -> dict[str, dict[str, float]]:
    """Per job: min / median / max of wall and CPU seconds over its runs, and the load it ran under."""
    out = {}
    for job in dict.fromkeys(r.job for r in runs):
        rs = [r for r in runs if r.job == job]
        out[job] = {f"{what}_{stat}": round(f([getattr(r, f"{what}_s") for r in rs]), 2)
                    for what in ("wall", "cpu") for stat, f in (("min", min), ("median", statistics.median),
                                                              ("max", max))}
        out[job].update(runs=len(rs), load_min=min(min(r.load_before, r.load_during_mean) for r in rs),
                        load_max=max(r.load_during_max for r in rs))
    return out


def machine() -> dict[str, object]:
    """What the times were measured on (they mean little without it)."""
    try:
        git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             check=False).stdout.strip() or None
    except OSError:
        git = None
    return {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "cpus": os.cpu_count(),
            "platform": platform.platform(), "python": platform.python_version(), "git": git,
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")}


def _table(runs: list[Run]) -> str:
    rows = [("job", "run", "wall s", "CPU s", "load before / during (mean, max) / after", "rc", "tests")]
    seen: dict[str, int] = {}
    for r in runs:
        seen[r.job] = seen.get(r.job, 0) + 1
        rows.append((r.job, str(seen[r.job]), f"{r.wall_s:.1f}", f"{r.cpu_s:.1f}",
                     f"{r.load_before:.2f} / {r.load_during_mean:.2f}, {r.load_during_max:.2f} / {r.load_after:.2f}",
                     str(r.returncode), ", ".join(f"{v} {k}" for k, v in (r.tests or {}).items())))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("jobs", nargs="*", metavar="JOB",
                   help=f"README jobs to time: {', '.join(JOBS)} (default: demo)")
    p.add_argument("--command", action="append", default=[], metavar="NAME=CMD",
                   help="also time this shell command (from the repository root; {tmp}: its own folder)")
    p.add_argument("--repeat", type=int, default=1, help="runs per job (default: 1)")
    p.add_argument("--work", default=None, help="folder for the runs' folders and logs (default: a new temporary one)")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the JSON to this file")
    args = p.parse_args(argv)
    unknown = [j for j in args.jobs if j not in JOBS]
    if unknown:
        p.error(f"unknown job(s) {', '.join(unknown)}; the README's jobs: {', '.join(JOBS)}")
    if args.repeat < 1:
        p.error(f"--repeat must be >= 1, got {args.repeat}")
    for c in args.command:
        if "=" not in c or not c.partition("=")[0].strip():
            p.error(f"--command {c!r}: expected NAME=CMD")
    if not args.jobs and not args.command:
        args.jobs = ["demo"]
    return args


def main(argv: list[str] | None = None) -> dict[str, object]:
    args = parse_args(argv)
    work = Path(args.work or tempfile.mkdtemp(prefix="vrh_readme_times_"))
    todo = [(j, JOBS[j]) for j in args.jobs]
    todo += [(c.partition("=")[0].strip(), Job(c.partition("=")[2], "--command")) for c in args.command]
    runs: list[Run] = []
    for name, job in todo:
        for i in range(args.repeat):
            folder = work / f"{name}_{i + 1}"
            for what, line in ((job.needs, JOBS[job.needs].command if job.needs else None), ("setup", job.setup)):
                if line:  # untimed, in the same folder: the demo a job reads, the clone a job runs in
                    prep = run_job(f"{what}_for_{name}", line, folder)
                    if prep.returncode:
                        sys.exit(f"readme_times: {what} of {name} failed, rc {prep.returncode}: see {prep.log}")
            print(f"readme_times: {name} run {i + 1}/{args.repeat} in {folder}", file=sys.stderr, flush=True)
            runs.append(run_job(name, job.command, folder, cwd=job.cwd, env=job.env))
            if runs[-1].returncode:
                print(f"readme_times: {name} failed, rc {runs[-1].returncode}: see {runs[-1].log}", file=sys.stderr)
    result = {"machine": machine(), "summary": summary(runs),
              "runs": [{k: v for k, v in asdict(r).items() if k != "samples"} for r in runs]}
    print(_table(runs))
    print(json.dumps(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    res = main()
    sys.exit(1 if any(r["returncode"] for r in res["runs"]) else 0)
