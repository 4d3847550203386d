"""The study report (``vrh report DIR`` on a ``vrh study run`` folder): the paper's figures across the
study's models, each from its cells' run folders, with the paper's own number beside the measured one
wherever a cell's model and benchmark are the paper's (:mod:`vrh.report.paper`).

Sections: the universality grid (model x benchmark k-curves, Fig. 4), all models at one k (Fig. 6,
Tab. A12), the cross-task table (Tab. 3), sparsity histograms on one score axis (Fig. 5), transfer (Fig. 7,
Tab. A13), the design-space ablation and methods (Tab. A9, Fig. 3), top-20 lists and their overlap across
benchmarks (App. D), the failure decomposition (Fig. 8a) and stability (Fig. 8b-c). A part with no cell is
left out. A paper figure is shown only where the paper reports the same model, benchmark and k (a figure at
another k is no comparison). The study folder's ``config.json`` says which folder is which cell (``cells``:
kind, model, benchmark, folder) and which datasets the benchmarks are.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.ticker import MaxNLocator

from vrh.report.document import Fig, Section, Table, Text, slug
from vrh.report.kchoice import study_k
from vrh.report.load import Run, is_num, pct
from vrh.report.paper import paper_benchmark, paper_model, paper_numbers
from vrh.report.methods_figure import method_curves
from vrh.report.plots import k_axis, labelled_bars, outcome_bars, split_reference, transfer_bars
from vrh.report.style import (BASELINE_COLOR, OTHER_COLORS, RANDOM_COLOR, TITLE_SIZE, VRH_COLOR, curve_style,
                              new_figure, plain_log_ticks, to_png)

TOP = 20  # App. D lists 20 heads; fewer when a model has few (an eighth of its heads)


class StudyView:
    """A study run and its cells' runs, looked up by (kind, model, benchmark)."""

    def __init__(self, study: Run, runs: list[Run]):
        self.run, self.config = study, study.config
        by_path = {r.path.resolve(): r for r in runs}
        self.cells: dict[tuple[str, str, str], Run] = {}
        self.sources: dict[tuple[str, str, str], str | None] = {}
        for c in self.config.get("cells") or []:
            r = by_path.get((study.path / str(c.get("folder"))).resolve())
            if r is not None and r.finished and c.get("kind") != "data":
                key = (c["kind"], c.get("model"), c.get("benchmark"))
                self.cells[key] = r
                self.sources[key] = c.get("source")
        self.models = list(self.config.get("models") or {})
        self.benchmarks = list(self.config.get("benchmarks") or [])
        self.vqa = list(self.config.get("vqa") or [])

    def get(self, kind: str, model: str, bench: str) -> Run | None:
        return self.cells.get((kind, model, bench))

    def of(self, kind: str) -> list[tuple[str, str, Run]]:
        return [(m, b, r) for (k, m, b), r in self.cells.items() if k == kind]

    def paper_model(self, model: str) -> str | None:
        return paper_model((self.config.get("models") or {}).get(model))

    def paper_benchmark(self, bench: str) -> str | None:
        return paper_benchmark((self.config.get("datasets") or {}).get(bench))


def _paper(value: Any) -> str:
    return f"{value:.1f}" if is_num(value) else "–"


def _diff(measured: Any, paper: Any) -> str:
    return f"{100 * measured - paper:+.1f}" if is_num(measured) and is_num(paper) else "–"


def _at(values: Any, ks: Any, k: int) -> Any:
    if not isinstance(values, list) or not isinstance(ks, list) or k not in ks:
        return None
    i = ks.index(k)
    return values[i] if i < len(values) else None


def is_study(run: Run) -> bool:
    """``run`` is a ``vrh study run`` folder: its results are the study's bookkeeping (cells run, resumed,
    redone), no measurement, and its sections are :func:`study_sections`."""
    return run.command == "study"


