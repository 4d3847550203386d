"""Emergence tracking during training: when and where retrieval heads appear (organism C, issue 17).

At fixed step intervals the trainer (``TrainConfig.track_every``) calls :func:`track`, which appends one
JSON line to the run's ``emergence.jsonl``:

* the detector's head-score map on a fixed probe set (:func:`score_map`): Eq. 1 with ``Phi = sum`` and
  ``Omega = mean``, computed by vrh's own scoring functions -- mean over samples of the mean over the
  teacher-forced answer tokens, EOS excluded, of the attention mass on the referent's key positions (the
  patches overlapping the GT box, vrh's K; for text jobs the referent's item tokens). The query rows are
  the answer tokens' own positions (vrh's ``out_own`` query kind), not the rows that produce them (``out``,
  one position earlier, which ``vrh detect`` scores by default);
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
from vrh.organism import world
from vrh.scoring.functions import omega_mean, per_sample_score
from vrh_lab.organism.batches import train_batch
from vrh_lab.organism.evaluate import grounding_accuracy
from vrh_lab.organism.text_tasks import text_sample

THRESHOLD = 0.1  # the sparsity threshold of the findings (heads with a score above it)
TASKS = runs.EMERGENCE_TASKS  # the entries a record may hold, in the order track() writes them
causal_task = runs.emergence_causal_task  # the task of a record's causal test


def probe_sets(heldout_seed: int, n: int, task: str, size: int = world.IMAGE_SIZE) -> tuple[list, list]:
    """(score samples, evaluation samples): seeds heldout+1 and heldout, as ``probe_heads`` uses them."""
    if task not in ("image", "text"):
        raise ValueError(f"emergence task must be 'image' or 'text', got {task!r}")
    make = world.grounding_sample if task == "image" else text_sample
    return ([make(heldout_seed + 1, k, size) for k in range(n)], [make(heldout_seed, k, size) for k in range(n)])


def answer_queries(labels: torch.Tensor) -> torch.Tensor:
    """Query positions of one row of a training batch (``labels`` ``[S]``): the teacher-forced answer tokens'
    own positions (vrh's ``out_own``), EOS (the row's last label) excluded."""
    return (labels != -100).nonzero().squeeze(1)[:-1]  # (A,)


@torch.no_grad()
def score_map(model, tok, spec, samples: list[dict[str, Any]], batch_size: int = 64) -> torch.Tensor:
    """[L, H] head scores on ``samples``: Eq. 1 through vrh's own pure functions
    (:func:`vrh.scoring.functions.per_sample_score` with ``Phi = sum``, then
    :func:`~vrh.scoring.functions.omega_mean`), K the referent's key positions (``TrainBatch.box_keys``),
    Q :func:`answer_queries`. One forward per batch; each sample's ``[L, H, S, S]`` rows are scored as vrh
    scores a captured sample."""
    model.eval()
    per_sample = []
    for i in range(0, len(samples), batch_size):
        b = train_batch(samples[i: i + batch_size], tok, spec)
        out = model(input_ids=b.input_ids, attention_mask=b.attention_mask, pixel_values=b.pixel_values,
                    output_attentions=True)
        att = torch.stack(out.attentions, 1)  # [B, L, H, S, S]
        per_sample += [per_sample_score(att[j], b.box_keys[j], answer_queries(b.labels[j]), "sum")
                       for j in range(att.shape[0])]  # B x [L, H]
    return omega_mean(torch.stack(per_sample))  # [N, L, H] -> [L, H]


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
        top = ", ".join(f"L{int(i) // H}H{int(i) % H}={float(sc.flatten()[i]):.2f}" for i in order)
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
    ap.add_argument("paths", nargs="+", help="emergence.jsonl files (e.g. organism_runs/vC/lm_c/emergence.jsonl)")
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
        epilog="example: vrh organism emergence organism_runs/vC/lm_c_text organism_runs/vC/lm_c "
               "organism_runs/vC/lm_c_long --out runs/emergence_c1 && vrh report runs/emergence_c1 --out "
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
