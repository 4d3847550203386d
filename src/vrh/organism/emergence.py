"""Emergence tracking during training: when and where retrieval heads appear (organism C, issue 17).

At fixed step intervals the trainer (``TrainConfig.track_every``) calls :func:`track`, which appends one
JSON line to the run's ``emergence.jsonl``:

* the detector's head-score map on a fixed probe set: the paper's ``out/sum/mean`` statistic, as
  :func:`vrh.organism.probe_heads.vrh_scores` computes it (mean over samples of the mean over the
  teacher-forced answer tokens, EOS excluded, of the attention mass on the referent's key positions:
  the patches overlapping the GT box, or for text jobs the referent's item tokens);
* a small-n causal test: held-out accuracy unmasked, with the map's top-k heads zeroed, and with k random
  heads outside them zeroed (a few seeds), through the evaluation's own masking.

The map is measured, never fed back: nothing here touches the loss, and the probe sets are disjoint
from the training stream (held-out seeds). ``read`` returns the records (the last one per step, so a
resumed run that re-tracked a step is counted once) for plots.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch

from vrh.heads import random_heads, top_k
from vrh.organism import world
from vrh.organism.batches import train_batch
from vrh.organism.evaluate import grounding_accuracy
from vrh.organism.text_tasks import text_sample

THRESHOLD = 0.1  # the sparsity threshold of the findings (heads with a score above it)


def probe_sets(heldout_seed: int, n: int, task: str, size: int = world.IMAGE_SIZE) -> tuple[list, list]:
    """(score samples, evaluation samples): seeds heldout+1 and heldout, as ``probe_heads`` uses them."""
    if task not in ("image", "text"):
        raise ValueError(f"emergence task must be 'image' or 'text', got {task!r}")
    make = world.grounding_sample if task == "image" else text_sample
    return ([make(heldout_seed + 1, k, size) for k in range(n)], [make(heldout_seed, k, size) for k in range(n)])


@torch.no_grad()
def score_map(model, tok, spec, samples: list[dict[str, Any]], batch_size: int = 64) -> torch.Tensor:
    """[L, H] mean answer->referent attention mass (``out/sum/mean``) over ``samples``."""
    model.eval()
    total, count = None, 0
    for i in range(0, len(samples), batch_size):
        b = train_batch(samples[i: i + batch_size], tok, spec)
        out = model(input_ids=b.input_ids, attention_mask=b.attention_mask, pixel_values=b.pixel_values,
                    output_attentions=True)
        att = torch.stack(out.attentions, 1)  # [B, L, H, S, S]
        q = b.labels != -100  # [B, S]: answer tokens + EOS
        q = q & (q.long().cumsum(1) < q.sum(1, keepdim=True))  # EOS (each row's last label) excluded
        mass = (att * b.box_keys[:, None, None, None, :].to(att.dtype)).sum(-1)  # [B, L, H, S]
        per = (mass * q[:, None, None, :].to(att.dtype)).sum(-1) / q.sum(1).clamp(min=1)[:, None, None]  # [B, L, H]
        total = per.sum(0) if total is None else total + per.sum(0)
        count += per.shape[0]
    return total / max(1, count)


def causal_test(model, tok, spec, samples, scores: torch.Tensor, k: int, seeds: int) -> dict[str, Any]:
    """Accuracy unmasked, with the top-k heads of ``scores`` zeroed, and with k random heads (outside the
    top-k) zeroed for ``seeds`` seeds."""
    L, H = scores.shape
    top = top_k(scores, k)
    rnd = [random_heads(L, H, k, sd, exclude=top) for sd in range(seeds)]
    return {"acc": grounding_accuracy(model, tok, samples, spec)["acc"],
            "top": [list(h) for h in top], "acc_top": grounding_accuracy(model, tok, samples, spec, top)["acc"],
            "random": [[list(h) for h in r] for r in rnd],
            "acc_random": [grounding_accuracy(model, tok, samples, spec, r)["acc"] for r in rnd]}


def tasks_of(text_frac: float) -> list[str]:
    """The tasks a run is tracked on, the causal test on the first: text-only pretraining -> text; image
    runs -> image, plus the text map when text jobs are in the mixture (are they the same heads?)."""
    if text_frac >= 1.0:
        return ["text"]
    return ["image"] + (["text"] if text_frac > 0 else [])


def track(org, path: str | Path) -> dict[str, Any]:
    """Measure organism A of ``org`` (a :class:`vrh.organism.train.Organisms`) now; append and return
    the record."""
    cfg, t0 = org.cfg, time.time()
    org.dropout.active = False
    rec: dict[str, Any] = {"step": org.step, "phase": Path(path).parent.name, "k": cfg.track_k, "n": cfg.track_n}
    for i, task in enumerate(tasks_of(cfg.text_frac)):
        score_samples, eval_samples = probe_sets(cfg.heldout_seed, cfg.track_n, task, cfg.image_size)
        scores = score_map(org.a, org.tok, org.spec_a, score_samples)
        entry: dict[str, Any] = {"scores": [[round(float(v), 5) for v in row] for row in scores],
                                 "above_threshold": int((scores > THRESHOLD).sum())}
        if i == 0:
            entry.update(causal_test(org.a, org.tok, org.spec_a, eval_samples, scores, cfg.track_k, cfg.track_seeds))
        else:
            entry["top"] = [list(h) for h in top_k(scores, cfg.track_k)]
        rec[task] = entry
    rec["seconds"] = round(time.time() - t0, 1)
    with open(path, "a") as f:
        f.write(json.dumps(rec) + "\n")
    print("track " + summary(rec), flush=True)
    return rec


def summary(rec: dict[str, Any]) -> str:
    """One log line: per task the top heads with their scores, heads above the threshold, the causal test."""
    parts = [f"step {rec['step']}"]
    for task in ("image", "text"):
        e = rec.get(task)
        if e is None:
            continue
        sc = torch.tensor(e["scores"])
        H = sc.shape[1]
        order = sc.flatten().argsort(descending=True)[:5]
        top = ", ".join(f"L{int(i) // H}H{int(i) % H}={float(sc.flatten()[i]):.2f}" for i in order)
        msg = f"{task}: {top}; >{THRESHOLD}: {e['above_threshold']}"
        if "acc_top" in e:
            rnd = sum(e["acc_random"]) / max(1, len(e["acc_random"]))
            msg += f"; acc {e['acc']:.3f} top{rec['k']} {e['acc_top']:.3f} random {rnd:.3f}"
        parts.append(msg)
    return " | ".join(parts)


def read(path: str | Path) -> list[dict[str, Any]]:
    """The records of ``emergence.jsonl`` in step order, the last one per (phase, step)."""
    by: dict[tuple[str, int], dict[str, Any]] = {}
    for line in Path(path).read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            by[(r.get("phase", ""), r["step"])] = r
    return [by[key] for key in sorted(by, key=lambda kv: kv[1])]


def main(argv: list[str] | None = None) -> int:
    """``python -m vrh.organism.emergence RUN/emergence.jsonl [...]``: one summary line per record."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("paths", nargs="+", help="emergence.jsonl files (e.g. organism_runs/vC/lm_c/emergence.jsonl)")
    for p in ap.parse_args(argv).paths:
        for rec in read(p):
            print(f"{rec.get('phase', '')} {summary(rec)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