def study_sections(runs: list[Run]) -> list[Section]:
    """The study's sections (none when no study run is among ``runs``): its summary, then one section per
    figure that has cells."""
    out = []
    for st in filter(is_study, runs):
        v = StudyView(st, runs)
        matched = {m: v.paper_model(m) for m in v.models}
        sec = Section(f"Study {st.config.get('name', st.name)}")
        sec.add(Text(f"{len(v.models)} models ({', '.join(v.models)}), grounding benchmarks "
                     f"{', '.join(v.benchmarks)}, VQA sets {', '.join(v.vqa) or 'none'}; {len(v.cells)} finished "
                     "cells, each an ordinary run folder (their own sections follow)."))
        paper = [f"{m} = {p}" for m, p in matched.items() if p]
        sec.add(Text("Paper models among them (by hub id): " + ", ".join(paper) + ". " + _protocol_note(v)
                     if paper else "No model of this study is one of the paper's (matched by hub id), so no "
                     "measured figure has a paper figure beside it; the paper's tables ship in "
                     "vrh/data/paper_numbers.py.", muted=not paper))
        grids = st.config.get("grids") or {}
        a7 = paper_numbers()["models_A7"]
        heads = [f"{m}: {grids[m][0]} x {grids[m][1]} = {grids[m][0] * grids[m][1]} heads (paper Tab. A7: "
                 f"{a7[p]['total_heads']})" for m, p in matched.items() if p in a7 and m in grids]
        if heads:
            sec.add(Text("Head counts: " + "; ".join(heads) + "."))
        out.append(sec)
        for part in (_grid, _one_k, _crosstask, _sparsity, _transfer, _ablation, _top_lists, _failures,
                     _stability):
            for block in part(v):
                if isinstance(block, Section):  # a part's title: a section of its own
                    out.append(block)
                else:
                    out[-1].add(block)
    return out


def _protocol_note(v: StudyView) -> str:
    det = (v.config.get("protocol") or {}).get("detection") or {}
    p = paper_numbers()["protocol"]
    notes = []
    if det.get("n") != p["detection_n"]:
        notes.append(f"detection on {det.get('n')} samples (paper: {p['detection_n']})")
    if det.get("scorers") and det["scorers"][0] != p["scorer"]:
        notes.append(f"scorer {det['scorers'][0]} (paper: {p['scorer']})")
    notes.append(f"paper splits: {p['splits']}; prompts: {p['prompt']}")
    return "Protocol differences: " + "; ".join(notes) + "."


# --- Fig. 4: the universality grid --------------------------------------------------------------------
def _grid(v: StudyView):
    sweeps = v.of("sweep")
    if not sweeps:
        return []
    models = [m for m in v.models if any(s[0] == m for s in sweeps)]
    benches = [b for b in v.benchmarks if any(s[1] == b for s in sweeps)]
    fig = new_figure(2.6 * len(benches) + 0.6, 2.1 * len(models) + 0.5)
    axes = fig.subplots(len(models), len(benches), squeeze=False, sharey=True)
    rows = []
    for i, m in enumerate(models):
        for j, b in enumerate(benches):
            ax, r = axes[i][j], v.get("sweep", m, b)
            ax.set_title(f"{m} / {b}", fontsize=8)
            if r is None:
                ax.axis("off")
                continue
            res = r.res
            ks = [float(k) for k in (res.k or [])]
            vrh = [np.nan if a is None else 100 * a for a in (res.vrh.accuracy if res.vrh else [])]
            rnd = [np.nan if a is None else 100 * a for a in (res.random.mean if res.random else [])]
            ax.plot(ks[:len(vrh)], vrh, color=VRH_COLOR, marker="o", linewidth=1.8, label="top-k VRHs")
            ax.plot(ks[:len(rnd)], rnd, color=RANDOM_COLOR, marker="s", linewidth=1.4, label="random")
            ax.set_ylim(0, 100)
            k_axis(ax, res.k or [], xlabel="")
            ax.tick_params(labelsize=7)
            pm, pb = v.paper_model(m), v.paper_benchmark(b)
            a1 = paper_numbers()["kcurves_A1"]
            ref = (a1["benchmarks"].get(pb) or {}).get(pm) if pm and pb else None
            for k in res.k or []:
                pv = _at(ref["vrh"], a1["ks"], k) if ref else None
                pr = _at(ref["random"], a1["ks"], k) if ref else None
                mv, mr = _at(res.vrh.accuracy if res.vrh else None, res.k, k), _at(
                    res.random.mean if res.random else None, res.k, k)
                rows.append([m, b, str(k), pct(mv), _paper(pv), _diff(mv, pv), pct(mr), _paper(pr), _diff(mr, pr)])
    axes[0][0].legend(fontsize=7)
    fig.supxlabel("number of masked heads k", fontsize=8)
    fig.supylabel("grounding accuracy (%)", fontsize=8)
    return [Section("Universality: k-curves per model and benchmark (Fig. 4, Tab. A1)"),
            Fig("study_grid", to_png(fig), "top-k VRHs (red) vs k random heads (grey, mean over seeds)"),
            Table(["model", "benchmark", "k", "VRH", "paper", "diff", "random", "paper", "diff"], rows,
                  "accuracy (%); paper: Tab. A1 where model and benchmark are the paper's")]


