"""DPO preference pairs from VRH masking (paper App. B, after Ma et al.'s retrieval-head DPO recipe).

For each training grounding sample the *positive policy* (the unmasked VLM) answers greedily -> ``chosen``;
the *negative policy* (the same VLM with its top-k VRHs masked) answers -> ``rejected``. The negative
policy concentrates exactly the failure DPO should push away from (fluent but delocalised boxes), which
is why VRH negatives beat the control: k random heads (``random_negatives``; redrawn for every example
with seed ``seed * 1000003 + sample index``, outside the detected set and, as in the paper, outside layer 0 by
default).

A pair is kept only when ``chosen`` is correct (IoU >= tau) -- otherwise DPO would reinforce a wrong box --
and ``rejected`` differs from it -- otherwise the pair carries no preference. Every dropped sample is
counted under its reason in ``results.json`` and marked in ``samples.jsonl``.

Training samples are the detection run's samples by default (``train="detect"``) or every grounding
sample of ``data`` that the run did not hold out (``train="data"``), so the run's held-out set stays
clean for evaluating the DPO model.

``pairs.jsonl`` is TRL's conversational *vision preference* format (TRL docs: ``dataset_formats.md``
"Vision datasets" and ``dpo_trainer.md`` "Training Vision Language Models"): one image path in
``images``, the user turn ``[{"type": "image"}, {"type": "text", ...}]`` in ``prompt``, one assistant turn
each in ``chosen`` / ``rejected``; nothing else, so DPOTrainer needs no column filtering. Train with
(TRL is not a vrh dependency; lr / epochs from App. B)::

    pip install trl datasets
    python - <<'EOF'
    from datasets import Image, Sequence, load_dataset
    from trl import DPOConfig, DPOTrainer

    ds = load_dataset("json", data_files="OUT/pairs.jsonl", split="train")
    ds = ds.cast_column("images", Sequence(Image()))  # image paths -> PIL images
    args = DPOConfig(output_dir="OUT/dpo-model", learning_rate=2e-7, num_train_epochs=4, max_length=None,
                     per_device_train_batch_size=1, gradient_accumulation_steps=8, bf16=True)
    DPOTrainer(model="MODEL", args=args, train_dataset=ds).train()
    EOF
    vrh evaluate --model OUT/dpo-model --data DATA --mask-heads RUN --k 0 --out OUT/dpo-eval

(``max_length=None`` because truncation could cut image tokens; the last line scores the trained model
on the detection run's held-out split.)
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from vrh import grounding, runs
from vrh.console import console, progress
from vrh.data import Sample, dataset_hash, load_dataset
from vrh.experiments.detect import held_out_ids
from vrh.experiments.evaluate import evaluate_samples, prompt_for, resolve_heads
from vrh.heads import random_heads
from vrh.inference import LoadedModel, load_model

PAIRS = "pairs.jsonl"
PAIR_FORMAT = {
    "name": "trl-conversational-vision-preference",
    "version": 1,  # bump when the keys or message layout change
    "keys": ["images", "prompt", "chosen", "rejected"],
    "source": "TRL docs: docs/source/dataset_formats.md 'Vision datasets' + docs/source/dpo_trainer.md "
              "'Training Vision Language Models' (huggingface/trl main)",
}
DROP_CHOSEN_INCORRECT = "chosen_incorrect"
DROP_SAME_ANSWER = "rejected_same_as_chosen"


@dataclass(frozen=True)
class DPOPairsConfig:
    model: str
    heads: str  # detection run folder
    out: str
    data: str | None = None  # default: the detection run's dataset
    k: int = 20
    train: str = "detect"  # "detect": the run's detection samples; "data": all of `data` not held out
    random_negatives: bool = False  # control: k random heads per example instead of the top-k VRHs
    seed: int = 0
    exclude_layers: tuple[int, ...] = (0,)  # layers random negatives avoid (paper: no first-layer heads)
    scorer: str | None = None
    n: int | None = None  # cap on training samples
    batch_size: int = 16
    max_new_tokens: int = 64
    tau: float = 0.5
    device: str = "cpu"
    dtype: str = "float32"

    def __post_init__(self):
        if self.train not in ("detect", "data"):
            raise ValueError(f"train must be 'detect' or 'data', got {self.train!r}")
        if self.k < 1:
            raise ValueError(f"k must be >= 1, got {self.k}")


def training_samples(cfg: DPOPairsConfig) -> tuple[list[Sample], dict[str, Any]]:
    """Grounding samples to build pairs from, never one the detection run held out for evaluation."""
    run_cfg = runs.read_json(Path(cfg.heads) / runs.CONFIG)
    data = cfg.data or run_cfg["data"]["path"]
    samples = [s for s in load_dataset(data) if s.task == "grounding"]
    info: dict[str, Any] = {"path": str(data), "sha256": dataset_hash(data), "train": cfg.train}
    held_out = set(held_out_ids(cfg.heads)) if run_cfg["data"].get("sha256") == info["sha256"] else set()
    if cfg.train == "detect":
        ids = [r["id"] for r in runs.read_jsonl(Path(cfg.heads) / runs.SAMPLES)]
        by_id = {s.id: s for s in samples}
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise ValueError(f"{len(missing)} detection samples of {cfg.heads} are not grounding samples of {data} "
                             f"(e.g. {missing[:3]}); pass the run's dataset or --train data")
        samples = [by_id[i] for i in ids]
    else:
        samples = [s for s in samples if s.id not in held_out]
        info["held_out_excluded"] = len(held_out)
        if not held_out:
            info["note"] = "dataset differs from the detection run's: no held-out ids to exclude"
    if cfg.n is not None:
        samples = samples[:cfg.n]
    if not samples:
        raise ValueError(f"no training samples for DPO pairs in {data}")
    info["n"] = len(samples)
    return samples, info


def chat_pair(sample: Sample, prompt: str, chosen: str, rejected: str) -> dict[str, Any]:
    """One TRL vision preference example (see :data:`PAIR_FORMAT`)."""
    answer = lambda text: [{"role": "assistant", "content": [{"type": "text", "text": text}]}]  # noqa: E731
    return {"images": [str(Path(sample.image_path).resolve())],
            "prompt": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]}],
            "chosen": answer(chosen), "rejected": answer(rejected)}


def drop_reason(chosen: dict[str, Any], rejected: dict[str, Any]) -> str | None:
    """Why a (chosen, rejected) record pair makes no DPO pair, or None to keep it.

    >>> drop_reason({"outcome": "correct", "pred_text": "(1,2),(3,4)"}, {"pred_text": "(9,9),(9,9)"}) is None
    True
    >>> drop_reason({"outcome": "mislocated", "pred_text": "a"}, {"pred_text": "b"})
    'chosen_incorrect'
    >>> drop_reason({"outcome": "correct", "pred_text": "a "}, {"pred_text": " a"})
    'rejected_same_as_chosen'
    """
    if chosen["outcome"] != grounding.CORRECT:
        return DROP_CHOSEN_INCORRECT
    if chosen["pred_text"].strip() == rejected["pred_text"].strip():
        return DROP_SAME_ANSWER
    return None


def training_command(out: str | Path, model: str, data: str, heads: str) -> str:
    """The documented TRL training + evaluation command (module docstring) filled in for this run."""
    doc = __doc__.split("Train with", 1)[1].split("::", 1)[1].split("\n(", 1)[0]
    text = "\n".join(line[4:] for line in doc.strip("\n").splitlines())
    values = {"OUT": str(out), "MODEL": str(model), "DATA": str(data), "RUN": str(heads)}
    return re.sub(r"\b(OUT|MODEL|DATA|RUN)\b", lambda m: values[m.group(1)], text)


def dpo_pairs(cfg: DPOPairsConfig, lm: LoadedModel | None = None) -> dict[str, Any]:
    t0 = time.time()
    lm = lm or load_model(cfg.model, device=cfg.device, dtype=cfg.dtype)
    L, H = lm.num_layers, lm.num_heads
    detected, head_info = resolve_heads(cfg.heads, cfg.k, L, H, scorer=cfg.scorer)
    samples, data_info = training_samples(cfg)
    negatives = [random_heads(L, H, cfg.k, cfg.seed * 1_000_003 + i, exclude=detected,
                              exclude_layers=cfg.exclude_layers) for i in range(len(samples))] \
        if cfg.random_negatives else None
    run = runs.RunFolder(cfg.out, overwrite=True)
    run.write_config({"command": "dpo-pairs", "config": asdict(cfg), "model": lm.describe(), "data": data_info,
                      "heads": head_info, "vrh_heads": [list(h) for h in detected],
                      "negative_policy": "random" if cfg.random_negatives else "vrh", "pair_format": PAIR_FORMAT})
    (run.path / PAIRS).unlink(missing_ok=True)
    kw = dict(batch_size=cfg.batch_size, max_new_tokens=cfg.max_new_tokens, tau=cfg.tau)
    with run, progress(2 * len(samples), "dpo-pairs") as advance:
        chosen = evaluate_samples(lm, samples, (), advance=advance, **kw)
        if negatives is None:
            rejected = evaluate_samples(lm, samples, detected, advance=advance, **kw)
        else:  # a fresh random head set per example: one sample per masked pass
            rejected = [evaluate_samples(lm, [s], h, advance=advance, **kw)[0] for s, h in zip(samples, negatives)]
        reasons: Counter = Counter()
        n_pairs = 0
        rejected_outcomes: Counter = Counter()
        with open(run.path / PAIRS, "w") as f:
            for i, (s, c, r) in enumerate(zip(samples, chosen, rejected)):
                reason = drop_reason(c, r)
                rec = {"id": s.id, "kept": reason is None, "drop_reason": reason, "chosen_text": c["pred_text"],
                       "chosen_outcome": c["outcome"], "chosen_iou": c.get("iou"), "rejected_text": r["pred_text"],
                       "rejected_outcome": r["outcome"], "rejected_iou": r.get("iou")}
                if negatives is not None:
                    rec["negative_heads"] = [list(h) for h in negatives[i]]
                run.append_sample(rec)
                if reason is not None:
                    reasons[reason] += 1
                    continue
                f.write(json.dumps(chat_pair(s, prompt_for(lm, s), c["pred_text"], r["pred_text"])) + "\n")
                n_pairs += 1
                rejected_outcomes[r["outcome"]] += 1
        n = len(samples)
        command = training_command(cfg.out, lm.path, data_info["path"], cfg.heads)
        result = {"n_samples": n, "n_pairs": n_pairs, "n_dropped": n - n_pairs, "dropped": dict(reasons),
                  "chosen_accuracy": sum(c["outcome"] == grounding.CORRECT for c in chosen) / n,
                  "rejected_accuracy": sum(r["outcome"] == grounding.CORRECT for r in rejected) / n,
                  "chosen_outcomes": dict(Counter(c["outcome"] for c in chosen)),
                  "rejected_outcomes": dict(Counter(r["outcome"] for r in rejected)),
                  "kept_rejected_outcomes": dict(rejected_outcomes),
                  "negative_policy": "random" if cfg.random_negatives else "vrh", "k": cfg.k,
                  "pair_format": PAIR_FORMAT["name"], "pair_format_version": PAIR_FORMAT["version"],
                  "pairs_file": PAIRS, "training_command": command, "elapsed_seconds": time.time() - t0}
        run.write(runs.RESULTS, result)
    drops = ", ".join(f"{v} {k}" for k, v in reasons.items()) or "none"
    console.print(f"dpo-pairs: {n_pairs} pairs from {n} samples (dropped: {drops}) -> {run.path / PAIRS}")
    console.print("train with TRL (not a vrh dependency); command on stdout, also in results.json:")
    print(command)  # plain stdout: no console wrapping, so it copies and pipes as is
    return result
