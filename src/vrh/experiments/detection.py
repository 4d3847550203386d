"""Detection (paper Sec. 3): answer each grounding sample and feed the attention rows of the answering
queries (and of the expression tokens) to every requested scorer. By default (``one_pass``, model answers)
the rows come from the answering ``generate()`` itself (:mod:`vrh.core.generation_capture`: the prefill gives
the expression and last-prompt rows, each decode step the row producing the next answer token), so a
sample costs one generate; the scored answer tokens are the generated ids. ``one_pass=False`` (CLI
``--two-pass``, the paper's protocol) generates, then re-runs prompt + answer text teacher-forced with one
capture pass; ``answer="gt"`` always teacher-forces the ground-truth box string.

One main capture forward per batch serves every scorer. A scorer may declare extra capture passes it needs
(``extra_passes``, by name, see :data:`~vrh.experiments.detection_batch.EXTRA_PASSES`; QRHead's calibration asks
for ``"null_query"``: the same images and answers with the expression replaced by
:data:`~vrh.experiments.detection_batch.NULL_QUERY`); each requested pass runs once
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
``overlays.npz``, names and schemas in :mod:`vrh.runs`); ``vrh detect`` (:func:`run_detect`), ``vrh compare``
and ``vrh demo`` all call it. Everything is computed with one
:class:`~vrh.experiments.settings.DetectSettings`, built once from the options. One batch -- answers, capture passes, per-sample info, scorer states -- is
:func:`vrh.experiments.detection_batch.detect_batch`; a batch's state is a
:class:`~vrh.experiments.detection_batch.BatchState`.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vrh import runs
from vrh.infra.console import console, progress_shown, report_skipped, warn
from vrh.infra.console import progress as progress_bar
from vrh.data import Sample, split_detect_eval
from vrh.infra.distributed import my_batches, world
from vrh.experiments.detection_batch import BatchState, EXTRA_PASSES, detect_batch, extra_passes, make_scorers
from vrh.experiments.settings import DetectRunSettings, DetectSettings, take, with_options
from vrh.experiments.heldout import GROUNDING_HINT, load_task_samples
from vrh.infra.oom import halving_on_oom
from vrh.core.heads import rank_heads
from vrh.core.layout import cross_layers
from vrh.models.loading import LoadedModel
from vrh.models.generation import fit_context
from vrh.options import DetectOptions
from vrh.scoring import make_scorer
from vrh.tasks import Task, get_task


@dataclass
class Detection:
    """What :func:`detect_heads` measured."""

    head_scores: runs.HeadScores
    per_sample: dict[str, np.ndarray]  # scorer -> (N, L, H)
    overlays: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # id -> (L, H, V), (V, 4)
    records: list[dict[str, Any]] = field(default_factory=list)


def detect_heads(lm: LoadedModel, samples: Sequence[Sample], settings: DetectSettings | None = None, *,
                 task: Task | None = None, on_record: Callable[[dict[str, Any]], None] | None = None,
                 state_dir: str | Path | None = None, progress: bool = True, **options: Any) -> Detection:
    """Score every head on grounding ``samples`` with every scorer of ``settings.scorers`` (specs, see
    :mod:`vrh.scoring`). ``settings`` (a :class:`~vrh.experiments.settings.DetectSettings`; default: its
    defaults) is the one value every batch is computed with; keyword ``options`` name its fields and replace
    them (``detect_heads(lm, samples, scorers=["out/sum/mean", "qrhead"], batch_size=8)``).
    ``progress=False``: no progress on stderr (as ``VRH_NO_PROGRESS``).

    Batch ``b`` is ``samples[b * batch_size:(b + 1) * batch_size]``; its state is combined with the others
    in sample order, so where and when a batch was computed does not change the result:

    * ``state_dir``: each finished batch is kept there (:func:`vrh.runs.write_batch_state`) and the batches
      already there are loaded, not computed (a rerun after a kill -9 redoes only the batches in flight);
    * under torchrun / accelerate each rank computes every world-size-th batch and the ranks exchange their
      states, so every rank returns the whole detection;
    * a batch that runs out of memory is retried as halves (:func:`vrh.infra.oom.halving_on_oom`).

    Overlays are kept for the scored samples among the first ``n_overlays`` samples; the ``rand1`` query
    seed of a sample is its position in ``samples``. ``n``, ``n_eval`` and ``detect_ids`` (the split of a
    dataset, :func:`detection_split`) are not read here: ``samples`` are the detection samples.

    ``one_pass`` (default; ``answer="model"`` only, ignored for ``"gt"``, which has nothing to generate):
    capture the main rows during the answering ``generate()`` (see the module docstring); ``False``: a
    teacher-forced forward over prompt + answer text after generating (two passes). The one-pass rows are
    those of the generated ids; they equal the two-pass rows wherever the answer text re-tokenizes to the
    generated ids (tested for every adapter family, ``tests/core/test_generation_capture.py``).
    """
    settings = with_options(settings or DetectSettings(), options, "detect_heads")
    settings = replace(settings, scorers=tuple(settings.scorers))  # a list from a notebook is the same value
    if settings.answer not in ("model", "gt"):
        raise ValueError(f"answer must be 'model' or 'gt', got {settings.answer!r}")
    if not settings.scorers:
        raise ValueError("at least one scorer is needed")
    t0 = time.time()
    task = task or get_task("grounding")
    made = make_scorers(settings.scorers, settings.seed)
    passes = extra_passes(made)
    unknown = [p for p in passes if p not in EXTRA_PASSES]
    if unknown:
        raise ValueError(f"scorers ask for capture passes {unknown} that detection does not know; it knows "
                         f"{sorted(EXTRA_PASSES)}")
    batch_size = settings.batch_size
    samples, too_long = fit_context(lm, task, samples, settings.max_new_tokens)  # skipped, listed in head_scores.json
    report_skipped(too_long, "detect")
    if too_long and not samples:
        raise ValueError(f"every sample's prompt is too long for the model: {too_long[0]['reason']}")
    dp = world()
    n_batches = -(-len(samples) // batch_size) if batch_size >= 1 else 0
    done = _kept_batches(state_dir, samples, batch_size, n_batches, set(made))
    dp.barrier()  # every rank has read the kept batches before any rank adds to them
    mine = [(b, start, stop) for b, start, stop in my_batches(len(samples), batch_size, dp) if b not in done]
    indexed = list(enumerate(samples))  # (position, sample): the position seeds rand1 and picks overlays
    new: dict[int, BatchState] = {}
    with progress_shown(progress), progress_bar(sum(stop - start for _, start, stop in mine), "detect") as advance:
        for b, start, stop in mine:
            state = BatchState.join(halving_on_oom(lambda part: detect_batch(lm, task, part, settings),
                                                   indexed[start:stop], "detect"))
            if state_dir is not None:
                runs.write_batch_state(state_dir, b, state.to_state())  # before the records: the state is the truth
            new[b] = state
            for r in state.records:
                if on_record is not None:
                    on_record(r)
            advance(stop - start)
    for theirs in dp.all_gather(new) if dp.active else ():
        new.update(theirs)
    states = {**done, **new}
    found = _combine(lm, settings, [states[b] for b in range(n_batches)], time.time() - t0)
    found.head_scores.skipped += too_long
    return found


def _kept_batches(state_dir: str | Path | None, samples: Sequence[Sample], batch_size: int, n_batches: int,
                  scorer_names: set[str]) -> dict[int, BatchState]:
    """The batches an interrupted run kept in ``state_dir``; kept batches of another plan are refused."""
    done = ({b: BatchState.from_state(st) for b, st in runs.read_batch_states(state_dir).items()}
            if state_dir is not None else {})
    for b, st in done.items():
        want = [s.id for s in samples[b * batch_size:(b + 1) * batch_size]]
        if b >= n_batches or st.ids != want or set(st.scorers) != scorer_names:
            raise ValueError(f"{state_dir}: the kept state of batch {b} is of other samples or scorers than this "
                             "run's; rerun with the settings of the interrupted run, or --overwrite")
    return done


def _combine(lm: LoadedModel, settings: DetectSettings, states: Sequence[BatchState], elapsed: float) -> Detection:
    """The detection of all batches: their states joined in sample order into fresh scorers."""
    scorers = make_scorers(settings.scorers, settings.seed)
    whole = BatchState.join([BatchState.empty(extra_passes(scorers)), *states])
    for name, st in whole.scorers.items():
        scorers[name].extend(st)
    found = _finish(lm, scorers, whole, elapsed, settings.capture)
    cross = sorted(cross_layers(lm.adapter, lm.model))
    if cross:  # which heads read the image: the report shows the two kinds (docs/adapters.md, Llama 3.2 Vision)
        found.head_scores.extra["cross_attention_layers"] = cross
    return found


def _finish(lm, scorers, whole: BatchState, elapsed: float, capture: str = "teacher_forced") -> Detection:
    """The detection from scorers that saw every sample and the joined state of all batches."""
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
        warn(w)
    primary = next(iter(scorers))
    forwards = whole.forwards
    extra = {"capture_forwards": forwards["main"],  # main capture passes: one per batch, shared by every scorer
             "extra_capture_forwards": {p: n for p, n in forwards.items() if p not in ("main", "batches")},
             "capture_batches": forwards["batches"], "capture": capture, "elapsed_seconds": elapsed}
    hs = runs.HeadScores(scorer=primary, num_layers=lm.num_layers, num_heads=lm.num_heads,
                         n_scored=int(per_sample[primary].shape[0]), variants=variants, skipped=list(whole.skipped),
                         warnings=warnings, extra=extra)
    overlays = {k: (a.numpy(), r.numpy()) for k, (a, r) in whole.overlays.items()}
    return Detection(hs, per_sample, overlays, list(whole.records))


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


def run_detection(lm: LoadedModel, data: str | Path, out: str | Path, settings: DetectSettings | None = None, *,
                  overwrite: bool = False, resume: bool = False, **options: Any) -> runs.HeadScores:
    """Detect on the ``settings.n`` detection samples of ``data`` (:func:`detection_split`) and write the run
    folder ``out``; keyword ``options`` name fields of ``settings`` and replace them, as for :func:`detect_heads`.

    With ``resume``, a finished detection run with the same settings is reused as it is, and an unfinished
    one continues from the batches it kept in ``detect_state/`` (removed once the run is finished); the
    result equals an uninterrupted run's, timing fields aside."""
    settings = with_options(settings or DetectSettings(), options, "run_detection")
    det, held_out, data_info = detection_split(data, settings)
    recorded = {f.name: getattr(settings, f.name) for f in fields(DetectOptions)}  # as config_record lists them
    config = {"command": "detect", "config": {**recorded, "data": str(data), "batch_size": settings.batch_size,
                                              "max_new_tokens": settings.max_new_tokens},
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
        found = detect_heads(lm, det, settings, on_record=run.append_sample, state_dir=run.path)
        run.replace_samples(found.records)  # sample order, with resumed batches and every rank's
        write_detection(run, found)
        hs = found.head_scores
        run.write_results(runs.DetectResults(n_scored=hs.n_scored, n_skipped=len(hs.skipped), scorer=hs.scorer,
                                             top_heads=hs.variants[hs.scorer]["ranking"][:20],
                                             elapsed_seconds=hs.extra["elapsed_seconds"]).to_json())
        runs.clear_batch_states(run)
    if world().is_main:  # once per run, not once per process
        console.print(f"detect: {hs.n_scored} samples scored, {len(hs.skipped)} skipped -> {out}")
    return hs


def run_detect(cfg: DetectRunSettings, lm: LoadedModel | None = None) -> runs.HeadScores:
    """``vrh detect``: a detection run folder at ``cfg.out`` (:func:`run_detection`), the top heads printed.
    Bad scorers or a split the data cannot give fail before the model loads."""
    from vrh.experiments.setup import load

    settings = take(DetectSettings, cfg)
    check_scorers(settings.scorers, settings.seed)  # bad input fails before the model loads
    if cfg.paper_model not in (None, "none"):
        from vrh.experiments.paper_agreement import named_paper_model

        named_paper_model(cfg.paper_model)
    detection_split(cfg.data, settings)
    lm = load(cfg, lm)
    hs = run_detection(lm, cfg.data, cfg.out, settings, overwrite=cfg.overwrite, resume=cfg.resume)
    if settings.answer == "model":
        warn_if_never_correct(cfg.out, cfg.model)
        from vrh.experiments.format_probe import never_parsed_line
        from vrh.infra.console import print_result

        outcomes = [r.get("outcome") for r in runs.read_samples(cfg.out)]
        line = never_parsed_line(cfg.COMMAND, len(outcomes), outcomes.count("parse_failure"), lm, cfg.data)
        if line:
            print_result(line)
    print_top_heads(hs)
    from vrh.experiments.paper_agreement import no_list_line, paper_agreement, print_paper_agreement

    if cfg.paper_model != "none":
        agreement = paper_agreement(hs.ranking(), hs.num_layers, hs.num_heads, cfg.model, cfg.data, cfg.paper_model)
        if agreement is None:
            from vrh.infra.console import console

            console.print(no_list_line(cfg.model, hs.num_layers, hs.num_heads, cfg.paper_model), markup=False,
                          highlight=False)
        print_paper_agreement(agreement)
    return hs


def warn_if_never_correct(out: str, model: str) -> None:
    """A loud line when the model answered no detection sample correctly: its heads were scored on answers
    that never found the object (the toy organism run on a user's photos scored 20 of 20 "mislocated")."""
    records = runs.read_samples(out)
    if records and not any(r.get("outcome") == "correct" for r in records):
        warn(f"--model {model} answered none of the {len(records)} detection samples correctly: these head scores "
             "come from answers that never found the object; check that --model is the model you meant for this data")


TOP_SHOWN = 10  # heads of the ranking printed; the full ranking is in head_scores.json


def print_top_heads(hs: runs.HeadScores) -> None:
    """The primary scorer's top heads with their scores, as a table on stdout."""
    from vrh.infra.console import head_text, print_table

    scores = hs.scores()  # (L, H)
    top = hs.ranking()[:TOP_SHOWN]
    print_table(f"detect: top {len(top)} of {hs.num_layers * hs.num_heads} heads by {hs.scorer} "
                f"({hs.n_scored} samples scored)", ["rank", "head (layer:head)", "score"],
                [[i + 1, head_text(h), f"{float(scores[h[0], h[1]]):.4g}"] for i, h in enumerate(top)])
