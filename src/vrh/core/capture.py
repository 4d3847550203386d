"""Capture softmax attention rows of the language model for a few query positions, in one forward.

Why this shape: scoring a head needs only the rows of the answer (or expression) tokens, but
``output_attentions=True`` forces the eager path and materializes every ``[B, H, N, N]`` map, which for a
VLM prompt of a few thousand image tokens is the dominant memory cost. Instead the language model runs
vrh's registered attention function (:mod:`vrh.core.attention`, name :data:`IMPL_NAME`, shared with the
uniform-attention ablation). It computes the layer output with the fused sdpa kernel (so logits are those
of a plain sdpa forward). :class:`RowCapture` subscribes to it as an observer
(:func:`vrh.core.attention.observe_attention`): per layer it gets query and key and recomputes
``softmax(q_sel @ k^T * scaling [softcapped])`` over the keys :func:`vrh.core.attention.allowed_keys` makes
visible, only for the requested query rows, storing them per layer in float32 on the CPU (so accelerator
memory stays flat). A layer that runs on the CPU, where rows and activations share one memory, keeps
instead what the rows are computed from (the selected query rows and a reference to the layer's keys, which
the KV cache holds anyway) whenever that is smaller than the rows, and computes the rows when the block
exits: the same arithmetic on the same tensors, but after the forward's activations are freed, so the
rows do not add to the forward's peak memory.

Only the language model's config is switched to :data:`IMPL_NAME`; the vision encoder keeps its own
implementation. The matching mask function is transformers' own sdpa mask, so the model builds exactly
the masks it would build for sdpa (padding, sliding windows, or ``None`` for plain causal).

Key spaces: rows are laid out over ONE key axis. In a decoder-only VLM that is the text sequence (the visual
tokens are positions of it). In a cross-attention VLM (Llama 3.2 Vision, :mod:`vrh.core.layout`) the visual
tokens are the keys of the cross-attention layers, the vision states, while the other layers self-attend
over the text. A capture reads one key space (``keys``; default: where the adapter's visual tokens are,
:func:`vrh.core.layout.visual_key_space`); the rows of a layer whose module reads the other key space are
zero, since it puts no weight on these keys (a self-attention head never sees a vision state).

Capture is meant for ONE teacher-forced forward over prompt+answer: a second forward of the language
model inside the block (e.g. ``generate()``) raises :class:`MultipleForwardsError`. To capture while
generating, use :func:`capture_generation_rows` instead (:class:`GenerationRowCapture`): the prefill gives the
rows of prompt positions, and each KV-cached decode step computes exactly the one query row that produces
the next token, against the cache's keys, so an answer's rows come without a second pass over the prompt.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from vrh.core.layout import KEY_SPACES, SEQUENCE, VISION, LanguageModelLayout, layer_key_space, visual_key_space
from vrh.core.attention import (IMPL_NAME, AttentionCall, active_observers, allowed_keys, ensure_registered,
                           language_model_uses_vrh, observe_attention)

__all__ = ["IMPL_NAME", "GenerationRowCapture", "MultipleForwardsError", "RowCapture", "capture_attention_rows",
           "capture_generation_rows", "ensure_registered"]


class MultipleForwardsError(RuntimeError):
    """A second language-model forward ran inside one ``capture_attention_rows`` block."""


class RowCapture:
    """Softmax rows captured during one forward; an attention observer (see :func:`vrh.core.attention.observe_attention`).

    Called once per attention-module forward (``capture(call)``), it counts forwards and stores the rows of
    the layers it captures; read them with :meth:`rows`.
    """

    def __init__(self, query_positions: list[torch.Tensor], layers: list[int],
                 module_to_layer: dict[int, int], blank: frozenset[int] = frozenset()):
        self.query_positions = [torch.as_tensor(p, dtype=torch.long).reshape(-1).cpu() for p in query_positions]
        self.layers = layers  # vrh layer indices, in the order rows() stacks them
        self._blank = blank  # layers reading the other key space: zero rows (see the module docstring)
        self.num_forwards = 0  # language-model forwards seen (a forward = layers called once each)
        self._slot = {layer: i for i, layer in enumerate(layers)}
        self._module_to_layer = module_to_layer  # id(attention module) -> vrh layer index
        self._seen: set[int] = set()  # layers that ran in the current forward
        self._filled: set[int] = set()  # captured layers already written
        self._parts: list[list[torch.Tensor | None]] | None = None  # [b][slot]: (H, Q_b, S_layer) float32 CPU
        # rows left to compute when the forward is over (CPU layers only, see _store): (b, slot, operands)
        self._deferred: list[tuple[int, int, _RowOperands]] = []
        self._rows: dict[int, torch.Tensor] = {}  # b -> assembled (L, H, Q_b, S), built on first rows(b)

    # --- reading ------------------------------------------------------------------------------
    def rows(self, b: int) -> torch.Tensor:
        """float32 CPU ``[L, H, Q_b, S]`` softmax rows of sample ``b``; layers in the order requested.

        S is the longest key length over the captured layers. It differs per layer only with a KV cache
        whose sliding-window layers keep just their last tokens; those rows are right-aligned (the cache
        holds the most recent keys) and the evicted keys, outside the window, get weight 0. Layers reading
        the other key space have zero rows.
        """
        if self._parts is None:
            raise RuntimeError("no language-model forward ran inside capture_attention_rows")
        missing = [layer for layer in self.layers if layer not in self._filled]
        if missing:
            raise RuntimeError(f"layers {missing} were not captured (forward interrupted?)")
        self.finish()
        if b not in self._rows:
            parts = self._parts[b]
            stored = [p for p in parts if p is not None]
            if not stored:
                raise RuntimeError(f"none of the captured layers {self.layers} reads the key space asked for")
            kv_len = max(p.shape[-1] for p in stored)
            out = torch.zeros(len(parts), *stored[0].shape[:2], kv_len, dtype=torch.float32)  # (L, H, Q_b, S)
            for slot, part in enumerate(parts):
                if part is not None:  # None: a layer of the other key space, zero rows
                    out[slot, :, :, kv_len - part.shape[-1]:] = part  # right-aligned (H, Q_b, S_layer)
            self._rows[b] = out
            self._parts[b] = []  # the assembled copy is now the only one
        return self._rows[b]

    def finish(self) -> None:
        """Compute the rows deferred by CPU layers (see :meth:`_store`); called when the capture block exits."""
        with torch.no_grad():
            while self._deferred:
                b, slot, operands = self._deferred.pop(0)  # dropping the operands frees that layer's keys
                self._parts[b][slot] = _softmax_of(operands)[0]  # (H, Q_b, S_layer), float32 on the CPU

    # --- writing (the attention observer) -------------------------------------------------------
    def __call__(self, call: AttentionCall) -> None:
        """Count the forward and, for a captured layer, store its rows; modules of other models are ignored."""
        layer = self._module_to_layer.get(id(call.module))
        if layer is None:
            return
        self._start_layer(layer)
        if layer not in self._slot:
            return
        if self._parts is None:
            self._check_inputs(call.query.shape[0], call.query.shape[2])  # query (B, H, N, D)
        if layer in self._blank:
            self._filled.add(layer)  # its rows stay zero
        else:
            self._store(layer, call)

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

    def _store(self, layer: int, call: AttentionCall) -> None:
        slot = self._slot[layer]
        # On the CPU the rows would sit in the same memory as the forward's activations until its end, at
        # its peak (e.g. the logits); the keys they come from are alive then anyway when a KV cache holds them.
        # Keeping the operands instead costs at most the keys (not copied) whenever those are the smaller.
        key, heads, kv_len = call.key, call.query.shape[1], call.key.shape[2]  # key (B, Hkv, S, D)
        rows_bytes = sum(heads * pos.numel() * kv_len * 4 for pos in self.query_positions)  # float32 rows
        defer = key.device.type == "cpu" and key.untyped_storage().nbytes() <= rows_bytes
        for b, pos in enumerate(self.query_positions):
            operands = _row_operands(call, b, pos.to(call.query.device))
            if defer:
                self._deferred.append((b, slot, operands))
            else:
                rows = _softmax_of(operands)  # (1, H, Q_b, S_layer)
                self._parts[b][slot] = rows[0].to("cpu", torch.float32)  # (H, Q_b, S_layer)
        self._filled.add(layer)


# --- math ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _RowOperands:
    """What softmax rows are computed from: ``query`` (B', H, Q, D) the selected query rows and ``key``
    (B', Hkv, S, D) a view of the layer's keys, both in the model's dtype; ``allowed`` (B'|1, 1|H, Q, S)
    the visible keys, None when every key is."""

    query: torch.Tensor
    key: torch.Tensor
    allowed: torch.Tensor | None
    scaling: float
    softcap: float | None


def _softmax_rows(call: AttentionCall, b: int | None, pos: torch.Tensor) -> torch.Tensor:
    """Softmax attention rows of sample ``b``'s queries ``pos`` (Q,), float32 (1, H, Q, S); ``b=None``: the
    same queries of every sample at once, (B, H, Q, S) (a decode step's one query row per sample).

    ``softmax(cap(q_sel @ k^T * scaling))`` over the keys :func:`vrh.core.attention.allowed_keys` lets them see;
    hidden keys get float32's min, which is what eager's additive ``scores + min`` rounds to, so fully hidden
    rows (left-padding queries) come out uniform as in eager. See :func:`_softmax_of` for the arithmetic.
    """
    return _softmax_of(_row_operands(call, b, pos))


def _row_operands(call: AttentionCall, b: int | None, pos: torch.Tensor) -> _RowOperands:
    """The operands of :func:`_softmax_rows` (the query rows gathered, the keys and mask only sliced)."""
    _, _, q_len, _ = call.query.shape  # (B, H, N, D)
    kv_len = call.key.shape[2]  # (B, Hkv, S, D)
    rows = slice(None) if b is None else slice(b, b + 1)
    q = call.query[rows]  # (B', H, N, D)
    if not (q_len == 1 and pos.numel() == 1):  # a decode step's one query needs no gather (cheap: once per layer)
        q = q[:, :, pos]  # (B', H, Q, D)
    mask, allowed = call.attention_mask, None
    if mask is not None or (q_len > 1 and call.is_causal):  # else every key is visible (allowed_keys' rule)
        if mask is not None and mask.shape[0] > 1:
            mask = mask[rows]  # (B', 1 or H, N, S): only these samples' masks are read
        allowed = allowed_keys(mask, q_len, kv_len, call.is_causal, q.device, pos)  # (B'|1, 1|H, Q, S)
    return _RowOperands(q, call.key[rows], allowed, call.scaling, call.softcap)


def _softmax_of(op: _RowOperands) -> torch.Tensor:
    """float32 (B', H, Q, S) softmax rows from their operands (see :func:`_softmax_rows`).

    GQA without copying K: query head h uses KV head h // n_rep (the order of transformers' repeat_kv), so
    the Q rows of the n_rep heads sharing a KV head are stacked and multiplied by that head's K once.
    Computed in float32 whatever the model dtype, so the rows are as exact as the stored format.
    """
    n_b, heads, n_q, dim = op.query.shape  # (B', H, Q, D)
    _, kv_heads, kv_len, _ = op.key.shape  # (B', Hkv, S, D)
    n_rep = heads // kv_heads
    q = op.query.to(torch.float32).reshape(n_b, kv_heads, n_rep * n_q, dim)  # (B', Hkv, n_rep*Q, D)
    k = op.key.to(torch.float32)  # (B', Hkv, S, D)
    scores = torch.matmul(q, k.transpose(2, 3)) * op.scaling  # (B', Hkv, n_rep*Q, S)
    scores = scores.reshape(n_b, heads, n_q, kv_len)  # (B', H, Q, S)
    if op.softcap is not None:
        scores = torch.tanh(scores / op.softcap) * op.softcap
    if op.allowed is not None:
        scores = scores.masked_fill(~op.allowed, torch.finfo(torch.float32).min)
    return torch.softmax(scores, dim=-1)


# --- capture during generation ---------------------------------------------------------------------
class GenerationRowCapture:
    """Softmax rows captured during one KV-cached ``generate()``; an attention observer.

    Why it is exact: forward 0 (the prefill) runs every prompt position, and decode forward ``t >= 1`` runs
    one query, the token at position ``P + t - 1`` (``P`` = the left-padded prompt length), against the
    cache's keys: that query row is the one that produces generated token ``t``, i.e. the row a
    teacher-forced forward over prompt + generated tokens computes at that position (same keys, same mask).
    So the rows of the prompt positions asked for (``prompt_positions[b]``, positions in ``[0, P)``) are
    kept from the prefill, and the one row of every sample from each decode step; :meth:`rows` lays any of
    them out on one key axis, as :class:`RowCapture` does for a teacher-forced forward.

    Needs a cache that holds each key once, in order (transformers' default dynamic cache; sliding-window
    layers keeping only their last keys are fine, their rows are right-aligned): a static cache's unwritten
    slots or a decode step of several tokens (assisted / speculative decoding) raise ``RuntimeError``.
    """

    def __init__(self, prompt_positions: list[torch.Tensor], layers: list[int], module_to_layer: dict[int, int],
                 blank: frozenset[int] = frozenset(), keys: str = SEQUENCE):
        self.prompt_positions = [torch.as_tensor(p, dtype=torch.long).reshape(-1).cpu() for p in prompt_positions]
        self.layers = layers  # vrh layer indices, in the order rows() stacks them
        self.keys = keys  # the key space of the rows (SEQUENCE: positions; VISION: the cross-attention keys)
        self._blank = blank  # layers reading the other key space: zero rows (see the module docstring)
        self.num_forwards = 0  # language-model forwards seen: the prefill, then one per decode step
        self.prompt_len: int | None = None  # P, the prefill's query length
        self._slot = {layer: i for i, layer in enumerate(layers)}
        self._module_to_layer = module_to_layer  # id(attention module) -> vrh layer index
        self._seen: set[int] = set()  # layers that ran in the current forward
        self._prefill: list[list[torch.Tensor | None]] = []  # [b][slot]: (H, Q_b, S_layer) float32 CPU
        self._steps: list[list[torch.Tensor | None]] = []  # [t - 1][slot]: (B, H, S_layer) float32 CPU
        # the current step's rows, still on the model's device: moved to the CPU together when the next forward
        # starts (one wait per step, not one per layer, on an accelerator)
        self._pending: list[tuple[int, int, torch.Tensor]] = []  # (step, slot, (B, H, S_layer))
        self._zero = torch.zeros(1, dtype=torch.long)  # the decode step's only query

    # --- reading ------------------------------------------------------------------------------
    def rows(self, b: int, positions: torch.Tensor) -> torch.Tensor:
        """float32 CPU ``[L, H, Q, S]`` rows of sample ``b`` at ``positions`` (Q,), in that order.

        A position below ``P`` must be one of ``prompt_positions[b]``; position ``p >= P`` is the query of
        decode step ``p - P + 1`` (the row producing token ``p - P + 1``), which must have run. ``S`` is
        ``max(positions) + 1``: keys are the sequence positions of prompt + generated tokens, keys after a
        query (and left padding) weigh 0, as in a teacher-forced capture of the same tokens. Over
        :data:`~vrh.core.layout.VISION` keys ``S`` is the number of cross-attention keys, which every step reads
        whole (they do not grow with the text).
        """
        if self.prompt_len is None:
            raise RuntimeError("no language-model forward ran inside capture_generation_rows")
        self._flush()
        pos = [int(p) for p in torch.as_tensor(positions).reshape(-1)]
        if not pos:
            raise ValueError("no query position asked for")
        P, last_step = self.prompt_len, len(self._steps)
        prompt_index = {int(p): i for i, p in enumerate(self.prompt_positions[b].tolist())}
        bad = [p for p in pos if (p < P and p not in prompt_index) or p < 0 or p - P + 1 > last_step]
        if bad:
            raise IndexError(f"sample {b}: positions {bad} were not captured: prompt positions "
                             f"{sorted(prompt_index)} and generated positions [{P}, {P + last_step - 1}] are")
        stored = [part for part in self._prefill[b] if part is not None]
        if not stored:
            raise RuntimeError(f"none of the captured layers {self.layers} reads the key space asked for")
        vision = self.keys == VISION
        kv_len = max(part.shape[-1] for part in stored) if vision else max(pos) + 1
        out = torch.zeros(len(self.layers), stored[0].shape[0], len(pos), kv_len)  # (L, H, Q, S)
        for i, p in enumerate(pos):
            for slot in range(len(self.layers)):
                if self.layers[slot] in self._blank:
                    continue  # the other key space: zero rows
                if p < P:
                    row = self._prefill[b][slot][:, prompt_index[p]]  # (H, S_layer), keys ending at P - 1
                    end = P
                else:
                    step = self._steps[p - P][slot]
                    if step is None:
                        raise RuntimeError(f"layer {self.layers[slot]} was not captured at decode step "
                                           f"{p - P + 1} (forward interrupted?)")
                    row, end = step[b], p + 1  # (H, S_layer), keys ending at the query itself
                if vision:
                    end = row.shape[-1]  # the cross-attention keys, the same at every step
                out[slot, :, i, end - row.shape[-1]:end] = row  # right-aligned: the cache keeps the latest keys
        return out

    # --- writing (the attention observer) -------------------------------------------------------
    def __call__(self, call: AttentionCall) -> None:
        layer = self._module_to_layer.get(id(call.module))
        if layer is None:
            return
        if layer in self._seen:  # the first layer again: the next forward (decode step) started
            self._seen = set()
        if not self._seen:
            self._flush()
            self.num_forwards += 1
            if self.num_forwards > 1:
                self._steps.append([None] * len(self.layers))
        self._seen.add(layer)
        if layer not in self._slot:
            return
        batch, _, q_len, _ = call.query.shape  # (B, H, N, D)
        slot, step = self._slot[layer], self.num_forwards - 1
        if step == 0:
            self._start_prefill(batch, q_len)
            if layer not in self._blank:
                self._store_prefill(slot, call)
            return
        kv_len = call.key.shape[2]  # (B, Hkv, S, D)
        if q_len != 1:
            raise RuntimeError(f"decode step {step} ran {q_len} query tokens; capture_generation_rows needs one new "
                               "token per step (no assisted, speculative or prompt-lookup decoding)")
        if layer in self._blank:
            return
        if self.keys == SEQUENCE and kv_len > self.prompt_len + step:
            raise RuntimeError(f"decode step {step} sees {kv_len} keys for {self.prompt_len + step} tokens: a static "
                               "or preallocated cache; capture_generation_rows needs the default dynamic cache")
        if self._zero.device != call.query.device:
            self._zero = self._zero.to(call.query.device)
        rows = _softmax_rows(call, None, self._zero)  # (B, H, 1, S_layer)
        self._pending.append((step, slot, rows[:, :, 0]))  # (B, H, S_layer)

    def _flush(self) -> None:
        for step, slot, rows in self._pending:
            self._steps[step - 1][slot] = rows.to("cpu", torch.float32)  # (B, H, S_layer)
        self._pending = []

    def _start_prefill(self, batch: int, q_len: int) -> None:
        if not self._prefill:
            if batch != len(self.prompt_positions):
                raise ValueError(f"got {len(self.prompt_positions)} prompt_positions tensors for a batch of {batch}")
            for b, pos in enumerate(self.prompt_positions):
                if pos.numel() and (int(pos.min()) < 0 or int(pos.max()) >= q_len):
                    raise IndexError(f"sample {b}: prompt positions must lie in [0, {q_len}), got {pos.tolist()}")
            self.prompt_len = q_len
            self._prefill = [[None] * len(self.layers) for _ in self.prompt_positions]

    def _store_prefill(self, slot: int, call: AttentionCall) -> None:
        for b, pos in enumerate(self.prompt_positions):
            rows = _softmax_rows(call, b, pos.to(call.query.device))  # (1, H, Q_b, S_layer)
            self._prefill[b][slot] = rows[0].to("cpu", torch.float32)  # (H, Q_b, S_layer)


# --- the capture contexts ------------------------------------------------------------------------
def _layer_map(model: nn.Module, adapter: LanguageModelLayout, layers: Sequence[int] | None, keys: str | None
               ) -> tuple[list[int], dict[int, int], frozenset[int], str]:
    """(requested vrh layers, {id(attention module): vrh layer} over all layers, the requested layers that read
    the other key space, the key space); refuses a nested capture and an unknown key space."""
    if any(isinstance(observer, (RowCapture, GenerationRowCapture)) for observer in active_observers()):
        raise RuntimeError("a row capture is already active; nested captures are not supported")
    n_layers = adapter.num_layers(model)
    layer_list = list(range(n_layers)) if layers is None else [int(x) for x in layers]
    bad = [x for x in layer_list if not 0 <= x < n_layers]
    if bad or len(set(layer_list)) != len(layer_list):
        raise ValueError(f"layers must be distinct indices in [0, {n_layers}), got {layer_list}")
    space = keys or visual_key_space(adapter, model)
    if space not in KEY_SPACES:
        raise ValueError(f"keys must be one of {KEY_SPACES}, got {keys!r}")
    blank = frozenset(x for x in layer_list if layer_key_space(adapter, model, x) != space)
    return layer_list, {id(adapter.attention_module(model, x)): x for x in range(n_layers)}, blank, space


@contextmanager
def capture_attention_rows(model: nn.Module, adapter: LanguageModelLayout, query_positions: list[torch.Tensor],
                           layers: Sequence[int] | None = None, keys: str | None = None) -> Iterator[RowCapture]:
    """Capture softmax rows of the language model for the given query positions during ONE forward.

    Inside the block run one ``model(**batch.inputs)``. ``query_positions[b]`` is a LongTensor [Q_b] of
    positions in sample b's (left-padded) input sequence, i.e. indices into this forward's tokens.
    ``layers`` (default: all) are vrh layer indices; ``rows(b)`` stacks them in the given order. The
    language model runs with :data:`IMPL_NAME` (sdpa output, same logits) and its previous
    implementation is restored on exit; the vision encoder is never switched. Not re-entrant. ``keys``: the
    key space of the rows (:data:`~vrh.core.layout.SEQUENCE` or :data:`~vrh.core.layout.VISION`; default:
    where the adapter's visual tokens are); layers reading the other one have zero rows.
    """
    layer_list, module_to_layer, blank, _ = _layer_map(model, adapter, layers, keys)
    capture = RowCapture(query_positions, layer_list, module_to_layer, blank)
    with language_model_uses_vrh(model, adapter), observe_attention(capture):
        yield capture
    capture.finish()  # the rows CPU layers deferred, now that the forward's activations are gone


@contextmanager
def capture_generation_rows(model: nn.Module, adapter: LanguageModelLayout, prompt_positions: list[torch.Tensor],
                            layers: Sequence[int] | None = None, keys: str | None = None
                            ) -> Iterator[GenerationRowCapture]:
    """Capture softmax rows during ONE ``model.generate(...)`` (greedy or sampled, default dynamic cache).

    ``prompt_positions[b]``: positions in sample b's left-padded prompt whose rows the prefill keeps (e.g.
    the expression tokens and the last prompt token); the row of every generated position is kept from its
    decode step. Read them with ``rows(b, positions)``. Same switching and layers as
    :func:`capture_attention_rows` (``keys`` too); not re-entrant.
    """
    layer_list, module_to_layer, blank, space = _layer_map(model, adapter, layers, keys)
    capture = GenerationRowCapture(prompt_positions, layer_list, module_to_layer, blank, space)
    with language_model_uses_vrh(model, adapter), observe_attention(capture):
        yield capture
