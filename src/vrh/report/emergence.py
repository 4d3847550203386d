"""Report section for emergence runs (``vrh organism emergence``): when and where retrieval heads appear
while an organism trains, how sparse they are, and whether the top heads stay the same.

An emergence run holds the training log of one recipe (its phases in order, e.g. C1's ``lm_c_text``,
``lm_c``, ``lm_c_long``; :mod:`vrh_lab.organism.emergence` says how each record is measured). Each phase keeps
its own step counter (a phase that starts over at step 0 is a new optimiser and schedule; one that
continues its predecessor's steps continues its run), so the x axis of every figure is (phase order,
step): phases are bands (alternately shaded), named on the top edge, and the ticks are each phase's own
steps.

Figures: (a) accuracy of the causal test (unmasked, top-k zeroed, k random heads zeroed: mean and min-max
band of the seeds); (b) sparsity (heads above the threshold, the top-1 and k-th score); (c) the ``[L][H]``
maps at a few steps of each phase, on one colour scale; (d) the final top-k heads' scores over training
and the Jaccard overlap of each record's top-k with the final one. Text-job maps (a text-only phase, or
the text map tracked beside the image task) are drawn apart and labelled: attention spread evenly over
a text job's prompt already puts about 0.2 of the mass on the referent, so a threshold of 0.1 means
nothing there. A table lists the first, last and evenly spaced records of each phase (step, top heads,
heads above the threshold, accuracies).
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

import numpy as np
from matplotlib.ticker import MaxNLocator

from vrh import runs as run_contract
from vrh.infra.console import head_text
from vrh.report.document import Fig, Section, Table, Text, slug
from vrh.report.load import Run, is_num, pct
from vrh.report.style import (BASELINE_COLOR, OTHER_COLORS, RANDOM_COLOR, TITLE_SIZE, VRH_COLOR, curve_style,
                              new_figure, to_png, wrap_title)

TASKS = run_contract.EMERGENCE_TASKS
causal_task = run_contract.emergence_causal_task  # the task of a record's causal test
TASK_COLOR = {"image": VRH_COLOR, "text": OTHER_COLORS[0]}
MAPS_PER_PHASE = 4  # first, two in between, last
TABLE_PER_PHASE = 6  # records per phase in the table
DEFAULT_THRESHOLD = 0.1  # vrh_lab.organism.emergence.THRESHOLD, for runs whose config does not record it


def head(h) -> str:
    """``0:5``: LAYER:HEAD, 0-based, the notation of the CLI and of every report section."""
    return head_text(h)


def scores_of(rec: dict, task: str) -> np.ndarray | None:
    """The ``[L, H]`` map of ``task`` in a record, or None when it has none (or not a 2-D map)."""
    e = rec.get(task)
    if not isinstance(e, dict) or not isinstance(e.get("scores"), list):
        return None
    arr = np.asarray(e["scores"], dtype=float)
    return arr if arr.ndim == 2 and arr.size else None


def top_of(rec: dict, task: str, k: int) -> list[tuple[int, int]]:
    """The record's top-k heads of ``task``: the ones it recorded (what its causal test zeroed), else the
    k highest scores (ties: the lower index first)."""
    e = rec.get(task) or {}
    if isinstance(e.get("top"), list) and e["top"]:
        return [tuple(h) for h in e["top"]]
    arr = scores_of(rec, task)
    if arr is None:
        return []
    order = np.argsort(-arr.flatten(), kind="stable")[:k]
    return [(int(i) // arr.shape[1], int(i) % arr.shape[1]) for i in order]


def jaccard(a, b) -> float | None:
    a, b = {tuple(h) for h in a}, {tuple(h) for h in b}
    return len(a & b) / len(a | b) if a | b else None


# --- the (phase, step) axis ---------------------------------------------------------------------------
@dataclass
class StepAxis:
    x: list[float]  # one position per record
    bands: list[tuple[str, float, float]]  # phase, left edge, right edge
    ticks: list[tuple[float, str]]  # position, the phase's own step


def step_axis(records: list[dict]) -> StepAxis:
    """Positions of the records on one axis: a phase whose first step follows its predecessor's last
    continues it (same step scale); a phase that starts over is placed one tracking interval after it."""
    groups: list[tuple[str, list[float]]] = []
    for rec in records:
        phase = str(rec.get("phase", ""))
        if not groups or groups[-1][0] != phase:
            groups.append((phase, []))
        groups[-1][1].append(float(rec.get("step", 0)))
    diffs = [b - a for _, st in groups for a, b in zip(st, st[1:]) if b > a]
    spacing = median(diffs) if diffs else 1.0
    x: list[float] = []
    spans = []
    offset, prev = 0.0, None
    for phase, steps in groups:
        if prev is not None and steps[0] <= prev[1]:  # a new step counter: one interval after the last
            offset = prev[0] + spacing - steps[0]
        xs = [offset + s for s in steps]
        x += xs
        spans.append((phase, xs[0], xs[-1], steps))
        prev = (xs[-1], steps[-1])
    bands = []
    for i, (phase, x0, x1, _) in enumerate(spans):
        left = x0 - spacing / 2 if i == 0 else (spans[i - 1][2] + x0) / 2
        right = x1 + spacing / 2 if i == len(spans) - 1 else (x1 + spans[i + 1][1]) / 2
        bands.append((phase, left, right))
    total = max(bands[-1][2] - bands[0][1], 1e-9)
    firsts = [(x0, steps[0]) for _, x0, _, steps in spans]
    others = []
    for phase, x0, x1, steps in spans:
        nb = max(1, round(8 * (x1 - x0 + spacing) / total))
        for v in MaxNLocator(nbins=nb, integer=True).tick_values(steps[0], steps[-1]):
            if steps[0] < v <= steps[-1]:
                others.append((x0 + v - steps[0], v))
    ticks: list[tuple[float, str]] = []
    for pos, step in firsts + others:  # every phase's first step, then the rest where there is room
        if all(abs(pos - p) >= 0.055 * total for p, _ in ticks):
            ticks.append((pos, f"{step:g}"))
    return StepAxis(x, bands, sorted(ticks))


def _draw_axis(ax, axis: StepAxis, labels: dict[str, str], top_labels: bool = True) -> None:
    """Phase bands (alternately shaded, separated by dotted lines), step ticks, phase names on top."""
    for i, (phase, left, right) in enumerate(axis.bands):
        if i % 2 == 1:
            ax.axvspan(left, right, color="#eeeeee", zorder=0, linewidth=0)
        if i:
            ax.axvline(left, color="#999999", linestyle=":", linewidth=0.8, zorder=1)
    ax.set_xlim(axis.bands[0][1], axis.bands[-1][2])
    ax.set_xticks([p for p, _ in axis.ticks], [t for _, t in axis.ticks], fontsize=8)
    ax.minorticks_off()
    if top_labels:
        top = ax.secondary_xaxis("top")
        top.set_xticks([(lo + hi) / 2 for _, lo, hi in axis.bands],
                       [labels.get(p, p) for p, _, _ in axis.bands], fontsize=8)
        top.tick_params(length=0)


def phase_labels(records: list[dict]) -> dict[str, str]:
    """``lm_c_text (text jobs)`` for a phase whose causal test ran on text, else the phase name."""
    out: dict[str, str] = {}
    for rec in records:
        phase = str(rec.get("phase", ""))
        if phase not in out:
            out[phase] = f"{phase} (text jobs)" if causal_task(rec) == "text" else phase
    return out


def _pct_axis(ax, label: str) -> None:
    ax.set_ylim(0, 1.02)
    ax.yaxis.set_major_formatter(lambda v, _: f"{100 * v:.0f}")
    ax.set_ylabel(label)
    ax.grid(axis="y", alpha=0.3)


def _segments(records: list[dict], axis: StepAxis):
    """Per phase: (task of its causal test, [(x, record)]) -- lines break between phases."""
    out: list[tuple[str | None, list[tuple[float, dict]]]] = []
    last = None
    for x, rec in zip(axis.x, records):
        if rec.get("phase") != last:
            out.append((causal_task(rec), []))
            last = rec.get("phase")
        out[-1][1].append((x, rec))
    return out


def _broken(xs: list[float], phases: list, *series: list) -> tuple[list, ...]:
    """``xs`` and each series with a NaN point between two phases' records: lines break at a phase."""
    out: tuple[list, ...] = tuple([] for _ in range(1 + len(series)))
    for i, x in enumerate(xs):
        if i and phases[i] != phases[i - 1]:
            for o in out:
                o.append(np.nan)
        for o, v in zip(out, (xs, *series)):
            o.append(v[i])
    return out


