"""``vrh study``: the paper's whole matrix from one study file, as resumable cells (docs/study.md).

``vrh study plan STUDY [--out DIR]`` lists every cell with its state and dependencies; ``vrh study run STUDY
--out DIR`` runs what is not done (``--executor local|slurm|debug`` submits the cells as jobs through
submitit); ``vrh study report DIR`` builds the report (the same as ``vrh report DIR``). The library is
:mod:`vrh.study`.
"""

from __future__ import annotations

import argparse

NAME = "study"
HELP = "the paper's matrix (models x benchmarks x protocol) from one study file, as resumable cells"
EXECUTORS = ("sequential", "local", "debug", "slurm")


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="study_command", metavar="ACTION", required=True)
    plan = sub.add_parser("plan", help="list every cell, its state (done, partial, changed, missing) and what it "
                                       "depends on", description="list every cell with its state")
    plan.add_argument("study", help="study file (TOML, docs/study.md)")
    plan.add_argument("--out", default=None, help="study folder whose cells' states to show (default: states not "
                                                  "shown)")
    plan.add_argument("--commands", action="store_true",
                      help="print, instead of the table, the vrh command line of each cell (the same folder, one "
                           "process per command; datasets are the study's)")
    run = sub.add_parser("run", help="run every cell that is not done, in dependency order",
                         description="run every cell that is not done; a rerun only checks; a killed run resumes")
    run.add_argument("study", help="study file (TOML, docs/study.md)")
    run.add_argument("--out", required=True, help="study folder: one run folder per cell inside it")
    run.add_argument("--executor", default="sequential", choices=EXECUTORS,
                     help="sequential: this process; local / debug / slurm: one submitit job per model's cells, "
                          "with their dependencies (default: %(default)s)")
    run.add_argument("--max-loaded", type=int, default=2,
                     help="models kept loaded at once in one process (default: %(default)s)")
    run.add_argument("--jobs-folder", default=None,
                     help="submitit's log and pickle folder (default: DIR/.study/jobs)")
    run.add_argument("--slurm", action="append", default=[], metavar="KEY=VALUE",
                     help="a submitit parameter for every job, e.g. slurm_partition=gpu, timeout_min=240, "
                          "gpus_per_node=1 (repeatable)")
    run.add_argument("--report", action="store_true", help="build DIR/report when the run finishes")
    rep = sub.add_parser("report", help="the study report (the same as vrh report DIR)",
                         description="the study report, with the paper's figures beside the measured ones")
    rep.add_argument("folder", help="study folder (vrh study run --out)")
    rep.add_argument("--out", default=None, help="report folder (default: DIR/report)")


def main(args: argparse.Namespace) -> int:
    from pathlib import Path

    from vrh.infra.console import console, printable
    from vrh.study.spec import load_study

    if args.study_command == "report":
        return _report(Path(args.folder), args.out)
    study = load_study(args.study)  # every check, the cells' own commands' included, before anything loads
    from vrh.study.execute import check_study_folder
    from vrh.study.spec import check_device_here
    from vrh.study.kinds import build_cells

    if args.out is not None:
        check_study_folder(Path(args.out))
    if args.study_command == "plan":
        try:
            check_device_here(study)
        except ValueError as e:  # planned here, perhaps run elsewhere: said, not refused
            console.print(f"note: {e} (only where the study runs matters)", markup=False, highlight=False)
        if args.commands:
            import shlex

            from vrh.study.execute import command_line

            out = Path(args.out or "STUDY_DIR")
            for c in build_cells(study):
                line = command_line(c, out)
                print(printable(f"# {c.id}: prepared by vrh study run" if line is None else shlex.join(line)))
            return 0
        _print_plan(study, Path(args.out) if args.out else None)
        return 0
    if args.max_loaded < 1:
        raise ValueError(f"--max-loaded must be >= 1, got {args.max_loaded}")
    if args.executor != "slurm":  # the cells run on this machine: its device must be here
        check_device_here(study)
    out = Path(args.out)
    try:
        if args.executor == "sequential":
            from vrh.study.execute import run_study

            rep = run_study(study, out, max_loaded=args.max_loaded, log=_log)
        else:
            from vrh.study.cluster import parse_parameters, submit_study

            rep = submit_study(study, out, cluster=args.executor, folder=args.jobs_folder,
                               parameters=parse_parameters(args.slurm), log=_log)
    except KeyboardInterrupt:
        console.print(f"\nvrh study: interrupted; finished cells are kept in {out}; rerun the same command to "
                      "continue (an interrupted cell resumes)")
        return 130
    _log(f"study: {len(rep.ran)} cells run ({len(rep.resumed)} resumed, {len(rep.redone)} redone), "
         f"{len(rep.already_done)} already done, {rep.elapsed_seconds:.1f} s -> {out}")
    if args.report:
        return _report(out, None)
    return 0


def _log(message: str) -> None:
    """A study's progress line on stderr: text from the study file (a setting in "changed (...)") printed as
    text, never as rich markup or terminal control."""
    from vrh.infra.console import console, printable

    console.print(printable(message), markup=False, highlight=False)


def _print_plan(study, out) -> None:
    """One line per cell (plain text, so that no terminal width truncates an id): state, id, folder, deps.
    What comes from the study file (its name, changed settings) is printed with control characters escaped."""
    from collections import Counter

    from vrh.infra.console import printable
    from vrh.study.execute import plan_states
    from vrh.study.kinds import build_cells

    states = ([(c, "-", []) for c in build_cells(study)] if out is None else plan_states(study, out))
    width = max(len(c.id) for c, _, _ in states)
    print(printable(f"study {study.name}: {len(states)} cells" + ("" if out is None else f" in {out}: " + ", ".join(
        f"{n} {s}" for s, n in Counter(s for _, s, _ in states).items()))))
    for c, state, diffs in states:
        deps = f"  <- {', '.join(c.deps)}" if c.deps else ""
        why = f"  ({'; '.join(diffs[:3])})" if diffs else ""
        print(printable(f"{state:8s} {c.id:{width}s}  {c.folder}{deps}{why}"))


def _report(folder, out) -> int:
    from pathlib import Path

    from vrh.infra.console import console
    from vrh.analyses.reporting import build_report

    paths = build_report([folder], out or Path(folder) / "report")  # titled by the study's name
    console.print(f"report: {paths['html']}")
    return 0
