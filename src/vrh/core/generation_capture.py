"""Greedy answers and their attention rows from ONE ``generate()``: detection without a second pass.

Why: detection scores the rows of the queries that produce the answer tokens (and of the expression
tokens). Generating the answer and then re-running prompt + answer teacher-forced costs a second forward
over a prompt of thousands of visual tokens. But greedy decoding already computes those rows: the prefill
runs every prompt position (the expression tokens, and the last prompt token, which produces answer token 0),
and decode step ``t`` runs the one query at position ``P + t - 1`` (the row that produces answer token
``t``) against the cache's keys. :func:`generate_with_rows` keeps them (:func:`vrh.core.capture.capture_generation_rows`)
and lays them out exactly as a teacher-forced capture of the same tokens would.

What the answer is: the GENERATED ids before the first end-of-sequence id (``generation_config.eos_token_id``),
not the decoded text re-tokenized. The two differ when decoding does not round-trip (a byte-level token
that is half a character, special tokens that decoding skips, whitespace that ``strip()`` removes); the
one-pass rows are then the rows the model really computed while answering. ``texts`` are exactly what
:func:`vrh.models.generation.generate_answers` returns for the same batch.

The last answer token's own row (``QuerySets.out_own``, OCR heads' ``out_own`` query) is computed only by the
step after it: when that sample stopped at an end-of-sequence token, that step ran (it produced the EOS);
when it ran to ``max_new_tokens``, one extra decode step is generated (``max_new_tokens + 1``) and its token
dropped, which changes no answer (greedy steps do not look ahead) and costs one decode step, so ``out_own``
stays that of the teacher-forced pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from vrh.models.adapters import VisionBatch
from vrh.core.capture import GenerationRowCapture, capture_generation_rows
from vrh.models.loading import LoadedModel
from vrh.models.generation import check_batch_fits, inputs_on_device
from vrh.models.queries import QuerySets, query_sets


@dataclass
class GeneratedRows:
    """Greedy answers of a batch and the rows detection scores, in generation coordinates.

    ``batch``: the prompt batch (left-padded to ``P``) whose ``inputs`` are now ``input_ids`` = prompt +
    generated ids (B, P + T) and ``attention_mask`` (1 on prompt and answer tokens, 0 on padding, the EOS and
    what follows), and whose ``answer_positions[b]`` are the generated answer tokens ``P .. P + A_b - 1``;
    so :func:`vrh.models.queries.query_sets` and every position-based reader work on it unchanged.
    ``queries[b]``: those query sets (None for an empty answer). ``rows(b)``: ``[L, H, Q_b, S_b]`` in the
    order of ``queries[b].positions``.
    """

    texts: list[str]
    meta: list[dict[str, Any]]
    batch: VisionBatch
    answer_ids: list[torch.Tensor]  # per sample: LongTensor [A_b] generated ids before the first EOS
    queries: list[QuerySets | None]
    capture: GenerationRowCapture
    order: list[int] | None = None  # sample b's index in the generated batch (None: b itself), see select()

    @property
    def num_forwards(self) -> int:
        """Forwards over the prompt (the prefill): 1. Decode steps see one token each and are not counted."""
        return 1 if self.capture.prompt_len is not None else 0

    def rows(self, b: int) -> torch.Tensor:
        q = self.queries[b]
        if q is None:
            raise ValueError(f"sample {b}: empty answer, no rows to score")
        return self.capture.rows(b if self.order is None else self.order[b], q.positions)  # (L, H, Q_b, S_b)

    def select(self, keep: Sequence[int]) -> GeneratedRows:
        """The samples ``keep`` (in that order) as a batch of their own; rows are shared, not copied."""
        keep = list(keep)
        b = self.batch
        pick = lambda xs: [xs[i] for i in keep]  # noqa: E731
        sub = replace(b, inputs={k: v[keep] for k, v in b.inputs.items()}, visual_positions=pick(b.visual_positions),
                      visual_rects=pick(b.visual_rects), expression_positions=pick(b.expression_positions),
                      answer_positions=pick(b.answer_positions), image_sizes=pick(b.image_sizes),
                      meta=pick(b.meta) if b.meta else [], cell_tokens=pick(b.cell_tokens))
        order = keep if self.order is None else [self.order[i] for i in keep]
        return GeneratedRows(texts=pick(self.texts), meta=pick(self.meta), batch=sub, answer_ids=pick(self.answer_ids),
                             queries=pick(self.queries), capture=self.capture, order=order)


def eos_ids(model: torch.nn.Module) -> list[int]:
    """The ids that end a generated answer: the model's ``generation_config.eos_token_id`` (int or list)."""
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        return []
    return [int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])]


def answer_lengths(new: torch.Tensor, eos: Sequence[int]) -> list[int]:
    """Per row of generated ids ``new`` (B, T): how many come before the first EOS id (T if none).

    >>> answer_lengths(torch.tensor([[5, 2, 0], [5, 6, 7]]), [2])
    [1, 3]
    """
    stop = torch.isin(new, torch.tensor(list(eos), dtype=new.dtype)) if eos else torch.zeros_like(new, dtype=torch.bool)
    first = torch.where(stop.any(1), stop.int().argmax(1), torch.full((new.shape[0],), new.shape[1]))  # (B,)
    return [int(n) for n in first]


@torch.no_grad()
def generate_with_rows(lm: LoadedModel, images: list, prompts: list[str], expressions: list[str],
                       max_new_tokens: int = 64, layers: Sequence[int] | None = None) -> GeneratedRows:
    """Greedy answers for a batch of (image, prompt) and, from the same ``generate()``, the rows of every query
    that :func:`vrh.models.queries.query_sets` names (expression tokens, last prompt token, answer producers and
    the answer tokens' own rows); ``layers`` as in :func:`vrh.core.capture.capture_attention_rows`."""
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    batch = lm.adapter.build_batch(lm.processor, images, prompts, expressions=expressions)
    check_batch_fits(lm, batch, max_new_tokens)
    P = batch.seq_len
    tok = getattr(lm.processor, "tokenizer", lm.processor)
    keep = [torch.unique(torch.cat([e, torch.tensor([P - 1])])) for e in batch.expression_positions]  # (E_b + 1,)
    with capture_generation_rows(lm.model, lm.adapter, keep, layers) as cap:
        out = lm.model.generate(**inputs_on_device(batch, lm.device), max_new_tokens=max_new_tokens + 1,
                                do_sample=False, pad_token_id=tok.pad_token_id)  # +1: see the module docstring
    new = out[:, P:P + max_new_tokens].cpu()  # (B, T) what generate_answers would return
    texts = [s.strip() for s in lm.adapter.decode(lm.processor, new)]
    lengths = answer_lengths(new, eos_ids(lm.model))
    steps = torch.arange(new.shape[1])  # (T,)
    answer_mask = (steps[None, :] < torch.tensor(lengths)[:, None]).to(batch.inputs["attention_mask"].dtype)  # (B, T)
    inputs = {"input_ids": torch.cat([batch.inputs["input_ids"], new], dim=1),  # (B, P + T)
              "attention_mask": torch.cat([batch.inputs["attention_mask"], answer_mask], dim=1)}  # (B, P + T)
    gen_batch = replace(batch, inputs=inputs, answer_positions=[P + torch.arange(n) for n in lengths])
    queries = [query_sets(gen_batch, b, lm.processor) if n else None for b, n in enumerate(lengths)]
    return GeneratedRows(texts=texts, meta=batch.meta or [{} for _ in texts], batch=gen_batch,
                         answer_ids=[new[b, :n] for b, n in enumerate(lengths)], queries=queries, capture=cap)
