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
each in ``chosen`` / ``rejected``; nothing else, so DPOTrainer needs no column filtering. Train and score the
result with (lr / epochs from App. B are the defaults; :mod:`vrh.experiments.dpo` drives TRL)::

    vrh dpo-train --pairs OUT --model MODEL --out OUT-dpo
    vrh evaluate --model OUT-dpo/model --data DATA --mask-heads RUN --k 0 --out OUT-dpo-eval

(the last line scores the trained model on the detection run's held-out split; ``vrh dpo`` runs the whole
comparison with its random-negative control, :mod:`vrh.experiments.dpo_comparison`).

:func:`make_pairs` is the whole stage (answers through the runner, pairs, ``results.json``) for
``vrh dpo-pairs`` (:func:`run_pairs`) and for ``vrh dpo``.
"""

from __future__ import annotations

import os
import re
import shlex
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vrh import runs
from vrh.data import Sample
from vrh.experiments.heldout import GROUNDING_HINT, load_task_samples
from vrh.experiments.settings import PairsSettings
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
DROP_REJECTED_CORRECT = "rejected_correct"  # only with rejected="wrong"
DROP_OVER_LIMIT = "beyond_pair_limit"  # a keepable pair after the first `pairs` kept ones
REJECTED_RULES = ("any", "wrong")
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


def drop_reason(chosen: Mapping[str, Any], rejected: Mapping[str, Any], rejected_rule: str = "any") -> str | None:
    """Why a (chosen, rejected) record pair makes no DPO pair, or None to keep it. ``rejected_rule="wrong"``
    also drops a pair whose rejected answer is itself correct (IoU >= the task's tau).

    >>> drop_reason({"outcome": "correct", "pred_text": "(1,2),(3,4)"}, {"pred_text": "(9,9),(9,9)"}) is None
    True
    >>> drop_reason({"outcome": "mislocated", "pred_text": "a"}, {"pred_text": "b"})
    'chosen_incorrect'
    >>> drop_reason({"outcome": "correct", "pred_text": "a "}, {"pred_text": " a"})
    'rejected_same_as_chosen'
    >>> drop_reason({"outcome": "correct", "pred_text": "a"}, {"outcome": "correct", "pred_text": "b"}, "wrong")
    'rejected_correct'
    """
    if rejected_rule not in REJECTED_RULES:
        raise ValueError(f"--rejected must be one of {REJECTED_RULES}, got {rejected_rule!r}")
    if chosen["outcome"] != CORRECT:
        return DROP_CHOSEN_INCORRECT
    if chosen["pred_text"].strip() == rejected["pred_text"].strip():
        return DROP_SAME_ANSWER
    if rejected_rule == "wrong" and rejected["outcome"] == CORRECT:
        return DROP_REJECTED_CORRECT
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
                negative_heads: Sequence[Sequence[tuple[int, int]]] | None = None, *, rejected_rule: str = "any",
                max_pairs: int | None = None) -> Pairs:
    """Pair each sample's ``chosen`` and ``rejected`` record (same order as ``samples``); keep a pair
    unless :func:`drop_reason` says otherwise, and at most ``max_pairs`` (the first ones; later keepable
    pairs are dropped as :data:`DROP_OVER_LIMIT`)."""
    if not len(samples) == len(prompts) == len(chosen) == len(rejected):
        raise ValueError("samples, prompts, chosen and rejected records must line up one to one")
    out = Pairs()
    for i, (s, p, c, r) in enumerate(zip(samples, prompts, chosen, rejected)):
        if c["id"] != s.id or r["id"] != s.id:
            raise ValueError(f"records of {c['id']!r} / {r['id']!r} do not belong to sample {s.id!r}")
        reason = drop_reason(c, r, rejected_rule)
        if reason is None and max_pairs is not None and len(out.rows) >= max_pairs:
            reason = DROP_OVER_LIMIT
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
    """The documented training + evaluation commands (module docstring) filled in for this run, each argument
    shell-quoted: pasted or piped to ``sh``, a path with a blank, ``<``, ``;`` or ``$`` stays one argument.

    >>> print(training_command("runs/a b", "org/m", "d.jsonl", "runs/det").splitlines()[0])
    vrh dpo-train --pairs 'runs/a b' --model org/m --out 'runs/a b-dpo'
    """
    doc = __doc__.split("Train and score", 1)[1].split("::", 1)[1].split("\n(", 1)[0]
    text = "\n".join(line[4:] for line in doc.strip("\n").splitlines())
    values = {"OUT": str(out), "MODEL": str(model), "DATA": str(data), "RUN": str(heads)}
    # the whole argument is quoted at once (OUT-dpo/model -> 'a b-dpo/model'), not the placeholder alone
    return re.sub(r"\b(OUT|MODEL|DATA|RUN)\b(\S*)", lambda m: shlex.quote(values[m.group(1)] + m.group(2)), text)


def resolve_k(k: int | None, num_layers: int, num_heads: int) -> int:
    """``--k``, or the default that scales with the model (:func:`vrh.options.default_k`)."""
    from vrh.options import default_k

    return default_k(num_layers, num_heads) if k is None else k


def make_pairs(lm: Any, opts: Any, out: str | os.PathLike, *, random_negatives: bool = False, resume: bool = False,
               overwrite: bool = False, config: Mapping[str, Any] | None = None,
               description: str = "dpo-pairs") -> runs.DpoPairsResults:
    """The dpo-pairs stage into run folder ``out``: answers (chosen: unmasked; rejected: the top ``opts.k``
    heads of ``opts.heads`` masked, or with ``random_negatives`` k random heads per sample), through
    :func:`vrh.experiments.runner.run_conditions` (so ``resume`` redoes only what is missing), then
    ``pairs.jsonl`` and ``results.json``.

    ``opts`` carries the pair options (:class:`vrh.options.PairOptions`), ``mask_mode`` / ``scorer``
    (:class:`~vrh.options.MaskOptions`) and ``batch_size`` / ``max_new_tokens``; ``config`` is the
    caller's record for ``config.json`` (the command and its options), completed here with what was resolved.
    """
    import time

    from vrh.experiments import conditions as cond
    from vrh.experiments.kcurves import conditions_table, random_control_report
    from vrh.experiments.runner import run_conditions
    from vrh.infra.console import warn
    from vrh.tasks import get_task

    t0 = time.time()
    task = get_task("grounding")
    samples, data_info = training_samples(opts.heads, opts.data, opts.train, opts.n)
    L, H = lm.num_layers, lm.num_heads
    k = resolve_k(opts.k, L, H)
    src = cond.head_source(opts.heads, opts.scorer, L, H, option="--heads")
    if src.kind != "run":
        raise FileNotFoundError(f"--heads {opts.heads}: a detection run folder is expected")
    chosen = cond.none(opts.mask_mode)
    detected = cond.top_k(src.scores, k, method=src.scorer, mask_mode=opts.mask_mode, source=opts.heads,
                          label=f"top{k}")
    control = None
    if random_negatives:
        cond.check_room(k, L, H, outside=detected.heads, exclude_layers=opts.exclude_layers)
        control = cond.random_controls(L, H, k, [negative_seed(opts.seed, i) for i in range(len(samples))],
                                       outside=detected.heads, exclude_layers=opts.exclude_layers,
                                       method=src.scorer, mask_mode=opts.mask_mode, label="random:s{seed}")
        for w in control.warnings:
            warn(w)
    policy = "random" if random_negatives else "vrh"

    run = runs.RunFolder(out, resume=resume, overwrite=overwrite)
    run.write_config({**(config or {}), "model": lm.describe(), "data": data_info, "task": task.config(),
                      "heads": {"source": str(opts.heads), "scorer": src.scorer},
                      "vrh_heads": [list(h) for h in detected.heads], "negative_policy": policy,
                      "conditions": [c.to_json() for c in ([chosen] if random_negatives else [chosen, detected])],
                      "pair_format": PAIR_FORMAT})
    with run:
        if control is None:
            main = run_conditions(lm, task, samples, [chosen, detected], run, opts, description=description)
            rejected_recs, negative_heads = main.records[detected.label], None
        else:  # a fresh head set per sample: each sample is its own condition, all in one runner call
            negs = control.conditions
            main = run_conditions(lm, task, samples, [chosen, *negs], run, opts, description=description,
                                  subsets={c.label: [s.id] for s, c in zip(samples, negs)})
            rejected_recs = [main.records[c.label][0] for c in negs]
            negative_heads = [c.heads for c in negs]
        chosen_recs = main.records[chosen.label]
        pairs = build_pairs(samples, [task.prompt(lm.adapter, s) for s in samples], chosen_recs, rejected_recs,
                            negative_heads, rejected_rule=opts.rejected, max_pairs=opts.pairs)
        write_pairs(run.path / runs.PAIRS, pairs.rows)
        n = len(samples)
        result = runs.DpoPairsResults(
            n_samples=n, n_pairs=len(pairs.rows), n_dropped=n - len(pairs.rows), dropped=dict(pairs.dropped),
            chosen_accuracy=task.summarize(chosen_recs)["accuracy"],
            rejected_accuracy=task.summarize(rejected_recs)["accuracy"],
            chosen_outcomes=dict(Counter(r["outcome"] for r in chosen_recs)),
            rejected_outcomes=dict(Counter(r["outcome"] for r in rejected_recs)),
            kept_rejected_outcomes=dict(pairs.kept_rejected_outcomes), negative_policy=policy, k=k,
            mask_mode=opts.mask_mode, pair_format=PAIR_FORMAT["name"], pair_format_version=PAIR_FORMAT["version"],
            pairs_file=runs.PAIRS, conditions=conditions_table(main)[:1 if control is not None else None],
            decisions=pairs.decisions, rejected_rule=opts.rejected, max_pairs=opts.pairs,
            training_command=training_command(out, lm.path, data_info["path"], opts.heads),
            elapsed_seconds=time.time() - t0,
            random_control=random_control_report([control]) if control is not None else None)
        run.write_results(result.to_json())
    return result


def run_pairs(cfg: PairsSettings, lm: Any = None) -> runs.DpoPairsResults:
    """``vrh dpo-pairs``: the pairs run folder at ``cfg.out`` (:func:`make_pairs`); the counts and the next
    commands printed on stdout. A bad ``--heads`` / ``--data`` fails before the model loads."""
    from vrh.experiments.heads_origin import adopt
    from vrh.experiments.setup import fit_random_pool, load
    from vrh.infra.console import print_result
    from vrh.options import config_record

    training_samples(cfg.heads, cfg.data, cfg.train, cfg.n)  # bad --heads / --data fail before the model loads
    lm = adopt(load(cfg, lm), cfg.answer_format, cfg.heads, command=cfg.COMMAND, option="--heads",
               task="grounding")  # the heads' answer format (vrh.experiments.heads_origin)
    cfg = fit_random_pool(cfg, lm)  # --random-from: a cross-attention model's pool
    result = make_pairs(lm, cfg, cfg.out, random_negatives=cfg.random_negatives, resume=cfg.resume,
                        overwrite=cfg.overwrite, config={"command": cfg.COMMAND, "config": config_record(cfg)},
                        description=cfg.COMMAND)
    drops = ", ".join(f"{v} {k}" for k, v in result.dropped.items()) or "none"
    # stdout is the result and a script: the counts as shell comments, then the next commands (shell-quoted),
    # unwrapped (no console), so ``vrh dpo-pairs ... > next.sh`` or ``| sh`` runs them as is; a newline in the
    # path would end the comment and run the rest of it, so the comment shows it as \n
    pairs = shlex.quote(f"{cfg.out}/{runs.PAIRS}").replace("\n", "\\n")
    print_result(f"# dpo-pairs: {result.n_pairs} pairs from {result.n_samples} samples (dropped: {drops}) -> "
                 f"{pairs}\n# train them and score the trained model (also in results.json):\n"
                 f"{result.training_command}")
    return result
