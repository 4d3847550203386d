"""Detection (paper Sec. 3): answer each grounding sample, re-run teacher-forced over prompt + answer with
one capture pass, and feed the captured rows to every requested scorer.

One main capture forward per batch serves every scorer. Scorers that calibrate against a content-free
query (QRHead, ``needs_null_rows``) get one more capture forward per batch, over the same images and
answers with the expression replaced by :data:`NULL_QUERY`; it runs only when such a scorer is requested.
``head_scores.json`` counts both (``capture_forwards`` main, ``null_capture_forwards``) next to the
number of batches, so the one-pass claim is checked, not assumed.

Writes a run folder: ``config.json``, ``samples.jsonl`` (one line per sample as it finishes),
``head_scores.json`` (the ``[L][H]`` map and ranking of every scorer; the first scorer is the primary
one), ``sample_scores.npz`` (per-sample ``[N, L, H]`` maps per scorer, for stability analyses) and
``overlays.npz`` (mean attention of every head over the visual tokens for the first few samples).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vrh import runs
from vrh.capture import capture_attention_rows
from vrh.console import console, progress
from vrh.data import Sample, dataset_hash, load_dataset, split_detect_eval
from vrh.experiments.evaluate import judge_sample, load_image, prompt_for
from vrh.heads import rank_heads
from vrh.inference import LoadedModel, generate_answers, load_model, query_sets
from vrh.regions import box_token_mask
from vrh.scoring import SampleInfo, make_scorer

DEFAULT_SCORER = "out/sum/mean"
NULL_QUERY = "N/A"  # QRHead's content-free query, in place of the referring expression


@dataclass(frozen=True)
class DetectConfig:
    model: str
    data: str
    out: str
    n: int = 200  # detection samples
    n_eval: int | None = None  # size of the held-out evaluation split (None = all the rest)
    scorers: tuple[str, ...] = (DEFAULT_SCORER,)
    answer: str = "model"  # "model": the model's own greedy answer; "gt": the ground-truth box string
    min_overlap: float = 0.0  # key set: cell overlap fraction (0 = any positive area)
    batch_size: int = 8
    max_new_tokens: int = 64
    seed: int = 0
    device: str = "cpu"
    dtype: str = "float32"
    n_overlays: int = 8

    def __post_init__(self):
        if self.answer not in ("model", "gt"):
            raise ValueError(f"answer must be 'model' or 'gt', got {self.answer!r}")
        if not self.scorers:
            raise ValueError("at least one scorer is needed")


def grid_shape(rects: torch.Tensor) -> tuple[int, int]:
    """(rows, cols) of a row-major visual token grid, read off the adapter's rectangles."""
    rows = len(torch.unique(rects[:, 1]))
    cols = len(torch.unique(rects[:, 0]))
    if rows * cols != len(rects):
        raise ValueError(f"visual tokens do not form a grid: {len(rects)} tokens, {rows} rows x {cols} cols")
    return rows, cols


def detect_split(cfg: DetectConfig) -> tuple[list[Sample], list[Sample]]:
    samples = [s for s in load_dataset(cfg.data) if s.task == "grounding"]
    if not samples:
        raise ValueError(f"{cfg.data} has no grounding samples")
    return split_detect_eval(samples, cfg.n, cfg.n_eval, cfg.seed)


