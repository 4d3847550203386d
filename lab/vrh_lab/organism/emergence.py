"""Emergence tracking during training: when and where retrieval heads appear (organism C, issue 17).

At fixed step intervals the trainer (``TrainConfig.track_every``) calls :func:`track`, which appends one
JSON line to the run's ``emergence.jsonl``:

* the detector's head-score map on a fixed probe set (:func:`score_map`): vrh's ``out/sum/mean`` scorer
  (Eq. 1 with ``Q = Q_out``, ``Phi = sum``, ``Omega = mean``) -- mean over samples of the mean over the rows
  that produce the teacher-forced answer tokens (EOS excluded; ``Q_out`` as
  :func:`vrh.models.queries.query_sets` defines it, the answer positions - 1) of the attention mass on
  the referent's key positions (the patches overlapping the GT box, vrh's K; for text jobs the referent's
  item tokens). Records written before 2026-12-01 read the answer tokens' own rows instead (vrh's
  ``out_own``);
* a small-n causal test: held-out accuracy unmasked, with the map's top-k heads zeroed, and with k random
  heads outside them zeroed (a few seeds), through the evaluation's own masking.

The map is measured, never fed back: nothing here touches the loss, and the probe sets are disjoint
from the training stream (held-out seeds). ``read`` returns the records (the last one per step, so a
resumed run that re-tracked a step is counted once) for plots.

The logs of a recipe's phases (e.g. C1: ``lm_c_text``, ``lm_c``, ``lm_c_long``) are concatenated into the
exported checkpoint (:func:`copy_to_checkpoint`), and :func:`write_run` (``vrh organism emergence SOURCES...
--out DIR``) turns logs into a vrh run folder that ``vrh report`` draws: accuracy under the causal test,
sparsity, the maps and whether the top heads stay the same, over training.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch

from vrh import runs
from vrh.core.heads import random_heads, top_k
from vrh.models.adapters.base import VisionBatch
from vrh.models.queries import query_sets
from vrh.organism import world
from vrh.scoring import SampleInfo, make_scorer
from vrh_lab.organism.batches import TrainBatch, train_batch
from vrh_lab.organism.evaluate import grounding_accuracy
from vrh_lab.organism.text_tasks import text_sample

THRESHOLD = 0.1  # the sparsity threshold of the findings (heads with a score above it)
TASKS = runs.EMERGENCE_TASKS  # the entries a record may hold, in the order track() writes them
causal_task = runs.emergence_causal_task  # the task of a record's causal test
SCORER = "out/sum/mean"  # the map: vrh's design-space default, the scorer `vrh detect` runs


def probe_sets(heldout_seed: int, n: int, task: str, size: int = world.IMAGE_SIZE) -> tuple[list, list]:
    """(score samples, evaluation samples): seeds heldout+1 and heldout, as ``probe_heads`` uses them."""
    if task not in ("image", "text"):
        raise ValueError(f"emergence task must be 'image' or 'text', got {task!r}")
    make = world.grounding_sample if task == "image" else text_sample
    return ([make(heldout_seed + 1, k, size) for k in range(n)], [make(heldout_seed, k, size) for k in range(n)])


def answer_positions(labels: torch.Tensor) -> torch.Tensor:
    """Positions of the teacher-forced answer tokens of one row of a training batch (``labels`` ``[S]``), EOS
    (the row's last label) excluded: what ``VisionBatch.answer_positions`` holds for vrh's batches."""
    return (labels != -100).nonzero().squeeze(1)[:-1]  # (A,)


def sample_infos(b: TrainBatch, tok) -> list[tuple[torch.Tensor, SampleInfo]]:
    """Per sample of a training batch: ``(positions, info)``, the sequence positions whose attention rows a
    scorer reads (ascending) and its :class:`~vrh.scoring.SampleInfo` (K the referent's key positions, the
    query kinds of :func:`vrh.models.queries.query_sets` -- one definition of ``Q_out`` -- indexing
    ``positions``)."""
    B = b.input_ids.shape[0]
    none = torch.zeros(0, dtype=torch.long)
    vis = [b.visual[j].nonzero().reshape(-1) for j in range(B)]  # B x (V_j,)
    vb = VisionBatch(inputs={"input_ids": b.input_ids, "attention_mask": b.attention_mask}, visual_positions=vis,
                     visual_rects=[torch.zeros(len(v), 4) for v in vis], expression_positions=[none] * B,
                     answer_positions=[answer_positions(b.labels[j]) for j in range(B)], image_sizes=[(0, 0)] * B)
    out = []
    for j in range(B):
        qs = query_sets(vb, j, tok)
        out.append((qs.positions, SampleInfo(key_positions=b.box_keys[j], visual_positions=vis[j],
                                             queries=qs.as_query_dict())))
    return out


@torch.no_grad()
def score_map(model, tok, spec, samples: list[dict[str, Any]], batch_size: int = 64,
              scorer: str = SCORER) -> torch.Tensor:
    """[L, H] head scores on ``samples``: vrh's scorer ``scorer`` (:func:`vrh.scoring.make_scorer`, default
    ``out/sum/mean``) fed each sample's attention rows at the positions :func:`sample_infos` names, as
    ``vrh detect`` feeds a captured sample. One forward per batch."""
    model.eval()
    sc = make_scorer(scorer)
    for i in range(0, len(samples), batch_size):
        b = train_batch(samples[i: i + batch_size], tok, spec)
        out = model(input_ids=b.input_ids, attention_mask=b.attention_mask, pixel_values=b.pixel_values,
                    output_attentions=True)
        att = torch.stack(out.attentions, 1)  # L x [B, H, S, S] -> [B, L, H, S, S]
        for j, (positions, info) in enumerate(sample_infos(b, tok)):
            sc.update(att[j][:, :, positions], info)  # (L, H, S, S) -> (L, H, Q, S)
    if sc.n_empty_keys or sc.n_empty_queries:
        raise ValueError(f"{sc.n_empty_keys} probe samples without a key position and {sc.n_empty_queries} "
                         "without an answer token: the probe set is broken")
    return sc.result()


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
    """Measure organism A of ``org`` (a :class:`vrh_lab.organism.train.Organisms`) now; append and return
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
        top = ", ".join(f"{int(i) // H}:{int(i) % H}={float(sc.flatten()[i]):.2f}" for i in order)
        msg = f"{task}: {top}; >{THRESHOLD}: {e['above_threshold']}"
        if "acc_top" in e:
            rnd = sum(e["acc_random"]) / max(1, len(e["acc_random"]))
            msg += f"; acc {e['acc']:.3f} top{rec['k']} {e['acc_top']:.3f} random {rnd:.3f}"
        parts.append(msg)
    return " | ".join(parts)