# --- Fig. 6 / Tab. A12: all models at one k -----------------------------------------------------------
def _report_k(v: StudyView) -> int | None:
    return study_k(v.config)


def _one_k(v: StudyView):
    k, bench = _report_k(v), (v.benchmarks or [None])[0]
    rows, labels, vals = [], [], []
    for m in v.models:
        r = v.get("sweep", m, bench)
        if r is None or k is None:
            continue
        res = r.res
        base, mv = res.baseline_accuracy, _at(res.vrh.accuracy if res.vrh else None, res.k, k)
        mr = _at(res.random.mean if res.random else None, res.k, k)
        ref = _paper_at_k(v.paper_model(m), v.paper_benchmark(bench), k)
        rows.append([m, pct(base), pct(mr), pct(mv), _paper((ref or {}).get("baseline")),
                     _paper((ref or {}).get("random")), _paper((ref or {}).get("vrh")),
                     _diff(mv, (ref or {}).get("vrh"))])
        labels.append(m)
        vals.append((base, mr, mv))
    if not rows:
        return []
    fig = new_figure(max(4.0, 1.2 + 1.2 * len(labels)), 3.4)
    ax = fig.add_subplot()
    x = np.arange(len(labels))
    for j, (name, color) in enumerate((("unmasked", BASELINE_COLOR), ("random", RANDOM_COLOR), ("VRH", VRH_COLOR))):
        ax.bar(x + (j - 1) * 0.27, [100 * t[j] if is_num(t[j]) else np.nan for t in vals], width=0.27,
               color=color, label=name)
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_ylim(0, 100)
    ax.set_ylabel("accuracy (%)")
    ax.set_title(f"{bench}: k = {k}", fontsize=TITLE_SIZE)
    ax.legend(fontsize=7)
    return [Section(f"All models at k = {k} (Fig. 6, Tab. A12)"), Fig("study_one_k", to_png(fig)),
            Table(["model", "unmasked", "random", "VRH", "paper unmasked", "paper random", "paper VRH", "diff"], rows,
                  f"grounding accuracy (%) on {bench}; paper: at the same k and benchmark only, Tab. A12 (k = 20, "
                  "RefCOCO) or, for its four main models, Tab. A1 (k <= 20) and Tab. A9 (RefCOCO, k = 50)")]