def _v(x) -> float:
    return float(x) if is_num(x) else float("nan")


# --- figures ------------------------------------------------------------------------------------------
def accuracy_figure(records: list[dict], *, k: int, title: str) -> bytes:
    """(a) Held-out accuracy under the causal test vs (phase, step): unmasked (black), the map's top-k
    heads zeroed (red), k random heads outside them zeroed (grey: mean, band = min-max over seeds).
    Phases whose test ran on text jobs are dashed with open markers."""
    axis = step_axis(records)
    fig = new_figure(8.0, 4.0)
    ax = fig.add_subplot()
    _draw_axis(ax, axis, phase_labels(records))
    seeds = max((len((r.get(causal_task(r) or "") or {}).get("acc_random") or []) for r in records), default=0)
    text_seen = False
    for task, pts in _segments(records, axis):
        if task is None:
            continue
        text_seen |= task == "text"
        xs = [x for x, _ in pts]
        es = [r[task] for _, r in pts]
        rnd = [[_v(a) for a in e.get("acc_random") or []] for e in es]
        ls, face = ("--", "white") if task == "text" else ("-", None)
        if any(rnd):
            lo = [min(r) if r else np.nan for r in rnd]
            hi = [max(r) if r else np.nan for r in rnd]
            ax.fill_between(xs, lo, hi, color=RANDOM_COLOR, alpha=0.25, linewidth=0, zorder=2)
            ax.plot(xs, [np.mean(r) if r else np.nan for r in rnd], color=RANDOM_COLOR, marker="s", markersize=3.5,
                    linestyle=ls, markerfacecolor=face, linewidth=1.6, zorder=3)
        ax.plot(xs, [_v(e.get("acc")) for e in es], color=BASELINE_COLOR, marker="o", markersize=3.5, linestyle=ls,
                markerfacecolor=face, linewidth=1.4, zorder=4)
        ax.plot(xs, [_v(e.get("acc_top")) for e in es], color=VRH_COLOR, marker="o", markersize=3.5, linestyle=ls,
                markerfacecolor=face, linewidth=2.0, zorder=5)
    # the legend from solid proxies (a text phase drawn first must not give every entry its dashes)
    proxy = dict(marker="o", markersize=3.5)
    ax.plot([], [], color=BASELINE_COLOR, linewidth=1.4, label="unmasked", **proxy)
    ax.plot([], [], color=VRH_COLOR, linewidth=2.0, label=f"top-{k} heads of the map zeroed", **proxy)
    if seeds:
        ax.plot([], [], color=RANDOM_COLOR, linewidth=1.6, marker="s", markersize=3.5,
                label=f"{k} random heads zeroed (mean, band min-max of {seeds} seed{'s' if seeds > 1 else ''})")
    if text_seen:
        ax.plot([], [], color=BASELINE_COLOR, linestyle="--", markerfacecolor="white", linewidth=1.4,
                label="dashed, open: the test ran on text jobs", **proxy)
    _pct_axis(ax, "held-out accuracy (%)")
    ax.set_xlabel("training step (each phase's own steps; phases in order)")
    ax.set_title(wrap_title(title, 7.6), fontsize=TITLE_SIZE)
    fig.legend(loc="outside lower center", fontsize=8, frameon=False, ncols=2)
    return to_png(fig)


