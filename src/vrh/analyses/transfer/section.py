"""``vrh transfer``'s report section: the accuracies of model B with A's heads masked (bars for one k, curves
for several), beside B's own heads and random ones, and the two score maps' rank agreement.

The run's results are a :class:`vrh.runs.TransferResults`; every key may be missing (it reads as None: a
missing number shows as an en dash, a missing series drops its figure).
"""

from __future__ import annotations

from vrh.report import plots
from vrh.report.document import Fig, Section, Table, Text, slug
from vrh.report.load import Run, is_num, model_pair, num, or_missing, pct, pm
from vrh.report.notes import random_control_blocks
from vrh.runs import TransferResults

ACCURACY_KEYS = ("baseline_accuracy", "random_accuracy_mean", "own_heads_accuracy", "transferred_heads_accuracy")


def _pair(r: TransferResults) -> str:
    """``A → B`` with checkpoint paths shortened to their folder names (:func:`vrh.report.load.model_pair`)."""
    return " → ".join(model_pair(or_missing(r.model_a, "?"), or_missing(r.model_b, "?")))


def _accuracies(r: TransferResults) -> dict[str, object]:
    """The accuracy keys of a transfer (:data:`ACCURACY_KEYS`), as written."""
    return {key: getattr(r, key) for key in ACCURACY_KEYS}


def _per_k(r: TransferResults) -> bool:
    """A per-k transfer (``k`` and the accuracies as lists) rather than one k."""
    return isinstance(r.k, list) or any(isinstance(getattr(r, key), list) for key in ACCURACY_KEYS[1:])


def _ran(value) -> bool:
    """Whether a condition produced any number (a transfer without B's own heads writes None)."""
    return any(is_num(v) for v in value) if isinstance(value, list) else is_num(value)


def transfer_section(runs: list[Run], kc: object = None) -> Section | None:  # kc: the report's k, unread
    trs = [r for r in runs if r.command == "transfer" and r.results]
    if not trs:
        return None
    s = Section("Transfer")
    s.add(Text("Cross-model masking (Fig. 7): the top-k VRHs detected in model A are masked at the same "
               "(layer, head) indices in model B and compared with masking B's own top-k VRHs (when B's own "
               "detection was given) and k random heads. Rank agreement of the two score maps: Spearman, "
               "Kendall and top-k overlap."))
    scalar = [r for r in trs if not _per_k(r.res) and any(_ran(v) for v in _accuracies(r.res).values())]
    if scalar:
        groups = [f"{_pair(r.res)}\n(k={or_missing(r.res.k, '?')})" for r in scalar]
        shown = [label for key, label, *_ in plots.TRANSFER_BARS if any(_ran(getattr(r.res, key)) for r in scalar)]
        s.add(Fig("transfer-bars", plots.transfer_bars(groups, [_accuracies(r.res) for r in scalar],
                                                       title="Cross-model masking"),
                  "Accuracy of model B: " + ", ".join(shown) + "."))
        for run in scalar:
            s.add(*random_control_blocks(run))
    for run in (r for r in trs if _per_k(r.res)):
        r = run.res  # per-k variant: lists aligned with r.k
        longest = max((len(v) for v in _accuracies(r).values() if isinstance(v, list)), default=0)
        ks = r.k if isinstance(r.k, list) else list(range(longest))
        curves = {"own VRHs": r.own_heads_accuracy, "transferred VRHs": r.transferred_heads_accuracy,
                  "random heads": r.random_accuracy_mean}
        curves = {n: c for n, c in curves.items() if isinstance(c, list) and _ran(c)}
        if not curves:
            continue
        s.add(Fig(f"{slug(run.name)}-transfer", plots.curve_family(
            ks, curves,
            baseline=r.baseline_accuracy, title=f"{run.name}: {_pair(r)}"), "Accuracy of model B vs k."))
        s.add(*random_control_blocks(run))
    own_ran = any(_ran(run.res.own_heads_accuracy) for run in trs)
    rows = []
    for run in trs:
        r = run.res
        one = (lambda v: v[-1] if isinstance(v, list) and v else v)
        rows.append([run.name, _pair(r), str(one(r.k)), pct(r.baseline_accuracy),
                     pm(one(r.random_accuracy_mean), one(r.random_accuracy_std))]
                    + ([pct(one(r.own_heads_accuracy))] if own_ran else [])
                    + [pct(one(r.transferred_heads_accuracy)), num(r.spearman, ".3f"),
                       num(r.kendall, ".3f"), pct(r.topk_overlap)])
    columns = (["run", "heads of A → masked in B", "k", "unmasked (%)", "random (%) mean ± std"]
               + (["own VRHs (%)"] if own_ran else [])
               + ["transferred VRHs (%)", "Spearman", "Kendall", "top-k overlap (%)"])
    keep = [j for j, c in enumerate(columns) if j < 3 or any(row[j] != "–" for row in rows)]  # no all-dash column
    s.add(Table([columns[j] for j in keep], [[row[j] for j in keep] for row in rows],
                "Per-k runs show their largest k." + ("" if own_ran else " No run masked B's own heads (that needs "
                                                      "B's own detection), so there is no own-heads column.")))
    return s