def _paper_at_k(pm: str | None, pb: str | None, k: int) -> dict[str, Any] | None:
    """The paper's unmasked / random / VRH accuracy of model ``pm`` on benchmark ``pb`` at ``k`` masked
    heads, or None where the paper has no figure at that k on that benchmark (a figure at another k or on
    another benchmark is no comparison)."""
    if not pm or not pb:
        return None
    p = paper_numbers()
    a12, a1, a9 = p["all_models_A12"], p["kcurves_A1"], p["ablation_A9"]
    if pm in a12["models"]:
        return a12["models"][pm] if (pb, k) == (a12["benchmark"], a12["k"]) else None
    ref = (a1["benchmarks"].get(pb) or {}).get(pm)
    if ref and k in a1["ks"]:
        return {"baseline": _at(ref["vrh"], a1["ks"], 0), "random": _at(ref["random"], a1["ks"], k),
                "vrh": _at(ref["vrh"], a1["ks"], k)}
    row = (a9["models"].get(pm) or {}) if pb == a9["benchmark"] else {}
    if str(k) not in row:
        return None
    return {"baseline": row.get("0", {}).get("vrh"), "random": row[str(k)]["random"], "vrh": row[str(k)]["vrh"]}


# --- Tab. 3: cross-task -------------------------------------------------------------------------------
def _crosstask(v: StudyView):
    if not v.of("crosstask"):
        return []
    t3 = paper_numbers()["crosstask_T3"]
    prot = (v.config.get("protocol") or {}).get("crosstask") or {}
    same = (prot.get("k"), v.paper_benchmark(prot.get("benchmark") or (v.benchmarks or [""])[0])) == (
        t3["k"], t3["detected_on"])  # Tab. 3: k = 20, heads detected on RefCOCO; else no comparison
    rows = []
    for m in v.models:
        for label, key in (("unmasked", "baseline"), ("random", "random"), ("VRH", "vrh")):
            row = [m if key == "baseline" else "", label]
            for q in v.vqa:
                r = v.get("crosstask", m, q)
                val = None
                if r is not None:
                    res, k = r.res, max([x for x in (r.res.k or []) if x > 0], default=None)
                    val = res.baseline_accuracy if key == "baseline" else _at(
                        (res.vrh.accuracy if key == "vrh" else res.random.mean) if (res.vrh and res.random) else None,
                        res.k, k)
                pq = v.paper_benchmark(q)
                ref = ((t3["models"].get(v.paper_model(m)) or {}).get(pq) or {}).get(key) if pq and same else None
                row.append(pct(val) + (f" (paper {ref:.1f})" if is_num(ref) else ""))
            rows.append(row)
    return [Section("Cross-task: VQA under grounding VRHs (Tab. 3)"),
            Table(["model", "condition", *v.vqa], rows, "VQA accuracy (%) with the top-k heads detected on the "
                                                          "study's cross-task benchmark masked; paper: Tab. 3 "
                                                          "where k is 20 and the heads are RefCOCO's")]


# --- Fig. 5: sparsity on one axis ---------------------------------------------------------------------
def _sparsity(v: StudyView):
    dets = [(m, b, r) for m, b, r in v.of("detect") if r.head_scores is not None and b == (v.benchmarks or [""])[0]]
    if not dets:
        return []
    maps = [(m, np.asarray(r.head_scores.score_map(), dtype=float).ravel()) for m, _, r in dets]
    pos = np.concatenate([s[s > 0] for _, s in maps]) if maps else np.array([])
    if pos.size == 0:
        return []
    bins = np.geomspace(pos.min(), pos.max() * 1.0001, 30)
    fig = new_figure(6.0, 1.3 * len(maps) + 0.6)
    axes = fig.subplots(len(maps), 1, sharex=True, squeeze=False)
    for i, (m, s) in enumerate(maps):
        ax = axes[i][0]
        ax.hist(s[s > 0], bins=bins, color=OTHER_COLORS[i % len(OTHER_COLORS)])
        ax.set_xscale("log")
        plain_log_ticks(ax.xaxis)
        ax.set_ylabel(m, fontsize=8)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # counts of heads: no 2.5 heads
        ax.tick_params(labelsize=7)
    fig.supylabel("heads per bin", fontsize=8)
    axes[-1][0].set_xlabel(f"head score on {dets[0][1]} (log scale, one axis for every model)", fontsize=8)
    rows = [[m, str(s.size), str(int((s > 0).sum())), f"{s.max():.3g}", f"{np.median(s):.3g}",
             f"{100 * (s >= 0.1 * s.max()).mean():.1f}"] for m, s in maps]
    return [Section("Sparsity per model (Fig. 5)"), Fig("study_sparsity", to_png(fig)),
            Table(["model", "heads", "score > 0", "max", "median", "% within 10x of max"], rows)]