def detect(cfg: DetectConfig, lm: LoadedModel | None = None) -> dict[str, Any]:
    """Run detection; returns the head_scores.json content."""
    t0 = time.time()
    lm = lm or load_model(cfg.model, device=cfg.device, dtype=cfg.dtype)
    det, held_out = detect_split(cfg)
    run = runs.RunFolder(cfg.out, overwrite=True)
    run.write_config({"command": "detect", "config": asdict(cfg), "model": lm.describe(),
                      "data": {"path": str(cfg.data), "sha256": dataset_hash(cfg.data),
                               "n_detect": len(det), "n_eval": len(held_out)},
                      "eval_ids": [s.id for s in held_out]})
    scorers = {name: make_scorer(name, seed=cfg.seed) for name in cfg.scorers}
    overlays: dict[str, np.ndarray] = {}
    skipped: list[dict[str, str]] = []
    forwards = {"main": 0, "null": 0, "batches": 0}
    n_scored = 0
    with run, progress(len(det), "detect") as advance:
        for start in range(0, len(det), cfg.batch_size):
            chunk = det[start:start + cfg.batch_size]
            images = [load_image(s) for s in chunk]
            prompts = [prompt_for(lm, s) for s in chunk]
            if cfg.answer == "model":
                answers, metas = generate_answers(lm, images, prompts, cfg.max_new_tokens)
            else:
                metas = lm.adapter.build_batch(lm.processor, images, prompts).meta
                answers = [lm.adapter.format_box(s.box, m, s.image_size) for s, m in zip(chunk, metas)]
            records = [judge_sample(lm, s, a, meta=m) for s, a, m in zip(chunk, answers, metas)]
            keep = [i for i, a in enumerate(answers) if a.strip()]
            for i in set(range(len(chunk))) - set(keep):
                skipped.append({"id": chunk[i].id, "reason": "empty answer"})
            if keep:
                main, null = _score_chunk(lm, cfg, [chunk[i] for i in keep], [images[i] for i in keep],
                                          [prompts[i] for i in keep], [answers[i] for i in keep],
                                          [records[i] for i in keep], scorers, overlays, n_scored)
                forwards["main"] += main
                forwards["null"] += null
                forwards["batches"] += 1
                n_scored += len(keep)
            for r in records:
                run.append_sample(r)
            advance(len(chunk))
        result = _write_scores(run, lm, cfg, scorers, overlays, skipped, time.time() - t0, forwards)
    console.print(f"detect: {result['n_scored']} samples scored, {len(skipped)} skipped -> {cfg.out}")
    return result


def _capture(lm, images, prompts, answers, expressions):
    """One teacher-forced capture forward over (image, prompt + answer); (batch, query sets, capture)."""
    batch = lm.adapter.build_batch(lm.processor, images, prompts, answers=answers, expressions=expressions)
    qs = [query_sets(batch, b, lm.processor) for b in range(len(images))]
    inputs = {k: (v.to(lm.device) if isinstance(v, torch.Tensor) else v) for k, v in batch.inputs.items()}
    with torch.no_grad(), capture_attention_rows(lm.model, lm.adapter, [q.positions for q in qs]) as cap:
        lm.model(**inputs)
    return batch, qs, cap


def _score_chunk(lm, cfg, chunk, images, prompts, answers, records, scorers, overlays, first_index
                 ) -> tuple[int, int]:
    """Score one batch; returns the number of (main, null) capture forwards it ran."""
    batch, qs, cap = _capture(lm, images, prompts, answers, [s.expression for s in chunk])
    null_scorers = {name for name, sc in scorers.items() if sc.needs_null_rows}
    null = None
    if null_scorers:  # same images and answers, the expression replaced by the null query
        null = _capture(lm, images, [lm.adapter.grounding_prompt(NULL_QUERY) for _ in chunk], answers,
                        [NULL_QUERY] * len(chunk))
    for b, (s, rec) in enumerate(zip(chunk, records)):
        rows = cap.rows(b)  # (L, H, Q, S)
        vis = batch.visual_positions[b]  # (V,)
        rects = batch.visual_rects[b]  # (V, 4)
        in_box = box_token_mask(rects, s.box, cfg.min_overlap)  # (V,)
        info = SampleInfo(
            key_positions=vis[in_box], visual_positions=vis, grid=grid_shape(rects),
            queries={"out": qs[b].out, "in": qs[b].inp, "coord": qs[b].coord, "last_prompt": qs[b].last_prompt},
            correct=rec.get("outcome") == "correct", iou=rec.get("iou"), index=first_index + b,
        )
        null_rows = None
        if null is not None:
            nbatch, nqs, ncap = null
            if not torch.equal(nbatch.visual_rects[b], rects):  # same image -> same visual tokens expected
                raise RuntimeError(f"{s.id}: the null-query pass tokenized the image differently")
            info.queries.update(null_in=nqs[b].inp, null_out=nqs[b].out)
            info.null_key_positions = nbatch.visual_positions[b][in_box]  # (|K|,) in the null pass's sequence
            null_rows = ncap.rows(b)  # (L, H, Qn, Sn)
        for name, scorer in scorers.items():
            if name in null_scorers:
                scorer.update(rows, info, null_rows=null_rows)
            else:
                scorer.update(rows, info)
        rec.update(n_visual_tokens=int(len(vis)), n_key_tokens=int(in_box.sum()), scored_answer=answers[b])
        if len(overlays) < cfg.n_overlays:
            vis_rows = rows[:, :, qs[b].out][..., vis]  # (L, H, Q_out, V)
            overlays[s.id] = vis_rows.mean(dim=2).numpy()  # (L, H, V)
            overlays[s.id + "/rects"] = rects.numpy()
    return cap.num_forwards, (null[2].num_forwards if null is not None else 0)


