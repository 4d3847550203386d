"""DPO preference pairs from VRH masking (paper App. B, after Ma et al.'s retrieval-head DPO recipe).

For each training grounding sample the *positive policy* (the unmasked VLM) answers greedily -> ``chosen``;
the *negative policy* (the same VLM with its top-k VRHs masked) answers -> ``rejected``. The negative
policy concentrates exactly the failure DPO should push away from (fluent but delocalised boxes), which is
why VRH negatives beat the control: k random heads, redrawn for every example (seed
``seed * 1000003 + sample index``, :func:`negative_seed`) outside the detected set and, as in the paper,
outside layer 0 by default.

A pair is kept only when ``chosen`` is correct -- otherwise DPO would reinforce a wrong box -- and
``rejected`` differs from it -- otherwise the pair carries no preference (:func:`drop_reason`).

Training samples (:func:`training_samples`) are the detection run's scored samples (``train="detect"``)
or every grounding sample of the dataset that the run did not hold out (``train="data"``); the run's
held-out ids are never used, so that split stays clean for evaluating the DPO model.

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

import os
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vrh import runs
from vrh.data import Sample
from vrh.experiments.heldout import GROUNDING_HINT, load_task_samples
from vrh.tasks.base import CORRECT

PAIR_FORMAT = {
    "name": "trl-conversational-vision-preference",
    "version": 1,  # bump when the keys or message layout change
    "keys": ["images", "prompt", "chosen", "rejected"],
    "source": "TRL docs: docs/source/dataset_formats.md 'Vision datasets' + docs/source/dpo_trainer.md "
              "'Training Vision Language Models' (huggingface/trl main)",
}
DROP_CHOSEN_INCORRECT = "chosen_incorrect"
DROP_SAME_ANSWER = "rejected_same_as_chosen"
TRAIN_SOURCES = ("detect", "data")


def negative_seed(seed: int, index: int) -> int:
    """Seed of the random negative heads of the ``index``-th training sample: distinct per sample, and a
    run's seeds never overlap another ``seed``'s for fewer than a million samples."""
    return seed * 1_000_003 + index


def training_samples(heads_run: str | os.PathLike, data: str | os.PathLike | None, train: str,
                     n: int | None = None) -> tuple[list[Sample], dict[str, Any]]:
    """Grounding samples to build pairs from, never one the detection run ``heads_run`` held out.

    ``train="detect"``: the run's scored samples, in its order (they must be grounding samples of
    ``data``); ``"data"``: every grounding sample of ``data`` whose id the run did not hold out (by id, even
    when ``data`` is not the run's dataset: a copy of it would otherwise leak). ``n`` caps the result.
    """
    if train not in TRAIN_SOURCES:
        raise ValueError(f"--train must be one of {TRAIN_SOURCES}, got {train!r}")
    split = runs.read_detection_split(heads_run)
    data = data or split.data_path
    if data is None:
        raise ValueError(f"{heads_run} does not record its dataset; pass --data")
    samples, info = load_task_samples(data, "grounding", hint=GROUNDING_HINT)
    info["train"] = train
    held_out = set(split.eval_ids)
    if train == "detect":
        by_id = {s.id: s for s in samples}
        missing = [i for i in split.detect_ids if i not in by_id]
        if missing:
            raise ValueError(f"{len(missing)} detection samples of {heads_run} are not grounding samples of {data} "
                             f"(e.g. {missing[:3]}); pass the run's dataset as --data, or --train data")
        samples = [by_id[i] for i in split.detect_ids if i not in held_out]
    else:
        samples = [s for s in samples if s.id not in held_out]
        info["held_out_excluded"] = len(held_out)
        if split.data_sha256 != info["sha256"]:
            info["note"] = "dataset differs from the detection run's: its held-out ids were excluded by id"
    if n is not None:
        if n < 1:
            raise ValueError(f"--n must be >= 1, got {n}")
        samples = samples[:n]
    if not samples:
        raise ValueError(f"no training samples for DPO pairs in {data} (--train {train})")
    info["n"] = len(samples)
    return samples, info


def chat_pair(sample: Sample, prompt: str, chosen: str, rejected: str) -> dict[str, Any]:
    """One TRL vision preference example (see :data:`PAIR_FORMAT`)."""
    answer = lambda text: [{"role": "assistant", "content": [{"type": "text", "text": text}]}]  # noqa: E731
    return {"images": [str(Path(sample.image_path).resolve())],
            "prompt": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]}],
            "chosen": answer(chosen), "rejected": answer(rejected)}


def drop_reason(chosen: Mapping[str, Any], rejected: Mapping[str, Any]) -> str | None:
    """Why a (chosen, rejected) record pair makes no DPO pair, or None to keep it.

    >>> drop_reason({"outcome": "correct", "pred_text": "(1,2),(3,4)"}, {"pred_text": "(9,9),(9,9)"}) is None
    True
    >>> drop_reason({"outcome": "mislocated", "pred_text": "a"}, {"pred_text": "b"})
    'chosen_incorrect'
    >>> drop_reason({"outcome": "correct", "pred_text": "a "}, {"pred_text": " a"})
    'rejected_same_as_chosen'
    """
    if chosen["outcome"] != CORRECT:
        return DROP_CHOSEN_INCORRECT
    if chosen["pred_text"].strip() == rejected["pred_text"].strip():
        return DROP_SAME_ANSWER
    return None


@dataclass
class Pairs:
    """What :func:`build_pairs` made of the records: the TRL rows and one decision per sample."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)  # per sample, in samples order
    dropped: Counter = field(default_factory=Counter)  # reason -> count
    kept_rejected_outcomes: Counter = field(default_factory=Counter)


def build_pairs(samples: Sequence[Sample], prompts: Sequence[str], chosen: Sequence[Mapping[str, Any]],
                rejected: Sequence[Mapping[str, Any]],
                negative_heads: Sequence[Sequence[tuple[int, int]]] | None = None) -> Pairs:
    """Pair each sample's ``chosen`` and ``rejected`` record (same order as ``samples``); keep a pair
    unless :func:`drop_reason` says otherwise."""
    if not len(samples) == len(prompts) == len(chosen) == len(rejected):
        raise ValueError("samples, prompts, chosen and rejected records must line up one to one")
    out = Pairs()
    for i, (s, p, c, r) in enumerate(zip(samples, prompts, chosen, rejected)):
        if c["id"] != s.id or r["id"] != s.id:
            raise ValueError(f"records of {c['id']!r} / {r['id']!r} do not belong to sample {s.id!r}")
        reason = drop_reason(c, r)
        dec = {"id": s.id, "kept": reason is None, "drop_reason": reason, "chosen_text": c["pred_text"],
               "chosen_outcome": c["outcome"], "chosen_iou": c.get("iou"), "rejected_text": r["pred_text"],
               "rejected_outcome": r["outcome"], "rejected_iou": r.get("iou")}
        if negative_heads is not None:
            dec["negative_heads"] = [list(h) for h in negative_heads[i]]
        out.decisions.append(dec)
        if reason is not None:
            out.dropped[reason] += 1
            continue
        out.rows.append(chat_pair(s, p, c["pred_text"], r["pred_text"]))
        out.kept_rejected_outcomes[r["outcome"]] += 1
    return out


def write_pairs(path: str | os.PathLike, rows: Sequence[Mapping[str, Any]]) -> Path:
    """``pairs.jsonl``, written whole and atomically: a resumed run rebuilds it from the sample records, and
    a reader never sees half of it."""
    return runs.write_jsonl(path, rows)


def training_command(out: str | os.PathLike, model: str, data: str | os.PathLike, heads: str | os.PathLike) -> str:
    """The documented TRL training + evaluation command (module docstring) filled in for this run."""
    doc = __doc__.split("Train with", 1)[1].split("::", 1)[1].split("\n(", 1)[0]
    text = "\n".join(line[4:] for line in doc.strip("\n").splitlines())
    values = {"OUT": str(out), "MODEL": str(model), "DATA": str(data), "RUN": str(heads)}
    return re.sub(r"\b(OUT|MODEL|DATA|RUN)\b", lambda m: values[m.group(1)], text)