def sparsity_figure(records: list[dict], *, k: int, threshold: float, title: str) -> bytes:
    """(b) How sparse: heads scoring above ``threshold`` (top), and the top-1 and k-th highest score (bottom)
    vs (phase, step); image maps red, text-job maps blue dashed."""
    axis = step_axis(records)
    labels = phase_labels(records)
    fig = new_figure(8.0, 5.6)
    top, bot = fig.subplots(2, 1, sharex=True)
    n_heads = 0
    for task in TASKS:
        xs, phases, count, first, kth = [], [], [], [], []
        for x, rec in zip(axis.x, records):
            arr = scores_of(rec, task)
            if arr is None:
                continue
            n_heads = max(n_heads, arr.size)
            srt = np.sort(arr.flatten())[::-1]
            xs.append(x)
            phases.append(rec.get("phase"))
            count.append(_v((rec[task] or {}).get("above_threshold", int((arr > threshold).sum()))))
            first.append(srt[0])
            kth.append(srt[min(k, srt.size) - 1])
        if not xs:
            continue
        xs, count, first, kth = _broken(xs, phases, count, first, kth)
        name = "image" if task == "image" else "text jobs"
        ls = "-" if task == "image" else "--"
        c = TASK_COLOR[task]
        top.plot(xs, count, color=c, linestyle=ls, marker="o", markersize=3.5, label=f"{name}: heads > {threshold:g}")
        bot.plot(xs, first, color=c, linestyle=ls, marker="o", markersize=3.5, label=f"{name}: top-1 score")
        bot.plot(xs, kth, color=c, linestyle=ls, marker="v", markersize=3.5, linewidth=0.9, alpha=0.7,
                 label=f"{name}: {_ordinal(k)} highest score")
    _draw_axis(top, axis, labels)
    _draw_axis(bot, axis, labels, top_labels=False)
    top.set_ylim(-0.5, max(n_heads, 1) + 0.5)
    top.set_ylabel(f"heads scoring > {threshold:g}\n(of {n_heads})")
    top.grid(axis="y", alpha=0.3)
    bot.axhline(threshold, color=BASELINE_COLOR, linestyle=":", linewidth=1, label=f"threshold {threshold:g}")
    bot.set_ylim(bottom=0)
    bot.set_ylabel("head score\n(answer->referent mass)")
    bot.grid(axis="y", alpha=0.3)
    bot.set_xlabel("training step (each phase's own steps; phases in order)")
    top.set_title(wrap_title(title, 7.6), fontsize=TITLE_SIZE)
    (h1, n1), (h2, n2) = top.get_legend_handles_labels(), bot.get_legend_handles_labels()
    entries = list(zip(h1 + h2, n1 + n2))  # one legend column per task (count, top-1, k-th), the threshold last
    entries.sort(key=lambda e: 2 if e[1].startswith("threshold") else 1 if e[1].startswith("text") else 0)
    fig.legend(*zip(*entries), loc="outside lower center", fontsize=8, frameon=False, ncols=3)
    return to_png(fig)


