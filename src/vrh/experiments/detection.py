"""Detection (paper Sec. 3): answer each grounding sample and feed the attention rows of the answering
queries (and of the expression tokens) to every requested scorer. By default (``one_pass``, model answers)
the rows come from the answering ``generate()`` itself (:mod:`vrh.core.generation_capture`: the prefill gives
the expression and last-prompt rows, each decode step the row producing the next answer token), so a
sample costs one generate; the scored answer tokens are the generated ids. ``one_pass=False`` (CLI
``--two-pass``, the paper's protocol) generates, then re-runs prompt + answer text teacher-forced with one
capture pass; ``answer="gt"`` always teacher-forces the ground-truth box string.

One main capture forward per batch serves every scorer. A scorer may declare extra capture passes it needs
(``extra_passes``, by name, see :data:`EXTRA_PASSES`; QRHead's calibration asks for ``"null_query"``: the
same images and answers with the expression replaced by :data:`NULL_QUERY`); each requested pass runs once
per batch and only when some scorer asks for it, always teacher-forced (with ``one_pass`` too, on the answer
text). The head scores count the forwards over the prompt (``capture_forwards`` main -- with ``one_pass``
the generate's prefill --, ``extra_capture_forwards`` per pass) next to the number of batches, and say
where the main rows came from (``capture``: ``"teacher_forced"`` or ``"generate"``), so the one-pass claim
is checked, not assumed.

:func:`detect_heads` is the computation (returns a :class:`Detection`); it works batch by batch and
combines the batches' states (records, scorer states, overlays, counts) in sample order at the end, which
makes it resumable (each finished batch kept on disk, ``detect_state/``), data-parallel (each rank takes
every world-size-th batch, :mod:`vrh.infra.distributed`) and tolerant of a batch that runs out of memory (retried
as halves), with the same result as one uninterrupted process. :func:`run_detection` writes a
detection run folder (``config.json``, ``samples.jsonl``, ``head_scores.json``, ``sample_scores.npz``,
``overlays.npz``, names and schemas in :mod:`vrh.runs`); ``vrh detect``, ``vrh compare`` and ``vrh demo``
all call it.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vrh import runs
from vrh.core.capture import capture_attention_rows
from vrh.infra.console import console, progress, report_skipped
from vrh.data import Sample, split_detect_eval
from vrh.infra.distributed import my_batches, world
from vrh.experiments.evaluation import GROUNDING_HINT, load_task_samples
from vrh.infra.oom import halving_on_oom
from vrh.core.generation_capture import generate_with_rows
from vrh.core.heads import rank_heads
from vrh.models.loading import LoadedModel
from vrh.models.generation import fit_context, generate_answers, query_sets
from vrh.infra.options import DetectOptions, config_record
from vrh.core.regions import box_token_mask
from vrh.scoring import SampleInfo, make_scorer
from vrh.scoring.functions import lcs_ratio
from vrh.tasks import Task, get_task

NULL_QUERY = "N/A"  # QRHead's content-free query, in place of the referring expression


def grid_shape(rects: torch.Tensor) -> tuple[int, int]:
    """(rows, cols) of a row-major visual token grid, read off the adapter's rectangles."""
    rows = len(torch.unique(rects[:, 1]))
    cols = len(torch.unique(rects[:, 0]))
    if rows * cols != len(rects):
        raise ValueError(f"visual tokens do not form a grid: {len(rects)} tokens, {rows} rows x {cols} cols")
    return rows, cols


@dataclass
class Detection:
    """What :func:`detect_heads` measured."""

    head_scores: runs.HeadScores
    per_sample: dict[str, np.ndarray]  # scorer -> (N, L, H)
    overlays: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # id -> (L, H, V), (V, 4)
    records: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class _Capture:
    batch: Any
    queries: list
    rows: Any  # RowCapture


def _capture(lm: LoadedModel, images, prompts, answers, expressions) -> _Capture:
    """One teacher-forced capture forward over (image, prompt + answer)."""
    batch = lm.adapter.build_batch(lm.processor, images, prompts, answers=answers, expressions=expressions)
    qs = [query_sets(batch, b, lm.processor) for b in range(len(images))]
    inputs = {k: (v.to(lm.device) if isinstance(v, torch.Tensor) else v) for k, v in batch.inputs.items()}
    with torch.no_grad(), capture_attention_rows(lm.model, lm.adapter, [q.positions for q in qs]) as cap:
        lm.model(**inputs)
    return _Capture(batch, qs, cap)


