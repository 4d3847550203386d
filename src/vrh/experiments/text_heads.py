"""``vrh text-heads``: the Retrieval Heads protocol on the VLM's language model, text only -- are the heads that
retrieve from the image the ones that retrieve from text?

What it runs (Wu et al. 2024, :mod:`vrh.scoring.copy_paste` cites the reference code): needle-in-a-haystack
prompts generated offline (:mod:`vrh.experiments.needles`), no image. Each prompt is answered greedily in ONE
``generate()`` whose decode rows are captured by vrh's one capture (:func:`vrh.core.capture.capture_generation_rows`,
rows only, no eager maps); a head's score on a test is its copy-paste hits over the needle's tokens, and its
retrieval score the mean over the tests answered exactly right (the reference keeps tests with ROUGE-1 recall
> 50). Then RH's causal test: needle recall with the top-k text heads masked (vrh's one masking,
:func:`vrh.core.masking.mask_heads`) against k random heads drawn outside them, over seeds; with
``--cross-heads`` also with the top-k of another head set (e.g. the VRHs of a detection run), the random heads
then drawn outside both sets.

The run folder follows the contract of every run: ``config.json``; ``samples.jsonl``, one line per (condition,
test) with the condition tag, ``pred_text``, ``outcome`` (``correct``/``wrong``), the test's depth, length and
context, and under ``none`` the test's ``[L][H]`` copy-paste map (``copy_paste``), so a resumed run recomputes
nothing that finished; ``head_scores.json`` (scorer ``copy_paste``: ``vrh sweep --heads``, ``vrh evaluate
--mask-heads`` and ``vrh compare-heads`` read it like a detection run); ``results.json`` written last.
The config records ``detect_ids`` (the test ids) and an empty ``eval_ids``, which is what a detection run
records, so the grounding commands accept this folder as a head source.

``--text-scorer qrhead`` scores the heads by QRHead's query-focused criterion instead (where the question's
tokens look, calibrated by a null question; :mod:`vrh.experiments.text_qrhead`), the definition of the published
QRHead lists: each ``none`` record then also carries its ``qrhead`` map, ``head_scores.json`` holds both variants
(the default is ``qrhead``) and the causal test masks the top-k by QR score.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from vrh.experiments.needles import NeedlePrompt, build_prompts, judge, unknown_words
from vrh.experiments.settings import TextHeadsSettings

SCORER = "copy_paste"
TASK = "needle"
MAX_DEFAULT_CONTEXT = 4096  # the longest default prompt: a 7B's full 128k context is hours per test on a GPU


def tokenizer_of(processor: Any) -> Any:
    return getattr(processor, "tokenizer", processor)


def chat_wrap(processor: Any) -> Callable[[str], str]:
    """The prompt the model reads for a user's text: its chat template with a generation prompt (the
    processor's, else the tokenizer's), or the text followed by ``Answer:`` when it has none."""
    def messages(body: str) -> list[dict[str, Any]]:
        return [{"role": "user", "content": [{"type": "text", "text": body}]}]

    from vrh.models import chat_templates

    def render(obj: Any, body: str) -> str:
        with chat_templates.bounded(chat_templates.whose(obj)):  # the checkpoint's template: bounded
            return obj.apply_chat_template(messages(body), add_generation_prompt=True, tokenize=False)

    for obj in (processor, tokenizer_of(processor)):
        if getattr(obj, "chat_template", None):
            try:
                render(obj, "x")
            except chat_templates.TemplateTooCostly:
                raise  # a hostile template, not one that wants other content
            except (ValueError, TypeError, KeyError, AttributeError):  # a template that wants other content
                continue
            return lambda body, obj=obj: render(obj, body)
    return lambda body: body + "\nAnswer:"


def encode(tok: Any, text: str) -> list[int]:
    bos = getattr(tok, "bos_token", None)
    return tok(text, add_special_tokens=not (bos and text.startswith(bos)))["input_ids"]


def needle_span(tok: Any, text: str, needle: str) -> tuple[list[int], tuple[int, int]]:
    """Token ids of ``text`` and the token range ``[start, end)`` that covers the needle's characters (the
    reference's needle span, found here by character offsets rather than its 90% token-set match)."""
    if text.count(needle) != 1:
        raise ValueError(f"the needle must occur once in the prompt, found {text.count(needle)} times")
    c0 = text.index(needle)
    c1 = c0 + len(needle)
    bos = getattr(tok, "bos_token", None)
    try:
        enc = tok(text, add_special_tokens=not (bos and text.startswith(bos)), return_offsets_mapping=True)
    except NotImplementedError:
        raise ValueError("vrh text-heads needs a fast tokenizer (character offsets locate the needle)") from None
    inside = [i for i, (s, e) in enumerate(enc["offset_mapping"]) if e > s and s < c1 and e > c0]
    return list(enc["input_ids"]), (min(inside), max(inside) + 1)


