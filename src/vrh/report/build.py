"""``vrh report``: turn run folders into one readable report, without touching a model.

:func:`build_report` reads only what runs wrote, through the typed readers of :mod:`vrh.runs` (config,
results, head scores, samples, overlays), and writes into ``out_dir``:

* ``report.html``: a single self-contained page (inline CSS, every figure a base64 ``data:`` URI, no
  scripts, fonts or external URLs) that can be mailed or archived and still shows everything;
* ``report.md`` with its figures as PNGs in ``out_dir/figures/``, for reading in a repository.

Every file is first written under a temporary name and renamed into place only once all of them were
written, so a report that fails midway (a full disk) leaves the previous report as it was. ``out_dir`` must be
empty or a previous report's: every file a report writes is recorded there first (:mod:`vrh.runs.written`),
and a folder without that record, a ``figures`` that is a symlink, or an existing file of the same name that
vrh did not write is refused before anything is written. Once the new report is in place, the figures the
previous report wrote and this one does not link are removed (figures that no longer match the report
mislead whoever browses the folder); nothing vrh did not write is ever touched. Figures are built with matplotlib's mathtext and TeX off
(:data:`vrh.report.style.PLAIN_TEXT`): run names and expressions are user text, and a ``$`` in one must
not be parsed as math (or fail the whole report).

A run whose results were not written did not finish: it is marked INCOMPLETE in the summary and in a
warning at the top, and a report of nothing but unfinished runs is refused (ValueError). Results of a newer
schema than :data:`vrh.runs.SCHEMA_VERSION` get a warning; runs without ``schema_version`` are version 1.
A ``random_control`` block (:func:`vrh.experiments.kcurves.random_control_report`) is shown next to the run's figure:
how many distinct random head sets were evaluated, and its warnings (e.g. every seed drew the same heads).

Runs are dispatched on the config's ``command``. Sections (each left out when no run feeds it):
Summary (+ provenance), Head scores and sparsity (``detect``), k-curves and Tab. A1-style tables
(``sweep``), Outcome breakdown (``sweep``, ``evaluate``), Attention overlays (``detect`` with
``overlays.npz``), Transfer, Stability, Method comparison, Emergence during training (``emergence``: an
organism's training log, :mod:`vrh.report.emergence`), DPO preference pairs (``dpo-pairs``,
:mod:`vrh.report.pairs`), DPO with retrieval heads (``dpo``: Fig. A3; ``dpo-train``; :mod:`vrh.report.dpo`), Other runs (any other command: its results.json keys and scalar values).

A run folder that names sub-runs (a demo) brings them into the report (:func:`vrh.report.load.load_runs`),
and a demo's finding is the first line under the title: what a reader opens the report for.

Each run's ``results.json`` is read as its command's typed value; the schema of every kind (keys, their
order and meaning, what an old or partial file reads as) lives in :mod:`vrh.runs.results` and
:mod:`vrh.runs.results_characterize`. The comparison's ``default_method`` (else a method named like "vrh",
"ours" or "own") is drawn red, "random" grey; methods with identical accuracies share one line. A ``demo``
run gets the headline section, a ``study`` run the study's sections (:mod:`vrh.report.study`; its own results
are the study's bookkeeping, not a measurement, so it is no "Other run"); any other command lands in "Other
runs" until a renderer is added here.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path

import matplotlib

from vrh.report.arguments import DEFAULT_TITLE, add_arguments
from vrh.report import characterize, emergence, study
from vrh.report import sections as sections_
from vrh.report.document import Section, Text, figures, render_html, render_markdown
from vrh.report.kchoice import KChoice, report_k
from vrh.report.load import load_runs
from vrh.report.model_cards import planted_notices
from vrh.report.notes import report_notices
from vrh.report.plots import STD_WORDS
from vrh.report.style import PLAIN_TEXT
from vrh.runs import safe_paths, written

HTML_NAME = "report.html"
MD_NAME = "report.md"
FIG_DIR = "figures"


SectionBuilder = Callable[[list, KChoice], "Section | list[Section] | None"]
Sections = tuple[Sequence[tuple[float, SectionBuilder]], Collection[str]]
STUDY_PLACE, SUMMARY_PLACE, EMERGENCE_PLACE = 5.0, 10.0, 100.0  # the report's own sections among the analyses'
OWN_COMMANDS = frozenset({"emergence"})  # runs a section of the report's own draws (an organism's training log)


def build_sections(runs, k: int | KChoice | None, sections: Sections | None = None) -> list[Section]:
    """Every section with something to show, in reading order. ``k``: the user's ``--k``, or None for
    the k the runs recorded (:func:`vrh.report.kchoice.report_k`). ``sections``: the analyses' sections,
    ``(place, builder)`` each, and the commands whose runs they draw (:func:`vrh.analyses.registry.report_sections`,
    handed by the caller: the report never imports an analysis); without them, every run is an "Other run"."""
    kc = k if isinstance(k, KChoice) else report_k(runs, k)
    given, drawn = sections if sections is not None else ((), frozenset())
    own: list[tuple[float, SectionBuilder]] = [
        (STUDY_PLACE, lambda rs, _k: study.study_sections(rs)),
        (SUMMARY_PLACE, lambda rs, _k: sections_.summary_section(rs)),
        (EMERGENCE_PLACE, lambda rs, _k: emergence.emergence_section(rs))]
    parts: list = []
    with matplotlib.rc_context(PLAIN_TEXT):  # every figure is drawn (to PNG) inside its section builder
        for _, build in sorted([*given, *own], key=lambda pb: pb[0]):  # stable: equal places keep their order
            part = build(runs, kc)
            parts += part if isinstance(part, list) else [part]
        parts.append(characterize.other_section([r for r in runs if not study.is_study(r)],  # bookkeeping, no run
                                                OWN_COMMANDS | set(drawn)))
    return [p for p in parts if p is not None]


MAX_LISTED = 6  # run folders the opening line names one by one; beyond, it counts them by command


def default_title(runs) -> str:
    """``Study report: NAME`` (the name the study file gives, not its folder's) for one study, else
    :data:`DEFAULT_TITLE`."""
    studies = [r for r in runs if study.is_study(r)]
    if len(studies) == 1:
        return f"Study report: {studies[0].config.get('name') or studies[0].name}"
    return DEFAULT_TITLE


def runs_line(runs) -> str:
    """The page's opening line on what it covers: a few run folders by name, many (a study's cells) counted
    by command, since the Summary table lists every one."""
    if len(runs) <= MAX_LISTED:
        return f"{len(runs)} run folder(s): " + ", ".join(
            f"{r.name} ({r.command}" + (f", part of {r.part_of})" if r.part_of else ")") for r in runs) + ". "
    tops = [r for r in runs if not r.part_of]
    counts = Counter(r.command for r in runs if r.part_of)
    parts = ", ".join(f"{n} {cmd}" for cmd, n in counts.items())
    head = ", ".join(f"{r.name} (" + (f"the study {r.config.get('name')}" if study.is_study(r) and r.config.get("name")
                                       else r.command) + ")" for r in tops[:MAX_LISTED])
    more = f" and {len(tops) - MAX_LISTED} more" if len(tops) > MAX_LISTED else ""
    return (f"{len(runs)} run folders: {head}{more}" + (f", with {sum(counts.values())} sub-runs ({parts})"
                                                        if counts else "") + "; the Summary table lists each. ")


def build_report(run_dirs: Sequence[str | Path], out_dir: str | Path, *, k: int | None = None,
                 title: str | None = None, sections: Sections | None = None) -> dict[str, Path]:
    """Write ``report.html`` and ``report.md`` (+ ``figures/``) for ``run_dirs`` into ``out_dir``, titled
    ``title`` (default: :func:`default_title`).

    ``k`` is the number of top heads marked on heat maps and averaged in overlays (default: the k the runs
    were made with, :func:`vrh.report.kchoice.report_k`; 20, capped at an eighth of a small model's heads,
    when no run records one). ``sections``: the analyses' sections (:func:`build_sections`). Returns ``{"html": ..., "md": ..., "figures": ...}`` paths.
    A path that is not a run folder raises FileNotFoundError; run folders none of which finished raise
    ValueError (a report of partial numbers only would read like a result); anything odd inside a run is
    reported, not raised.
    """
    if not run_dirs:
        raise ValueError("vrh report needs at least one run folder")
    if k is not None and k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    out_dir = Path(out_dir)
    check_report_folder(out_dir)  # before any work: a folder that is not a vrh report is refused at once
    runs = load_runs(list(run_dirs))
    if not any(r.finished for r in runs):
        raise ValueError("no finished run to report: " + "; ".join(f"{r.path} did not finish ({r.progress()})"
                                                                   for r in runs)
                         + " -- a run is finished once it has written its results; wait for it or --resume it")
    kc = report_k(runs, k)
    title = title or default_title(runs)
    secs = build_sections(runs, kc, sections)
    intro = [*characterize.headline_lines(runs),  # the finding first, then what the page covers
             *planted_notices(runs),  # and at once, what kind of finding it is on a model with planted heads
             Text(runs_line(runs) + "Heads are LAYER:HEAD, 0-based (as the CLI writes them). Accuracies in %; "
                  f"a ± after a mean over seeds or resamplings is their {STD_WORDS}."),
             *report_notices(runs), *k_notice(kc, runs)]
    html_path, md_path, fig_dir = out_dir / HTML_NAME, out_dir / MD_NAME, out_dir / FIG_DIR
    md, figs = render_markdown(title, intro, secs, FIG_DIR)
    files = {**{fig_dir / name: png for name, png in figs.items()}, md_path: md.encode("utf-8"),
             html_path: render_html(title, intro, secs).encode("utf-8")}
    check_report_folder(out_dir, files)  # again, now that the figures' names are known
    before = written.recorded(out_dir)
    written.record(out_dir, files)  # recorded before they are written: a crash leaves nothing unrecorded
    safe_paths.mkdirs(out_dir, fig_dir)
    _write_all(out_dir, files)
    _remove_stale_figures(out_dir, before, set(files))
    return {"html": html_path, "md": md_path, "figures": fig_dir}


def check_report_folder(out_dir: Path, files: Mapping[Path, bytes] = {}) -> None:
    """Refuse (FileExistsError) an ``--out`` a report may not write into: a non-empty folder that is not a vrh
    report (no record of what vrh wrote there, :mod:`vrh.runs.written`), a ``figures`` that is not a real folder
    (a symlink is never followed), or a file among ``files`` that exists without vrh having written it."""
    if out_dir.exists() and not out_dir.is_dir():
        raise FileExistsError(f"--out {out_dir} is a file, not a folder")
    if not out_dir.is_dir() or not any(out_dir.iterdir()):
        return
    if not written.has_record(out_dir):
        raise FileExistsError(f"--out {out_dir} is not empty and is not a vrh report folder (no record of files vrh "
                              "wrote there); a report writes only into an empty folder or a previous report's: "
                              "choose another --out")
    figs = out_dir / FIG_DIR
    if figs.is_symlink() or (figs.exists() and not figs.is_dir()):
        raise FileExistsError(f"--out {out_dir}: {figs} is not a folder vrh made (a symlink or a file); a report "
                              "never writes through it: remove it or choose another --out")
    mine = written.recorded(out_dir)
    clash = sorted(str(p.relative_to(out_dir)) for p in files
                   if (p.exists() or p.is_symlink()) and (p.is_symlink() or written.relative(out_dir, p) not in mine))
    if clash:
        raise FileExistsError(f"--out {out_dir}: {', '.join(clash[:5])} exist(s) but vrh did not write them; a report "
                              "never replaces a file of yours: move them away or choose another --out")


def _remove_stale_figures(out_dir: Path, before: set[str], keep: set[Path]) -> None:
    """Remove the files a previous report in ``out_dir`` wrote (recorded in ``before``) that the report just
    written does not: its figures that no longer match. Nothing vrh did not write is touched."""
    keep_rel = {written.relative(out_dir, p) for p in keep}
    for rel in sorted(before - keep_rel):
        path = out_dir / rel
        # no component a link (a planted ``link/ -> elsewhere`` with ``link/a.txt`` recorded deleted elsewhere/a.txt)
        if not rel.endswith("/") and safe_paths.is_symlink_free(out_dir, path) and path.is_file():
            safe_paths.unlink(out_dir, path)


def k_notice(kc: KChoice, runs) -> list[Text]:
    """Say which k the heat maps and overlays mark when it is not evident: runs that disagree, or none
    that records one."""
    if not any(r.command == "detect" for r in runs):
        return []
    if kc.k is None:
        return [Text("No run records a k, so heat maps and overlays mark a default number of top heads "
                     "(stated on each); pass --k to choose.", muted=True)]
    if kc.others:
        return [Text(f"Heat maps and overlays mark the top-{kc.k} heads (k from {kc.source}); other runs "
                     f"used other ks: {'; '.join(kc.others)}.", muted=True)]
    return []


def _write_all(out_dir: Path, files: Mapping[Path, bytes]) -> None:
    """Write every file under ``<name>.tmp`` first and rename them into place only once all were written:
    a write that fails (a full disk) leaves every previous file as it was and no temporary behind. Nothing in
    ``out_dir`` is followed if it is a link (:mod:`vrh.runs.safe_paths`): a planted ``report.html.tmp`` link
    is unlinked, never written through."""
    staged: list[Path] = []
    try:
        for path, data in files.items():
            staged.append(path.with_name(path.name + ".tmp"))  # before the write: a torn one is removed too
            with safe_paths.open_write(out_dir, staged[-1], "wb", fresh=True) as f:
                f.write(data)
        for path, tmp in zip(files, staged):
            safe_paths.replace(out_dir, tmp, path)
    finally:
        for tmp in staged:
            try:
                safe_paths.unlink(out_dir, tmp)  # nothing left of the renamed ones
            except OSError:
                pass  # a folder on the way that is not one (refused above): nothing of vrh's to remove


def report_main(args: argparse.Namespace | Sequence[str] | None = None, sections: Sections | None = None) -> int:
    """CLI entry: ``args`` is the parsed namespace (``runs``, ``out``, optional ``k`` / ``title``) or an
    argv list. Prints where the report went; returns 0. Only unfinished runs raise ValueError (exit code 2
    in the CLI)."""
    if args is None or not isinstance(args, argparse.Namespace):
        p = argparse.ArgumentParser(prog="vrh report", description="Build an HTML + Markdown report from run folders")
        add_arguments(p)
        args = p.parse_args(None if args is None else list(args))
    paths = build_report(args.runs, args.out, k=getattr(args, "k", None), title=getattr(args, "title", None),
                         sections=sections)
    from vrh.infra.console import console

    console.print(f"report: {paths['html']} (self-contained), {paths['md']} + {paths['figures']}/")
    return 0


__all__ = ["build_report", "report_main", "add_arguments", "build_sections", "figures"]