def read(path: str | Path) -> list[dict[str, Any]]:
    """The records of ``emergence.jsonl`` (or of the one in folder ``path``) in step order, the last one per
    (phase, step); a log of several phases (an exported checkpoint's) keeps its phases in the order they
    appear, steps ascending within each (:func:`vrh.runs.read_emergence`)."""
    return runs.read_emergence(path)


def collect(sources: list[str | Path]) -> list[dict[str, Any]]:
    """The records of several logs (files, or folders holding one) concatenated in the order given, each
    log in its own order; a record without a phase gets its log's folder name (as :func:`track` names it).
    Raises ValueError when two sources hold the same (phase, step): a log given twice."""
    out: list[dict[str, Any]] = []
    seen: dict[tuple[str, Any], str] = {}
    for src in sources:
        folder = Path(src) if Path(src).is_dir() else Path(src).parent
        for rec in read(src):
            rec = {**rec, "phase": rec.get("phase") or folder.name}
            key = (rec["phase"], rec["step"])
            if key in seen:
                raise ValueError(f"phase {key[0]!r} step {key[1]} is in both {seen[key]} and {src}: "
                                 "give each phase's log once")
            seen[key] = str(src)
            out.append(rec)
    return out


def copy_to_checkpoint(phase_dirs: list[str | Path], checkpoint: str | Path) -> Path | None:
    """Write the phases' logs (in the order given) into an exported checkpoint folder as one
    ``emergence.jsonl``, so the training history travels with the weights; returns its path, or None when
    no phase tracked emergence (a log left there by an earlier export is then removed: it belongs to other
    weights)."""
    logs = [Path(d) / runs.EMERGENCE for d in phase_dirs if (Path(d) / runs.EMERGENCE).is_file()]
    records = collect(logs)
    if not records:
        (Path(checkpoint) / runs.EMERGENCE).unlink(missing_ok=True)
        return None
    return runs.write_emergence(checkpoint, records)


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def summarize(records: list[dict[str, Any]], threshold: float = THRESHOLD) -> dict[str, Any]:
    """The results of an emergence run: per phase its step range and its last record's causal test (task,
    top-k heads, accuracy unmasked / top-k zeroed / mean of the random-k seeds, heads above ``threshold``;
    plus the text map's when the phase also tracked text), and the last phase's figures as ``final``: the
    keys of :class:`vrh.runs.EmergenceResults`."""
    phases: dict[str, list[dict[str, Any]]] = {}
    for rec in records:
        phases.setdefault(str(rec.get("phase", "")), []).append(rec)
    out_phases = []
    for phase, recs in phases.items():
        last = recs[-1]
        task = causal_task(last)
        e = last.get(task) or {}
        final: dict[str, Any] = {"step": last["step"], "task": task, "top_k_heads": e.get("top"),
                                 "acc": e.get("acc"), "acc_top": e.get("acc_top"),
                                 "acc_random_mean": _mean(e.get("acc_random") or []),
                                 "above_threshold": e.get("above_threshold")}
        for other in TASKS:
            if other != task and isinstance(last.get(other), dict):
                final[other] = {"top_k_heads": last[other].get("top"),
                                "above_threshold": last[other].get("above_threshold")}
        out_phases.append({"phase": phase, "first_step": recs[0]["step"], "last_step": last["step"],
                           "n_records": len(recs), "tasks": [t for t in TASKS if any(t in r for r in recs)],
                           "final": final})
    first = records[0] if records else {}
    return runs.EmergenceResults(
        n_records=len(records), k=first.get("k"), n=first.get("n"), threshold=threshold, phases=out_phases,
        final={"phase": out_phases[-1]["phase"], **out_phases[-1]["final"]} if out_phases else None).to_json()


