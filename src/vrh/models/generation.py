"""Running a loaded model: greedy answers and the prompt-length guard (a batch's query sets:
:mod:`vrh.models.queries`).

These are the only places vrh generates with a model; every experiment goes through them, so masking
(:func:`vrh.core.masking.mask_heads`) and capture (:func:`vrh.core.capture.capture_attention_rows`) compose
the same way everywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
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
def generate_answers(lm: LoadedModel, images: list, prompts: list[str], max_new_tokens: int = 64,
                     while_generating: Callable[[VisionBatch], AbstractContextManager[Any]] | None = None
                     ) -> tuple[list[str], list[dict[str, Any]]]:
    """Greedy answers (new tokens only, decoded by the adapter) for a batch of (image, prompt), with the
    adapter's per-sample metadata that box parsing needs (e.g. the resized image size).
    ``while_generating(batch)``: a context manager entered around ``generate`` with the batch just built (the
    knockout mask modes read its visual tokens there: :func:`vrh.core.knockout.knockout_batch`)."""
    batch = lm.adapter.build_batch(lm.processor, images, prompts)
    check_batch_fits(lm, batch, max_new_tokens)
    tok = getattr(lm.processor, "tokenizer", lm.processor)
    with while_generating(batch) if while_generating is not None else nullcontext():
        out = lm.model.generate(**inputs_on_device(batch, lm.device), max_new_tokens=max_new_tokens,
                                do_sample=False, pad_token_id=tok.pad_token_id)
    new = out[:, batch.seq_len:]  # (B, T) generated ids after the left-padded prompt
    texts = [s.strip() for s in lm.adapter.decode(lm.processor, new)]
    return texts, batch.meta or [{} for _ in texts]
