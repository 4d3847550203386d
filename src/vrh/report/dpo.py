"""Report sections of the DPO application (paper App. B): Fig. A3 from ``dpo`` runs, and one table per
``dpo-train`` run (steps, loss, rewards).

Fig. A3 is the held-out grounding accuracy of base / DPO-random / DPO-VRH per benchmark, with error bars of
one binomial standard error, and a table of the paired differences (DPO-VRH - base, DPO-random - base,
DPO-VRH - DPO-random) with their standard errors (:mod:`vrh.experiments.dpo_comparison` computes them; a
report only reads them). The pairs each training used are the run's ``pairs_*`` sub-runs, drawn by the DPO
preference pairs section (:mod:`vrh.report.pairs`: counts, drop reasons, examples); their counts are
repeated here because a control trained on fewer pairs is a weaker control, and the reader must see it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from vrh.report.document import Fig, Section, Table, Text, slug
from vrh.report.load import Run, is_num, num, pct
from vrh.report.style import BASELINE_COLOR, RANDOM_COLOR, TITLE_SIZE, VRH_COLOR, new_figure, to_png, wrap_title

MODEL_COLORS = {"base": "#ffffff", "dpo-random": RANDOM_COLOR, "dpo-vrh": VRH_COLOR}


def dpo_figure(benchmarks: Sequence[str], acc: Sequence[Mapping[str, Any]], se: Sequence[Mapping[str, Any]],
               models: Sequence[str], *, title: str) -> bytes:
    """Fig. A3: per benchmark one bar per model (accuracy, error bar = 1 se), the value printed on each."""
    fig = new_figure(max(4.5, 1.8 + 1.2 * len(benchmarks) * max(len(models), 1) / 3), 3.8)
    ax = fig.add_subplot()
    x = np.arange(len(benchmarks))
    w = 0.8 / max(len(models), 1)
    for j, m in enumerate(models):
        vals = np.array([a.get(m) if is_num(a.get(m)) else np.nan for a in acc], dtype=float)
        err = np.array([s.get(m) if is_num(s.get(m)) else 0.0 for s in se], dtype=float)
        pos = x + (j - (len(models) - 1) / 2) * w
        ax.bar(pos, vals, width=w, yerr=err, capsize=3, color=MODEL_COLORS.get(m, "#1f77b4"),
               edgecolor=BASELINE_COLOR, linewidth=0.8, label=m)
        for p, v, e in zip(pos, vals, err):
            if np.isfinite(v):
                ax.text(p, v + e + 0.01, f"{100 * v:.1f}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(x, benchmarks, fontsize=8)
    ax.set_ylim(0, 1.1)
    ax.yaxis.set_major_formatter(lambda v, _: f"{100 * v:.0f}")
    ax.set_ylabel("grounding accuracy (%)")
    ax.set_title(wrap_title(title, fig.get_figwidth() - 0.6), fontsize=TITLE_SIZE)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return to_png(fig)


def _pp(x: Any) -> str:
    """A difference of fractions in percentage points, signed."""
    return f"{100 * x:+.2f}" if is_num(x) else "–"


def _diff_rows(label: str, block: Mapping[str, Any]) -> list[list[str]]:
    diffs = block.get("differences") if isinstance(block.get("differences"), list) else []
    return [[label, f"{d.get('a')} - {d.get('b')}", _pp(d.get("diff")), _pp(d.get("se")).lstrip("+")]
            for d in diffs if isinstance(d, dict)]


def dpo_section(runs: list[Run], kc: object = None) -> Section | None:  # kc: the report's k, unread
    comparisons = [r for r in runs if r.command == "dpo" and isinstance(r.results, dict)]
    trainings = [r for r in runs if r.command == "dpo-train" and isinstance(r.results, dict)]
    if not comparisons and not trainings:
        return None
    s = Section("DPO with retrieval heads (Fig. A3)")
    s.add(Text("DPO on preference pairs whose rejected answer comes from the model with its top-k VRHs masked "
               "(DPO-VRH), against a control whose rejected answers come from k random heads masked per sample "
               "(DPO-random), both trained from the base model and evaluated with it on held-out samples "
               "(paper App. B). Error bars and ± are one standard error; differences are paired (same samples)."))
    for run in comparisons:
        s.add(_comparison(run))
    for run in trainings:
        s.add(_training(run))
    return s


def _comparison(run: Run) -> Section:
    r = run.res  # a DpoResults
    sub = Section(run.name, level=3)
    models = [m for m in (r.models or []) if isinstance(m, str)]
    benches = r.benchmarks if isinstance(r.benchmarks, dict) else {}
    benches = {k: v for k, v in benches.items() if isinstance(v, dict)}
    if not models or not benches:
        sub.add(Text(f"{run.name} records no accuracies.", muted=True))
        return sub
    names = list(benches)
    acc = [b.get("accuracy") if isinstance(b.get("accuracy"), dict) else {} for b in benches.values()]
    se = [b.get("se") if isinstance(b.get("se"), dict) else {} for b in benches.values()]
    sub.add(Fig(f"dpo_{slug(run.name)}", dpo_figure(names, acc, se, models, title=run.title(f"k = {r.k}")),
                f"{run.name}: held-out grounding accuracy per benchmark, base vs DPO-random vs DPO-VRH (Fig. A3)"))
    rows = [[name, num(b.get("n"), "d"), *(f"{pct(a.get(m))} ± {pct(e.get(m))}" for m in models)]
            for (name, b), a, e in zip(benches.items(), acc, se)]
    avg = r.average if isinstance(r.average, dict) else {}
    if isinstance(avg.get("accuracy"), dict) and len(benches) > 1:
        rows.append(["average", "", *(f"{pct(avg['accuracy'].get(m))} ± {pct((avg.get('se') or {}).get(m))}"
                                      for m in models)])
    sub.add(Table(["benchmark", "n", *models], rows, f"{run.name}: accuracy (%) ± se"))
    diff_rows = [row for name, b in benches.items() for row in _diff_rows(name, b)]
    if avg and len(benches) > 1:
        diff_rows += _diff_rows("average", avg)
    if diff_rows:
        sub.add(Table(["benchmark", "difference", "points", "se (points)"], diff_rows,
                      f"{run.name}: paired differences in percentage points (paper: +0.78 on average for DPO-VRH)"))
    pairs = r.pairs if isinstance(r.pairs, dict) else {}
    training = r.training if isinstance(r.training, dict) else {}
    prow = []
    for policy in ("vrh", "random"):
        p, t = pairs.get(policy) or {}, training.get(policy) or {}
        dropped = p.get("dropped") if isinstance(p.get("dropped"), dict) else {}
        prow.append([policy, num(p.get("n_samples"), "d"), num(p.get("n_pairs"), "d"),
                     ", ".join(f"{k} {v}" for k, v in dropped.items()) or "none", num(t.get("steps"), "d"),
                     num(t.get("train_loss"), ".4f")])
    sub.add(Table(["negatives", "samples", "pairs", "dropped", "steps", "mean loss"], prow,
                  f"{run.name}: the pairs each model was trained on (details in the DPO preference pairs section)"))
    counts = [(pairs.get(p) or {}).get("n_pairs") for p in ("vrh", "random")]
    if all(is_num(c) for c in counts) and min(counts) < 0.5 * max(counts):
        sub.add(Text(f"The two trainings saw very different numbers of pairs ({counts[0]} VRH vs {counts[1]} random): "
                     "masking random heads rarely changes the answer, so most random-negative pairs are dropped "
                     "as identical to the chosen one. Fix the count with --pairs for a like-for-like control.",
                     warn=True))
    settings = r.settings if isinstance(r.settings, dict) else {}
    if settings:
        sub.add(Text("Training: " + ", ".join(_setting(k, v) for k, v in settings.items()) + ".", muted=True))
    return sub


def _setting(key: str, value: Any) -> str:
    """One training setting in words: TRL's ``max_steps -1`` means no step limit, the epochs decide.

    >>> _setting("max_steps", -1), _setting("max_steps", 40), _setting("lr", 1e-05)
    ('no step limit (the epochs decide)', 'max_steps 40', 'lr 1e-05')
    """
    if key == "max_steps" and is_num(value) and value <= 0:
        return "no step limit (the epochs decide)"
    return f"{key} {value}"


def _training(run: Run) -> Section:
    r = run.res  # a DpoTrainResults
    sub = Section(f"{run.name} (dpo-train)", level=3)
    last = r.last_log if isinstance(r.last_log, dict) else {}
    rows = [["pairs", num(r.n_pairs, "d")], ["optimizer steps", num(r.steps, "d")], ["epochs", num(r.epochs, ".3g")],
            ["mean training loss", num(r.train_loss, ".4f")],
            *([f"last {k}", num(last.get(k), ".4g")] for k in ("loss", "rewards/margins", "rewards/accuracies")
              if is_num(last.get(k))),
            ["training time (s)", num(r.train_seconds, ".0f")],
            ["peak memory (MiB)", num(r.peak_memory_bytes / 2**20, ".0f") if is_num(r.peak_memory_bytes) else "–"]]
    sub.add(Table(["", "value"], rows, f"{run.name}: DPO training ({r.peak_memory_kind or 'memory not measured'})"))
    if r.model_dir:
        sub.add(Text(f"Trained checkpoint: {r.model_dir} (use it as --model).", muted=True))
    return sub
