"""One batch of detection (:mod:`vrh.experiments.detection`): answer and judge its samples, capture their
rows (the main pass and the extra passes the scorers ask for), build each sample's
:class:`~vrh.scoring.base.SampleInfo` and feed fresh scorers; :func:`detect_batch` returns what the batch
produced as a :class:`BatchState`.

Why a module of its own: :mod:`vrh.experiments.detection` is the computation over batches (which batches
this rank runs, what an interrupted run kept, the out-of-memory retry, the combination in sample order)
and the run folder; this module is everything about ONE batch, with the two values that cross between
them: :class:`~vrh.experiments.settings.DetectSettings` (what every batch is computed with, the value built
from the options) and :class:`BatchState` (what a batch produced, kept on disk and exchanged between ranks). An extra capture pass is one :class:`ExtraPass`
entry in :data:`EXTRA_PASSES`: how it captures, and which SampleInfo fields it fills.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from vrh.core.capture import capture_attention_rows
from vrh.core.generation_capture import GeneratedRows, generate_with_rows
from vrh.core.layout import VISION, visual_key_space
from vrh.core.regions import box_token_mask
from vrh.data import Sample
from vrh.models.generation import generate_answers
from vrh.models.queries import NULL_PREFIX, NULL_QUERY_KINDS, NULL_QUERY_PASS, query_sets
from vrh.models.loading import LoadedModel
from vrh.experiments.settings import DetectSettings
from vrh.scoring import SampleInfo, make_scorer
from vrh.tasks import Task

NULL_QUERY = "N/A"  # QRHead's content-free query, in place of the referring expression


def grid_shape(rects: torch.Tensor, cell: torch.Tensor, meta: dict[str, Any]) -> tuple[int, int] | None:
    """(rows, cols) of the row-major grid a sample's V visual tokens form, or None when they form none.

    The adapter's ``meta["token_grid"]`` when it has exactly V places (the tokens are that grid, padding-only
    patches included: LLaVA's pad-to-square); None when it has other tokens besides (a thumbnail, class or
    newline token). Only an adapter that reports no ``token_grid`` has its grid read off the rectangles, and
    only when every token is a cell."""
    if meta.get("token_grid") is not None:
        rows, cols = (int(v) for v in meta["token_grid"])
        return (rows, cols) if rows * cols == len(rects) else None
    if not bool(cell.all()):
        return None
    rows = len(torch.unique(rects[:, 1]))
    cols = len(torch.unique(rects[:, 0]))
    if rows * cols != len(rects):
        raise ValueError(f"visual tokens do not form a grid: {len(rects)} tokens, {rows} rows x {cols} cols")
    return rows, cols


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


@dataclass(frozen=True)
class ExtraPass:
    """An extra capture pass a scorer may ask for by name (its ``extra_passes``), as :data:`EXTRA_PASSES` has it.

    ``capture(lm, samples, images, answers)``: one teacher-forced forward over the batch, on the main pass's
    images and answers. ``sample_fields(capture, b, in_box)``: what the pass adds to sample ``b``'s
    :class:`~vrh.scoring.base.SampleInfo`: ``queries`` (query kinds of its own, which index ITS rows; listed
    in ``query_kinds``) and any other SampleInfo field; ``in_box`` is the main pass's ``(V,)`` key mask (the
    same image gives the same visual tokens, which detection checks). Why a hook: detection hands every pass
    alike, so a new pass is one entry here and no branch in detection.
    """

    capture: Callable[..., _Capture]
    sample_fields: Callable[[_Capture, int, torch.Tensor], dict[str, Any]]
    query_kinds: tuple[str, ...] = ()


def _null_query_pass(lm: LoadedModel, samples: Sequence[Sample], images, answers) -> _Capture:
    """Same images and answers, the referring expression replaced by :data:`NULL_QUERY`."""
    return _capture(lm, images, [lm.adapter.grounding_prompt(NULL_QUERY) for _ in samples], answers,
                    [NULL_QUERY] * len(samples))


def _null_query_fields(cap: _Capture, b: int, in_box: torch.Tensor) -> dict[str, Any]:
    """The null query's expression and answer producers, and K in that pass's sequence."""
    return {"queries": cap.queries[b].as_query_dict(NULL_PREFIX, kinds=NULL_QUERY_KINDS[::-1]),  # in, out
            "null_key_positions": cap.batch.visual_positions[b][in_box]}  # (|K|,)


# name -> pass; a scorer's ``extra_passes`` name entries of this table
EXTRA_PASSES: dict[str, ExtraPass] = {
    NULL_QUERY_PASS: ExtraPass(_null_query_pass, _null_query_fields,
                               query_kinds=tuple(NULL_PREFIX + k for k in NULL_QUERY_KINDS[::-1])),
}


@dataclass
class BatchState:
    """What detection keeps of one batch (or of consecutive batches, :meth:`join`), in sample order.

    Why a value: a batch's state is written to ``detect_state/`` as soon as it is finished, exchanged
    between ranks and combined with the others into the detection, so where and when it was computed does
    not change the result. On disk it is the plain dict :meth:`to_state` returns (lists, ints, strings and
    tensors: :func:`vrh.runs.write_batch_state` saves it, ``torch.load(weights_only=True)`` reads it).
    """

    ids: list[str]  # every sample of the batch
    records: list[dict[str, Any]]  # one per sample, judged and (if scored) with its scoring facts
    skipped: list[dict[str, str]]  # samples with nothing to score: id, reason
    forwards: dict[str, int]  # capture forwards: "main", "batches", one count per extra pass
    scorers: dict[str, dict[str, Any]]  # scorer name -> AccumulatingScorer.state()
    overlays: dict[str, tuple[torch.Tensor, torch.Tensor]]  # id -> (L, H, V) mean out-row attention, (V, 4)

    @classmethod
    def empty(cls, passes: Sequence[str] = ()) -> BatchState:
        """No sample; every forward count at 0 (so a join lists each count even if no batch ran it)."""
        return cls([], [], [], {"main": 0, "batches": 0, **{p: 0 for p in passes}}, {}, {})

    def to_state(self) -> dict[str, Any]:
        return {"ids": self.ids, "records": self.records, "skipped": self.skipped, "forwards": self.forwards,
                "scorers": self.scorers, "overlays": self.overlays}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> BatchState:
        return cls(ids=list(state["ids"]), records=list(state["records"]), skipped=list(state["skipped"]),
                   forwards=dict(state["forwards"]), scorers=dict(state["scorers"]), overlays=dict(state["overlays"]))

    @classmethod
    def join(cls, pieces: Sequence[BatchState]) -> BatchState:
        """The state of ``pieces`` one after the other (the halves of a batch retried out of memory, or all
        batches of a detection): lists concatenated, counts and scorers' counters summed."""
        out = cls([], [], [], {}, {}, {})
        for piece in pieces:
            out.ids += piece.ids
            out.records += piece.records
            out.skipped += piece.skipped
            out.overlays.update(piece.overlays)
            for k, v in piece.forwards.items():
                out.forwards[k] = out.forwards.get(k, 0) + v
            for name, st in piece.scorers.items():
                joined = out.scorers.setdefault(name, {"lists": {}, "counters": {}})
                for k, tail in st["lists"].items():
                    joined["lists"].setdefault(k, []).extend(tail)
                for k, v in st["counters"].items():
                    joined["counters"][k] = joined["counters"].get(k, 0) + v
        return out