def _ordinal(k: int) -> str:
    return f"{k}{'th' if 10 <= k % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(k % 10, 'th')}"


def pick_maps(records: list[dict], task: str | None, per_phase: int = MAPS_PER_PHASE) -> list[tuple[str, list[dict]]]:
    """Per phase (in order) the records whose ``task`` map is drawn (``task`` None: any record): the
    first, the last and evenly spaced ones between, ``per_phase`` at most."""
    by: dict[str, list[dict]] = {}
    for rec in records:
        if task is None or scores_of(rec, task) is not None:
            by.setdefault(str(rec.get("phase", "")), []).append(rec)
    out = []
    for phase, recs in by.items():
        idx = sorted({round(i * (len(recs) - 1) / max(1, per_phase - 1)) for i in range(per_phase)})
        out.append((phase, [recs[i] for i in idx]))
    return out


def map_grid(rows: list[tuple[str, list[dict]]], *, task: str, k: int, threshold: float, title: str) -> bytes:
    """(c) Where: the ``[L][H]`` maps of ``task`` at a few steps, one row per phase, one colour scale for
    all (0 to the largest score shown); the record's top-k heads ringed."""
    ncols = max(len(recs) for _, recs in rows)
    arrs = [scores_of(r, task) for _, recs in rows for r in recs]
    L, H = arrs[0].shape
    vmax = max(float(np.nanmax(a)) for a in arrs) or 1.0
    cell_w = min(2.6, max(1.5, 0.26 * H + 0.4))
    cell_h = min(2.4, max(1.05, 0.2 * L + 0.75))
    fig = new_figure(0.9 + ncols * cell_w, 0.9 + len(rows) * cell_h)
    axes = fig.subplots(len(rows), ncols, squeeze=False)
    im = None
    for i, (phase, recs) in enumerate(rows):
        for j in range(ncols):
            ax = axes[i][j]
            if j >= len(recs):
                ax.set_axis_off()
                continue
            rec = recs[j]
            arr = scores_of(rec, task)
            im = ax.imshow(arr, cmap="Reds", vmin=0, vmax=vmax, aspect="auto", interpolation="nearest")
            tops = top_of(rec, task, k)
            ax.scatter([h for _, h in tops], [l for l, _ in tops], s=30, facecolors="none", edgecolors="#1f77b4",
                       linewidths=1.1)
            n_above = int((arr > threshold).sum())
            ax.set_title(f"step {rec.get('step')}: {n_above} > {threshold:g}", fontsize=8)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=8))
            ax.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=6))
            ax.tick_params(labelsize=7)
            if j == 0:
                ax.set_ylabel(f"{phase}\nlayer", fontsize=8)
            if i == len(rows) - 1 or j >= len(rows[i + 1][1]):
                ax.set_xlabel("head", fontsize=8)
    fig.colorbar(im, ax=axes, shrink=0.85, label="head score" if task == "image" else "head score (text jobs)")
    fig.suptitle(wrap_title(title, 0.9 + ncols * cell_w - 0.4), fontsize=TITLE_SIZE)
    return to_png(fig)


