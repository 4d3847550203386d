"""Causal validation: answer with some heads masked and judge every sample (paper Sec. 4).

:func:`evaluate_samples` is the one evaluation loop: greedy answers under :func:`vrh.masking.mask_heads`,
parsed and judged per sample (grounding: correct / mislocated / parse failure at IoU >= tau; VQA: exact
match after normalisation, or parse failure on an empty answer). Sweeps, transfer and compare call it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from vrh import grounding
from vrh.data import Sample
from vrh.heads import Head
from vrh.inference import LoadedModel, generate_answers
from vrh.masking import mask_heads


def load_image(sample: Sample):
    from PIL import Image

    with Image.open(sample.image_path) as im:
        return im.convert("RGB")


def prompt_for(lm: LoadedModel, sample: Sample) -> str:
    if sample.task == "grounding":
        return lm.adapter.grounding_prompt(sample.expression)
    return lm.adapter.vqa_prompt(sample.question)


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", text.lower()).strip()


def judge_vqa(pred: str, answer: str) -> str:
    """VQA outcome: exact match after lower-casing and stripping punctuation; empty = parse failure."""
    p = _norm(pred)
    if not p:
        return grounding.PARSE_FAILURE
    return grounding.CORRECT if p == _norm(answer) or p.split()[0] == _norm(answer) else "wrong"


def judge_sample(lm: LoadedModel, sample: Sample, text: str, meta: dict | None = None, tau: float = 0.5
                 ) -> dict[str, Any]:
    rec: dict[str, Any] = {"id": sample.id, "task": sample.task, "image": str(sample.image_path),
                           "pred_text": text}
    if sample.task == "grounding":
        box = lm.adapter.parse_box(text, meta or {}, sample.image_size)
        outcome, iou = grounding.judge(box, sample.box, tau)
        rec.update(expression=sample.expression, gt_box=list(sample.box),
                   pred_box=list(box) if box is not None else None, iou=iou, outcome=outcome)
    else:
        rec.update(question=sample.question, answer=sample.answer, outcome=judge_vqa(text, sample.answer))
    return rec


def evaluate_samples(lm: LoadedModel, samples: Sequence[Sample], heads: Sequence[Head] = (), *,
                     batch_size: int = 16, max_new_tokens: int = 64, tau: float = 0.5, mask_mode: str = "zero",
                     on_record: Callable[[dict[str, Any]], None] | None = None,
                     advance: Callable[[int], None] | None = None,
                     finished: Mapping[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Answer every sample with ``heads`` masked (``mask_mode`` "zero" or "uniform", see
    :func:`vrh.masking.mask_heads`); return (and hand to ``on_record``) one record each.

    ``finished`` maps sample ids to records of an interrupted run: those are returned as they are (not
    handed to ``on_record`` again) and only the rest is generated."""
    finished = finished or {}
    done = {s.id: finished[s.id] for s in samples if s.id in finished}
    if advance is not None and done:
        advance(len(done))
    todo = [s for s in samples if s.id not in done]
    new: dict[str, dict[str, Any]] = {}
    with mask_heads(lm.model, lm.adapter, heads, mode=mask_mode):
        for start in range(0, len(todo), batch_size):
            chunk = list(todo[start:start + batch_size])
            images = [load_image(s) for s in chunk]
            prompts = [prompt_for(lm, s) for s in chunk]
            texts, metas = generate_answers(lm, images, prompts, max_new_tokens=max_new_tokens)
            for s, t, meta in zip(chunk, texts, metas):
                rec = judge_sample(lm, s, t, meta=meta, tau=tau)
                new[s.id] = rec
                if on_record is not None:
                    on_record(rec)
            if advance is not None:
                advance(len(chunk))
    return [done[s.id] if s.id in done else new[s.id] for s in samples]


