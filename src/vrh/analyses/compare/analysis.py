"""``vrh compare``: every head-scoring method judged by the same causal test (paper Sec. 3.3, Fig. 2-3,
App. F-G, Tab. A9).

Why one run: the design-space variants and the prior-method baselines differ only in how they score the SAME
attention rows, so a fair comparison scores them all in one detection (one capture pass per batch feeding
every scorer, plus the extra passes a scorer asks for) on the same samples, then masks each method's top-k
heads on the same disjoint held-out set. k random heads drawn outside the default method's top-k, over
several seeds, are the control (built and folded as in ``vrh sweep``).

All conditions go through one :func:`vrh.experiments.runner.run_conditions` call, which evaluates each distinct
head set once and tags its records for every (method, k) that selects it -- on small models many methods agree.

:func:`run_compare` writes ``RUN/detect/`` (a full detection run), ``RUN/config.json``, ``RUN/samples.jsonl``
(one line per (condition, sample), labels ``none``, ``top{k}`` (the default method), ``top{k}:{method}``,
``random{k}:s{seed}``), ``RUN/compare.md`` (Tab. A9 style), ``RUN/compare.png`` and, last,
``RUN/results.json`` (:class:`vrh.runs.CompareResults`; each condition's ``source`` is ``detect``, relative to
the run folder). A resumed run reuses a finished detection and every finished sample.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vrh.analyses.compare.settings import CompareSettings
from vrh.runs import CompareResults, safe_paths

DETECT_DIR = "detect"
TABLE_NAME = "compare.md"
PLOT_NAME = "compare.png"


def fold(res: Any, method_scores: dict[str, Any], ks: list[int], default: str, seeds: tuple[int, ...]
         ) -> dict[str, Any]:
    """The comparison's keys of :class:`vrh.runs.CompareResults` from the runner's summaries (``res``:
    :class:`vrh.experiments.runner.ConditionResults`): ``k``, ``methods`` (a :class:`vrh.runs.MethodCurve`
    each), ``random`` (the default's random control as ``vrh sweep`` folds it), ``baseline_accuracy``,
    ``similarity`` to the default, ``best_method_by_k`` (names tied at the lowest accuracy) and
    ``default_method``. ``method_scores`` maps method name -> ``[L, H]`` scores, in the order the table lists
    them (the default first).
    """
    from vrh.experiments.kcurves import fold_curves
    from vrh.experiments.method_comparison import FIG7_K, finite_or_none, map_similarity
    from vrh.experiments.runner import ConditionResults
    from vrh.runs import CompareRandom, MethodCurve

    top = {(c.method, c.k): res.summary(c.label) for c in res.conditions if c.kind == "top_k"}
    methods = {name: MethodCurve(accuracy=[top[name, k]["accuracy"] for k in ks],
                                 parse_failure_rate=[top[name, k]["parse_failure_rate"] for k in ks],
                                 n_positive_heads=int((scores > 0).sum()))
               for name, scores in method_scores.items()}
    # the default's curve and its random control, as vrh sweep folds them (other methods' top-k left out)
    own = [c for c in res.conditions if c.kind != "top_k" or c.method == default]
    curves = fold_curves(ConditionResults(own, res.records, res.summaries), seeds)
    at = [curves.k.index(k) for k in ks]
    rnd = curves.random
    random = CompareRandom(mean=[rnd.mean[i] for i in at], std=[rnd.std[i] for i in at],
                           accuracy=[rnd.accuracy[i] for i in at], seeds=list(seeds),
                           n_distinct_sets=[rnd.n_distinct_sets[i] for i in at])
    ref = method_scores[default]
    similarity = {}
    for name, scores in method_scores.items():
        sim = map_similarity(ref, scores, k=min(FIG7_K, ref.numel()))
        similarity[name] = {"spearman_vs_default": finite_or_none(sim["spearman"]),
                            "kendall_vs_default": finite_or_none(sim["kendall"]),
                            "top20_overlap_vs_default": sim["top20_overlap"], "overlap_k": sim["top20_k"]}
    best = {}
    for i, k in enumerate(ks):
        low = min(m.accuracy[i] for m in methods.values())
        best[str(k)] = [name for name, m in methods.items() if m.accuracy[i] == low]
    return {"k": list(ks), "methods": methods, "random": random, "baseline_accuracy": curves.baseline_accuracy,
            "similarity": similarity, "best_method_by_k": best, "default_method": default}


def markdown_table(result: CompareResults) -> str:
    """Tab. A9 style: rows methods, columns k, accuracy (%) after masking; per column the largest causal
    effect (lowest accuracy) is **bold**, the second <u>underlined</u>; random (mean +- std) and the unmasked
    model close the table."""
    ks, methods = result.k, result.methods
    lines = [f"Accuracy (%) after masking the top-k heads of each method (mask mode: {result.mask_mode}); "
             "lower = more causal. **Bold**: largest effect, <u>underlined</u>: second.", "",
             "| method | " + " | ".join(f"k={k}" for k in ks) + " |", "|---|" + "---:|" * len(ks)]
    ranks = [sorted({m.accuracy[i] for m in methods.values()})[:2] for i in range(len(ks))]
    for name, m in methods.items():
        cells = []
        for i, a in enumerate(m.accuracy):
            cell = f"{100 * a:.1f}"
            cells.append(f"**{cell}**" if a == ranks[i][0] else f"<u>{cell}</u>" if a in ranks[i][1:] else cell)
        label = f"{name} (default)" if name == result.default_method else name
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    rnd = result.random
    lines.append("| random | " + " | ".join(f"{100 * m:.1f} ± {100 * s:.1f}" for m, s in zip(rnd.mean, rnd.std))
                 + " |")
    base = result.baseline_accuracy
    if base is not None:
        lines.append("| unmasked (k=0) | " + " | ".join(f"{100 * base:.1f}" for _ in ks) + " |")
    return "\n".join(lines) + "\n"


def save_plot(result: CompareResults, path: Path, title: str) -> None:
    """Accuracy vs k per method, random in grey and the default in red (the report's curve style)."""
    from vrh.report.methods_figure import method_curves

    ours = f"{result.default_method} (ours)"
    named = {(ours if n == result.default_method else n): m.accuracy for n, m in result.methods.items()}
    named["random"] = result.random.mean
    safe_paths.write_atomic(path.parent, path, method_curves(result.k, named, baseline=result.baseline_accuracy,
                                                             title=title, highlight=ours if ours in named else None))


def run_compare(cfg: CompareSettings, lm: Any = None) -> CompareResults:
    """Detect with every method into ``RUN/detect``, mask each method's top-k on the held-out split, write
    the table, the figure and ``results.json`` (:func:`fold` plus the run's bookkeeping); the methods' table
    printed. A bad ``--data`` fails before the model loads."""
    import time

    from vrh import runs
    from vrh.experiments import conditions as cond
    from vrh.experiments.detection import run_detection
    from vrh.experiments.heldout import GROUNDING_HINT, load_task_samples, select_eval_samples
    from vrh.experiments.kcurves import conditions_table, random_control_report, sweep_conditions
    from vrh.experiments.runner import run_conditions
    from vrh.experiments.settings import DetectSettings, take
    from vrh.experiments.setup import fit_random_pool, load
    from vrh.infra.console import console, warn
    from vrh.options import DEFAULT_K_RULE, config_record, default_k, default_ks
    from vrh.tasks import get_task

    t0 = time.time()
    task = get_task("grounding")
    # fail on a bad --data before loading the model
    _, data_id = load_task_samples(cfg.data, "grounding", hint=GROUNDING_HINT)
    lm = load(cfg, lm)
    cfg = fit_random_pool(cfg, lm)  # --random-from: a cross-attention model's pool
    total = lm.num_layers * lm.num_heads
    ks = sorted({k for k in (cfg.ks if cfg.ks is not None else default_ks(default_k(lm.num_layers, lm.num_heads),
                                                                          lm.num_layers, lm.num_heads)) if k > 0})
    if cfg.ks is None:
        console.print(f"compare: --ks {','.join(map(str, ks))} (default: 1, k/2, k, 2k; k = {DEFAULT_K_RULE})")
    for k in ks:  # before detection: a k with no room for k random heads outside the top-k can never run
        cond.check_room(k, lm.num_layers, lm.num_heads, "--ks")
    run = runs.RunFolder(cfg.out, resume=cfg.resume, overwrite=cfg.overwrite)
    # written before detection, so a resumed run with other settings is refused before anything is redone
    run.write_config({"command": cfg.COMMAND, "config": config_record(cfg), "model": lm.describe(), "data": data_id,
                      "detect_run": DETECT_DIR})
    det_dir = run.path / DETECT_DIR
    hs = run_detection(lm, cfg.data, det_dir, take(DetectSettings, cfg), resume=cfg.resume)
    name_of = dict(zip(cfg.scorers, hs.variants))  # spec -> the scorer's name in head_scores.json
    default = name_of[cfg.default]
    method_scores = {name_of[s]: hs.scores(name_of[s]) for s in cfg.scorers}  # default first, as detected
    samples, data_info = select_eval_samples(cfg.data, "grounding", None, [det_dir], True)

    conds, controls = sweep_conditions(method_scores[default], ks, cfg.seeds, method=default,
                                       exclude_layers=cfg.exclude_layers, mask_mode=cfg.mask_mode,
                                       source=DETECT_DIR, option="--ks")
    for name, scores in method_scores.items():
        if name != default:
            conds += [cond.top_k(scores, k, method=name, mask_mode=cfg.mask_mode, label=f"top{k}:{name}",
                                 source=DETECT_DIR) for k in ks]
    control = random_control_report(controls)
    for w in control.warnings:
        warn(w)

    with run:
        res = run_conditions(lm, task, samples, conds, run, cfg, description=cfg.COMMAND)
        result = CompareResults(
            **fold(res, method_scores, ks, default, cfg.seeds), conditions=conditions_table(res),
            random_control=control, mask_mode=cfg.mask_mode, n_eval=len(samples), n_detect=hs.n_scored,
            num_heads_total=total, method_options={name: hs.variants[name].get("options") for name in method_scores},
            n_evaluations=res.n_evaluations, capture_forwards=hs.extra.get("capture_forwards"),
            extra_capture_forwards=hs.extra.get("extra_capture_forwards"), data=data_info,
            elapsed_seconds=time.time() - t0)
        safe_paths.write_atomic(run.path, run.path / TABLE_NAME, markdown_table(result))  # never through a link
        save_plot(result, run.path / PLOT_NAME, f"{Path(cfg.model).name}: accuracy after masking top-k heads")
        run.write_results(result.to_json())  # last: its presence marks the run finished
    console.print(f"compare: {len(result.methods)} methods x k={result.k} on {len(samples)} held-out samples "
                  f"({res.n_evaluations} distinct head sets) -> {cfg.out}")
    print_methods(result)
    return result


def print_methods(result: CompareResults) -> None:
    """The methods' table (accuracy (%) after masking each method's top-k, per k; random and unmasked last) on
    stdout; ``compare.md`` marks the best per column."""
    from vrh.infra.console import print_table

    rows = [[f"{name} (default)" if name == result.default_method else name, *(f"{100 * a:.1f}" for a in m.accuracy)]
            for name, m in result.methods.items()]
    rows.append(["random", *(f"{100 * m:.1f} ± {100 * s:.1f}" for m, s in zip(result.random.mean, result.random.std))])
    if result.baseline_accuracy is not None:
        rows.append(["unmasked (k=0)", *(f"{100 * result.baseline_accuracy:.1f}" for _ in result.k)])
    print_table(f"compare: accuracy (%) after masking the top-k heads of each method (lower = more causal; "
                f"mask mode {result.mask_mode})", ["method", *(f"k={k}" for k in result.k)], rows)
