"""Report sections for the core pipeline: summary, head scores + sparsity, k-curves, outcomes, overlays.

Each ``*_section(runs, k)`` takes every loaded run, picks the ones it understands by ``command`` and
returns a :class:`~vrh.report.document.Section`, or ``None`` when it has nothing to show (the report then
leaves the heading out rather than printing an empty one). Characterisation sections (transfer, stability,
compare, unknown commands) are in :mod:`vrh.report.characterize`.

An attention overlay embeds only an image the run names (:func:`overlay_image`): its dataset's image for
the sample, or a file inside the run folder. A samples record can name any path (``/etc/passwd``,
``../private/photo.png``); such an image, and a missing or unreadable one, is left out of the overlay and
named in one line under the section, never raised.

Sparsity is stated at the thresholds a run recorded (:func:`sparsity_thresholds`): the demo records its own
in ``results.json`` (its console prints the same), and a page that recomputed them at other thresholds
would disagree with the run's other outputs. A detection made as part of such a run uses that run's
thresholds; a run that recorded none gets the paper's (:data:`vrh.scoring.sparsity.DEFAULT_THRESHOLDS`), and the
page says so next to the numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vrh.data import load_dataset
from vrh.infra.console import heads_text
from vrh.report import overlay, plots
from vrh.report.document import Fig, Section, Table, Text, slug
from vrh.report.kchoice import KChoice
from vrh.report.load import Run, at, is_num, model_pair, num, or_missing, pct, pm, sample_kind, short
from vrh.report.notes import random_control_blocks
from vrh.scoring.sparsity import DEFAULT_THRESHOLDS, sparsity_summary
from vrh.runs import RandomCurve, SampleRecord, VrhCurve

MAX_OVERLAYS = 4  # samples drawn per detection run; more adds bytes, not insight


def thresholds_text(thresholds=DEFAULT_THRESHOLDS) -> str:
    """``0.001 (non-negligible) and 0.005 (high)`` for the paper's Fig. 5 thresholds
    (:data:`vrh.scoring.sparsity.DEFAULT_THRESHOLDS`), which have those names; other thresholds by value only."""
    names = ["non-negligible", "high"] if tuple(thresholds) == DEFAULT_THRESHOLDS else []
    return " and ".join(f"{t:g}" + (f" ({names[i]})" if i < len(names) else "") for i, t in enumerate(thresholds))


def recorded_sparsity(run: Run, key: str = "fraction_above") -> dict[float, object]:
    """``threshold -> value`` of the sparsity ``run`` recorded in its results (``sparsity.<key>``, a
    :func:`vrh.scoring.sparsity.sparsity_summary`), thresholds as numbers again (JSON keeps keys as strings)."""
    sp = run.res.value("sparsity")  # the demo's (DemoResults.sparsity); any run may record one
    recorded = sp.get(key) if isinstance(sp, dict) else None
    out = {}
    for t, v in (recorded.items() if isinstance(recorded, dict) else []):
        try:
            t = float(t)
        except (TypeError, ValueError):
            continue
        if is_num(t):
            out[t] = v
    return out


def recorded_thresholds(run: Run) -> tuple[float, ...] | None:
    """The sparsity thresholds ``run`` recorded, ascending; None when it recorded none."""
    return tuple(sorted(recorded_sparsity(run))) or None


@dataclass(frozen=True)
class Thresholds:
    values: tuple[float, ...]
    note: str  # whose they are, for the page: "recorded by demo", "det recorded none: ..."
    recorded: bool

    def describe(self) -> str:
        """``thresholds 0.05 and 0.1, recorded by demo`` (or the defaults, and why)."""
        return f"thresholds {thresholds_text(self.values)}{', ' if self.recorded else '; '}{self.note}"


def sparsity_thresholds(run: Run, runs: list[Run]) -> Thresholds:
    """The thresholds to state ``run``'s sparsity at: its own recorded ones, else those of the run it is
    part of (nearest first), else the paper's defaults, saying that the run recorded none."""
    by_name = {r.name: r for r in runs}
    seen, owner = set(), run
    while owner is not None and owner.name not in seen:
        seen.add(owner.name)
        found = recorded_thresholds(owner)
        if found:
            return Thresholds(found, f"recorded by {owner.name}", True)
        owner = by_name.get(owner.part_of) if owner.part_of else None
    return Thresholds(DEFAULT_THRESHOLDS, f"{run.name} recorded no sparsity thresholds: the report's defaults, the "
                                          "paper's Fig. 5", False)