def default_contexts(lm: Any, max_new_tokens: int) -> tuple[int, ...]:
    from vrh.models.generation import context_limit

    limit = min(context_limit(lm.model) or MAX_DEFAULT_CONTEXT, MAX_DEFAULT_CONTEXT + max_new_tokens)
    top = limit - max_new_tokens
    return tuple(sorted({max(1, top // 4), max(1, top // 2), top}))


@torch.no_grad()
def answer(lm: Any, ids: Sequence[int], max_new_tokens: int, capture: bool = False
           ) -> tuple[torch.Tensor, str, torch.Tensor | None]:
    """Greedy answer ids (before the first EOS), its text and, with ``capture``, the ``[L, H, A, S]`` rows that
    produced each answer token (keys: prompt then generated positions)."""
    from contextlib import nullcontext

    from vrh.core.capture import capture_generation_rows
    from vrh.core.generation_capture import answer_lengths, eos_ids
    from vrh.core.layout import SEQUENCE

    x = torch.tensor([list(ids)], device=lm.device)  # (1, P)
    P = x.shape[1]
    tok = tokenizer_of(lm.processor)
    ctx = capture_generation_rows(lm.model, lm.adapter, [torch.tensor([P - 1])], keys=SEQUENCE) if capture \
        else nullcontext()
    with ctx as cap:
        out = lm.model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=max_new_tokens,
                                do_sample=False, pad_token_id=tok.pad_token_id if tok.pad_token_id is not None
                                else (eos_ids(lm.model) or [0])[0])
    new = out[0, P:].cpu()  # (T,)
    n = answer_lengths(new[None], eos_ids(lm.model))[0]
    text = tok.decode(new[:n], skip_special_tokens=True).strip()
    rows = cap.rows(0, torch.arange(P - 1, P - 1 + n)) if capture and n else None  # (L, H, A, S)
    return new[:n], text, rows


def _unknown(tok: Any, wrap: Callable[[str], str], prompts: Sequence[NeedlePrompt]) -> list[str]:
    """The words of the first prompts that ``tok`` has no token for."""
    return unknown_words(lambda w: tok(w, add_special_tokens=False)["input_ids"], tok.unk_token_id,
                         " ".join(wrap(p.body) for p in prompts[:8]))


def resolve_haystack(lm: Any, cfg: Any) -> Any:
    """``cfg`` with its haystack style chosen when not given: ``sentences`` where the model's tokenizer has its
    words, else ``items`` (the organisms' word-level vocabulary), said on stderr; where neither fits,
    ``sentences``, which :func:`prepare_tests` then refuses naming the missing words."""
    from dataclasses import replace

    from vrh.infra.console import console

    if cfg.haystack is not None:
        return cfg
    tok, wrap = tokenizer_of(lm.processor), chat_wrap(lm.processor)
    context = min(cfg.contexts or default_contexts(lm, cfg.max_new_tokens))
    lacking = {}
    for style in ("sentences", "items"):
        try:
            probe = build_prompts(lambda text: len(encode(tok, text)), style=style, contexts=(context,),
                                  depths=cfg.depths[:1], lengths=cfg.needle_lengths[:1], needles=1, seed=cfg.seed,
                                  wrap=wrap)
        except ValueError:  # no haystack of this style fits the context: prepare_tests says so
            continue
        lacking[style] = _unknown(tok, wrap, probe)
        if not lacking[style]:
            why = ("" if style == "sentences" else " (no 'sentences' haystack fits the context)"
                   if not lacking.get("sentences") else
                   f" (the tokenizer lacks words of 'sentences': {', '.join(lacking['sentences'][:4])})")
            console.print(f"text-heads: --haystack {style}{why}", markup=False, highlight=False)
            return replace(cfg, haystack=style)
    return replace(cfg, haystack="sentences")


MAX_TESTS = 100_000  # needle tests one run may hold: each is a greedy answer per condition (the default: 60)


def check_settings(cfg: Any) -> None:
    """What ``vrh text-heads`` refuses before the model loads and before any prompt is built: an empty
    ``--seeds``, ``--needles`` / ``--contexts`` below 1, no depths or lengths, or more needle tests than
    :data:`MAX_TESTS` (their number said: building them is quadratic in the context)."""
    if not cfg.seeds:
        raise ValueError("--seeds is empty: the random control needs at least one seed (e.g. --seeds 0,1,2)")
    if cfg.needles < 1:
        raise ValueError(f"--needles must be >= 1 (tests per context, depth and length), got {cfg.needles}")
    if cfg.contexts is not None and (not cfg.contexts or min(cfg.contexts) < 1):
        raise ValueError(f"--contexts must be prompt lengths >= 1 token, got {list(cfg.contexts)}")
    if not cfg.depths or not cfg.needle_lengths:
        raise ValueError("--depths and --needle-lengths need at least one value each")
    n_ctx = len(cfg.contexts) if cfg.contexts else 3  # the default: a quarter, a half and all of the context
    total = n_ctx * len(cfg.depths) * len(cfg.needle_lengths) * cfg.needles
    if total > MAX_TESTS:
        raise ValueError(f"{total:,} needle tests ({n_ctx} contexts x {len(cfg.depths)} depths x "
                         f"{len(cfg.needle_lengths)} needle lengths x --needles {cfg.needles}) are more than the "
                         f"{MAX_TESTS:,} one run may hold; lower --needles")


def check_contexts(lm: Any, cfg: Any) -> None:
    """``--contexts`` against the model's positions, before a prompt of that length is built (building one of
    100,000 tokens took minutes before it was refused)."""
    from vrh.models.generation import context_limit

    limit = context_limit(lm.model)
    if cfg.contexts and limit is not None and max(cfg.contexts) + cfg.max_new_tokens > limit:
        raise ValueError(f"--contexts {max(cfg.contexts)} + --max-new-tokens {cfg.max_new_tokens} exceed the "
                         f"model's {limit} positions")


def prepare_tests(lm: Any, cfg: Any) -> tuple[list[NeedlePrompt], list[tuple[list[int], tuple[int, int]]],
                                               tuple[int, ...]]:
    """The needle tests of ``cfg`` (a :class:`TextHeadsSettings`, or a text-heads run's recorded config as an
    object) for ``lm``: prompts, their token ids and needle spans, and the contexts used. Refuses words the
    tokenizer lacks and prompts beyond the model's context."""
    check_contexts(lm, cfg)
    tok = tokenizer_of(lm.processor)
    wrap = chat_wrap(lm.processor)
    contexts = tuple(cfg.contexts or default_contexts(lm, cfg.max_new_tokens))
    prompts = build_prompts(lambda text: len(encode(tok, text)), style=cfg.haystack, contexts=contexts,
                            depths=cfg.depths, lengths=cfg.needle_lengths, needles=cfg.needles, seed=cfg.seed,
                            wrap=wrap)
    unknown = _unknown(tok, wrap, prompts)
    if unknown:
        raise ValueError(f"--haystack {cfg.haystack}: the model's tokenizer does not have the words "
                         f"{', '.join(unknown[:8])}{' ...' if len(unknown) > 8 else ''}; a test with unknown tokens is "
                         "no fair test (for the shipped organisms use --haystack items)")
    return prompts, [needle_span(tok, wrap(p.body), p.needle) for p in prompts], contexts


def evaluate_needles(lm: Any, prompts: Sequence[NeedlePrompt], tests: Sequence[tuple[list[int], tuple[int, int]]],
                     conds: Sequence[Any], run: Any, max_new_tokens: int, done: dict[tuple, dict[str, Any]],
                     description: str = "text-heads: masked recall") -> dict[str, float]:
    """Needle recall under each masking condition (label -> fraction recalled exactly); every answer appended
    to ``run`` as it finishes, and a (condition, test) in ``done`` (a resumed run's records) not redone."""
    from vrh.core.masking import mask_heads
    from vrh.infra.console import progress

    recall: dict[str, float] = {}
    with progress(len(conds) * len(prompts), description, unit="tests") as advance:
        for c in conds:
            hits = 0
            for p, (ids, span) in zip(prompts, tests):
                rec = done.get((c.label, p.id))
                if rec is None:
                    with mask_heads(lm.model, lm.adapter, c.heads, c.mask_mode):
                        _, text, _ = answer(lm, ids, max_new_tokens)
                    rec = _record(p, c, text, len(ids), span)
                    run.append_sample(rec)
                hits += rec["outcome"] == "correct"
                advance()
            recall[c.label] = hits / len(prompts)
    return recall


def _condition_sets(scores: torch.Tensor, cross: torch.Tensor | None, k: int, cfg: TextHeadsSettings,
                    cross_heads: tuple | None = None, scorer: str = SCORER, cross_whole: bool = False
                    ) -> tuple[list, list[str]]:
    from vrh.experiments import conditions as cond

    L, H = scores.shape
    conds = [cond.top_k(scores, k, method=scorer, mask_mode=cfg.mask_mode, label=f"top{k}:text")]
    if cross is not None:
        conds.append(cond.top_k(cross, k, method="cross", mask_mode=cfg.mask_mode, label=f"top{k}:cross"))
    elif cross_heads and cross_whole:  # a published set without a ranking (qrhead:...): all of it
        conds.append(cond.explicit(cross_heads, mask_mode=cfg.mask_mode, label=f"all{len(cross_heads)}:cross"))
    elif cross_heads:  # a list (a paper list is in its rank order): its first k heads
        conds.append(cond.explicit(cross_heads[:k], mask_mode=cfg.mask_mode, label=f"top{k}:cross"))
    outside = sorted({h for c in conds for h in c.heads})
    n = max(len(c.heads) for c in conds)
    rc = cond.random_controls(L, H, n, cfg.seeds, outside=outside, exclude_layers=cfg.exclude_layers,
                              method=scorer, mask_mode=cfg.mask_mode, label="random{k}:s{seed}")
    return conds + rc.conditions, rc.warnings


def run_text_heads(cfg: TextHeadsSettings, lm: Any = None) -> dict[str, Any]:
    """``vrh text-heads``: the run folder at ``cfg.out`` (module docstring); returns results.json."""
    import numpy as np

    from vrh import runs
    from vrh.experiments import conditions as cond
    from vrh.scoring.head_overlap import untied_k
    from vrh.experiments.heads_origin import adopt
    from vrh.experiments.setup import load
    from vrh.infra.console import console, percent_text, print_result, print_table, progress, warn
    from vrh.options import DEFAULT_K_RULE, config_record, default_k
    from vrh.runs.results_characterize import TextHeadsResults
    from vrh.scoring.copy_paste import copy_paste_sample

    scorer = cfg.text_scorer
    t0 = time.time()
    if cfg.cross_heads:  # a missing run folder or a bad list fails before the model loads
        cond.head_source(cfg.cross_heads, cfg.scorer, option="--cross-heads")
    check_settings(cfg)  # before the model loads
    lm = load(cfg, lm)
    if cfg.cross_heads:  # heads of another model: one line naming both (text prompts ask for no box format)
        adopt(lm, None, cfg.cross_heads, command=cfg.COMMAND, option="--cross-heads", task=None,
              uses_answer_format=False)
    L, H = lm.num_layers, lm.num_heads
    k = cfg.k if cfg.k is not None else default_k(L, H)
    cond.check_k(k, L, H)
    if k < 1:
        raise ValueError(f"--k must be >= 1 (the causal test masks the top-k heads), got {k}")
    cross_src = cond.head_source(cfg.cross_heads, cfg.scorer, L, H, option="--cross-heads") if cfg.cross_heads \
        else None
    check_contexts(lm, cfg)  # before any prompt is built
    cfg = resolve_haystack(lm, cfg)  # recorded resolved: a resume resolves it the same way
    prompts, tests, contexts = prepare_tests(lm, cfg)
    if cfg.k is None:
        console.print(f"text-heads: k = {k} of {L * H} heads (--k default: {DEFAULT_K_RULE})")

    run = runs.RunFolder(cfg.out, resume=cfg.resume, overwrite=cfg.overwrite)
    run.write_config({"command": cfg.COMMAND, "config": config_record(cfg), "model": lm.describe(),
                      "data": {"path": None, "sha256": None, "task": TASK, "contexts": list(contexts)},
                      "detect_ids": [p.id for p in prompts], "eval_ids": [],
                      "cross_heads": cfg.cross_heads})
    with run:
        done = {(r.get("condition"), r["id"]): r for r in run.finished_samples()}
        maps: dict[str, torch.Tensor] = {}
        qr_maps: dict[str, torch.Tensor] = {}
        correct: dict[str, bool] = {}
        with progress(len(prompts), "text-heads: needles", unit="tests") as advance:
            for p, (ids, span) in zip(prompts, tests):
                rec = done.get(("none", p.id))
                if rec is None:
                    out_ids, text, rows = answer(lm, ids, cfg.max_new_tokens, capture=True)
                    score = torch.zeros(L, H) if rows is None else copy_paste_sample(
                        rows, torch.tensor(list(ids) + out_ids.tolist()), out_ids, span)
                    rec = _record(p, cond.none(cfg.mask_mode), text, len(ids), span)
                    rec["copy_paste"] = score.tolist()
                    if scorer == "qrhead":
                        from vrh.experiments.text_qrhead import qrhead_text_map

                        rec["qrhead"] = qrhead_text_map(lm, tokenizer_of(lm.processor), chat_wrap(lm.processor),
                                                        p).tolist()
                    run.append_sample(rec)
                maps[p.id] = torch.tensor(rec["copy_paste"])
                if scorer == "qrhead":
                    qr_maps[p.id] = torch.tensor(rec["qrhead"])
                correct[p.id] = rec["outcome"] == "correct"
                advance()
        kept = [maps[i] for i in maps if correct[i]]
        copy_scores = torch.stack(kept).mean(0) if kept else torch.zeros(L, H)  # (L, H)
        n_correct = len(kept)
        variants = {SCORER: copy_scores}
        if scorer == "qrhead":  # the mean over every test: the score reads the question, not the answer
            variants["qrhead"] = torch.stack([qr_maps[p.id] for p in prompts]).mean(0)  # (L, H)
        elif not kept:
            warn(f"--model {cfg.model} answered none of the {len(prompts)} needle tests exactly: every head scores 0 "
                 "and the ranking is the (layer, head) order; the causal test below tests nothing")
        scores = variants[scorer]
        ordered = sorted(scores.flatten().tolist(), reverse=True)
        if any(ordered) and untied_k(ordered, k) < k:  # (an all-zero map was said above)
            warn(f"--k {k}: the top-{k} text heads cut through {ordered.count(ordered[k - 1])} heads tied at score "
                 f"{ordered[k - 1]:g}; {k - untied_k(ordered, k)} of the masked heads are picked by (layer, head) order")
        _write_scores(run, variants, scorer, len(prompts) if scorer == "qrhead" else n_correct, len(prompts))

        cross = cross_src.scores if cross_src is not None and cross_src.kind == "run" else None
        from vrh.data.published_heads import is_published_spec

        whole = bool(cfg.cross_heads) and is_published_spec(cfg.cross_heads)  # a set without a ranking: all of it
        conds, warnings = _condition_sets(scores, cross, k, cfg, cross_src.heads if cross_src else None, scorer, whole)
        for w in warnings:
            warn(w)
        recall = {"none": n_correct / len(prompts),
                  **evaluate_needles(lm, prompts, tests, conds, run, cfg.max_new_tokens, done)}
        rnd = [recall[c.label] for c in conds if c.kind == "random"]
        ranking = [list(h) for h in _ranking(scores)]
        result = {"model": lm.path, "scorer": scorer, "k": k, "n": len(prompts),
                  "n_correct": n_correct, "recall": recall["none"],
                  "recall_chance": float(np.mean([p.chance for p in prompts])),
                  "copied_other_item": _copied_other(run, prompts),
                  "recall_by_depth": _by(prompts, correct, "depth"), "recall_by_context": _by(prompts, correct, "context"),
                  "recall_by_length": _by(prompts, correct, "length"),
                  "text_heads_recall": recall[conds[0].label],
                  "cross_heads_recall": recall[conds[1].label] if cross_src else None,
                  "cross_heads": cfg.cross_heads,
                  "random_recall": rnd, "random_recall_mean": float(np.mean(rnd)) if rnd else None,
                  "random_recall_std": float(np.std(rnd)) if rnd else None,
                  "conditions": [{**c.to_json(), "recall": recall[c.label]} for c in conds],
                  "top_heads": ranking[:20], "random_warnings": warnings, "elapsed_seconds": time.time() - t0}
        run.write_results(TextHeadsResults(**result).to_json())  # the kind's keys, in its order
    print_table(f"text-heads: top {min(10, L * H)} of {L * H} heads by {scorer.replace('_', '-')} score ({n_correct} of "
                f"{len(prompts)} needles recalled exactly)", ["rank", "head (layer:head)", "score"],
                [[i + 1, f"{l}:{h}", f"{float(scores[l, h]):.4g}"] for i, (l, h) in enumerate(ranking[:10])])
    cross_txt = f", cross {conds[1].label.split(':')[0]} {percent_text(result['cross_heads_recall'])}" if cross_src \
        else ""
    print_result(f"text-heads: needle recall {percent_text(result['recall'])}, top-{k} text heads masked "
                 f"{percent_text(result['text_heads_recall'])}{cross_txt}, random "
                 f"{percent_text(result['random_recall_mean'])} -> {cfg.out}")
    return result


def _record(p: NeedlePrompt, c: Any, text: str, n_tokens: int, span: tuple[int, int]) -> dict[str, Any]:
    """One test's record; ``copied_other``: the answer is another item's values (it copied, from the wrong item)."""
    from vrh.experiments.needles import answer_values

    return {"id": p.id, "task": TASK, "pred_text": text, "outcome": "correct" if judge(p, text) else "wrong",
            **c.tag(), "depth": p.depth, "length": p.length, "context": p.context, "units": p.units,
            "n_tokens": n_tokens, "needle_span": list(span), "values": list(p.values),
            "copied_other": answer_values(text) in p.decoys()}


def _copied_other(run: Any, prompts: Sequence[NeedlePrompt]) -> float:
    """Fraction of the unmasked answers that are another item's values: copied, but from the wrong item."""
    recs = {r["id"]: r for r in run.finished_samples() if r.get("condition") == "none"}
    return sum(bool(recs[p.id].get("copied_other")) for p in prompts) / len(prompts)


def _by(prompts: Sequence[NeedlePrompt], correct: dict[str, bool], field: str) -> dict[str, float]:
    groups: dict[str, list[bool]] = {}
    for p in prompts:
        groups.setdefault(str(getattr(p, field)), []).append(correct[p.id])
    return {key: sum(v) / len(v) for key, v in groups.items()}


def _ranking(scores: torch.Tensor) -> list[tuple[int, int]]:
    from vrh.core.heads import rank_heads

    return rank_heads(scores)


def _write_scores(run: Any, variants: dict[str, torch.Tensor], scorer: str, n_scored: int, n: int) -> None:
    from vrh import runs

    out = {name: {"scores": s.tolist(), "ranking": [list(h) for h in _ranking(s)], "n_positive_heads": int((s > 0).sum())}
           for name, s in variants.items()}
    L, H = variants[scorer].shape
    runs.write_head_scores(run, runs.HeadScores(scorer=scorer, num_layers=L, num_heads=H, n_scored=n_scored,
                                                variants=out, extra={"task": TASK, "n_tests": n}))
