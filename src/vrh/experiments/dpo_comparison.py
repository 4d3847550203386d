"""The DPO application end to end (paper App. B, Fig. A3): VRH-negative and random-negative pairs, a DPO
model trained on each, and base / DPO-random / DPO-VRH evaluated on each benchmark's held-out samples.

:func:`train_run` is one training as a run folder (``vrh dpo-train``); :func:`run_comparison` the whole loop
(``vrh dpo``, and what a study cell calls), every stage a sub-run folder of ``out``::

    pairs_vrh/  pairs_random/          dpo-pairs runs (the random one redraws k heads outside layer 0 per sample)
    train_vrh/  train_random/          dpo-train runs; the checkpoint is train_*/model
    eval_<benchmark>_<model>/          evaluate runs, one per benchmark and model (base, dpo-random, dpo-vrh)

Evaluation samples are each benchmark's held-out samples against the detection run
(:func:`vrh.experiments.heldout.select_eval_samples`), and :func:`check_disjoint` refuses any evaluation id
that is also a training sample of the pairs. Differences are paired (same samples, every model): the mean
per-sample difference of correctness and its standard error (:func:`paired_difference`).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from vrh import runs

MODELS = ("base", "dpo-random", "dpo-vrh")
POLICIES = {"dpo-vrh": "vrh", "dpo-random": "random"}  # trained model -> its negative policy
DIFFERENCES = (("dpo-vrh", "base"), ("dpo-random", "base"), ("dpo-vrh", "dpo-random"))


def accuracy_se(correct: Sequence[bool]) -> tuple[float, float]:
    """Accuracy and its binomial standard error ``sqrt(p (1 - p) / n)``.

    >>> accuracy_se([True, True, False, False])
    (0.5, 0.25)
    """
    n = len(correct)
    if n == 0:
        raise ValueError("no samples: accuracy undefined")
    p = sum(map(bool, correct)) / n
    return p, math.sqrt(p * (1 - p) / n)


def paired_difference(a: Sequence[bool], b: Sequence[bool]) -> tuple[float, float]:
    """Mean of ``a_i - b_i`` over the same samples and its standard error (sample sd / sqrt(n); 0 for n = 1).

    >>> d, se = paired_difference([True, True, False, True], [True, False, False, False])
    >>> d, round(se, 4)  # d = [0, 1, 0, 1]: sd sqrt(1/3), se sqrt(1/3) / 2
    (0.5, 0.2887)
    """
    if len(a) != len(b) or not a:
        raise ValueError(f"paired difference needs two equally long, non-empty lists, got {len(a)} and {len(b)}")
    d = [int(bool(x)) - int(bool(y)) for x, y in zip(a, b)]
    n, mean = len(d), sum(d) / len(d)
    if n == 1:
        return mean, 0.0
    var = sum((x - mean) ** 2 for x in d) / (n - 1)
    return mean, math.sqrt(var / n)


def check_disjoint(train_ids: Sequence[str], eval_ids: Sequence[str], where: str) -> None:
    """Refuse an evaluation that shares a sample id with the DPO training samples."""
    shared = sorted(set(train_ids) & set(eval_ids))
    if shared:
        raise ValueError(f"{len(shared)} evaluation samples of {where} are DPO training samples (e.g. {shared[:3]}); "
                         "the comparison must be held out: use another benchmark split or --train")


def train_run(base: str, pairs: str | os.PathLike, out: str | os.PathLike, opts: Any, *, device: str = "cpu",
              dtype: str = "float32", adapter: str | None = None, resume: bool = False, overwrite: bool = False,
              config: Mapping[str, Any] | None = None) -> runs.DpoTrainResults:
    """One DPO training as a dpo-train run folder ``out`` (``config.json``, ``train_log.jsonl``, ``model/``,
    ``results.json``): ``base`` (a ``--model`` value) trained on the pairs of ``pairs`` with the
    :class:`vrh.options.DpoTrainOptions` ``opts``. A finished run in ``out`` is returned as is with
    ``resume``; an interrupted one continues from its last complete TRL checkpoint
    (:func:`vrh.experiments.dpo.train_dpo`)."""
    import dataclasses

    from vrh.experiments import dpo
    from vrh.models.loading import load_model

    t0 = time.time()
    trl_version = dpo.require_trl()
    dataset = dpo.load_pairs(pairs)  # bad pairs fail before the models load
    settings = {f.name: getattr(opts, f.name) for f in dataclasses.fields(opts)
                if f.name in ("lr", "epochs", "max_steps", "beta", "train_batch_size", "grad_accum", "save_steps",
                              "train_seed")}
    run = runs.RunFolder(out, resume=resume, overwrite=overwrite)
    if resume and run.path.joinpath(runs.RESULTS).is_file():  # finished: reused if made with this whole config
        old = runs.read_config(out)
        # what an interrupted resume compares, but the loaded model's description (the model is not loaded here:
        # its --model, --dtype, --adapter, --device are in the command's own record)
        mine = json.loads(json.dumps({**(config or {}), "pairs": str(dpo.pairs_file(pairs)),
                                      "n_pairs": len(dataset), "settings": settings}))
        diffs = runs.config_differences({k: old.get(k) for k in mine}, mine)
        run.release()
        if diffs:
            raise ValueError(f"cannot resume {out}: it holds a finished training with other settings ("
                             + "; ".join(diffs) + "); --overwrite to train again")
        return runs.DpoTrainResults.from_json(runs.read_results(out))
    load = dict(device=device, dtype=dtype, adapter=adapter)
    policy, reference = load_model(base, **load), load_model(base, **load)
    run.write_config({**(config or {}), "model": policy.describe(), "pairs": str(dpo.pairs_file(pairs)),
                      "n_pairs": len(dataset), "settings": settings, "trl": trl_version})
    with run:
        o = dpo.train_dpo(policy, reference, dataset, run.path, opts, device=device, dtype=dtype, resume=resume)
        result = runs.DpoTrainResults(
            pairs=str(dpo.pairs_file(pairs)), n_pairs=len(dataset), base_model=policy.path, model_dir=o.model_dir,
            steps=o.steps, epochs=o.epochs, train_loss=o.train_loss, last_log=o.last_log,
            resumed_from=o.resumed_from, settings=settings, train_seconds=o.seconds,
            peak_memory_bytes=o.peak_memory_bytes, peak_memory_kind=o.peak_memory_kind, trl_version=trl_version,
            elapsed_seconds=time.time() - t0)
        run.write_results(result.to_json())
    return result


def benchmark_name(path: str | os.PathLike, taken: Sequence[str] = ()) -> str:
    """A folder-safe name for a benchmark file: its stem (its folder's name for ``data.jsonl``), prefixed by
    the folder's name when another benchmark took it, numbered if that is taken too."""
    p = Path(path)
    safe = lambda text: "".join(c if c.isalnum() or c in "-_" else "_" for c in text) or "benchmark"  # noqa: E731
    name = safe(p.parent.name if p.stem == "data" and p.parent.name else p.stem)
    if name in taken and p.parent.name:
        name = safe(f"{p.parent.name}_{p.stem}")
    base, i = name, 2
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    return name


def run_comparison(lm: Any, cfg: Any, out: str | os.PathLike, *, benchmarks: Sequence[str] = (),
                   resume: bool = False, overwrite: bool = False,
                   config: Mapping[str, Any] | None = None) -> runs.DpoResults:
    """The whole App. B loop into run folder ``out`` (see the module docstring); ``lm`` is the loaded base model
    (pairs and the base evaluation use it; the DPO models are trained from ``lm.path`` and loaded back from
    their saved folders). ``cfg`` carries the pair options (:class:`vrh.options.PairOptions`), the
    training options (:class:`~vrh.options.DpoTrainOptions`), ``mask_mode``, ``scorer``,
    ``batch_size``, ``max_new_tokens``, ``device``, ``dtype``, ``adapter`` and ``n_eval`` (None: every
    held-out sample). ``benchmarks``: grounding datasets (default: the detection run's)."""
    from vrh.experiments import preference_pairs as pp
    from vrh.experiments import conditions as cond
    from vrh.experiments.heldout import select_eval_samples
    from vrh.experiments.runner import run_conditions
    from vrh.infra.console import console
    from vrh.models.loading import load_model
    from vrh.tasks import get_task

    t0, stages = time.time(), {}
    out = Path(out)
    split = runs.read_detection_split(cfg.heads)
    benchmarks = list(benchmarks) or [split.data_path]
    if any(b is None for b in benchmarks):
        raise ValueError(f"{cfg.heads} does not record its dataset; pass --benchmarks")
    train_samples, _ = pp.training_samples(cfg.heads, cfg.data, cfg.train, cfg.n)
    train_ids = [s.id for s in train_samples]
    task = get_task("grounding")
    evals, names = [], []
    for b in benchmarks:  # every evaluation set is chosen and checked before anything runs
        samples, info = select_eval_samples(b, "grounding", cfg.n_eval, [cfg.heads])
        check_disjoint(train_ids, [s.id for s in samples], str(b))
        names.append(benchmark_name(b, names))
        evals.append((names[-1], samples, info))
    subruns = ["pairs_vrh", "pairs_random", "train_vrh", "train_random",
               *(f"eval_{name}_{m}" for name, _, _ in evals for m in MODELS)]
    run = runs.RunFolder(out, resume=resume, overwrite=overwrite)
    run.write_config({**(config or {}), "model": lm.describe(), "benchmarks": [str(b) for b in benchmarks],
                      "subruns": subruns})
    part = {"part_of": str(out)}
    with run:
        pairs = {}
        for policy in ("vrh", "random"):
            s0 = time.time()
            pairs[policy] = pp.make_pairs(lm, cfg, out / f"pairs_{policy}", random_negatives=policy == "random",
                                          resume=resume, config={"command": "dpo-pairs", **part},
                                          description=f"pairs ({policy} negatives)")
            stages[f"pairs_{policy}"] = time.time() - s0
            console.print(f"dpo: {pairs[policy].n_pairs} {policy}-negative pairs of {pairs[policy].n_samples} samples")
        trained = {}
        for model, policy in POLICIES.items():
            s0 = time.time()
            trained[model] = train_run(lm.path, out / f"pairs_{policy}", out / f"train_{policy}", cfg,
                                       device=cfg.device, dtype=cfg.dtype, adapter=cfg.adapter, resume=resume,
                                       config={"command": "dpo-train", **part})
            stages[f"train_{policy}"] = time.time() - s0
        correct: dict[str, dict[str, list[bool]]] = {name: {} for name, _, _ in evals}
        none = cond.none(cfg.mask_mode)
        for m in MODELS:
            s0 = time.time()
            model = lm if m == "base" else load_model(trained[m].model_dir, device=cfg.device, dtype=cfg.dtype,
                                                      adapter=cfg.adapter, answer_format=getattr(cfg, "answer_format", None))
            for name, samples, info in evals:
                sub = runs.RunFolder(out / f"eval_{name}_{m}", resume=resume)
                sub.write_config({"command": "evaluate", **part, "model": model.describe(), "data": info,
                                  "task": task.config(), "conditions": [none.to_json()], "dpo_model": m})
                with sub:
                    res = run_conditions(model, task, samples, [none], sub, cfg, description=f"eval {name} {m}")
                    recs = {r["id"]: r for r in res.records[none.label]}
                    correct[name][m] = [recs[s.id]["outcome"] == "correct" for s in samples]
                    summary = res.summary(none.label)
                    sub.write_results(runs.EvaluateResults(
                        summary=runs.TaskSummary.from_json(summary), k=0, mask_mode=cfg.mask_mode, masked_heads=[],
                        heads={"source": "none"}, condition=none.to_json(), elapsed_seconds=None).to_json())
            stages[f"eval_{m}"] = time.time() - s0
        result = runs.DpoResults(
            models=list(MODELS), benchmarks={name: benchmark_block(correct[name], info)
                                             for name, _, info in evals},
            average=average_block([benchmark_block(correct[name], info) for name, _, info in evals]),
            pairs={p: {"n_samples": r.n_samples, "n_pairs": r.n_pairs, "dropped": r.dropped,
                       "kept_rejected_outcomes": r.kept_rejected_outcomes} for p, r in pairs.items()},
            training={POLICIES[m]: {"steps": t.steps, "epochs": t.epochs, "train_loss": t.train_loss,
                                    "last_log": t.last_log, "train_seconds": t.train_seconds,
                                    "peak_memory_bytes": t.peak_memory_bytes, "peak_memory_kind": t.peak_memory_kind}
                      for m, t in trained.items()},
            k=pairs["vrh"].k, settings=trained["dpo-vrh"].settings,
            overlap_checked={"train_samples": len(train_ids), "shared_with_evaluation": 0},
            subruns=subruns, stage_seconds=stages, elapsed_seconds=time.time() - t0)
        run.write_results(result.to_json())
    return result


def benchmark_block(correct: Mapping[str, Sequence[bool]], info: Mapping[str, Any]) -> dict[str, Any]:
    """One benchmark of Fig. A3: accuracy and se per model, and the paired differences of :data:`DIFFERENCES`."""
    acc = {m: accuracy_se(correct[m]) for m in MODELS}
    diffs = [{"a": a, "b": b, **dict(zip(("diff", "se"), paired_difference(correct[a], correct[b])))}
             for a, b in DIFFERENCES]
    return {"data": info.get("path"), "n": len(correct[MODELS[0]]), "accuracy": {m: v[0] for m, v in acc.items()},
            "se": {m: v[1] for m, v in acc.items()}, "differences": diffs}


def average_block(blocks: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The mean over benchmarks (the paper's "average improvement"): each value's mean, its se as
    ``sqrt(sum se^2) / B`` (benchmarks' samples independent)."""
    B = len(blocks)
    mean = lambda xs: sum(xs) / B  # noqa: E731
    comb = lambda ses: math.sqrt(sum(s * s for s in ses)) / B  # noqa: E731
    diffs = [{"a": a, "b": b, "diff": mean([blk["differences"][i]["diff"] for blk in blocks]),
              "se": comb([blk["differences"][i]["se"] for blk in blocks])} for i, (a, b) in enumerate(DIFFERENCES)]
    return {"n_benchmarks": B, "accuracy": {m: mean([blk["accuracy"][m] for blk in blocks]) for m in MODELS},
            "se": {m: comb([blk["se"][m] for blk in blocks]) for m in MODELS}, "differences": diffs}
