"""``vrh compare``'s report section: accuracy after masking each method's top-k heads (Fig. 3 / Fig. 2), beside
random heads and the unmasked model, and which variant of each method ran.

The run's results are a :class:`vrh.runs.CompareResults`; every key may be missing (it reads as None).
"""

from __future__ import annotations

from vrh.report.document import Fig, Section, Table, Text, slug
from vrh.report.load import Run, at, pct, pm
from vrh.report.methods_figure import ONE_PANEL_METHODS, method_curves
from vrh.report.notes import random_control_blocks
from vrh.runs import CompareRandom


def compare_section(runs: list[Run], kc: object = None) -> Section | None:  # kc: the report's k, unread
    cms = [r for r in runs if r.command == "compare" and r.results]
    if not cms:
        return None
    s = Section("Method comparison")
    s.add(Text("Accuracy after masking the top-k heads of each head-finding method (Fig. 3 / Fig. 2); lower "
               "means the method found heads that matter more."))
    for run in cms:
        r = run.res  # a CompareResults
        ks = r.k if isinstance(r.k, list) else [r.k]
        methods = {name: m.accuracy for name, m in (r.methods or {}).items() if m is not None}
        methods = {n: (a if isinstance(a, list) else [a]) for n, a in methods.items() if a is not None}
        random = r.random or CompareRandom.empty()
        rnd = random.mean
        curves = dict(methods)
        if rnd is not None:
            curves["random"] = rnd if isinstance(rnd, list) else [rnd]
        sub = Section(run.name, level=3)
        if curves and len(ks) > 1:
            default = r.default_method
            panels = len([n for n in curves if n != "random"]) > ONE_PANEL_METHODS
            sub.add(Fig(f"{slug(run.name)}-compare", method_curves(
                ks, curves, baseline=r.baseline_accuracy, title=run.title(), highlight=default),
                "Accuracy vs k per method" + (f"; red: the default method ({default})" if default in curves else "")
                + ("; one panel per method, each with the default method, the random heads and the unmasked "
                   "model drawn thin for reference; methods with identical accuracies at every k share a panel "
                   "(a = b); the numbers are in the table." if panels else
                   "; methods with identical accuracies at every k share one line and one legend entry (a = b).")))
        sub.add(*random_control_blocks(run))
        rstd = random.std or []
        rows = [[n] + [pct(at(a, i)) for i in range(len(ks))] for n, a in methods.items()]
        if rnd is not None:
            rl = rnd if isinstance(rnd, list) else [rnd]
            rows.append(["random"] + [pm(at(rl, i), at(rstd, i)) for i in range(len(ks))])
        sub.add(Table(["method"] + [f"k={k}" for k in ks], rows, "Accuracy (%) after masking the top-k heads"))
        variants = _variant_lines(r.method_options)
        if variants:
            sub.add(Text("Which variant of each method ran (every option, defaults included; a prior method's "
                         "defaults are its authors' reference code, docs/baselines.md): " + variants, muted=True))
        s.add(sub)
    return s


def _variant_lines(options) -> str:
    """``name (key=value, ...)`` per method that has options, from compare's ``method_options``."""
    if not isinstance(options, dict):
        return ""
    parts = [f"{name} ({', '.join(f'{k}={v}' for k, v in opts.items())})" for name, opts in options.items()
             if isinstance(opts, dict) and opts]
    return "; ".join(parts)