def _outcome_accuracy(records: list[SampleRecord]) -> float | None:
    judged = [r for r in records if "outcome" in r]
    return sum(r["outcome"] == "correct" for r in judged) / len(judged) if judged else None


def _mask_label(run: Run) -> str:
    """What an evaluate run masked, in words: 'no masking', 'top-20 VRHs', 'random k=20 (seed 1)'.

    From the run's ``condition`` (its kind; old sweep kinds accepted) or, for older runs, its heads info."""
    r = run.res  # an EvaluateResults
    info = run.config.get("heads") or r.heads or {}
    cond = r.condition or next(iter(run.config.get("conditions") or []), None)
    cond = cond if isinstance(cond, dict) else {}
    k = cond.get("k", len(run.config.get("masked_heads") or [])) if r.k is None else r.k
    kind = sample_kind(cond)
    if kind is None:  # before conditions were recorded
        source = info.get("source")
        kind = ("none" if source == "none" else "random" if info.get("random") or source == "random"
                else "list" if source == "list" else "top_k")
    if kind == "none" or k == 0:
        return "no masking"
    if kind == "random":
        return f"random k={k} (seed {cond.get('seed', info.get('seed', '?'))})"
    if kind == "list":
        return f"{k} listed heads"
    return f"top-{k} VRHs"


# --- summary ------------------------------------------------------------------------------------------
def summary_row(run: Run) -> list[str]:
    r, cmd = run.res, run.command
    data = run.config.get("data") if isinstance(run.config.get("data"), dict) else {}
    # what most runs record under these names (compare and stability: n_eval); each command refines below
    n = next((v for v in (r.value("n"), r.value("n_eval"), data.get("n")) if is_num(v)), None)
    acc = r.value("accuracy") if r.value("accuracy") is not None else r.value("baseline_accuracy")
    note = ""
    if cmd == "detect":
        hs = run.head_scores
        n = hs.n_scored if hs is not None else (r.n_scored if r.n_scored is not None else len(run.samples))
        acc = _outcome_accuracy(run.samples)
        scorer = hs.scorer if hs is not None else (r.scorer if r.scorer is not None else "?")
        note = f"scorer {scorer}; accuracy of unmasked answers on the detection split"
        if is_num(r.n_skipped) and r.n_skipped:
            note += f"; {r.n_skipped} samples skipped"
    elif cmd == "evaluate":
        note = _mask_label(run)
    elif cmd == "sweep":
        seeds = r.random.seeds if r.random is not None and r.random.seeds is not None else "?"
        note = f"unmasked; k = {r.k if r.k is not None else '?'}, seeds {seeds}"
    elif cmd == "transfer":
        a, b = model_pair(or_missing(r.model_a, "?"), or_missing(r.model_b, "?"))
        note = f"heads of {a} masked in {b}, unmasked accuracy"
    elif cmd == "stability":
        n = max(r.n_values) if r.n_values else n
        note = "n = largest scoring-set size"
    elif cmd == "demo":
        n = or_missing(r.n_eval, n)
        note = (f"unmasked, held-out grounding split; heads detected on {num(r.n_detect, 'd')} other "
                f"samples; headline k = {or_missing(r.k, '?')} of {or_missing(r.num_heads_total, '?')} heads")
    elif cmd == "dpo-pairs":
        n, acc = or_missing(r.n_samples, n), r.chosen_accuracy
        note = (f"{num(r.n_pairs, 'd')} pairs kept of {num(n, 'd')} samples ({num(r.n_dropped, 'd')} "
                "dropped); accuracy of the unmasked (chosen) answers")
    elif cmd == "emergence":  # an organism's training log: the last phase's last causal test
        final = r.final if isinstance(r.final, dict) else {}
        acc = final.get("acc")
        spans = [f"{p.get('phase')} {p.get('first_step')}-{p.get('last_step')}" for p in r.phases or []
                 if isinstance(p, dict)]
        note = (f"training log ({'; '.join(spans)}); accuracy unmasked at {final.get('phase')} step "
                f"{final.get('step')} ({'text jobs' if final.get('task') == 'text' else final.get('task')})")
    task = run.config.get("task") if isinstance(run.config.get("task"), dict) else {}
    if task.get("answer_rule"):  # which rule scored the VQA answers (vrh.tasks.answer_rules), each by name
        res = run.results if isinstance(run.results, dict) else {}
        used = sorted({rule for d in [res, *(res.get("conditions") or [])] if isinstance(d, dict)
                       for rule in (d.get("answer_rules") or {})})  # e.g. countbench or countbenchqa
        note = (note + "; " if note else "") + f"answer rule: {task['answer_rule']}" + (
            f" ({', '.join(used)})" if used and used != [task["answer_rule"]] else "")
    rc = run.random_control
    if rc and rc.warnings:
        note = ((note + "; " if note else "")
                + f"{len(rc.warnings)} random-control warning(s), shown with its figures")
    if run.problems:
        note = (note + "; " if note else "") + "; ".join(run.problems)
    return [run.name, cmd, "finished" if run.finished else "INCOMPLETE", run.model, _data(run),
            num(n, "d") if is_num(n) else "–", pct(acc), note]



