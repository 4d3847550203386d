"""Report sections for the demo's headline and for runs no section draws ("Other runs"); the other
characterisation runs' sections are in their analyses' folders (:mod:`vrh.analyses.transfer.section`,
:mod:`vrh.analyses.stability.section`, :mod:`vrh.analyses.compare.section`).

Each run's results are its command's typed value (:mod:`vrh.runs.results`: ``DemoResults``). Every key may be
missing (it then reads as None): a missing number shows as an en dash, a missing series simply drops its figure,
so a run written by a slightly different version of a command still renders instead of breaking the whole
report.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np

from vrh.infra.console import heads_text
from vrh.report import plots
from vrh.report.document import Section, Table, Text
from vrh.report.load import Run, is_num, num, or_missing, pct, pm, short
from vrh.report.notes import random_control_blocks
from vrh.report.sections import recorded_sparsity, sparsity_thresholds
from vrh.runs import RESULTS, DemoVqa
from vrh.scoring.sparsity import sparsity_summary


def headline_lines(runs: list[Run]) -> list[Text]:
    """Each demo's finding in one sentence, for the top of the page: grounding accuracy with the top-k VRHs
    masked vs k random heads vs unmasked (then VQA), every number from the demo's results. A demo without
    its masked accuracy (one that did not finish) has no finding to state."""
    out = []
    for run in (r for r in runs if r.command == "demo" and is_num(r.res.vrh_masked_accuracy)):
        r, vqa = run.res, run.res.vqa  # a DemoResults
        k = or_missing(r.k, "?")
        text = (f"{run.name} (grounding): top-{k} VRHs masked → {pct(r.vrh_masked_accuracy)}% vs {k} random "
                f"heads {pct(r.random_masked_accuracy_mean)}% (unmasked {pct(r.baseline_accuracy)}%)")
        if vqa is not None and not vqa.is_empty():
            text += (f"; VQA: {pct(vqa.vrh_masked_accuracy)}% vs {pct(vqa.random_masked_accuracy_mean)}% "
                     f"(unmasked {pct(vqa.baseline_accuracy)}%)")
        out.append(Text(text + "."))
    return out


def demo_section(runs: list[Run], kc: object = None) -> Section | None:  # kc: the report's k, unread
    """The demo's headline figures (its sub-runs render in their own sections)."""
    demos = [r for r in runs if r.command == "demo" and r.results]
    if not demos:
        return None
    s = Section("Headline (vrh demo)")
    for run in demos:
        r = run.res  # a DemoResults
        k, total = r.k, r.num_heads_total
        vqa = r.vqa or DemoVqa.empty()
        rows = [["grounding, unmasked", pct(r.baseline_accuracy), ""],
                [f"grounding, top-{k} VRHs masked", pct(r.vrh_masked_accuracy),
                 f"parse failures {pct(r.vrh_parse_failure_rate)} %"],
                [f"grounding, {k} random heads masked", pm(r.random_masked_accuracy_mean,
                                                          r.random_masked_accuracy_std),
                 f"mean ± {plots.STD_WORDS} over seeds {r.random_seeds}"],
                ["VQA, unmasked", pct(vqa.baseline_accuracy), ""],
                [f"VQA, top-{k} VRHs masked", pct(vqa.vrh_masked_accuracy), ""],
                [f"VQA, {k} random heads masked", pm(vqa.random_masked_accuracy_mean, vqa.random_masked_accuracy_std),
                 f"mean ± {plots.STD_WORDS} over seeds {r.random_seeds}"
                 if is_num(vqa.random_masked_accuracy_std) else ""]]
        s.add(Text(f"{run.name}: {k} of {total} heads masked; top-{k} heads (LAYER:HEAD): "
                   + heads_text(r.top_k_heads or [])))
        s.add(Table(["condition", "accuracy (%)", "note"], rows))
        s.add(*random_control_blocks(run))
        s.add(*_demo_sparsity(run, runs))
    return s



def _demo_sparsity(run: Run, runs: list[Run]) -> list:
    """The demo's sparsity as it recorded it (the thresholds its results and console use, named); for a demo
    that recorded none, recomputed from its detection sub-run at the report's defaults, saying so."""
    th = sparsity_thresholds(run, runs)
    if recorded_sparsity(run):  # th.values are the demo's own
        fr, counts, where = recorded_sparsity(run), recorded_sparsity(run, "count_above"), ""
    else:
        det = next((r for r in runs if r.command == "detect" and r.part_of == run.name and r.head_scores is not None
                    and r.head_scores.score_map() is not None), None)
        if det is None:
            return []
        sp = sparsity_summary(np.asarray(det.head_scores.score_map(), dtype=float), th.values)
        fr, counts, where = sp["fraction_above"], sp["count_above"], f", computed from {det.name}'s scores"
    return [Table(["sparsity: heads scoring above", "heads (%)", "count"],
                  [[f"{t:g}", pct(fr.get(t)), num(counts.get(t), "d")] for t in th.values],
                  f"{run.name}: {th.describe()}{where}")]


def other_section(runs: list[Run], known: Collection[str]) -> Section | None:
    """Runs of commands no section draws (``known``: the commands some section draws, handed by
    :func:`vrh.report.build.build_sections`): say so and list what they hold, so nothing is silently dropped and
    the owner of the command knows what to add (a report section in its registration, :mod:`vrh.analyses`)."""
    others = [r for r in runs if r.command not in known]
    if not others:
        return None
    s = Section("Other runs")
    for run in others:
        sub = Section(f"{run.name} ({run.command})", level=3)
        if run.results is None:
            why = "." if run.finished else f" yet: the run did not finish ({run.progress()})."
            sub.add(Text(f"No {RESULTS}{why}", muted=run.finished, warn=not run.finished))
        elif not isinstance(run.results, dict):
            sub.add(Text(f"{RESULTS} holds a {type(run.results).__name__}, not an object.", muted=True))
        else:
            sub.add(Text(f"vrh report has no renderer for '{run.command}' runs yet. {RESULTS} keys: "
                         + ", ".join(sorted(map(str, run.results))) + "."))
            flat = [[str(k), num(v, ".4g") if is_num(v) else short(v)] for k, v in run.results.items()
                    if is_num(v) or isinstance(v, str)]
            if flat:
                sub.add(Table(["key", "value"], flat[:20]))
            sub.add(*random_control_blocks(run))
        s.add(sub)
    return s