# --- Fig. 7 / Tab. A13: transfer ----------------------------------------------------------------------
def _transfer(v: StudyView):
    cells = v.of("transfer")
    if not cells:
        return []
    rows, a13 = [], paper_numbers()["transfer_A13"]
    for target, b, r in cells:
        res, source = r.res, v.sources.get(("transfer", target, b)) or "?"
        pair = [v.paper_model(source), v.paper_model(target)]
        same = (res.k, v.paper_benchmark(b)) == (a13["k"], a13["benchmark"])
        ref = a13["models"].get(pair[1]) if same and (pair in a13["pairs"] or pair[::-1] in a13["pairs"]) else None
        rows.append([f"{source} -> {target}", b, pct(res.baseline_accuracy), pct(res.own_heads_accuracy),
                     pct(res.transferred_heads_accuracy), pct(res.random_accuracy_mean),
                     f"{res.spearman:.2f}" if is_num(res.spearman) else "–",
                     f"{res.topk_overlap:.2f}" if is_num(res.topk_overlap) else "–",
                     _paper((ref or {}).get("cross")), _diff(res.transferred_heads_accuracy, (ref or {}).get("cross"))])
    keys = ("baseline_accuracy", "random_accuracy_mean", "own_heads_accuracy", "transferred_heads_accuracy")
    groups = [f"{row[0]}\nSpearman {row[6]}\ntop-k overlap {row[7]}" for row in rows]  # the maps' similarity
    png = transfer_bars(groups, [{key: getattr(r.res, key) for key in keys} for _, _, r in cells],
                        title="model B: unmasked, random, its own VRHs, model A's VRHs; under each pair: how "
                              "alike A's and B's score maps are")
    return [Section("Transfer between models sharing a backbone (Fig. 7, Tab. A13)"), Fig("study_transfer", png),
            Table(["A's heads -> B", "benchmark", "B unmasked", "B own", "A's (cross)", "random", "Spearman",
                   "top-k overlap", "paper cross", "diff"], rows, "accuracy (%) of model B; Spearman: rank "
                   "correlation of A's and B's score maps; paper: Tab. A13 at k = 20 on RefCOCO")]


# --- Tab. A9 / Fig. 3: the design space and prior methods ---------------------------------------------
FLIPS = {"in/sum/mean": "flipped_query", "out/argmax/mean": "flipped_phi", "out/sum/freq": "flipped_omega"}


def _ablation(v: StudyView):
    out = []
    for m, b, r in v.of("compare"):
        res = r.res
        ks = res.k or []
        pm = v.paper_model(m) if v.paper_benchmark(b) == "RefCOCO" else None
        a9 = paper_numbers()["ablation_A9"]["models"].get(pm) or {}
        rows = []
        for name, curve in (res.methods or {}).items():
            acc = curve.accuracy if curve else []
            key = "vrh" if name == res.default_method else FLIPS.get(name)
            rows.append([name + (" (default)" if name == res.default_method else "")]
                        + [pct(a) + (f" (paper {a9[str(k)][key]:.1f})" if key and str(k) in a9 else "")
                           for k, a in zip(ks, acc)])
        if res.random is not None:
            rows.append(["random"] + [pct(a) + (f" (paper {a9[str(k)]['random']:.1f})" if str(k) in a9 else "")
                                      for k, a in zip(ks, res.random.mean or [])])
        out += [Section(f"Design space and methods: {m} on {b} (Tab. A9, Fig. 3)"), *_methods_figure(m, b, res),
                Table(["method", *(f"k={k}" for k in ks)], rows, "grounding accuracy (%) with each method's top-k "
                                                                  "masked; lower = more causal")]
    return out