def _data(run: Run) -> str:
    """The data a run's accuracy is on; a demo writes its own synthetic world (no data option)."""
    if run.data == "–" and run.command == "demo":
        seed = (run.config.get("config") or {}).get("world_seed")
        return "synthetic world" + (f" (seed {seed})" if seed is not None else "")
    return run.data


def summary_section(runs: list[Run]) -> Section:
    s = Section("Summary")
    s.add(Table(["run", "command", "status", "model", "data", "n", "accuracy (%)", "notes"],
                [summary_row(r) for r in runs],
                "Accuracy = IoU >= 0.5 for grounding; for VQA the answer rule the notes name ('official': each "
                "benchmark's own, 'lenient': vrh's); unmasked unless the notes say so."
                + ("" if all(r.finished for r in runs)
                   else " INCOMPLETE runs did not finish: their numbers are missing or partial.")))
    prov = []
    for r in runs:
        env = r.config.get("environment") or {}
        prov.append([r.name, str(r.path), env.get("vrh", "–"), (env.get("git_hash") or "–")[:12],
                     env.get("torch", "–"), env.get("transformers", "–"), env.get("time", "–")])
    s.add(Section("Provenance", [Table(["run", "folder", "vrh", "git", "torch", "transformers", "time"], prov)],
                  level=3))
    return s


# --- head scores and sparsity -------------------------------------------------------------------------
def _overlap(a: list, b: list, k: int) -> float | None:
    if not a or not b:
        return None
    return len({tuple(h) for h in a[:k]} & {tuple(h) for h in b[:k]}) / k


def cross_attention_note(cross: list[int], top: list, num_heads: int) -> str:
    """What a cross-attention model's head scores mean (its ``head_scores.json`` lists the cross-attention layers).

    >>> cross_attention_note([1, 3], [(3, 0), (0, 2)], 4).endswith("1 of the top 2 heads are cross-attention heads.")
    True
    """
    layers = set(cross)
    n_cross = sum(1 for layer, _ in top if layer in layers)
    return (f"Cross-attention model: layers {', '.join(map(str, cross))} ({len(cross) * num_heads} heads) read the "
            "image; the other layers' heads self-attend over the text, never see a visual token and score 0 by "
            "construction. Scores are masses over the visual keys alone (a cross-attention row sums to 1 over "
            f"them), not comparable with a decoder-only model's. {n_cross} of the top {len(top)} heads are "
            "cross-attention heads.")


