"""``vrh stability``'s report section: the top-k overlap vs the number of scoring samples (Fig. 8c), with the
accuracy of each draw's heads where it was measured, and which output tokens to score (Fig. 8b).

The run's results are a :class:`vrh.runs.StabilityResults`; every key may be missing (it reads as None).
"""

from __future__ import annotations

from vrh.report import plots
from vrh.report.document import Fig, Section, Table, Text, slug
from vrh.report.load import Run, at, or_missing, pct, pm
from vrh.report.notes import random_control_blocks
from vrh.report.style import RANDOM_COLOR, VRH_COLOR, VRH_LIGHT
from vrh.runs import RESULTS


def stability_section(runs: list[Run], kc: object = None) -> Section | None:  # kc: the report's k, unread
    sts = [r for r in runs if r.command == "stability" and r.results]
    if not sts:
        return None
    s = Section("Stability")
    s.add(Text("How many scoring samples detection needs (Fig. 8c): overlap of the top-k heads found with n "
               f"samples with the reference top-k (that of the whole detection set), mean ± {plots.STD_WORDS} "
               "over resamplings; and which output tokens to score (Fig. 8b)."))
    for run in sts:
        r = run.res  # a StabilityResults
        sub = Section(run.name, level=3)
        n_values, mean = r.n_values or [], r.topk_overlap_mean or []
        if n_values and mean:
            ref = r.n_total if r.n_total in n_values else None
            sub.add(Fig(f"{slug(run.name)}-stability", plots.stability_curve(
                n_values, mean, r.topk_overlap_std, k=r.k, title=run.title(), reference_n=ref),
                "Top-k overlap vs number of scoring samples; band: ±1 std (population) over resamplings"
                + (f"; hollow marker: n = {ref}, the whole detection set, which is the reference (100 % by "
                   "definition, not a measurement)." if ref is not None else ".")))
            std = r.topk_overlap_std or []
            acc = r.accuracy_mean or []
            sub.add(Table(["n", f"top-{or_missing(r.k, 'k')} overlap (%) mean ± std"]
                          + (["accuracy (%)"] if acc else []),
                          [[f"{n} (all: the reference)" if n == ref else str(n), pm(at(mean, i), at(std, i))]
                           + ([pct(at(acc, i))] if acc else []) for i, n in enumerate(n_values)]))
        tc = r.token_choice
        if tc is not None and not tc.is_empty():
            labels = ["VRHs from one\nrandom output token", "VRHs from all\noutput tokens", "random heads"]
            vals = [tc.rand1_accuracy, tc.out_accuracy, tc.random_accuracy]
            sub.add(Fig(f"{slug(run.name)}-token-choice", plots.labelled_bars(
                labels, vals, [VRH_LIGHT, VRH_COLOR, RANDOM_COLOR], baseline=tc.baseline_accuracy,
                title=f"{run.name}: accuracy after masking k={or_missing(r.k, '?')} heads"),
                "Which output tokens to score (Fig. 8b)."))
        if r.token_choice_skipped:
            sub.add(Text(f"Token-choice comparison skipped: {r.token_choice_skipped}", muted=True))
        if len(sub.blocks) == 0:
            keys = sorted(run.results) if isinstance(run.results, dict) else []
            sub.add(Text(f"No stability series in {RESULTS} (keys: {', '.join(keys)}).", muted=True))
        sub.add(*random_control_blocks(run))
        s.add(sub)
    return s
