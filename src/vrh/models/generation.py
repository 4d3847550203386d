"""Running a loaded model: greedy answers, the prompt-length guard, and the query sets of a batch.

These are the only places vrh generates with a model; every experiment goes through them, so masking
(:func:`vrh.core.masking.mask_heads`) and capture (:func:`vrh.core.capture.capture_attention_rows`) compose
the same way everywhere.
"""

from __future__ import annotations

import keyword
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import torch
from torch import nn

from vrh.models.adapters import VisionBatch
from vrh.models.loading import LoadedModel


def inputs_on_device(batch: VisionBatch, device: torch.device) -> dict[str, torch.Tensor]:
    """The batch's model inputs with every tensor on ``device`` (what ``generate`` takes as keywords)."""
    return {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in batch.inputs.items()}


def context_limit(model: nn.Module) -> int | None:
    """The most positions the language model was built for (``max_position_embeddings`` of its text config),
    or None when the config does not say."""
    cfg = getattr(model, "config", None)
    for c in (getattr(cfg, "text_config", None), cfg):
        n = getattr(c, "max_position_embeddings", None) if c is not None else None
        if isinstance(n, int) and n > 0:
            return n
    return None


def fit_context(lm: LoadedModel, task: Any, samples: Sequence[Any], max_new_tokens: int
                ) -> tuple[list[Any], list[dict[str, str]]]:
    """The samples whose prompt text and ``max_new_tokens`` answer tokens fit the model's context, and a skip
    record (``id``, ``reason`` with the length and the limit) for each of the others.

    Why before generating: a prompt beyond the context (a 100 kB expression) runs minutes at gigabytes of
    memory and would be judged as an ordinary parse failure. The count here is the prompt's text tokens, a
    lower bound of the sequence (visual tokens and the chat template add to it); a batch that is still too
    long once built is refused by :func:`check_batch_fits`."""
    limit = context_limit(getattr(lm, "model", None))  # a stand-in without a model (tests): nothing to check
    if limit is None:
        return list(samples), []
    tok = getattr(lm.processor, "tokenizer", lm.processor)
    keep, skipped = [], []
    for s in samples:
        n = len(tok(task.prompt(lm.adapter, s), add_special_tokens=False)["input_ids"])
        if n + max_new_tokens > limit:
            skipped.append({"id": s.id, "reason": f"prompt too long: {n} text tokens + {max_new_tokens} answer "
                                                  f"tokens exceed the model's context of {limit} positions"})
        else:
            keep.append(s)
    return keep, skipped


def check_batch_fits(lm: LoadedModel, batch: VisionBatch, max_new_tokens: int) -> None:
    """Refuse a built batch whose longest prompt (visual tokens included) plus ``max_new_tokens`` exceeds the
    model's context, naming both numbers (:func:`fit_context` has already skipped prompts whose text alone
    is too long)."""
    limit = context_limit(lm.model)
    if limit is not None and batch.seq_len + max_new_tokens > limit:
        raise ValueError(f"a prompt of {batch.seq_len} tokens (visual tokens included) + {max_new_tokens} answer "
                         f"tokens exceeds the model's context of {limit} positions; lower --max-new-tokens or "
                         "use images the processor turns into fewer visual tokens")


@torch.no_grad()
def generate_answers(lm: LoadedModel, images: list, prompts: list[str], max_new_tokens: int = 64
                     ) -> tuple[list[str], list[dict[str, Any]]]:
    """Greedy answers (new tokens only, decoded by the adapter) for a batch of (image, prompt), with the
    adapter's per-sample metadata that box parsing needs (e.g. the resized image size)."""
    batch = lm.adapter.build_batch(lm.processor, images, prompts)
    check_batch_fits(lm, batch, max_new_tokens)
    tok = getattr(lm.processor, "tokenizer", lm.processor)
    out = lm.model.generate(**inputs_on_device(batch, lm.device), max_new_tokens=max_new_tokens, do_sample=False,
                            pad_token_id=tok.pad_token_id)
    new = out[:, batch.seq_len:]  # (B, T) generated ids after the left-padded prompt
    texts = [s.strip() for s in lm.adapter.decode(lm.processor, new)]
    return texts, batch.meta or [{} for _ in texts]