def scores_section(runs: list[Run], kc: KChoice) -> Section | None:
    dets = [r for r in runs if r.command == "detect" and r.head_scores is not None and r.head_scores.score_map()]
    if not dets:
        return None
    s = Section("Head scores and sparsity")
    ths = [sparsity_thresholds(run, runs) for run in dets]
    s.add(Text("Score of every (layer, head), 0-based, from the primary scorer of each detection run; the "
               "ringed cells are the top-k heads that masking removes. Sparsity follows Fig. 5: the share of "
               "heads scoring above a threshold, at the thresholds the run (or the run it is part of) recorded, "
               "stated with each table" + ("." if all(th.recorded for th in ths) else
                                           f"; where none were recorded, the paper's {thresholds_text()}.")))
    for run, th in zip(dets, ths):
        hs = run.head_scores
        scores = np.asarray(hs.score_map(), dtype=float)
        kk = kc.for_heads(scores.size)
        ranking = hs.ranking() or []
        title = run.title(", ".join(x for x in (hs.scorer, is_num(hs.n_scored) and f"n={hs.n_scored}") if x))
        sub = Section(run.name, level=3)
        sub.add(Fig(f"{slug(run.name)}-heatmap", plots.score_heatmap(scores, title=title, top=ranking[:kk]),
                    f"Layer x head VRH scores; ringed: the {kc.caption(scores.size)}. The colour scale runs from "
                    f"{plots.heatmap_range(scores)[0]:g} to the highest score."))
        hist = plots.score_histogram_figure(scores, title=title, thresholds=th.values)
        sub.add(Fig(f"{slug(run.name)}-histogram", plots.to_png(hist),
                    f"Distribution of head scores ({plots.axis_scales(hist.axes[0])}); vertical lines: the sparsity "
                    f"{th.describe()}."))
        sp = sparsity_summary(scores, th.values)
        rows = [[f"heads above {t:g}", f"{pct(sp['fraction_above'][t])} %", str(sp["count_above"][t])]
                for t in th.values]
        rows += [["max score", num(sp["max"]), ""], ["median score", num(sp["median"]), ""],
                 [f"share of total score in top 1% ({sp['top1pct_heads']} heads)", f"{pct(sp['top1pct_share'])} %", ""]]
        sub.add(Table(["sparsity", "value", "count"], rows,
                      f"{sp['num_layers']} layers x {sp['num_heads']} heads; {th.describe()}"))
        if ranking:
            sub.add(Text(f"Top-{kk} heads (LAYER:HEAD): " + heads_text(ranking[:kk])))
        cross = hs.extra.get("cross_attention_layers")
        if cross:
            sub.add(Text(cross_attention_note(cross, ranking[:kk], hs.num_heads)))
        variants = hs.variants or {}
        if len(variants) > 1:
            vrows = []
            for name, v in variants.items():
                vsp = sparsity_summary(v.get("scores") or [[np.nan]], th.values)
                vrows.append([name, *(pct(vsp["fraction_above"][t]) for t in th.values),
                              num(vsp["max"]), pct(vsp["top1pct_share"]), pct(_overlap(v.get("ranking"), ranking, kk))])
            sub.add(Table(["scorer", *(f"> {t:g} (%)" for t in th.values), "max", "top-1% share (%)",
                           f"top-{kk} overlap with primary (%)"], vrows, "Scorer variants of this run"))
        if hs.skipped:
            sub.add(Text(f"{len(hs.skipped)} samples skipped (e.g. {hs.skipped[0]}).", muted=True))
        for w in hs.warnings or []:
            sub.add(Text(f"{run.name}: detection: {w}", warn=True))
        s.add(sub)
    return s