def _null_query_pass(lm: LoadedModel, samples: Sequence[Sample], images, answers) -> _Capture:
    """Same images and answers, the referring expression replaced by :data:`NULL_QUERY`."""
    return _capture(lm, images, [lm.adapter.grounding_prompt(NULL_QUERY) for _ in samples], answers,
                    [NULL_QUERY] * len(samples))


# name -> pass builder; a scorer's ``extra_passes`` name entries of this table
EXTRA_PASSES: dict[str, Callable[..., _Capture]] = {"null_query": _null_query_pass}


def detect_heads(lm: LoadedModel, samples: Sequence[Sample], *, scorers: Sequence[str] = ("out/sum/mean",),
                 answer: str = "model", min_overlap: float = 0.0, seed: int = 0, n_overlays: int = 8,
                 batch_size: int = 16, max_new_tokens: int = 64, task: Task | None = None,
                 on_record: Callable[[dict[str, Any]], None] | None = None,
                 state_dir: str | Path | None = None, one_pass: bool = True) -> Detection:
    """Score every head on grounding ``samples`` with every scorer (specs, see :mod:`vrh.scoring`).

    Batch ``b`` is ``samples[b * batch_size:(b + 1) * batch_size]``; its state is combined with the others
    in sample order, so where and when a batch was computed does not change the result:

    * ``state_dir``: each finished batch is kept there (:func:`vrh.runs.write_batch_state`) and the batches
      already there are loaded, not computed (a rerun after a kill -9 redoes only the batches in flight);
    * under torchrun / accelerate each rank computes every world-size-th batch and the ranks exchange their
      states, so every rank returns the whole detection;
    * a batch that runs out of memory is retried as halves (:func:`vrh.infra.oom.halving_on_oom`).

    Overlays are kept for the scored samples among the first ``n_overlays`` samples; the ``rand1`` query
    seed of a sample is its position in ``samples``.

    ``one_pass`` (default; ``answer="model"`` only, ignored for ``"gt"``, which has nothing to generate):
    capture the main rows during the answering ``generate()`` (see the module docstring); ``False``: a
    teacher-forced forward over prompt + answer text after generating (two passes). The one-pass rows are
    those of the generated ids; they equal the two-pass rows wherever the answer text re-tokenizes to the
    generated ids (tested for every adapter family, ``tests/core/test_generation_capture.py``).
    """
    if answer not in ("model", "gt"):
        raise ValueError(f"answer must be 'model' or 'gt', got {answer!r}")
    if not scorers:
        raise ValueError("at least one scorer is needed")
    t0 = time.time()
    task = task or get_task("grounding")
    specs = list(scorers)
    made = _make_scorers(specs, seed)
    passes = sorted({p for sc in made.values() for p in sc.extra_passes})
    unknown = [p for p in passes if p not in EXTRA_PASSES]
    if unknown:
        raise ValueError(f"scorers ask for capture passes {unknown} that detection does not know; it knows "
                         f"{sorted(EXTRA_PASSES)}")
    samples, too_long = fit_context(lm, task, samples, max_new_tokens)  # skipped, listed in head_scores.json
    report_skipped(too_long, "detect")
    if too_long and not samples:
        raise ValueError(f"every sample's prompt is too long for the model: {too_long[0]['reason']}")
    dp = world()
    n_batches = -(-len(samples) // batch_size) if batch_size >= 1 else 0
    done = runs.read_batch_states(state_dir) if state_dir is not None else {}
    for b, st in done.items():
        want = [s.id for s in samples[b * batch_size:(b + 1) * batch_size]]
        if b >= n_batches or list(st["ids"]) != want or set(st["scorers"]) != set(made):
            raise ValueError(f"{state_dir}: the kept state of batch {b} is of other samples or scorers than this "
                             "run's; rerun with the settings of the interrupted run, or --overwrite")
    dp.barrier()  # every rank has read the kept batches before any rank adds to them
    mine = [(b, start, stop) for b, start, stop in my_batches(len(samples), batch_size, dp) if b not in done]
    indexed = list(enumerate(samples))  # (position, sample): the position seeds rand1 and picks overlays

    def one(part: Sequence[tuple[int, Sample]]) -> dict[str, Any]:
        return _detect_batch(lm, task, part, specs=specs, seed=seed, passes=passes, answer=answer,
                             min_overlap=min_overlap, n_overlays=n_overlays, max_new_tokens=max_new_tokens,
                             one_pass=one_pass)

    new: dict[int, dict[str, Any]] = {}
    with progress(sum(stop - start for _, start, stop in mine), "detect") as advance:
        for b, start, stop in mine:
            state = _join_states(halving_on_oom(one, indexed[start:stop], "detect"))
            if state_dir is not None:
                runs.write_batch_state(state_dir, b, state)  # before the records: the state is the truth
            new[b] = state
            for r in state["records"]:
                if on_record is not None:
                    on_record(r)
            advance(stop - start)
    for theirs in dp.all_gather(new) if dp.active else ():
        new.update(theirs)
    states = {**done, **new}
    capture = "generate" if one_pass and answer == "model" else "teacher_forced"
    found = _combine(lm, specs, seed, passes, [states[b] for b in range(n_batches)], time.time() - t0, capture)
    found.head_scores.skipped += too_long
    return found


def _make_scorers(specs: Sequence[str], seed: int) -> dict[str, Any]:
    made = {}
    for spec in specs:
        sc = make_scorer(spec, seed=seed)
        if sc.name in made:
            raise ValueError(f"scorer {spec!r} is listed twice (as {sc.name!r})")
        for method in ("state", "extend"):
            if not callable(getattr(sc, method, None)):
                raise TypeError(f"scorer {sc.name!r} has no {method}(); derive it from "
                                "vrh.scoring.base.AccumulatingScorer so detection can combine batches")
        made[sc.name] = sc
    return made


def _detect_batch(lm: LoadedModel, task: Task, part: Sequence[tuple[int, Sample]], *, specs, seed, passes, answer,
                  min_overlap, n_overlays, max_new_tokens, one_pass=False) -> dict[str, Any]:
    """One batch, from answers to fresh scorers' states: everything :func:`_combine` needs of it."""
    index = [i for i, _ in part]
    chunk = [s for _, s in part]
    images = [s.load_image() for s in chunk]
    prompts = [task.prompt(lm.adapter, s) for s in chunk]
    generated = None  # one pass: the answers' rows, captured while generating them
    if answer == "model" and one_pass:
        generated = generate_with_rows(lm, images, prompts, [s.expression for s in chunk], max_new_tokens)
        answers, metas = generated.texts, generated.meta
    elif answer == "model":
        answers, metas = generate_answers(lm, images, prompts, max_new_tokens)
    else:
        metas = lm.adapter.build_batch(lm.processor, images, prompts).meta
        answers = [lm.adapter.format_box(s.box, m, s.image_size) for s, m in zip(chunk, metas)]
    recs = [task.judge(lm.adapter, s, a, m) for s, a, m in zip(chunk, answers, metas)]
    # an answer of only special or blank tokens has text "" (two pass: nothing to teacher-force); one pass
    # also needs a generated token before the EOS
    keep = [i for i, a in enumerate(answers) if a.strip() and (generated is None or generated.queries[i])]
    made = _make_scorers(specs, seed)
    forwards = {"main": 0, "batches": 0, **{p: 0 for p in passes}}
    overlays: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    if keep:
        main = None
        if generated is not None:
            kept = generated.select(keep)
            main = _Capture(kept.batch, kept.queries, kept)
        _score_batch(lm, [chunk[i] for i in keep], [images[i] for i in keep], [prompts[i] for i in keep],
                     [answers[i] for i in keep], [recs[i] for i in keep], [metas[i] for i in keep], made, passes,
                     min_overlap, overlays, n_overlays, [index[i] for i in keep], forwards, main=main)
    return {"ids": [s.id for s in chunk], "records": recs,
            "skipped": [{"id": chunk[i].id, "reason": "empty answer"} for i in range(len(chunk)) if i not in keep],
            "forwards": forwards, "scorers": {name: sc.state() for name, sc in made.items()},
            "overlays": {k: tuple(torch.from_numpy(np.ascontiguousarray(v)) for v in pair)
                         for k, pair in overlays.items()}}


def _join_states(pieces: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One batch's state from the states of its pieces (a batch split by an out-of-memory retry), in order."""
    if len(pieces) == 1:
        return pieces[0]
    first, out = pieces[0], {"ids": [], "records": [], "skipped": [], "forwards": {}, "overlays": {}}
    out["scorers"] = {name: {"lists": {k: [] for k in st["lists"]}, "counters": {k: 0 for k in st["counters"]}}
                      for name, st in first["scorers"].items()}
    for piece in pieces:
        for key in ("ids", "records", "skipped"):
            out[key] += piece[key]
        out["overlays"].update(piece["overlays"])
        for k, v in piece["forwards"].items():
            out["forwards"][k] = out["forwards"].get(k, 0) + v
        for name, st in piece["scorers"].items():
            for k, tail in st["lists"].items():
                out["scorers"][name]["lists"][k] += list(tail)
            for k, v in st["counters"].items():
                out["scorers"][name]["counters"][k] += v
    return out


def _combine(lm: LoadedModel, specs: Sequence[str], seed: int, passes: Sequence[str],
             states: Sequence[dict[str, Any]], elapsed: float, capture: str = "teacher_forced") -> Detection:
    """The detection of all batches: their states folded in sample order into fresh scorers."""
    made = _make_scorers(specs, seed)
    overlays: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    skipped: list[dict[str, str]] = []
    records: list[dict[str, Any]] = []
    forwards = {"main": 0, "batches": 0, **{p: 0 for p in passes}}
    for st in states:
        for name, sc in made.items():
            sc.extend(st["scorers"][name])
        overlays.update({k: (a.numpy(), r.numpy()) for k, (a, r) in st["overlays"].items()})
        skipped += st["skipped"]
        records += st["records"]
        for k, v in st["forwards"].items():
            forwards[k] = forwards.get(k, 0) + v
    return _finish(lm, made, overlays, skipped, records, forwards, elapsed, capture)


def _answer_facts(lm: LoadedModel, batch, b: int, sample: Sample, meta: dict[str, Any]) -> dict[str, Any]:
    """What scorers may need about sample ``b``'s prompt and answer beyond its rows: every prompt key
    position (text and image, no padding, no answer), which answer tokens occur in the tokenized ground-truth
    answer (the GT box as the family writes it), and the longest common run of the two token sequences over
    the GT length (OCR heads' correctness weight)."""
    ans = batch.answer_positions[b]  # (A,)
    mask = batch.inputs["attention_mask"][b]  # (S,) 1 = real token (left padding is 0)
    prompt = torch.nonzero(mask[: int(ans[0])]).reshape(-1)  # (P,) every real token before the answer
    tok = getattr(lm.processor, "tokenizer", lm.processor)
    answer_ids = batch.inputs["input_ids"][b][ans].tolist()
    gold_ids = tok(lm.adapter.format_box(sample.box, meta, sample.read_image_size()),
                   add_special_tokens=False)["input_ids"]
    gold = set(gold_ids)
    return {"prompt_positions": prompt, "answer_in_gold": [i for i, t in enumerate(answer_ids) if t in gold],
            "answer_lcs": lcs_ratio(gold_ids, answer_ids)}


def _score_batch(lm, chunk, images, prompts, answers, records, metas, scorers, passes, min_overlap, overlays,
                 n_overlays, index, forwards, main: _Capture | None = None) -> None:
    """Score the samples of ``chunk`` (non-empty answers); ``main``: their rows already captured (one pass),
    else one teacher-forced capture forward over prompt + answer text here."""
    if main is None:
        main = _capture(lm, images, prompts, answers, [s.expression for s in chunk])
    extra = {p: EXTRA_PASSES[p](lm, chunk, images, answers) for p in passes}
    forwards["main"] += main.rows.num_forwards
    forwards["batches"] += 1
    for p, cap in extra.items():
        forwards[p] += cap.rows.num_forwards
    for b, (s, rec) in enumerate(zip(chunk, records)):
        rows = main.rows.rows(b)  # (L, H, Q, S)
        vis = main.batch.visual_positions[b]  # (V,)
        rects = main.batch.visual_rects[b]  # (V, 4)
        cells = getattr(main.batch, "cell_tokens", None)  # only cell tokens may enter K (adapters.base.VisionBatch)
        cell = cells[b] if cells else torch.ones(len(vis), dtype=torch.bool)  # (V,)
        in_box = box_token_mask(rects, s.box, min_overlap) & cell  # (V,)
        q = main.queries[b]
        grid = grid_shape(rects) if bool(cell.all()) else None  # non-cell tokens: no single row-major grid
        info = SampleInfo(key_positions=vis[in_box], visual_positions=vis, grid=grid,
                          queries={"out": q.out, "in": q.inp, "coord": q.coord, "last_prompt": q.last_prompt,
                                   "out_own": q.own},
                          correct=rec.get("outcome") == "correct", iou=rec.get("iou"), index=index[b],
                          **_answer_facts(lm, main.batch, b, s, metas[b]))
        extra_rows = {}
        for p, cap in extra.items():
            if not torch.equal(cap.batch.visual_rects[b], rects):  # same image -> same visual tokens expected
                raise RuntimeError(f"{s.id}: the {p} pass tokenized the image differently")
            if p == "null_query":
                info.queries.update(null_in=cap.queries[b].inp, null_out=cap.queries[b].out)
                info.null_key_positions = cap.batch.visual_positions[b][in_box]  # (|K|,) in that pass's sequence
            extra_rows[p] = cap.rows.rows(b)  # (L, H, Q', S')
        for scorer in scorers.values():
            scorer.update(rows, info, extra={p: extra_rows[p] for p in scorer.extra_passes})
        rec.update(n_visual_tokens=int(len(vis)), n_key_tokens=int(in_box.sum()), scored_answer=answers[b])
        if index[b] < n_overlays:  # one of the first n_overlays samples (two arrays: maps, rectangles)
            vis_rows = rows[:, :, q.out][..., vis]  # (L, H, Q_out, V)
            overlays[s.id] = (vis_rows.mean(dim=2).numpy(), rects.numpy())  # (L, H, V), (V, 4)


def _finish(lm, scorers, overlays, skipped, records, forwards, elapsed, capture="teacher_forced") -> Detection:
    variants, per_sample, warnings = {}, {}, []
    for name, scorer in scorers.items():
        scores = scorer.result()  # (L, H)
        variants[name] = {"scores": scores.tolist(), "ranking": [list(h) for h in rank_heads(scores)],
                          "n_positive_heads": int((scores > 0).sum()),
                          "options": dict(getattr(scorer, "options", {}))}  # the variant that ran, defaults included
        per_sample[name] = scorer.per_sample().numpy()  # (N, L, H)
        if len(torch.unique(scores)) == 1:
            # e.g. expression-token queries on a model that reads the request before the image: causal
            # attention can never reach the visual tokens, and the ranking is the (layer, head) tie order
            warnings.append(f"scorer {name!r} gives every head the same score ({float(scores.flatten()[0]):.3g}); "
                            "its ranking is only the (layer, head) tie order")
    for w in warnings:
        console.print(f"[yellow]warning:[/yellow] {w}")
    primary = next(iter(scorers))
    extra = {"capture_forwards": forwards["main"],  # main capture passes: one per batch, shared by every scorer
             "extra_capture_forwards": {p: n for p, n in forwards.items() if p not in ("main", "batches")},
             "capture_batches": forwards["batches"], "capture": capture, "elapsed_seconds": elapsed}
    hs = runs.HeadScores(scorer=primary, num_layers=lm.num_layers, num_heads=lm.num_heads,
                         n_scored=int(per_sample[primary].shape[0]), variants=variants, skipped=skipped,
                         warnings=warnings, extra=extra)
    return Detection(hs, per_sample, overlays, records)


def write_detection(run: runs.RunFolder, det: Detection) -> None:
    runs.write_head_scores(run, det.head_scores)
    runs.write_sample_scores(run, det.per_sample)
    runs.write_overlays(run, det.overlays)


def check_scorers(specs: Sequence[str], seed: int = 0) -> list[str]:
    """Canonical names of the scorer specs; an unknown method or option fails here, before any model loads."""
    if not specs:
        raise ValueError("--scorers: at least one scorer is needed")
    return [make_scorer(spec, seed=seed).name for spec in specs]


def detection_split(data: str | Path, opts: DetectOptions) -> tuple[list[Sample], list[Sample], dict[str, Any]]:
    """The detection samples, the held-out rest and the dataset's identity: a seeded draw of ``opts.n``
    (:func:`vrh.data.split_detect_eval`), or the ids listed in ``opts.detect_ids`` (a file, one id per line),
    which then replace ``--n``; ``--n-eval`` caps the held-out rest either way."""
    samples, info = load_task_samples(data, "grounding", hint=GROUNDING_HINT)
    if opts.detect_ids is not None:
        det_ids = read_id_list(opts.detect_ids, [s.id for s in samples], data)
        rest = [s for s in samples if s.id not in det_ids]
        if opts.n_eval is not None and opts.n_eval > len(rest):
            raise ValueError(f"--n-eval {opts.n_eval} asks for more samples than the {len(rest)} left after "
                             f"--detect-ids {opts.detect_ids}; lower --n-eval")
        _, held_out = split_detect_eval(rest, 0, opts.n_eval, opts.seed)
        return [s for s in samples if s.id in det_ids], held_out, info
    if opts.n < 1:
        raise ValueError(f"--n must be >= 1, got {opts.n}")
    if opts.n + (opts.n_eval or 0) > len(samples):
        raise ValueError(f"--n {opts.n}" + (f" + --n-eval {opts.n_eval}" if opts.n_eval else "")
                         + f" asks for more samples than {data} has: {len(samples)} grounding samples; lower "
                         + ("--n or --n-eval" if opts.n_eval else "--n"))
    det, held_out = split_detect_eval(samples, opts.n, opts.n_eval, opts.seed)
    return det, held_out, info


def read_id_list(path: str | Path, known: Sequence[str], data: str | Path) -> set[str]:
    """The sample ids listed in ``path`` (one per line; blank lines and ``#`` comments ignored); an empty
    list, a duplicate or an id that is not a grounding sample of ``data`` is an error naming it."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"--detect-ids: no such file {path}")
    ids = [line.split("#", 1)[0].strip() for line in path.read_text(encoding="utf-8").splitlines()]
    ids = [i for i in ids if i]
    if not ids:
        raise ValueError(f"--detect-ids {path} lists no sample id")
    dup = sorted(i for i, c in Counter(ids).items() if c > 1)
    if dup:
        raise ValueError(f"--detect-ids {path} lists id(s) twice: {dup[:5]}")
    known = set(known)
    unknown = [i for i in ids if i not in known]
    if unknown:
        raise ValueError(f"--detect-ids {path}: {len(unknown)} id(s) are not grounding samples of {data}, e.g. "
                         f"{unknown[:5]}")
    return set(ids)


def run_detection(lm: LoadedModel, data: str | Path, out: str | Path, opts: DetectOptions, *,
                  batch_size: int = 16, max_new_tokens: int = 64, overwrite: bool = False, resume: bool = False,
                  command: str = "detect", extra_config: dict[str, Any] | None = None) -> runs.HeadScores:
    """Detect on the ``opts.n`` detection samples of ``data`` and write the run folder ``out``.

    With ``resume``, a finished detection run with the same settings is reused as it is, and an unfinished
    one continues from the batches it kept in ``detect_state/`` (removed once the run is finished); the
    result equals an uninterrupted run's, timing fields aside."""
    det, held_out, data_info = detection_split(data, opts)
    config = {"command": command, "config": {**config_record(opts), "data": str(data), "batch_size": batch_size,
                                             "max_new_tokens": max_new_tokens, **(extra_config or {})},
              "model": lm.describe(),
              "data": {**data_info, "n_detect": len(det), "n_eval": len(held_out)},
              "detect_ids": [s.id for s in det], "eval_ids": [s.id for s in held_out]}
    if resume and runs.is_finished(out) and (Path(out) / runs.HEAD_SCORES).exists():
        run = runs.RunFolder(out, resume=True)
        run.write_config(config)  # raises, naming the setting, if it differs
        runs.clear_batch_states(run)  # left by a kill between results.json and the clean-up
        console.print(f"detect: reusing the finished detection in {out}")
        return runs.read_head_scores(out)
    run = runs.RunFolder(out, overwrite=overwrite, resume=resume)
    run.write_config(config)
    with run:
        found = detect_heads(lm, det, scorers=opts.scorers, answer=opts.answer, min_overlap=opts.min_overlap,
                             seed=opts.seed, n_overlays=opts.n_overlays, batch_size=batch_size,
                             max_new_tokens=max_new_tokens, on_record=run.append_sample, state_dir=run.path,
                             one_pass=opts.one_pass)
        run.replace_samples(found.records)  # sample order, with resumed batches and every rank's
        write_detection(run, found)
        hs = found.head_scores
        run.write_results({"n_scored": hs.n_scored, "n_skipped": len(hs.skipped), "scorer": hs.scorer,
                           "top_heads": hs.variants[hs.scorer]["ranking"][:20],
                           "elapsed_seconds": hs.extra["elapsed_seconds"]})
        runs.clear_batch_states(run)
    if world().is_main:  # once per run, not once per process
        console.print(f"detect: {hs.n_scored} samples scored, {len(hs.skipped)} skipped -> {out}")
    return hs
