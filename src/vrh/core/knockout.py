"""Attention knockout: a head's logits from some queries to some keys set to ``-inf`` before its softmax.

The mechanism of the mask modes ``knockout-image`` and ``knockout-referent`` (:mod:`vrh.core.mask_modes`):
where ``zero`` removes what a head writes and ``uniform`` where it looks, a knockout removes only *which keys*
it may read: blocked from the visual tokens (or only the referent's, the key set of Eq. 1), the head still
attends to the text, with its softmax renormalised over what is left. It answers "is it the heads' attention
to the image (the referent) that matters, or anything they compute?" (Geva et al. 2023's attention knockout,
for fused attention).

How, without an N x N map: inside vrh's registered attention function (:func:`vrh.core.attention.
rewrite_attention`), after the fused output of the whole layer, the masked heads' rows of the blocked
queries only are recomputed, ``softmax(cap(q k^T * scaling))`` over the keys :func:`vrh.core.attention.
allowed_keys` makes visible minus the blocked ones, in chunks of :data:`_CHUNK` query rows (a (B, h, chunk,
S) buffer), and written over those heads' rows of the output. Every other head and row is the fused kernel's.

What is blocked, per batch row (each row its own key set, so a batch equals its samples one at a time):

* **keys**: the mode's key set (:class:`KnockoutBatch`): every visual token, or the referent's visual tokens
  (cell tokens whose rectangle overlaps the sample's box: :func:`vrh.core.regions.box_token_mask`, detection's
  rule and ``min_overlap``);
* **queries** (:data:`QUERY_RULES`, the setting ``--blocked-queries``, in ``config.json``): ``answer`` (the
  default), the queries that produce the answer tokens -- the last prompt position and every decode step, the
  rows Eq. 1 scores; or ``image``, every position from the row's first visual token on (the prompt's own
  reading of the image too).

Where the batch comes from: :func:`vrh.models.generation.generate_answers` announces each batch it builds
(:func:`knockout_batch`: the visual positions, rectangles, cell flags and the samples' boxes); a knockout
forward with no batch announced is an error, not a silent no-op.

Edge cases, stated once:

* a blocked row with no key left (a cross-attention head of Llama 3.2 Vision under ``knockout-image``: every
  key is a vision state) has **zero output** (the head writes nothing there, as ``zero`` mode), never NaN;
* in a cross-attention family the text holds no visual token, so its self-attention layers have no key to
  block (a knockout there changes nothing) and the ``image`` query rule blocks every query of its
  cross-attention layers (mllama already masks the text before the image out of cross-attention);
* a KV cache whose sliding-window layers keep only their last keys is read right-aligned, as capture reads
  it; the blocked positions that left the window are simply gone;
* capture observers see the attention of the un-knocked-out softmax (they run before it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import weakref

import torch
from torch import nn

from vrh.core.attention import AttentionCall, allowed_keys, language_model_uses_vrh, rewrite_attention
from vrh.core.heads import Head
from vrh.core.layout import VISION, LanguageModelLayout, layer_key_space, visual_key_space
from vrh.core.masking import RowSubset, validate_heads
from vrh.core.regions import box_token_mask

QUERY_RULES = {"answer": "the queries that produce the answer tokens (the last prompt position and every decode "
                         "step: the rows Eq. 1 scores)",
               "image": "every position from the row's first visual token on (the prompt's reading of the image "
                        "too)"}
DEFAULT_QUERIES = "answer"
_CHUNK = 256  # query rows recomputed at once: bounds the (B, h, chunk, S) float score buffer


@dataclass(frozen=True)
class KnockoutSettings:
    """Which queries a knockout blocks (:data:`QUERY_RULES`) and the referent's overlap rule (detection's
    ``min_overlap``)."""

    queries: str = DEFAULT_QUERIES
    min_overlap: float = 0.0

    def __post_init__(self):
        if self.queries not in QUERY_RULES:
            raise ValueError(f"knockout queries {self.queries!r}: choose from {tuple(QUERY_RULES)}")
        if not 0.0 <= self.min_overlap <= 1.0:
            raise ValueError(f"knockout min_overlap {self.min_overlap}: expected a fraction in [0, 1]")


_SETTINGS = KnockoutSettings()


@contextmanager
def knockout_settings(settings: KnockoutSettings) -> Iterator[None]:
    """Use ``settings`` for the knockouts run inside (the runner enters the command's); restored on exit."""
    global _SETTINGS
    previous = _SETTINGS
    try:
        _SETTINGS = settings
        yield
    finally:
        _SETTINGS = previous


def current_settings() -> KnockoutSettings:
    return _SETTINGS


# --- the batch: what each row's key set and queries are ------------------------------------------------------
@dataclass
class KnockoutBatch:
    """One prompt batch as a knockout reads it (a :class:`~vrh.models.adapters.VisionBatch`'s fields).

    ``visual_positions[b]`` (LongTensor [V_b]: sequence positions, or cross-attention key indices in a
    cross-attention family, ``in_text=False``), ``visual_rects[b]`` [V_b, 4], ``cell_tokens[b]`` bool [V_b],
    ``boxes[b]`` the sample's box (None: none), ``prompt_len`` the left-padded prompt length P.
    ``totals``: per attention module, the positions seen so far in this batch's generation (a decode step's
    query is at that position; the KV cache is read right-aligned from it).
    """

    visual_positions: list[torch.Tensor]
    visual_rects: list[torch.Tensor]
    cell_tokens: list[torch.Tensor]
    boxes: list[Any]
    prompt_len: int
    in_text: bool = True
    totals: dict[int, int] = field(default_factory=dict)
    _last: dict[int, tuple[Any, torch.Tensor, int]] = field(default_factory=dict)  # module -> (call ref, q_abs, total)

    def positions(self, call: AttentionCall) -> tuple[torch.Tensor, int]:
        """Where ``call``'s queries sit in the sequence (LongTensor [N]) and how many positions the module has
        seen with them. A decode step (one query after a prompt) is at the position the module has reached; any
        other call is a forward from position 0 (the prompt, or a step of a family generating without a cache).
        Counted once per call however many knockouts read it."""
        mid = id(call.module)
        last = self._last.get(mid)
        if last is not None and last[0]() is call:
            return last[1], last[2]
        q_len, seen = call.query.shape[2], self.totals.get(mid, 0)
        q_abs = torch.tensor([seen]) if q_len == 1 and seen > 0 else torch.arange(q_len)
        self.totals[mid] = int(q_abs[-1]) + 1
        self._last[mid] = (weakref.ref(call), q_abs, self.totals[mid])
        return q_abs, self.totals[mid]

    @property
    def batch_size(self) -> int:
        return len(self.visual_positions)

    def image_keys(self, b: int) -> torch.Tensor:
        """Row ``b``'s visual tokens, LongTensor [V_b]."""
        return self.visual_positions[b].reshape(-1).long()

    def referent_keys(self, b: int) -> torch.Tensor:
        """Row ``b``'s referent tokens, the key set of Eq. 1: cell tokens whose rectangle overlaps the box."""
        box = self.boxes[b] if b < len(self.boxes) else None
        if box is None:
            raise ValueError("knockout-referent: a sample without a box (a grounding sample's box is the referent); "
                             "use knockout-image for other tasks")
        inside = box_token_mask(self.visual_rects[b], box, _SETTINGS.min_overlap) & self.cell_tokens[b].bool()
        return self.image_keys(b)[inside.to(self.visual_positions[b].device)]

    def first_query(self, b: int, space: str) -> int:
        """The first blocked query position of row ``b`` in a layer reading key space ``space``."""
        if _SETTINGS.queries == "answer":
            return self.prompt_len - 1
        if space == VISION or not self.in_text:
            return 0
        vis = self.image_keys(b)
        return int(vis.min()) if vis.numel() else self.prompt_len - 1


_BATCH: KnockoutBatch | None = None


@contextmanager
def knockout_batch(batch: Any, boxes: Sequence[Any] | None = None, *, in_text: bool = True) -> Iterator[None]:
    """Announce the prompt batch generated inside (``batch``: a VisionBatch, or anything with its
    ``visual_positions``, ``visual_rects``, ``cell_tokens`` and ``seq_len``; ``boxes``: one per row, None where a
    sample has none). Cheap: nothing is computed unless a knockout runs. Restored on exit."""
    global _BATCH
    previous = _BATCH
    n = len(batch.visual_positions)
    boxes = list(boxes) if boxes is not None else [None] * n
    if len(boxes) != n:
        raise ValueError(f"knockout_batch: {len(boxes)} boxes for {n} rows")
    cells = list(batch.cell_tokens) or [torch.ones(len(v), dtype=torch.bool) for v in batch.visual_positions]
    try:
        _BATCH = KnockoutBatch(list(batch.visual_positions), list(batch.visual_rects), cells, boxes,
                               int(batch.seq_len), in_text)
        yield
    finally:
        _BATCH = previous


# --- the knockout of a set of heads --------------------------------------------------------------------------
KeyRule = Callable[[KnockoutBatch, int], torch.Tensor]  # (batch, row) -> LongTensor of blocked key positions


@dataclass
class _Entry:
    keys: KeyRule
    masked: dict[int, torch.Tensor]  # id(attention module) -> bool [B or 1, H]: heads masked per row
    space: dict[int, str]  # id(attention module) -> key space it reads
    subset: RowSubset | None


@contextmanager
def knockout_heads(model: nn.Module, adapter: LanguageModelLayout, row_heads: Sequence[Sequence[Head]],
                   keys: KeyRule, *, subset: RowSubset | None = None, every_row: bool = False) -> Iterator[None]:
    """Within the context, batch row b's heads ``row_heads[b]`` have ``keys(batch, b)`` blocked (see the module
    docstring); ``every_row=True``: ``row_heads`` holds one head set, applied to every row of any batch.
    Validated before anything is installed; the attention implementation is restored on exit, also on error;
    nests (each context blocks its own heads' keys). ``subset``: the rows a layer call computes
    (:class:`vrh.core.masking.RowSubset`, set by the shared prompt prefill)."""
    num_layers, num_heads = adapter.num_layers(model), adapter.num_heads(model)
    by_row = []
    for b, heads in enumerate(row_heads):
        try:
            by_row.append(validate_heads(heads, num_layers, num_heads))
        except ValueError as e:
            raise ValueError(f"row {b}: {e}") from None
    masked: dict[int, torch.Tensor] = {}
    space: dict[int, str] = {}
    for b, by_layer in enumerate(by_row):
        for layer, idx in by_layer.items():
            mid = id(adapter.attention_module(model, layer))
            if mid not in masked:
                masked[mid] = torch.zeros(len(row_heads), num_heads, dtype=torch.bool)
                space[mid] = layer_key_space(adapter, model, layer)
            masked[mid][b, idx] = True
    if every_row and len(row_heads) != 1:
        raise ValueError("knockout_heads(every_row=True) takes one head set")
    entry = _Entry(keys, masked, space, subset)
    if not masked:
        yield
        return
    in_text = visual_key_space(adapter, model) != VISION
    with language_model_uses_vrh(model, adapter), rewrite_attention(lambda c, v, o: _rewrite(entry, c, v, o,
                                                                                             in_text, every_row)):
        yield


def _rewrite(entry: _Entry, call: AttentionCall, value: torch.Tensor, out: torch.Tensor, in_text: bool,
             every_row: bool) -> torch.Tensor:
    """The output of ``call`` with ``entry``'s heads' blocked rows recomputed (see the module docstring)."""
    mid = id(call.module)
    table = entry.masked.get(mid)
    if table is None:
        return out
    batch = _BATCH
    if batch is None:
        raise RuntimeError("knockout: no prompt batch announced; generate through vrh.models.generation."
                           "generate_answers, or enter vrh.core.knockout.knockout_batch(batch, boxes)")
    n_call, n_heads, q_len, _ = call.query.shape  # (B, H, N, D)
    kv_len = call.key.shape[2]  # (B, Hkv, S, D)
    space = entry.space[mid]
    part = entry.subset.rows if entry.subset is not None else None
    rows = torch.arange(n_call) if part is None else part.cpu()  # the batch rows this call computes
    if len(rows) != n_call or (part is None and n_call != batch.batch_size):
        raise RuntimeError(f"knockout: a layer call of {n_call} rows in a batch announced with "
                           f"{batch.batch_size} (beam search or num_return_sequences > 1 are not supported)")
    if not every_row and table.shape[0] != batch.batch_size:
        raise RuntimeError(f"knockout: {table.shape[0]} head sets for a batch of {batch.batch_size} rows")
    q_abs, total = batch.positions(call)
    key_offset = 0 if space == VISION else max(0, total - kv_len)  # a window-evicted cache: right-aligned

    heads_of = table[0].expand(n_call, n_heads) if every_row else table[rows]  # (B, H) heads masked per row
    blocked_q = torch.zeros(n_call, q_len, dtype=torch.bool)  # (B, N)
    blocked_k = torch.zeros(n_call, kv_len, dtype=torch.bool)  # (B, S)
    for i, b in enumerate(rows.tolist()):
        if not bool(heads_of[i].any()):
            continue
        blocked_q[i] = q_abs >= batch.first_query(b, space)
        if space == VISION or in_text:  # a cross-attention family's text holds no visual token
            if space == VISION and entry.keys is image_keys:
                blocked_k[i] = True  # every key of a cross-attention is a vision state
            else:
                k = entry.keys(batch, b).cpu() - key_offset
                blocked_k[i, k[(k >= 0) & (k < kv_len)]] = True
    blocked_q &= heads_of.any(1, keepdim=True) & blocked_k.any(1, keepdim=True)
    heads = torch.nonzero(heads_of.any(0)).flatten()  # (u,) heads masked in some row
    qi = torch.nonzero(blocked_q.any(0)).flatten()  # (Q',) query rows blocked in some row
    if heads.numel() == 0 or qi.numel() == 0:
        return out
    dev = out.device
    new = _blocked_rows(call, value, heads.to(call.query.device), qi.to(call.query.device),
                        blocked_q[:, qi].to(dev), blocked_k.to(dev))  # (B, Q', u, Dv)
    sel = (blocked_q[:, qi, None] & heads_of[:, None, heads]).to(dev)  # (B, Q', u)
    qd, hd = qi.to(dev), heads.to(dev)
    cur = out[:, qd[:, None], hd[None, :]]  # (B, Q', u, Dv)
    out = out.clone()
    out[:, qd[:, None], hd[None, :]] = torch.where(sel[..., None], new.to(out.dtype), cur)
    return out


def _blocked_rows(call: AttentionCall, value: torch.Tensor, heads: torch.Tensor, qi: torch.Tensor,
                  blocked_q: torch.Tensor, blocked_k: torch.Tensor) -> torch.Tensor:
    """Heads ``heads``' outputs at queries ``qi`` with ``blocked_k`` hidden from the rows ``blocked_q`` marks;
    float32 softmax as eager; a row with no key left is 0. Returns (B, Q', u, Dv).

    ``blocked_q`` (B, Q') bool, ``blocked_k`` (B, S) bool."""
    query, key = call.query, call.key  # (B, H, N, D), (B, Hkv, S, D)
    q_len, kv_len = query.shape[2], key.shape[2]
    n_rep = query.shape[1] // key.shape[1]
    kv_heads = torch.div(heads, n_rep, rounding_mode="floor")
    q = query.index_select(1, heads)  # (B, u, N, D)
    k = key.index_select(1, kv_heads)  # (B, u, S, D)
    v = value.index_select(1, kv_heads)  # (B, u, S, Dv)
    outs = []
    for start in range(0, qi.numel(), _CHUNK):
        rows = qi[start:start + _CHUNK]  # (C,)
        allowed = allowed_keys(call.attention_mask, q_len, kv_len, call.is_causal, query.device, rows)  # (B|1,1|H,C,S)
        if allowed.shape[1] > 1:
            allowed = allowed.index_select(1, heads)
        hide = blocked_q[:, None, start:start + _CHUNK, None] & blocked_k[:, None, None, :]  # (B, 1, C, S)
        keep = allowed & ~hide  # (B, 1|u, C, S)
        empty = ~keep.any(-1, keepdim=True)  # (B, 1|u, C, 1): nothing left to attend to
        w = torch.matmul(q[:, :, rows], k.transpose(2, 3)) * call.scaling  # (B, u, C, S)
        if call.softcap is not None:
            w = torch.tanh(w / call.softcap) * call.softcap
        w = w.masked_fill(~(keep | empty), float("-inf"))  # an empty row softmaxes over everything, then zeroed
        w = torch.softmax(w, dim=-1, dtype=torch.float32).to(v.dtype)
        o = torch.matmul(w, v)  # (B, u, C, Dv)
        outs.append(o.masked_fill(empty, 0.0))
    return torch.cat(outs, dim=2).transpose(1, 2)  # (B, u, Q', Dv) -> (B, Q', u, Dv)


# --- the two key rules -----------------------------------------------------------------------------------
def image_keys(batch: KnockoutBatch, b: int) -> torch.Tensor:
    """Every visual token of row ``b`` (``knockout-image``; a cross-attention layer: every key)."""
    return batch.image_keys(b)


def referent_keys(batch: KnockoutBatch, b: int) -> torch.Tensor:
    """Row ``b``'s referent tokens, the key set of Eq. 1 (``knockout-referent``)."""
    return batch.referent_keys(b)