def _methods_figure(m: str, b: str, res) -> list[Fig]:
    """Fig. 3 for one comparison: accuracy with each method's top-k masked, as curves over k, or as bars
    where the comparison ran at one k (a curve of one point is no figure)."""
    ks = res.k or []
    curves = {name: (c.accuracy if c else None) or [] for name, c in (res.methods or {}).items()}
    if res.random is not None:
        curves["random"] = res.random.mean or []
    if not ks or not curves:
        return []
    title = f"{m} on {b}: accuracy with each method's top-k heads masked"
    if len(ks) > 1:
        png = method_curves(ks, curves, baseline=res.baseline_accuracy, title=title, highlight=res.default_method)
    else:
        colors = [VRH_COLOR if n == res.default_method else RANDOM_COLOR if n == "random" else OTHER_COLORS[0]
                  for n in curves]
        png = labelled_bars(list(curves), [(c or [None])[0] for c in curves.values()], colors,
                            title=f"{title} (k = {ks[0]})", baseline=res.baseline_accuracy)
    return [Fig(slug(f"study_methods_{m}_{b}"), png, f"red: the default method ({res.default_method}); grey: "
                                                     "k random heads (mean over seeds); dashed: unmasked")]


# --- App. D: top-20 lists -----------------------------------------------------------------------------
def _top_lists(v: StudyView):
    dets = {(m, b): r for m, b, r in v.of("detect") if r.head_scores is not None}
    if not dets:
        return []
    rows, overlap, sizes = [], [], set()
    for (m, b), r in dets.items():
        hs = r.head_scores
        n = min(TOP, max(1, hs.num_layers * hs.num_heads // 8))
        sizes.add(n)
        top = hs.ranking()[:n]
        pm, pb = v.paper_model(m), v.paper_benchmark(b)
        ref = ((paper_numbers()["top20_D"].get(pb) or {}).get(pm)) if pm and pb else None
        same = f"{len({tuple(h) for h in top} & {tuple(h) for h in ref[:n]})}/{n}" if ref else "–"
        rows.append([m, b, ", ".join(f"({l},{h})" for l, h in top), same])
    for m in v.models:
        benches = [b for b in v.benchmarks if (m, b) in dets]
        for i, a in enumerate(benches):
            for c in benches[i + 1:]:
                ha, hc = dets[(m, a)].head_scores, dets[(m, c)].head_scores
                n = min(TOP, max(1, ha.num_layers * ha.num_heads // 8))
                shared = len(set(ha.ranking()[:n]) & set(hc.ranking()[:n]))
                overlap.append([m, f"{a} / {c}", f"{shared}/{n}"])
    out = [Section("Top heads per model and benchmark (App. D)"),
           Table(["model", "benchmark", "top heads (layer, head), 0-based", "same as paper"], rows,
                 f"the top {'/'.join(map(str, sorted(sizes)))} heads by descending score (App. D lists {TOP}; "
                 "an eighth of the heads on a model with fewer than 160)")]
    if overlap:
        out.append(Table(["model", "benchmarks", "shared top heads"], overlap, "overlap across benchmarks"))
    return out


# --- Fig. 8: failures and stability -------------------------------------------------------------------
def _failures(v: StudyView):
    k, cells = _report_k(v), []
    for m, b, r in v.of("sweep"):
        res = r.res
        fv = _at(res.vrh.fractions if res.vrh else None, res.k, k)
        fr = _at(res.random.fractions_mean if res.random else None, res.k, k)
        if isinstance(fv, dict):
            cells.append((m, b, fv, fr if isinstance(fr, dict) else {}))
    if not cells:
        return []
    keys = sorted({x for _, _, fv, fr in cells for x in (*fv, *fr)})  # one column per outcome any cell has
    rows, labels, fractions = [], [], []
    for m, b, fv, fr in cells:
        rows += [[m, b, "VRH", *(pct(fv.get(x)) for x in keys)], ["", "", "random", *(pct(fr.get(x)) for x in keys)]]
        labels += [f"{m} / {b}: VRH", f"{m} / {b}: random"]
        fractions += [fv, fr or None]
    png = outcome_bars(labels, fractions, title=f"outcome of each sample with k = {k} heads masked: top-k VRHs vs "
                                                "k random heads (mean over seeds), per model and benchmark")
    return [Section(f"Failure decomposition at k = {k} (Fig. 8a)"), Fig("study_failures", png),
            Table(["model", "benchmark", "masked", *keys], rows, "share of samples (%) by outcome")]


def _stability(v: StudyView):
    rows = []
    for m, b, r in v.of("stability"):
        res = r.res
        curve = ", ".join(f"n={n}: {pct(o)}" + (" (all: the reference)" if n == res.n_total else "")
                          for n, o in zip(res.n_values or [], res.topk_overlap_mean or []) if is_num(o))
        tc = res.token_choice
        rows.append([m, b, str(res.k), curve, *(pct(getattr(tc, key)) if tc else "–" for key in
                                                ("baseline_accuracy", "rand1_accuracy", "out_accuracy",
                                                 "random_accuracy"))])
    if not rows:
        return []
    fig = new_figure(6.0, 3.8)
    ax = fig.add_subplot()
    curves: dict[tuple, list[str]] = {}  # identical curves drawn once, named together (one would hide another)
    refs: set = set()
    for m, b, r in v.of("stability"):
        ns, ys, ref = split_reference(r.res.n_values or [], r.res.topk_overlap_mean or [], r.res.n_total)
        refs.update(ref)
        ys = [round(100 * o, 7) if is_num(o) else np.nan for o in ys]  # %, as the run's own chart
        curves.setdefault((tuple(ns[:len(ys)]), tuple(ys[:len(ns)]), r.res.k), []).append(f"{m} / {b}")
    for i, ((ns, ys, k), names) in enumerate(curves.items()):
        ax.plot(ns, ys, label=f"{', '.join(names)} (k = {k})", **curve_style(i))
    if refs:
        ax.scatter(sorted(refs), [100] * len(refs), s=55, facecolors="white", edgecolors=BASELINE_COLOR,
                   linewidths=1.4, zorder=5, clip_on=False, label="n = the whole detection set: the reference (100% by definition)")
    ax.set_xscale("log")
    plain_log_ticks(ax.xaxis)
    ax.set_ylim(-2, 105)
    ax.set_xlabel("scoring samples n (log scale)", fontsize=8)
    ax.set_ylabel("top-k overlap with the full detection (%)", fontsize=8)
    ax.set_title("how many samples find the heads (mean over bootstrap draws)", fontsize=TITLE_SIZE)
    fig.legend(loc="outside lower center", fontsize=7, frameon=False)
    return [Section("Stability (Fig. 8b-c)"), Fig("study_stability", to_png(fig)),
            Table(["model", "benchmark", "k", "top-k overlap (%) with the full set, by scoring-set size", "unmasked",
                   "top-k of rand1", "top-k of out", "random"], rows,
                  "overlap of the top-k found from n scoring samples with the full detection's (at n = all, the "
                  "reference itself; the paper's Fig. 8c plots the accuracy with those heads masked instead: vrh "
                  "stability --accuracy-draws); Fig. 8b: accuracy (%) with the top-k of one random answer token "
                  "(rand1) vs all of them (out) masked")]