def identity_figure(records: list[dict], *, task: str, k: int, threshold: float, title: str) -> bytes:
    """(d) Do the top heads stay the same: the final top-k heads' scores at every record (one line per
    head), and the Jaccard overlap of each record's top-k with the final top-k."""
    records = [r for r in records if scores_of(r, task) is not None]  # the axis: the phases that have the map
    axis = step_axis(records)
    pts = list(zip(axis.x, records))
    final = top_of(pts[-1][1], task, k)
    fig = new_figure(8.0, 5.6)
    top, bot = fig.subplots(2, 1, sharex=True)
    xs = [x for x, _ in pts]
    phases = [r.get("phase") for r in records]
    maps = [scores_of(r, task) for _, r in pts]
    for i, (l, h) in enumerate(final):
        ys = [a[l, h] if l < a.shape[0] and h < a.shape[1] else np.nan for a in maps]
        style = dict(curve_style(i), markersize=4)
        if i == 0:
            style.update(color=VRH_COLOR)
        top.plot(*_broken(xs, phases, ys), label=head((l, h)), linewidth=1.6, **style)
    top.axhline(threshold, color=BASELINE_COLOR, linestyle=":", linewidth=1, label=f"threshold {threshold:g}")
    top.set_ylim(bottom=0)
    top.set_ylabel("head score")
    top.grid(axis="y", alpha=0.3)
    top.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0), title=f"final top-{len(final)}",
               title_fontsize=8)
    jac = [jaccard(top_of(r, task, k), final) for _, r in pts]
    bot.plot(*_broken(xs, phases, [_v(j) for j in jac]), color=BASELINE_COLOR, marker="o", markersize=3.5,
             linewidth=1.6)
    bot.set_ylim(-0.03, 1.05)
    bot.set_ylabel(f"Jaccard(top-{k},\nfinal top-{k})")
    bot.grid(axis="y", alpha=0.3)
    labels = phase_labels(records)
    _draw_axis(top, axis, labels)
    _draw_axis(bot, axis, labels, top_labels=False)
    bot.set_xlabel("training step (each phase's own steps; phases in order)")
    top.set_title(wrap_title(title, 6.6), fontsize=TITLE_SIZE)
    return to_png(fig)