def write_run(sources: list[str | Path], out: str | Path, overwrite: bool = False) -> dict[str, Any]:
    """A vrh run folder (``command: emergence``) from emergence logs given in phase order (files, phase
    folders or an exported checkpoint folder holding one): ``config.json`` (the sources), the concatenated
    log as ``emergence.jsonl`` and ``results.json`` (:func:`summarize`, written last). Returns the
    results. ``vrh report OUT`` draws it."""
    sources = [Path(s).resolve() for s in sources]
    if not sources:
        raise ValueError("vrh organism emergence needs at least one emergence log")
    out_r = Path(out).resolve()
    for src in sources:  # --overwrite clears OUT: never a folder whose log is being read
        folder = src if src.is_dir() else src.parent
        if out_r == folder or out_r in folder.parents:
            raise ValueError(f"--out {out} holds the source {src}; choose another folder")
    records = collect(sources)
    if not records:
        raise ValueError("no emergence records in " + ", ".join(map(str, sources)))
    with runs.RunFolder(out, overwrite=overwrite) as run:
        run.write_config({"command": "emergence", "sources": [str(s) for s in sources],
                          "phases": list(dict.fromkeys(r["phase"] for r in records)), "threshold": THRESHOLD})
        runs.write_emergence(run, records)
        result = summarize(records)
        run.write_results(result)
    return result


def main(argv: list[str] | None = None) -> int:
    """``python -m vrh_lab.organism.emergence RUN/emergence.jsonl [...]``: one summary line per record."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("paths", nargs="+", help="emergence.jsonl files (e.g. lab/organism_runs/vC/lm_c/emergence.jsonl)")
    for p in ap.parse_args(argv).paths:
        for rec in read(p):
            print(f"{rec.get('phase', '')} {summary(rec)}")
    return 0


def run_main(argv: list[str] | None = None) -> int:
    """``vrh organism emergence SOURCES... --out DIR [--overwrite]``."""
    import argparse

    ap = argparse.ArgumentParser(
        prog="vrh organism emergence",
        description="Make a run folder of organism training's emergence logs (for vrh report): the logs of "
                    "a recipe's phases, given in phase order, are concatenated; results.json summarises each "
                    "phase's last record.",
        epilog="example: vrh organism emergence lab/organism_runs/vC/lm_c_text lab/organism_runs/vC/lm_c "
               "lab/organism_runs/vC/lm_c_long --out runs/emergence_c1 && vrh report runs/emergence_c1 --out "
               "runs/report_c1")
    ap.add_argument("sources", nargs="+", help="emergence.jsonl files, phase folders holding one, or an exported "
                                               "organism checkpoint folder holding its recipe's log; in phase order")
    ap.add_argument("--out", required=True, help="run folder to write")
    ap.add_argument("--overwrite", action="store_true", help="replace a previous run folder at --out")
    a = ap.parse_args(argv)
    res = write_run(a.sources, a.out, overwrite=a.overwrite)
    for ph in res["phases"]:
        print(f"{ph['phase']}: steps {ph['first_step']}-{ph['last_step']} ({ph['n_records']} records)")
    print(f"wrote {a.out} ({res['n_records']} records); draw it with: vrh report {a.out} --out REPORT_DIR")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