def summarize_records(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Accuracy and outcome fractions (correct / mislocated or wrong / parse failure)."""
    n = len(records)
    counts: dict[str, int] = {}
    for r in records:
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    frac = {k: v / n for k, v in counts.items()} if n else {}
    return {"n": n, "accuracy": frac.get(grounding.CORRECT, 0.0), "counts": counts, "fractions": frac,
            "parse_failure_rate": frac.get(grounding.PARSE_FAILURE, 0.0),
            "mean_iou": (sum(r.get("iou", 0.0) for r in records) / n) if n and "iou" in records[0] else None}


# --- the `vrh evaluate` command ---------------------------------------------------------------------
from dataclasses import asdict, dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

from vrh import runs  # noqa: E402


@dataclass(frozen=True)
class EvaluateConfig:
    model: str
    data: str
    out: str
    mask_heads: str | None = None  # detection run folder, or "L:H,L:H" list, or None (no masking)
    k: int = 20
    random: bool = False  # mask k random heads drawn outside the detected set instead
    seed: int = 0
    exclude_layers: tuple[int, ...] = ()  # layers random heads are never drawn from
    scorer: str | None = None  # which scorer of the detection run ranks the heads (default: its primary)
    mask_mode: str = "zero"  # "zero" (head output zeroed) or "uniform" (uniform attention), vrh.masking
    n: int | None = None
    task: str = "grounding"
    disjoint: bool = True  # evaluate only on the detection run's held-out ids (paper App. H)
    batch_size: int = 16
    max_new_tokens: int = 64
    tau: float = 0.5
    device: str = "cpu"
    dtype: str = "float32"
    resume: bool = False  # keep the finished samples of an interrupted run in `out` (same config required)


def config_record(cfg) -> dict[str, Any]:
    """A config as stored in config.json: everything but how this invocation runs (``resume``), so a
    resumed run's config equals the interrupted one's."""
    return {k: v for k, v in asdict(cfg).items() if k != "resume"}


def resolve_heads(spec: str | None, k: int, num_layers: int, num_heads: int, *, random: bool = False,
                  seed: int = 0, exclude_layers: Sequence[int] = (), scorer: str | None = None
                  ) -> tuple[list[Head], dict[str, Any]]:
    """Heads to mask from a run folder (its top-k) or an explicit list; ``random`` draws k heads outside
    that detected set instead (the paper's control)."""
    from vrh.heads import parse_head_list, random_heads, top_k

    if spec is None:
        if random:
            return random_heads(num_layers, num_heads, k, seed, exclude_layers=exclude_layers), {
                "source": "random", "seed": seed}
        return [], {"source": "none"}
    if Path(spec).is_dir():
        from vrh.experiments.detect import load_head_scores

        scores, hs = load_head_scores(spec, scorer)
        if tuple(scores.shape) != (num_layers, num_heads):
            raise ValueError(f"{spec} scored a model with {tuple(scores.shape)} (layers, heads); this model "
                             f"has ({num_layers}, {num_heads})")
        detected = top_k(scores, k)
        info = {"source": str(spec), "scorer": scorer or hs["scorer"]}
    else:
        detected = parse_head_list(spec)
        info = {"source": "list"}
    for l, h in detected:
        if not (0 <= l < num_layers and 0 <= h < num_heads):
            raise ValueError(f"head ({l}, {h}) is outside this model's {num_layers} x {num_heads} heads")
    if random:
        heads = random_heads(num_layers, num_heads, len(detected), seed, exclude=detected,
                             exclude_layers=exclude_layers)
        return heads, {**info, "random": True, "seed": seed, "detected": [list(h) for h in detected]}
    return detected, info


def select_eval_samples(data: str, task: str, n: int | None, heads_run: str | None, disjoint: bool,
                        ) -> tuple[list[Sample], dict[str, Any]]:
    from vrh.data import dataset_hash, load_dataset

    samples = [s for s in load_dataset(data) if s.task == task]
    info: dict[str, Any] = {"path": str(data), "sha256": dataset_hash(data), "task": task}
    if disjoint and heads_run and Path(heads_run).is_dir():
        cfg = runs.read_json(Path(heads_run) / runs.CONFIG)
        if cfg.get("data", {}).get("sha256") == info["sha256"]:
            keep = set(cfg["eval_ids"])
            samples = [s for s in samples if s.id in keep]
            info["disjoint_from"] = str(heads_run)
        else:
            info["disjoint_from"] = "different dataset"
    if n is not None:
        samples = samples[:n]
    if not samples:
        raise ValueError(f"no {task} samples to evaluate in {data}")
    info["n"] = len(samples)
    return samples, info


def evaluate(cfg: EvaluateConfig, lm: LoadedModel | None = None) -> dict[str, Any]:
    import time

    from vrh.console import console, progress
    from vrh.inference import load_model

    t0 = time.time()
    lm = lm or load_model(cfg.model, device=cfg.device, dtype=cfg.dtype)
    heads, head_info = resolve_heads(cfg.mask_heads, cfg.k, lm.num_layers, lm.num_heads, random=cfg.random,
                                     seed=cfg.seed, exclude_layers=cfg.exclude_layers, scorer=cfg.scorer)
    samples, data_info = select_eval_samples(cfg.data, cfg.task, cfg.n, cfg.mask_heads, cfg.disjoint)
    run = runs.RunFolder(cfg.out, resume=cfg.resume, overwrite=not cfg.resume)
    run.write_config({"command": "evaluate", "config": config_record(cfg), "model": lm.describe(), "data": data_info,
                      "masked_heads": [list(h) for h in heads], "heads": head_info})
    with run, progress(len(samples), "evaluate") as advance:
        records = evaluate_samples(lm, samples, heads, batch_size=cfg.batch_size,
                                   max_new_tokens=cfg.max_new_tokens, tau=cfg.tau, mask_mode=cfg.mask_mode,
                                   on_record=run.append_sample, advance=advance,
                                   finished={r["id"]: r for r in run.finished_samples()})
        result = {**summarize_records(records), "k": len(heads), "mask_mode": cfg.mask_mode,
                  "masked_heads": [list(h) for h in heads],
                  "heads": head_info, "elapsed_seconds": time.time() - t0}
        run.write(runs.RESULTS, result)
    console.print(f"evaluate: accuracy {result['accuracy']:.3f} on {result['n']} samples "
                  f"({len(heads)} heads masked) -> {cfg.out}")
    return result
