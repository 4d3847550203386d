"""Report section for ``dpo-pairs`` runs (:mod:`vrh.analyses.dpo_pairs`, paper App. B).

What a reader of a DPO dataset needs before training on it: how many pairs survived and why the others were
dropped (a chosen answer that was wrong would teach the wrong box; a rejected answer equal to the chosen
one carries no preference, :func:`vrh.experiments.preference_pairs.drop_reason`), how often each policy was right, and a few
examples to see what "rejected" looks like. The examples come from the run's per-sample ``decisions`` in its
results, joined by id with its sample records for the expression; kept and dropped ones are both shown, so
that each drop reason has a face. Every value is optional: an older run without decisions shows its counts.
"""

from __future__ import annotations

from vrh import runs as run_contract
from vrh.report.document import Section, Table, Text
from vrh.report.load import Run, is_num, num, or_missing, pct, short
from vrh.report.notes import random_control_blocks

MAX_EXAMPLES = 5
# what each of vrh.experiments.preference_pairs's drop reasons (DROP_*) means; named here, not imported: vrh.experiments.preference_pairs loads torch, and a
# report never needs it (a test keeps the two in step; a reason not listed here shows without a meaning)
DROP_MEANING = {"chosen_incorrect": "the unmasked answer was not correct: DPO would reinforce a wrong box",
                "rejected_same_as_chosen": "masking did not change the answer: no preference to learn",
                "rejected_correct": "the masked answer was correct too (kept only with --rejected any)",
                "beyond_pair_limit": "a usable pair after the first --pairs ones"}


def dpo_section(runs: list[Run], kc: object = None) -> Section | None:  # kc: the report's k, unread
    dps = [r for r in runs if r.command == "dpo-pairs" and r.results]
    if not dps:
        return None
    s = Section("DPO preference pairs")
    s.add(Text("Preference pairs for DPO (App. B): chosen = the unmasked model's answer, rejected = its answer "
               "with the top-k VRHs masked (or, as the control, k random heads drawn per sample). A pair is kept "
               "only when the chosen answer is correct and the rejected one differs from it."))
    for run in dps:
        s.add(_run_section(run))
    return s


def _run_section(run: Run) -> Section:
    r = run.res  # a DpoPairsResults
    sub = Section(run.name, level=3)
    k = or_missing(r.k, "?")
    sub.add(Text(f"{run.name}: rejected answers with "
                 + (f"{k} random heads masked per sample" if r.negative_policy == "random"
                    else f"the top-{k} VRHs masked")
                 + (f" (mask mode {r.mask_mode})" if r.mask_mode else "")
                 + f"; pairs in {r.pairs_file or run_contract.PAIRS}"
                 + (f", format {r.pair_format} v{or_missing(r.pair_format_version, '?')}" if r.pair_format else "")
                 + (f"; rejected answers kept: {r.rejected_rule}" if r.rejected_rule else "")
                 + (f"; at most {r.max_pairs} pairs" if r.max_pairs else "")
                 + "."))
    dropped = r.dropped if isinstance(r.dropped, dict) else {}
    rows = [["samples", num(r.n_samples, "d"), ""], ["pairs kept", num(r.n_pairs, "d"), ""],
            ["pairs dropped", num(r.n_dropped, "d"), ""]]
    rows += [[f"dropped: {reason}", num(n, "d"), DROP_MEANING.get(reason, "")] for reason, n in dropped.items()]
    rows += [["chosen accuracy (%)", pct(r.chosen_accuracy), "unmasked answers"],
             ["rejected accuracy (%)", pct(r.rejected_accuracy), "answers with the heads masked"]]
    sub.add(Table(["", "value", "note"], rows, f"{run.name}: pairs and drop reasons"))
    outcomes = [("chosen", r.chosen_outcomes), ("rejected", r.rejected_outcomes),
                ("rejected, kept pairs", r.kept_rejected_outcomes)]
    outcomes = [(label, o) for label, o in outcomes if isinstance(o, dict) and o]
    if outcomes:
        names = list(dict.fromkeys(name for _, o in outcomes for name in o))
        sub.add(Table(["answers", *names], [[label, *(num(o.get(n, 0), "d") for n in names)] for label, o in outcomes],
                      "Outcomes of the answers (counts)"))
    examples = _examples(run)
    if examples:
        both = {row[-1] == "kept" for row in examples} == {True, False}
        sub.add(Table(["sample", "expression", "chosen (unmasked)", "rejected (masked)", "pair"], examples,
                      f"Examples: {len(examples)} of {len(_decisions(run))} samples"
                      + ("; kept pairs first, then one per drop reason" if both else "")))
    elif r.n_samples:
        sub.add(Text(f"{run.name} records no per-sample decisions: no examples to show.", muted=True))
    sub.add(*random_control_blocks(run))
    return sub


def _decisions(run: Run) -> list[dict]:
    decisions = run.res.decisions
    return [d for d in decisions if isinstance(d, dict)] if isinstance(decisions, list) else []


def _answer(d: dict, side: str) -> str:
    """``(12,3),(40,30)  (mislocated, IoU 0.12)``: one side's answer with its outcome."""
    text = short(str(d.get(f"{side}_text", "")).strip(), 48)
    iou = d.get(f"{side}_iou")
    detail = ", ".join(x for x in (d.get(f"{side}_outcome"), is_num(iou) and f"IoU {iou:.2f}") if x)
    return f"{text} ({detail})" if detail else text


def _examples(run: Run) -> list[list[str]]:
    """Up to :data:`MAX_EXAMPLES` rows: kept pairs, then the first sample of each drop reason."""
    decisions = _decisions(run)
    kept = [d for d in decisions if d.get("kept")]
    first_of_reason: dict = {}
    for d in decisions:
        if not d.get("kept"):
            first_of_reason.setdefault(d.get("drop_reason"), d)
    drops = list(first_of_reason.values())[:MAX_EXAMPLES - (1 if kept else 0)]  # at least one kept pair
    picked = kept[:MAX_EXAMPLES - len(drops)] + drops
    expressions = {str(rec.get("id")): rec.get("expression") for rec in run.samples if rec.get("expression")}
    return [[str(d.get("id", "?")), str(expressions.get(str(d.get("id")), "–")), _answer(d, "chosen"),
             _answer(d, "rejected"), "kept" if d.get("kept") else f"dropped: {d.get('drop_reason')}"] for d in picked]