# --- k-curves -----------------------------------------------------------------------------------------
def kcurve_section(runs: list[Run], kc: object = None) -> Section | None:  # kc: the report's k, unread
    sweeps = [r for r in runs if r.command == "sweep" and r.res.k]
    if not sweeps:
        return None
    s = Section("k-curves")
    s.add(Text("Accuracy after masking the top-k VRHs (red) vs k random heads drawn outside the top-k (grey: "
               "mean, band = min-max over seeds), as in Fig. 4; the dashed line is the unmasked model. "
               "Tables follow Tab. A1."))
    for run in sweeps:
        r = run.res  # a SweepResults
        ks, v, rnd = r.k, r.vrh or VrhCurve.empty(), r.random or RandomCurve.empty()
        per_seed = [x if isinstance(x, list) else [] for x in (rnd.accuracy or [[]] * len(ks))]
        title = run.title(or_missing(r.task, "grounding"))
        sub = Section(run.name, level=3)
        sub.add(Fig(f"{slug(run.name)}-kcurve",
                    plots.k_curve(ks, [at(v.accuracy, i) for i in range(len(ks))], per_seed,
                                  baseline=r.baseline_accuracy, title=title),
                    "Accuracy vs number of masked heads k."))
        sub.add(*random_control_blocks(run))
        base = r.baseline_accuracy
        distinct = rnd.n_distinct_sets  # fold_curves: distinct random head sets per k
        rows = []
        for i, kv in enumerate(ks):
            va = at(v.accuracy, i)
            rows.append([str(kv), pct(va), (f"{100 * (va - base):+.1f}" if is_num(va) and is_num(base) else "–"),
                         pm(at(rnd.mean, i), at(rnd.std, i)),
                         pct(at(v.parse_failure_rate, i)), pct(at(rnd.parse_failure_rate_mean, i))]
                        + ([num(at(distinct, i), "d")] if isinstance(distinct, list) else []))
        n = (run.config.get("data") or {}).get("n", "?") if isinstance(run.config.get("data"), dict) else "?"
        sub.add(Table(["k", "VRH acc (%)", "Δ vs unmasked", "random acc (%) mean ± std", "VRH parse fail (%)",
                       "random parse fail (%)"] + (["distinct random sets"] if isinstance(distinct, list) else []),
                      rows, f"{run.name}: n = {n} samples, {len(rnd.seeds or [])} random seeds"))
        s.add(sub)
    return s


# --- outcomes -----------------------------------------------------------------------------------------
def outcome_section(runs: list[Run], kc: object = None) -> Section | None:  # kc: the report's k, unread
    s = Section("Outcome breakdown")
    s.add(Text("Why accuracy drops (Fig. 8a): a mislocated box means the model still answers in form but "
               "looks in the wrong place; a parse failure means it no longer produces a box at all."))
    for run in (r for r in runs if r.command == "sweep" and r.res.k):
        r = run.res  # a SweepResults
        v, rnd = r.vrh or VrhCurve.empty(), r.random or RandomCurve.empty()
        labels, fracs = [], []
        for i, kv in enumerate(r.k):
            if kv == 0:
                labels.append("unmasked")
                fracs.append(at(v.fractions, i))
                continue
            labels += [f"VRH k={kv}", f"random k={kv}"]
            fracs += [at(v.fractions, i), at(rnd.fractions_mean, i)]
        if any(fracs):
            s.add(Fig(f"{slug(run.name)}-outcomes",
                      plots.outcome_bars(labels, fracs, title=f"{run.name}: outcomes per masking condition"),
                      "Random bars average the seeds."))
    evals = [r for r in runs if r.command == "evaluate" and r.results]
    if evals:
        unmasked = [r for r in evals if _mask_label(r) == "no masking"]
        evals = unmasked + [r for r in evals if r not in unmasked]  # the reference bar first
        masked = len(evals) - len(unmasked)
        # a reference line only where something was masked: under unmasked bars alone it is one of them
        ref, ref_from = _unmasked_reference(evals, runs) if masked else (None, "")
        models = {r.model for r in evals}
        labels = [f"{r.name}\n{_mask_label(r)}" + (f"\n{r.model}" if len(models) > 1 else "") for r in evals]
        fracs = [r.res.summary.outcome_fractions() for r in evals]  # EvaluateResults
        title = ("Masked evaluations" if not unmasked else "Unmasked evaluations" if not masked
                 else "Evaluations, unmasked and masked")
        if not masked:
            note = "; nothing is masked: the bars compare " + ("models." if len(models) > 1 else "runs.")
        elif ref is not None:
            note = f"; dashed line: unmasked accuracy {pct(ref)} % ({ref_from})."
        else:
            note = "; no unmasked run of the same model and data to compare with."
        if any(fracs):
            s.add(Fig("evaluate-outcomes", plots.outcome_bars(labels, fracs, title=title, reference=ref),
                      "One bar per evaluate run" + note))
        s.add(Table(["run", "masked", "n", "accuracy (%)", "mislocated / wrong (%)", "parse failure (%)", "mean IoU"],
                    [_evaluate_row(r) for r in evals]))
    return s if len(s.blocks) > 1 else None