def extra_passes(scorers: dict[str, Any]) -> tuple[str, ...]:
    """The extra capture passes ``scorers`` (name -> scorer) ask for, sorted (:data:`EXTRA_PASSES` names)."""
    return tuple(sorted({p for sc in scorers.values() for p in sc.extra_passes}))


def make_scorers(specs: Sequence[str], seed: int) -> dict[str, Any]:
    """Scorer name -> a fresh scorer of each spec; a spec listed twice, or a scorer detection cannot combine
    across batches, is refused."""
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


@dataclass
class _Answered:
    """One batch answered and judged: what scoring needs of each of its samples."""

    samples: list[Sample]
    index: list[int]  # each sample's position in the detection's samples
    images: list
    prompts: list[str]
    answers: list[str]
    metas: list[dict[str, Any]]
    records: list[dict[str, Any]]  # the task's judgement of each answer
    generated: GeneratedRows | None  # one pass: the answers' rows, captured while generating them

    def scorable(self) -> list[int]:
        """The samples with something to score. An answer of only special or blank tokens has text "" (two
        pass: nothing to teacher-force); one pass also needs a generated token before the EOS."""
        return [i for i, a in enumerate(self.answers)
                if a.strip() and (self.generated is None or self.generated.queries[i])]

    def select(self, keep: Sequence[int]) -> _Answered:
        pick = lambda xs: [xs[i] for i in keep]  # noqa: E731
        return _Answered(pick(self.samples), pick(self.index), pick(self.images), pick(self.prompts),
                         pick(self.answers), pick(self.metas), pick(self.records),
                         self.generated.select(keep) if self.generated is not None else None)


