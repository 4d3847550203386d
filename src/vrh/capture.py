"""Capture softmax attention rows of the language model for a few query positions, in one forward.

Why this shape: scoring a head needs only the rows of the answer (or expression) tokens, but
``output_attentions=True`` forces the eager path and materializes every ``[B, H, N, N]`` map, which for a
VLM prompt of a few thousand image tokens is the dominant memory cost. Instead the language model runs
vrh's registered attention function (:mod:`vrh.attention`, name :data:`IMPL_NAME`, shared with the
uniform-attention ablation). It computes the layer output with the fused sdpa kernel (so logits are those
of a plain sdpa forward) and, while a capture is active, hands query and key to :class:`RowCapture`, which
recomputes ``softmax(q_sel @ k^T * scaling [softcapped] + mask_rows)`` only for the requested query rows,
storing them per layer in float32 on the CPU (so accelerator memory stays flat).

Only the language model's config is switched to :data:`IMPL_NAME`; the vision encoder keeps its own
implementation. The matching mask function is transformers' own sdpa mask, so the model builds exactly
the masks it would build for sdpa (padding, sliding windows, or ``None`` for plain causal).

Capture is meant for ONE teacher-forced forward over prompt+answer: a second forward of the language
model inside the block (e.g. ``generate()``) raises :class:`MultipleForwardsError`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from vrh.attention import IMPL_NAME, ensure_registered, language_model_uses_vrh

__all__ = ["IMPL_NAME", "MultipleForwardsError", "RowCapture", "capture_attention_rows",
           "ensure_registered"]

# The capture the attention function (vrh.attention.vrh_attention_forward) writes to. Module-level because transformers calls the attention
# function without any handle of ours; it is set only inside ``capture_attention_rows`` and always reset.
_ACTIVE: RowCapture | None = None

# Query rows of the softcapped output path computed at once; bounds its (B, H, chunk, S) buffer.
_SOFTCAP_CHUNK = 256


class MultipleForwardsError(RuntimeError):
    """A second language-model forward ran inside one ``capture_attention_rows`` block."""


class RowCapture:
    """Softmax rows captured during one forward; filled by the attention function, read with :meth:`rows`."""

    def __init__(self, query_positions: list[torch.Tensor], layers: list[int],
                 module_to_layer: dict[int, int]):
        self.query_positions = [torch.as_tensor(p, dtype=torch.long).reshape(-1).cpu() for p in query_positions]
        self.layers = layers  # vrh layer indices, in the order rows() stacks them
        self.num_forwards = 0  # language-model forwards seen (a forward = layers called once each)
        self._slot = {layer: i for i, layer in enumerate(layers)}
        self._module_to_layer = module_to_layer  # id(attention module) -> vrh layer index
        self._seen: set[int] = set()  # layers that ran in the current forward
        self._filled: set[int] = set()  # captured layers already written
        self._parts: list[list[torch.Tensor | None]] | None = None  # [b][slot]: (H, Q_b, S_layer) float32 CPU
        self._rows: dict[int, torch.Tensor] = {}  # b -> assembled (L, H, Q_b, S), built on first rows(b)

    # --- reading ------------------------------------------------------------------------------
    def rows(self, b: int) -> torch.Tensor:
        """float32 CPU ``[L, H, Q_b, S]`` softmax rows of sample ``b``; layers in the order requested.

        S is the longest key length over the captured layers. It differs per layer only with a KV cache
        whose sliding-window layers keep just their last tokens; those rows are right-aligned (the cache
        holds the most recent keys) and the evicted keys, outside the window, get weight 0.
        """
        if self._parts is None:
            raise RuntimeError("no language-model forward ran inside capture_attention_rows")
        missing = [layer for layer in self.layers if layer not in self._filled]
        if missing:
            raise RuntimeError(f"layers {missing} were not captured (forward interrupted?)")
        if b not in self._rows:
            parts = self._parts[b]
            kv_len = max(p.shape[-1] for p in parts)
            out = torch.zeros(len(parts), *parts[0].shape[:2], kv_len, dtype=torch.float32)  # (L, H, Q_b, S)
            for slot, part in enumerate(parts):
                out[slot, :, :, kv_len - part.shape[-1]:] = part  # right-aligned (H, Q_b, S_layer)
            self._rows[b] = out
            self._parts[b] = []  # the assembled copy is now the only one
        return self._rows[b]

    # --- writing (called by the attention function) --------------------------------------------
    def _layer_of(self, module: nn.Module) -> int | None:
        return self._module_to_layer.get(id(module))

    def _start_layer(self, layer: int) -> None:
        """Count forwards: a layer running twice means a second forward (generate, or a loop)."""
        if layer in self._seen:
            raise MultipleForwardsError(
                "capture_attention_rows captures exactly one language-model forward, but a second one started "
                "(generate() or several model(...) calls inside the block). Run one teacher-forced forward over "
                "prompt+answer, or open one capture block per forward.")
        if not self._seen:
            self.num_forwards += 1
        self._seen.add(layer)

    def _check_inputs(self, batch: int, q_len: int) -> None:
        if batch != len(self.query_positions):
            raise ValueError(f"got {len(self.query_positions)} query_positions tensors for a batch of {batch}")
        for b, pos in enumerate(self.query_positions):
            if pos.numel() and (int(pos.min()) < 0 or int(pos.max()) >= q_len):
                raise IndexError(f"sample {b}: query positions must lie in [0, {q_len}), got {pos.tolist()}")
        self._parts = [[None] * len(self.layers) for _ in self.query_positions]

    def _store(self, layer: int, query: torch.Tensor, key: torch.Tensor, attention_mask: torch.Tensor | None,
               scaling: float, is_causal: bool, softcap: float | None) -> None:
        batch, _, q_len, _ = query.shape  # (B, H, N, D)
        if self._parts is None:
            self._check_inputs(batch, q_len)
        slot = self._slot[layer]
        for b, pos in enumerate(self.query_positions):
            pos_dev = pos.to(query.device)
            rows = _softmax_rows(query[b:b + 1, :, pos_dev], key[b:b + 1], attention_mask, b, pos_dev,
                                 q_len, scaling, is_causal, softcap)  # (1, H, Q_b, S_layer)
            self._parts[b][slot] = rows[0].to("cpu", torch.float32)  # (H, Q_b, S_layer)
        self._filled.add(layer)


# --- math ---------------------------------------------------------------------------------------
def _mask_rows(attention_mask: torch.Tensor | None, b: int, pos: torch.Tensor, q_len: int, kv_len: int,
               is_causal: bool, device: torch.device, dtype: torch.dtype = torch.float32) -> torch.Tensor | None:
    """Additive ``dtype`` mask for the selected query rows of sample ``b``, shape (1 or H, Q, S), or None.

    A materialized mask (bool: True = attend; or additive float) is sliced; masked entries become
    ``finfo(dtype).min`` as in eager, so fully masked rows (queries on left padding) match eager's
    uniform rows. With ``attention_mask=None`` the rows follow exactly what sdpa then computes: nothing
    masked for one query or a non-causal module, else ``is_causal``'s upper-left alignment (key j <= query
    i). transformers only leaves the mask to ``is_causal`` when no earlier tokens are cached (q_offset 0:
    kv_len == q_len, or a static cache's empty tail, which sdpa crops), so that equals true causality.
    """
    neg = torch.finfo(dtype).min
    if attention_mask is not None:
        m = attention_mask[b if attention_mask.shape[0] > 1 else 0]  # (1 or H, N, S)
        m = m[:, pos if m.shape[1] > 1 else torch.zeros_like(pos), :kv_len]  # (1 or H, Q, S)
        if m.dtype == torch.bool:
            return torch.zeros(m.shape, dtype=dtype, device=device).masked_fill_(~m, neg)
        return m.to(dtype).clamp_min(neg)
    if q_len == 1 or not is_causal:
        return None
    keys = torch.arange(kv_len, device=device)  # (S,)
    allowed = keys[None, :] <= pos[:, None]  # (Q, S), upper-left aligned as sdpa's is_causal
    return torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill_(~allowed, neg)[None]


def _softmax_rows(q_sel: torch.Tensor, key: torch.Tensor, attention_mask: torch.Tensor | None, b: int,
                  pos: torch.Tensor, q_len: int, scaling: float, is_causal: bool,
                  softcap: float | None) -> torch.Tensor:
    """Softmax attention rows for the selected queries of one sample, float32 (1, H, Q, S).

    GQA without copying K: query head h uses KV head h // n_rep (the order of transformers' repeat_kv),
    so the Q rows of the n_rep heads sharing a KV head are stacked and multiplied by that head's K once.
    Computed in float32 whatever the model dtype, so the rows are as exact as the stored format.
    """
    _, heads, n_q, dim = q_sel.shape  # (1, H, Q, D)
    _, kv_heads, kv_len, _ = key.shape  # (1, Hkv, S, D)
    n_rep = heads // kv_heads
    q = q_sel.to(torch.float32).reshape(1, kv_heads, n_rep * n_q, dim)  # (1, Hkv, n_rep*Q, D)
    k = key.to(torch.float32)  # (1, Hkv, S, D)
    scores = torch.matmul(q, k.transpose(2, 3)) * scaling  # (1, Hkv, n_rep*Q, S)
    scores = scores.reshape(1, heads, n_q, kv_len)  # (1, H, Q, S)
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    mask = _mask_rows(attention_mask, b, pos, q_len, kv_len, is_causal, scores.device)
    if mask is not None:
        scores = scores + mask[None]  # (1, H, Q, S) + (1, 1 or H, Q, S)
    return torch.softmax(scores, dim=-1)


def _softcap_output(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    attention_mask: torch.Tensor | None, scaling: float, is_causal: bool, softcap: float,
                    dropout: float) -> torch.Tensor:
    """Layer output for softcapped attention (gemma2), which sdpa cannot express.

    Same arithmetic as eager (softcap, add mask, float32 softmax cast back, dropout), but query rows go
    in chunks of ``_SOFTCAP_CHUNK`` so no (B, H, N, N) buffer exists. Returns (B, N, H, D) like sdpa.
    """
    from transformers.integrations.sdpa_attention import repeat_kv

    batch, heads, q_len, _ = query.shape  # (B, H, N, D)
    n_rep = heads // key.shape[1]
    k = repeat_kv(key, n_rep)  # (B, H, S, D)
    v = repeat_kv(value, n_rep)  # (B, H, S, Dv)
    kv_len = k.shape[2]
    outs = []
    for start in range(0, q_len, _SOFTCAP_CHUNK):
        stop = min(start + _SOFTCAP_CHUNK, q_len)
        w = torch.matmul(query[:, :, start:stop], k.transpose(2, 3)) * scaling  # (B, H, C, S)
        w = torch.tanh(w / softcap) * softcap
        pos = torch.arange(start, stop, device=query.device)  # (C,)
        masks = [_mask_rows(attention_mask, b, pos, q_len, kv_len, is_causal, w.device, w.dtype)
                 for b in range(batch)]
        if masks[0] is not None:
            w = w + torch.stack(masks)  # (B, H, C, S) + (B, 1 or H, C, S)
        w = torch.softmax(w, dim=-1, dtype=torch.float32).to(query.dtype)
        w = nn.functional.dropout(w, p=dropout, training=module.training)
        outs.append(torch.matmul(w, v))  # (B, H, C, Dv)
    return torch.cat(outs, dim=2).transpose(1, 2).contiguous()  # (B, N, H, Dv)


# --- the capture context ---------------------------------------------------------------------
@contextmanager
def capture_attention_rows(model: nn.Module, adapter: Any, query_positions: list[torch.Tensor],
                           layers: Sequence[int] | None = None) -> Iterator[RowCapture]:
    """Capture softmax rows of the language model for the given query positions during ONE forward.

    Inside the block run one ``model(**batch.inputs)``. ``query_positions[b]`` is a LongTensor [Q_b] of
    positions in sample b's (left-padded) input sequence, i.e. indices into this forward's tokens.
    ``layers`` (default: all) are vrh layer indices; ``rows(b)`` stacks them in the given order. The
    language model runs with :data:`IMPL_NAME` (sdpa output, same logits) and its previous
    implementation is restored on exit; the vision encoder is never switched. Not re-entrant.
    """
    global _ACTIVE
    if _ACTIVE is not None:
        raise RuntimeError("capture_attention_rows is already active; nested captures are not supported")
    n_layers = adapter.num_layers(model)
    layer_list = list(range(n_layers)) if layers is None else [int(x) for x in layers]
    bad = [x for x in layer_list if not 0 <= x < n_layers]
    if bad or len(set(layer_list)) != len(layer_list):
        raise ValueError(f"layers must be distinct indices in [0, {n_layers}), got {layer_list}")
    module_to_layer = {id(adapter.attention_module(model, x)): x for x in range(n_layers)}
    capture = RowCapture(query_positions, layer_list, module_to_layer)

    with language_model_uses_vrh(model, adapter):
        try:
            _ACTIVE = capture
            yield capture
        finally:
            _ACTIVE = None