@dataclass
class QuerySets:
    """Query positions of one sample, as indices into the captured row list ``positions``.

    ``out``: positions whose next-token prediction is an answer token (the query row that *produces*
    answer token i is the position of token i-1; the first is the last prompt token). ``in_``: the
    referring-expression tokens. ``coord``: the subset of ``out`` predicting tokens that contain a digit.
    ``last_prompt``: the last prompt token (a one-element index list). ``out_own``: the answer tokens' own
    positions, in answer order (OCR heads' reference reads the row at each answer token itself).

    Why the field names: they are the query kinds the scorers read (``SampleInfo.queries``, listed in
    :data:`vrh.scoring.functions.QUERY_KINDS`), ``in_`` for the kind ``in`` (a Python keyword), so
    :meth:`as_query_dict` derives the kinds from the fields and a new kind is one field here (computed in
    :func:`query_sets`) plus its name in ``QUERY_KINDS`` (a test holds the two together).
    """

    positions: torch.Tensor  # LongTensor [Q] sequence positions captured, ascending
    out: torch.Tensor
    in_: torch.Tensor
    coord: torch.Tensor
    last_prompt: torch.Tensor
    out_own: torch.Tensor

    @classmethod
    def kinds(cls) -> dict[str, str]:
        """Query kind -> the field that holds it, in field order (a trailing ``_`` marks a keyword kind).

        >>> QuerySets.kinds()
        {'out': 'out', 'in': 'in_', 'coord': 'coord', 'last_prompt': 'last_prompt', 'out_own': 'out_own'}
        """
        names = [f.name for f in fields(cls) if f.name != "positions"]
        return {(n[:-1] if keyword.iskeyword(n[:-1]) else n): n for n in names}

    def as_query_dict(self, prefix: str = "", kinds: Sequence[str] | None = None) -> dict[str, torch.Tensor]:
        """Query kind -> indices into ``positions`` (``SampleInfo.queries``), each kind named ``prefix + kind``
        (an extra capture pass names its own, e.g. ``null_in``); ``kinds`` picks some (default: all).

        >>> t = lambda *xs: torch.tensor(xs)
        >>> qs = QuerySets(t(3, 4, 5), out=t(1, 2), in_=t(0), coord=t(2), last_prompt=t(1), out_own=t(2))
        >>> {k: v.tolist() for k, v in qs.as_query_dict("null_", kinds=("in", "out")).items()}
        {'null_in': [0], 'null_out': [1, 2]}
        """
        held = self.kinds()
        unknown = sorted(set(kinds or ()) - set(held))
        if unknown:
            raise ValueError(f"query kinds {unknown} are not query sets; they are {list(held)}")
        return {prefix + k: getattr(self, held[k]) for k in (held if kinds is None else kinds)}


def query_sets(batch: VisionBatch, b: int, processor: Any) -> QuerySets:
    if batch.answer_positions is None:
        raise ValueError("query sets need a teacher-forced batch (build_batch with answers)")
    ans = batch.answer_positions[b]  # (A,)
    if len(ans) == 0:
        raise ValueError("empty answer: nothing to score")
    producers = ans - 1  # (A,) row producing answer token i sits at position i-1
    expr = batch.expression_positions[b]
    positions = torch.unique(torch.cat([producers, ans, expr]))  # sorted
    index = {int(p): i for i, p in enumerate(positions.tolist())}
    ids = batch.inputs["input_ids"][b]
    tok = getattr(processor, "tokenizer", processor)
    is_coord = [any(ch.isdigit() for ch in tok.decode([int(ids[p])])) for p in ans.tolist()]
    idx = lambda ps: torch.tensor([index[int(p)] for p in ps], dtype=torch.long)
    return QuerySets(
        positions=positions,
        out=idx(producers.tolist()),
        in_=idx(expr.tolist()),
        coord=idx([p for p, c in zip(producers.tolist(), is_coord) if c]),
        last_prompt=idx([int(producers[0])]),
        out_own=idx(ans.tolist()),
    )