@dataclass
class _Scored:
    """What scoring a batch produced: fresh scorers' states, the forwards it took, overlays, and the fields
    each scored sample's record gains (in the scored samples' order)."""

    scorers: dict[str, dict[str, Any]]
    forwards: dict[str, int]
    overlays: dict[str, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    record_fields: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def nothing(cls, settings: DetectSettings) -> _Scored:
        scorers = make_scorers(settings.scorers, settings.seed)
        return cls({name: sc.state() for name, sc in scorers.items()}, BatchState.empty(extra_passes(scorers)).forwards)


def detect_batch(lm: LoadedModel, task: Task, part: Sequence[tuple[int, Sample]],
                 settings: DetectSettings) -> BatchState:
    """One batch of ``(position, sample)``, from answers to fresh scorers' states: everything
    :func:`vrh.experiments.detection.detect_heads` combines."""
    answered = _answer_batch(lm, task, part, settings)
    keep = answered.scorable()
    scored = _score_batch(lm, answered.select(keep), settings) if keep else _Scored.nothing(settings)
    gained = dict(zip(keep, scored.record_fields))
    return BatchState(ids=[s.id for s in answered.samples],
                      records=[{**rec, **gained.get(i, {})} for i, rec in enumerate(answered.records)],
                      skipped=[{"id": s.id, "reason": "empty answer"} for i, s in enumerate(answered.samples)
                               if i not in gained],
                      forwards=scored.forwards, scorers=scored.scorers, overlays=scored.overlays)


def _answer_batch(lm: LoadedModel, task: Task, part: Sequence[tuple[int, Sample]],
                  settings: DetectSettings) -> _Answered:
    """Answer (or, ``answer="gt"``, write the ground truth for) and judge the samples of ``part``."""
    chunk = [s for _, s in part]
    images = [s.load_image() for s in chunk]
    prompts = [task.prompt(lm.adapter, s) for s in chunk]
    generated = None
    if settings.capture == "generate":
        generated = generate_with_rows(lm, images, prompts, [s.expression for s in chunk], settings.max_new_tokens)
        answers, metas = generated.texts, generated.meta
    elif settings.answer == "model":
        answers, metas = generate_answers(lm, images, prompts, settings.max_new_tokens)
    else:
        metas = lm.adapter.build_batch(lm.processor, images, prompts).meta
        answers = [lm.adapter.format_box(s.box, m, s.image_size) for s, m in zip(chunk, metas)]
    records = [task.judge(lm.adapter, s, a, m) for s, a, m in zip(chunk, answers, metas)]
    return _Answered(chunk, [i for i, _ in part], images, prompts, answers, metas, records, generated)


def _answer_facts(lm: LoadedModel, batch, b: int, sample: Sample, meta: dict[str, Any],
                  scorers: Mapping[str, Any]) -> dict[str, Any]:
    """What scorers may need about sample ``b``'s prompt and answer beyond its rows: every prompt key
    position (text and image, no padding, no answer), and what each scorer's capture hook adds (a scorer's
    ``sample_facts(lm, sample, meta, prompt_ids, answer_ids) -> {SampleInfo field: value}``, called only when
    that scorer runs: OCR Heads' :func:`vrh.scoring.ocr_heads.answer_facts`)."""
    ans = batch.answer_positions[b]  # (A,)
    mask = batch.inputs["attention_mask"][b]  # (S,) 1 = real token (left padding is 0)
    prompt = torch.nonzero(mask[: int(ans[0])]).reshape(-1)  # (P,) every real token before the answer
    facts: dict[str, Any] = {"prompt_positions": prompt}
    hooks = list(dict.fromkeys(h for sc in scorers.values() if (h := getattr(sc, "sample_facts", None))))
    if hooks:
        answer_ids = batch.inputs["input_ids"][b][ans].tolist()
        prompt_ids = batch.inputs["input_ids"][b][prompt].tolist()  # (P,) what a reference's sequences start with
        for hook in hooks:
            added = hook(lm, sample, meta, prompt_ids, answer_ids)
            taken = sorted(set(added) & set(facts))
            if taken:
                raise RuntimeError(f"scorers' sample_facts hooks set the same SampleInfo fields: {taken}")
            facts.update(added)
    return facts


def _score_batch(lm: LoadedModel, answered: _Answered, settings: DetectSettings) -> _Scored:
    """Score the samples of ``answered`` (each with a non-empty answer) with fresh scorers: the main rows
    (captured while generating, one pass, else one teacher-forced forward over prompt + answer text here)
    and one forward per extra pass, shared by every scorer."""
    if answered.generated is not None:
        main = _Capture(answered.generated.batch, answered.generated.queries, answered.generated)
    else:
        main = _capture(lm, answered.images, answered.prompts, answered.answers,
                        [s.expression for s in answered.samples])
    scorers = make_scorers(settings.scorers, settings.seed)
    extra = {p: EXTRA_PASSES[p].capture(lm, answered.samples, answered.images, answered.answers)
             for p in extra_passes(scorers)}
    forwards = {"main": main.rows.num_forwards, "batches": 1, **{p: cap.rows.num_forwards for p, cap in extra.items()}}
    overlays: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    record_fields: list[dict[str, Any]] = []
    for b, s in enumerate(answered.samples):
        rows = main.rows.rows(b)  # (L, H, Q, S)
        info = _sample_info(lm, answered, main, extra, b, settings.min_overlap, scorers)
        extra_rows = {p: cap.rows.rows(b) for p, cap in extra.items()}  # (L, H, Q', S') each
        for scorer in scorers.values():
            scorer.update(rows, info, extra={p: extra_rows[p] for p in scorer.extra_passes})
        record_fields.append({"n_visual_tokens": int(len(info.visual_positions)),
                              "n_key_tokens": int(len(info.key_positions)), "scored_answer": answered.answers[b]})
        if answered.index[b] < settings.n_overlays:  # one of the first n_overlays samples
            vis, rects = info.visual_positions, main.batch.visual_rects[b]  # (V,), (V, 4)
            vis_rows = rows[:, :, main.queries[b].out][..., vis]  # (L, H, Q_out, V)
            pair = (vis_rows.mean(dim=2).numpy(), rects.numpy())  # (L, H, V), (V, 4)
            overlays[s.id] = tuple(torch.from_numpy(np.ascontiguousarray(v)) for v in pair)
    return _Scored({name: sc.state() for name, sc in scorers.items()}, forwards, overlays, record_fields)


def _sample_info(lm: LoadedModel, answered: _Answered, main: _Capture, extra: dict[str, _Capture], b: int,
                 min_overlap: float, scorers: Mapping[str, Any]) -> SampleInfo:
    """Sample ``b``'s :class:`~vrh.scoring.base.SampleInfo`: K, V, the grid and the query sets of the main
    pass, its correctness and answer facts, and what each extra pass adds (:attr:`ExtraPass.sample_fields`)."""
    s = answered.samples[b]
    vis = main.batch.visual_positions[b]  # (V,)
    rects = main.batch.visual_rects[b]  # (V, 4)
    cells = getattr(main.batch, "cell_tokens", None)  # only cell tokens may enter K (adapters.base.VisionBatch)
    cell = cells[b] if cells else torch.ones(len(vis), dtype=torch.bool)  # (V,)
    in_box = box_token_mask(rects, s.box, min_overlap) & cell  # (V,)
    grid = grid_shape(rects, cell, main.batch.meta[b] if main.batch.meta else {})
    rec = answered.records[b]
    fields = dict(key_positions=vis[in_box], visual_positions=vis, grid=grid, queries=main.queries[b].as_query_dict(),
                  correct=rec.get("outcome") == "correct", iou=rec.get("iou"), index=answered.index[b],
                  **_answer_facts(lm, main.batch, b, s, answered.metas[b], scorers))
    if visual_key_space(lm.adapter, lm.model) == VISION:  # rows over the cross-attention keys have no text key
        fields["prompt_positions"] = None  # (vrh.core.capture): a scorer reading prompt keys refuses
    for p, cap in extra.items():
        if not torch.equal(cap.batch.visual_rects[b], rects):  # same image -> same visual tokens expected
            raise RuntimeError(f"{s.id}: the {p} pass tokenized the image differently")
        added = EXTRA_PASSES[p].sample_fields(cap, b, in_box)
        taken = sorted(set(added.get("queries", {})) & set(fields["queries"])
                       | {k for k in added if k != "queries" and fields.get(k) is not None})
        if taken:
            raise RuntimeError(f"the {p} pass sets SampleInfo fields or query kinds already set: {taken}")
        fields = {**fields, **added, "queries": {**fields["queries"], **added.get("queries", {})}}
    return SampleInfo(**fields)