# --- the section --------------------------------------------------------------------------------------
def _mean(xs) -> float | None:
    xs = [x for x in xs or [] if is_num(x)]
    return sum(xs) / len(xs) if xs else None


def _threshold(run: Run) -> float:
    t = run.config.get("threshold", run.res.threshold)  # an EmergenceResults
    return float(t) if is_num(t) else DEFAULT_THRESHOLD


def record_rows(records: list[dict], k: int) -> list[list[str]]:
    """One table row per record: its causal test's task, top-k heads, heads above the threshold, accuracy
    unmasked / top-k zeroed / k random zeroed (mean of the seeds)."""
    rows = []
    for rec in records:
        task = causal_task(rec)
        e = (rec.get(task) or {}) if task else {}
        rows.append([str(rec.get("phase", "")), str(rec.get("step", "")),
                     "text jobs" if task == "text" else (task or "–"),
                     " ".join(head(h) for h in top_of(rec, task, k)) if task else "–",
                     str(e["above_threshold"]) if is_num(e.get("above_threshold")) else "–",
                     pct(e.get("acc")), pct(e.get("acc_top")), pct(_mean(e.get("acc_random")))])
    return rows


def text_note(records: list[dict], threshold: float) -> Text | None:
    """Why text-job maps are not read against the threshold, with the first text map's measured range."""
    first = next((r for r in records if scores_of(r, "text") is not None), None)
    if first is None:
        return None
    arr = scores_of(first, "text")
    return Text(f"Text jobs (a text-only phase's test and maps, and the text map tracked beside the image "
                f"task) are labelled as such. Their referent is the named item's tokens in a written list: "
                f"attention spread evenly over the prompt already puts about 0.2 of the answer's mass on it "
                f"(the first text map, {first.get('phase')} step {first.get('step')}, ranges "
                f"{np.nanmin(arr):.3f}-{np.nanmax(arr):.3f}), so the threshold {threshold:g} means nothing "
                f"there: read text maps for which heads stand out, not for how many pass {threshold:g}.",
                muted=True)


def final_line(run: Run, records: list[dict], k: int) -> Text:
    """The last record's causal test in words."""
    last = records[-1]
    task = causal_task(last)
    e = (last.get(task) or {}) if task else {}
    rnd = [a for a in e.get("acc_random") or [] if is_num(a)]
    what = "text jobs" if task == "text" else (task or "no causal test")
    msg = (f"{run.name}: last record {last.get('phase')} step {last.get('step')} ({what}): top-{k} heads "
           f"{', '.join(head(h) for h in top_of(last, task, k)) if task else '–'}; "
           f"{e.get('above_threshold', '–')} heads above {_threshold(run):g}; accuracy {pct(e.get('acc'))} % "
           f"unmasked, {pct(e.get('acc_top'))} % with the top-{k} zeroed, {pct(_mean(rnd))} % with {k} random "
           f"heads zeroed (mean of {len(rnd)} seed{'s' if len(rnd) != 1 else ''}).")
    return Text(msg)