def _evaluate_row(run: Run) -> list[str]:
    s = run.res.summary  # the task's summary of an EvaluateResults
    fr = s.outcome_fractions() or {}
    return [run.name, _mask_label(run), num(s.n, "d"), pct(s.accuracy), pct(fr.get("mislocated", fr.get("wrong"))),
            pct(s.parse_failure_rate), num(s.mean_iou, ".3f")]


def _model_and_data(run: Run) -> tuple[str, str] | None:
    """The model and dataset paths a run's config records, or None when it lacks either."""
    model, data = run.config.get("model"), run.config.get("data")
    model = model.get("path") if isinstance(model, dict) else model
    data = data.get("path") if isinstance(data, dict) else data
    return (str(model), str(data)) if model and data else None


def _unmasked_reference(evals: list[Run], runs: list[Run]) -> tuple[float | None, str]:
    """The unmasked accuracy to draw under evaluate runs' bars, and where it comes from: an unmasked evaluate
    run among them; else a baseline an evaluate run recorded; else the baseline of another run (a sweep, a
    demo's sub-run) on the same model and data as every masked evaluate run. (None, "") when there is none."""
    for r in evals:
        if _mask_label(r) == "no masking" and is_num(r.res.summary.accuracy):
            return r.res.summary.accuracy, r.name
    for r in evals:  # an evaluation that recorded its model's unmasked accuracy too
        if is_num(r.res.value("baseline_accuracy")):
            return r.res.value("baseline_accuracy"), f"recorded by {r.name}"
    keys = {_model_and_data(r) for r in evals}
    if len(keys) == 1 and None not in keys:
        for r in runs:
            if r.command != "evaluate" and _model_and_data(r) in keys and is_num(r.res.value("baseline_accuracy")):
                return r.res.value("baseline_accuracy"), f"{r.name}, same model and data"
    return None, ""


# --- attention overlays -------------------------------------------------------------------------------
def dataset_images(run: Run) -> tuple[dict[str, Path], str]:
    """``{sample id: image path}`` of the dataset the run's config names (``data.path``), and why it is
    empty when the run names one that cannot be read here ("" otherwise)."""
    data = run.config.get("data")
    path = data.get("path") if isinstance(data, dict) else data
    if not isinstance(path, str) or not path:
        return {}, ""
    try:
        samples = load_dataset(path, check_images=False, on_error="skip")
    except (OSError, ValueError) as e:  # not found, unreadable, not text
        return {}, f"its dataset is not readable here: {e}"
    return {s.id: Path(s.image_path) for s in samples}, ""