def _write_scores(run, lm, cfg, scorers, overlays, skipped, elapsed, forwards) -> dict[str, Any]:
    variants = {}
    per_sample = {}
    warnings = []
    for name, scorer in scorers.items():
        scores = scorer.result()  # (L, H)
        variants[name] = {"scores": scores.tolist(), "ranking": [list(h) for h in rank_heads(scores)],
                          "n_positive_heads": int((scores > 0).sum())}
        per_sample[name] = scorer.per_sample().numpy()  # (N, L, H)
        if len(torch.unique(scores)) == 1:
            # e.g. expression-token queries on a model that reads the request before the image: causal
            # attention can never reach the visual tokens, and the ranking is the (layer, head) tie order
            warnings.append(f"scorer {name!r} gives every head the same score ({float(scores.flatten()[0]):.3g}); "
                            "its ranking is only the (layer, head) tie order")
    for w in warnings:
        console.print(f"[yellow]warning:[/yellow] {w}")
    primary = cfg.scorers[0]
    n_scored = int(per_sample[primary].shape[0])
    out = {
        "scorer": primary,
        "num_layers": lm.num_layers,
        "num_heads": lm.num_heads,
        "n_scored": n_scored,
        "scores": variants[primary]["scores"],
        "ranking": variants[primary]["ranking"],
        "variants": variants,
        "skipped": skipped,
        "warnings": warnings,
        "capture_forwards": forwards["main"],  # main capture passes: one per batch, shared by every scorer
        "null_capture_forwards": forwards["null"],  # null-query passes (QRHead): one per batch, or none
        "capture_batches": forwards["batches"],
        "elapsed_seconds": elapsed,
    }
    run.write(runs.HEAD_SCORES, out)
    np.savez(Path(run.path) / "sample_scores.npz", **{k.replace("/", "|"): v for k, v in per_sample.items()})
    if overlays:
        np.savez(Path(run.path) / "overlays.npz", **overlays)
    return out


def load_head_scores(run_dir: str | Path, scorer: str | None = None) -> tuple[torch.Tensor, dict[str, Any]]:
    """The ``[L, H]`` score map of a detection run (its primary scorer unless ``scorer`` is named)."""
    hs = runs.read_json(Path(run_dir) / runs.HEAD_SCORES)
    if scorer is None or scorer == hs["scorer"]:
        return torch.tensor(hs["scores"]), hs
    if scorer not in hs["variants"]:
        raise ValueError(f"{run_dir} has no scorer {scorer!r}; it has {sorted(hs['variants'])}")
    return torch.tensor(hs["variants"][scorer]["scores"]), hs


def held_out_ids(run_dir: str | Path) -> Sequence[str]:
    return runs.read_json(Path(run_dir) / runs.CONFIG)["eval_ids"]