def emergence_section(runs: list[Run]) -> Section | None:
    """Emergence during training: every ``emergence`` run with records (None when there is none)."""
    ems = [r for r in runs if r.command == "emergence" and r.emergence]
    if not ems:
        return None
    s = Section("Emergence during training")
    s.add(Text("Organism training logs (vrh organism emergence). At every tracked step: the detector's "
               "out/sum/mean map (mean answer-to-referent attention mass per head) on held-out probe samples, "
               "and a causal test on other held-out samples: accuracy unmasked, with the map's top-k heads "
               "zeroed, and with k random heads outside them zeroed (several seeds). The x axis is training "
               "step within each phase, phases in order (shaded bands, named on top); a phase that starts "
               "over at step 0 starts a new optimiser and schedule. Heads are written LAYER:HEAD, "
               "0-based."))
    for run in ems:
        recs = run.emergence
        first = recs[0]
        k = int(first["k"]) if is_num(first.get("k")) else 3
        n = first.get("n")
        thr = _threshold(run)
        phases = list(dict.fromkeys(str(r.get("phase", "")) for r in recs))
        sub = Section(run.name, level=3)
        sub.add(Text(f"{len(recs)} records over {len(phases)} phase(s) ({', '.join(phases)}); k = {k}; "
                     + (f"n = {n} samples per test, so one sample is {100 / n:.1f} accuracy points."
                        if is_num(n) and n > 0 else "n not recorded.")))
        sub.add(final_line(run, recs, k))
        base = slug(run.name)
        sub.add(Fig(f"{base}-emergence-accuracy", accuracy_figure(recs, k=k, title=f"{run.name}: causal test "
                                                                                   "during training"),
                    f"(a) Held-out accuracy unmasked (black), with the map's top-{k} heads zeroed (red) and with "
                    f"{k} random heads outside them zeroed (grey: mean, band min-max over seeds); dashed with "
                    "open markers where the test ran on text jobs."))
        sub.add(Fig(f"{base}-emergence-sparsity", sparsity_figure(recs, k=k, threshold=thr,
                                                                  title=f"{run.name}: how sparse"),
                    f"(b) Heads scoring above {thr:g} (top) and the highest and {_ordinal(k)} highest head score "
                    "(bottom); red: image maps, blue dashed: text-job maps."))
        tasks = [t for t in TASKS if any(scores_of(r, t) is not None for r in recs)]
        for task in tasks:
            rows = pick_maps(recs, task)
            label = "image" if task == "image" else "text-job"
            sub.add(Fig(f"{base}-emergence-maps-{task}",
                        map_grid(rows, task=task, k=k, threshold=thr,
                                 title=f"{run.name}: where ({label} maps, layer x head)"),
                        f"(c) The {label} score map at the first, last and two intermediate records of each "
                        f"phase, one colour scale (0 to the largest score shown); ringed: that record's top-{k} "
                        f"heads; titles: heads above {thr:g}."
                        + (" Text jobs: the threshold does not apply (see the note)." if task == "text" else "")))
        main_task = tasks[0] if tasks else None
        if main_task:
            label = "image" if main_task == "image" else "text-job"
            sub.add(Fig(f"{base}-emergence-identity",
                        identity_figure(recs, task=main_task, k=k, threshold=thr,
                                        title=f"{run.name}: do the top heads stay the same ({label} maps)"),
                        f"(d) Top: the {label} scores of the final record's top-{k} heads at every record. Bottom: "
                        f"Jaccard overlap of each record's top-{k} with the final top-{k} (1: the same heads)."))
        sub.add(text_note(recs, thr))
        shown = [r for _, rs in pick_maps(recs, None, TABLE_PER_PHASE) for r in rs]
        sub.add(Table(["phase", "step", "test on", f"top-{k} heads", f"heads > {thr:g}", "unmasked (%)",
                       f"top-{k} zeroed (%)", f"{k} random zeroed (%), mean"], record_rows(shown, k),
                      f"{run.name}: the causal test and the map it used, at the first, last and evenly spaced "
                      f"records of each phase ({len(shown)} of {len(recs)}; every record is in the run's "
                      f"{run_contract.EMERGENCE})"))
        s.add(sub)
    return s