def _inside_run(run: Run, image) -> Path | None:
    """``image`` (a record's path, relative to the run folder) resolved, if it lies inside the run folder
    after ``..`` and symlinks are followed; else None."""
    if not isinstance(image, str) or not image:
        return None
    try:
        root, path = run.path.resolve(), (run.path / image).resolve()
    except (OSError, ValueError, RuntimeError):  # a NUL byte; a symlink loop (RuntimeError before 3.13)
        return None
    return path if path.is_relative_to(root) else None


def overlay_image(run: Run, sid: str, record: dict, named: dict[str, Path],
                  why_unnamed: str = "") -> tuple[np.ndarray | None, str]:
    """The image an overlay of sample ``sid`` may show, or None and why not.

    Only images the run names are embedded: the image that the run's dataset (``named``,
    :func:`dataset_images`) gives ``sid``, never the record's path for it; else a record path inside the
    run folder. ``why_unnamed`` is added to the reason when neither applies."""
    path = named[sid] if sid in named else _inside_run(run, record.get("image"))
    if path is None:
        return None, "not named by the run's dataset nor inside the run folder" + (
            f"; {why_unnamed}" if why_unnamed else "")
    try:
        if not path.is_file():
            return None, f"not found: {path}"
        return overlay.load_image(path), ""
    except overlay.UNREADABLE as e:
        return None, f"unreadable: {e}"


def overlay_section(runs: list[Run], kc: KChoice) -> Section | None:
    s = Section("Attention overlays")
    s.add(Text("Mean attention from the output tokens onto the image (Fig. A1): all heads, the top-k VRHs, "
               "and all other heads. Green: ground-truth box; cyan dashed: the model's predicted box."))
    left_out = []  # "run/sample (why)" of every overlay drawn without its image
    for run in (r for r in runs if r.command == "detect" and r.overlays):
        records = {str(rec.get("id")): rec for rec in run.samples}
        ranking = run.head_scores.ranking() if run.head_scores is not None else []
        named, why_unnamed = dataset_images(run)
        settings = run.config.get("config") if isinstance(run.config.get("config"), dict) else {}
        min_overlap = settings.get("min_overlap") if is_num(settings.get("min_overlap")) else 0.0
        for i, (sid, (att, rects)) in enumerate(list(run.overlays.items())[:MAX_OVERLAYS]):
            rec = records.get(sid, {})
            if att.ndim != 3:
                s.add(Text(f"{run.name}/{short(sid)}: no visual-token cells stored; skipped.", muted=True))
                continue
            kk = kc.for_heads(att.shape[0] * att.shape[1])
            what = rec.get("expression") or rec.get("question") or ""
            title = f"{run.name} / {short(sid)}" + (f': "{what}"' if what else "") + \
                (f"  (IoU {rec['iou']:.2f}, {rec.get('outcome')})" if is_num(rec.get("iou")) else "")
            image, why = overlay_image(run, sid, rec, named, why_unnamed)
            if image is None:
                left_out.append(f"{run.name}/{short(sid)} ({why})")
            png = plots.attention_overlay(att, rects, ranking[:kk], image=image, gt_box=rec.get("gt_box"),
                                          pred_box=rec.get("pred_box"), title=title, min_overlap=min_overlap)
            s.add(Fig(f"{slug(run.name)}-overlay-{i}-{slug(sid)}", png,  # the index: ids may share a slug
                      f"Sample {sid}; {kc.caption(att.shape[0] * att.shape[1])} of {run.name}. Each attention "
                      "panel has its own colour scale, from 0 to its peak, or to "
                      f"{overlay.EVEN_FLOOR:g}x its even share where the peak is lower, so a nearly even map is "
                      "drawn light (its colour bar says which); each title compares the panel's peak with the "
                      "top-k panel's and gives the share of attention on the cells detection counts as in the "
                      "GT box (any overlap" + (f", at least {100 * min_overlap:.3g}% of the cell" if min_overlap > 0
                                               else "") + ")."))
    if left_out:
        s.add(Text(f"{len(left_out)} overlay image(s) not embedded: " + "; ".join(left_out) + ".", muted=True))
    return s if len(s.blocks) > 1 else None
