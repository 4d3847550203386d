"""The attention math vrh owns: the one registered attention function, which keys a query may see, and a hook.

Two features need to act *inside* attention, where transformers offers no hook: row capture
(:mod:`vrh.core.capture`, softmax rows of a few queries) and the uniform-attention ablation
(:func:`vrh.core.masking.mask_heads` with ``mode="uniform"``, Retrieval Heads' way of knocking a head out).
Both go through this single registered function (name :data:`IMPL_NAME`) so they compose -- rows can be
captured while heads are uniform-masked -- and the language model is switched and restored in one place.

The function computes the layer output with the fused sdpa kernel (so logits equal a plain sdpa forward
when nothing is active; softcapped attention, which sdpa cannot express, goes through
:func:`_softcap_output`), then, if heads of this layer are uniform-masked, overwrites their outputs with the
mean of the values each query may see. Anything that wants to *read* attention subscribes with
:func:`observe_attention`: each observer gets one :class:`AttentionCall` per attention-module forward. This
module knows nothing about its observers (capture imports attention, never the reverse).

Which keys a query may see is decided in ONE place, :func:`allowed_keys`, used by the uniform ablation, the
softcap output path and capture's row recomputation, so they cannot disagree about padding, causality or
sliding windows.

Only the language model's config is switched; the vision encoder keeps its own implementation. The mask
function registered for :data:`IMPL_NAME` is transformers' own sdpa mask, so the model builds exactly the
masks it would build for sdpa (bool padding / sliding-window masks, or ``None`` for plain causal).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from vrh.core.layout import LanguageModelLayout

IMPL_NAME = "vrh_attention"

# Module-level because transformers calls the attention function without any handle of ours; each is
# set only by its context manager (``uniform_heads``, ``observe_attention``) and always restored.
# id(attention module) -> LongTensor of query heads whose attention is uniform.
_UNIFORM: dict[int, torch.Tensor] = {}
# Observers called once per attention-module forward, in subscription order.
_OBSERVERS: tuple[Callable[[AttentionCall], None], ...] = ()
# Rewriters: each may replace a module's output (the knockouts of vrh.core.knockout), in subscription order.
_REWRITERS: tuple[Callable[[AttentionCall, torch.Tensor, torch.Tensor], torch.Tensor], ...] = ()

# Query rows computed at once by the uniform output (bounds its float (B, h, chunk, S) weight buffer)
# and by the softcap output (bounds its (B, H, chunk, S) score buffer).
_UNIFORM_CHUNK = 512
_SOFTCAP_CHUNK = 256


# --- which keys a query may see ------------------------------------------------------------------
def allowed_keys(attention_mask: torch.Tensor | None, q_len: int, kv_len: int, is_causal: bool,
                 device: torch.device, queries: torch.Tensor | None = None) -> torch.Tensor:
    """Which keys each query may see, bool ``(B or 1, 1 or H, Q, S)``: exactly the keys sdpa attends to.

    ``queries`` (LongTensor ``(Q,)``, indices into this call's ``q_len`` queries) selects rows; ``None``
    means all ``q_len`` of them. ``S`` is ``kv_len``. The result is on ``device`` (the caller's scores or
    values: with a ``device_map`` a layer may receive a mask built on another GPU) and may be an expanded
    view: do not write to it.

    * A materialized mask (what transformers' sdpa mask builds for padding, sliding windows or a KV cache
      offset) is read as sdpa reads it and cut to ``kv_len`` (sdpa crops a static cache's empty tail the
      same way). bool: True = attend. Additive float (eager's 0 / dtype-min, or a user's 4D mask): an
      entry counts as visible above half the dtype's most negative value (so ``-inf`` and ``min`` hide).
      A float mask is only a *visibility* mask here: one that carries finite biases on visible keys
      (anything but 0 there) raises ``ValueError``, because every path using this function (uniform
      ablation, softcap output, captured rows) would otherwise silently drop the bias.
    * ``attention_mask=None``: every key for a single query (decode) or a non-causal module, else sdpa's
      ``is_causal``: key j visible to query i iff j <= i (upper-left aligned). transformers leaves the mask
      to ``is_causal`` only when nothing is cached before the queries, so that is true causality.

    >>> allowed_keys(None, 3, 3, True, torch.device("cpu"))[0, 0].int()
    tensor([[1, 0, 0],
            [1, 1, 0],
            [1, 1, 1]], dtype=torch.int32)
    """
    n_q = q_len if queries is None else queries.numel()
    if attention_mask is not None:
        m = attention_mask[..., :kv_len].to(device)  # (B or 1, 1 or H, N or 1, S); a no-op on its own device
        if queries is not None and m.shape[2] > 1:
            m = m.index_select(2, queries.to(m.device))  # (B or 1, 1 or H, Q, S)
        if m.dtype != torch.bool:
            m = _visible_in_additive(m)
        return m.expand(m.shape[0], m.shape[1], n_q, kv_len)
    if q_len == 1 or not is_causal:
        return torch.ones(1, 1, 1, 1, dtype=torch.bool, device=device).expand(1, 1, n_q, kv_len)
    q = torch.arange(q_len, device=device) if queries is None else queries.to(device)  # (Q,)
    k = torch.arange(kv_len, device=device)  # (S,)
    return (k[None, :] <= q[:, None])[None, None]  # (1, 1, Q, S)


def _visible_in_additive(mask: torch.Tensor) -> torch.Tensor:
    """bool visibility of an additive float mask; refuses finite biases on visible keys (see allowed_keys)."""
    visible = mask > torch.finfo(mask.dtype).min / 2
    if bool((mask.masked_fill(~visible, 0) != 0).any()):
        raise ValueError(
            "vrh attention: the float attention_mask carries additive biases (values other than 0 on visible "
            "keys); vrh reads masks as visibility only (bool, or 0 / -inf). Pass a bool or 0/-inf mask.")
    return visible


# --- uniform attention ---------------------------------------------------------------------------
def _uniform_output(value: torch.Tensor, allowed: torch.Tensor, heads: torch.Tensor, n_rep: int) -> torch.Tensor:
    """Mean of the visible values for the query heads ``heads``; (B, N, |heads|, D).

    ``value`` (B, Hkv, S, D), query head h reads KV head ``h // n_rep`` (transformers' repeat_kv order);
    ``allowed`` (B or 1, 1 or H, N, S). Computed as ``allowed @ V / count`` in float32: exactly the softmax
    output with every visible key weighted ``1 / count``. A query with no visible key (a left-padding
    query) gets 0; such rows never reach a real token.
    """
    heads = heads.to(value.device)
    v = value.index_select(1, torch.div(heads, n_rep, rounding_mode="floor")).float()  # (B, h, S, D)
    a = allowed if allowed.shape[1] == 1 else allowed.index_select(1, heads)  # (B or 1, 1 or h, N, S)
    outs = []
    for start in range(0, a.shape[2], _UNIFORM_CHUNK):  # bounds the float (B, h, chunk, S) weights
        w = a[:, :, start:start + _UNIFORM_CHUNK].float()  # (B or 1, 1 or h, C, S)
        count = w.sum(-1, keepdim=True).clamp_min(1.0)  # (B or 1, 1 or h, C, 1)
        outs.append(torch.matmul(w, v) / count)  # (B, h, C, D)
    out = torch.cat(outs, dim=2)  # (B, h, N, D)
    return out.transpose(1, 2).to(value.dtype)  # (B, h, N, D) -> (B, N, h, D)


@contextmanager
def uniform_heads(by_module: dict[int, list[int]]) -> Iterator[None]:
    """Make the given heads attend uniformly while inside: ``{id(attention module): [heads]}``.

    Nests: inner heads add to outer ones; the previous set is restored on exit, also on error.
    """
    global _UNIFORM
    previous = _UNIFORM
    merged = {k: v.clone() for k, v in previous.items()}
    for key, heads in by_module.items():
        old = merged.get(key, torch.zeros(0, dtype=torch.long))
        merged[key] = torch.unique(torch.cat([old, torch.as_tensor(list(heads), dtype=torch.long)]))
    try:
        _UNIFORM = merged
        yield
    finally:
        _UNIFORM = previous


def active_uniform_heads() -> dict[int, list[int]]:
    """The heads uniform-masked right now, ``{id(attention module): sorted heads}`` (empty outside blocks)."""
    return {key: heads.tolist() for key, heads in _UNIFORM.items()}


# --- softcapped attention ------------------------------------------------------------------------
def _softcap_output(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    attention_mask: torch.Tensor | None, scaling: float, is_causal: bool, softcap: float,
                    dropout: float) -> torch.Tensor:
    """Layer output for softcapped attention (gemma2), which sdpa cannot express; (B, N, H, Dv) like sdpa.

    Same arithmetic as eager (softcap, mask, float32 softmax cast back, dropout), but query rows go in
    chunks of ``_SOFTCAP_CHUNK`` so no (B, H, N, N) buffer exists. Hidden keys get ``finfo(dtype).min``,
    which is what eager's ``scores + min`` rounds to (softcapped scores are bounded), so fully hidden rows
    (left-padding queries) come out uniform as in eager.
    """
    from transformers.integrations.sdpa_attention import repeat_kv

    q_len, n_rep = query.shape[2], query.shape[1] // key.shape[1]  # query (B, H, N, D), key (B, Hkv, S, D)
    k = repeat_kv(key, n_rep)  # (B, H, S, D)
    v = repeat_kv(value, n_rep)  # (B, H, S, Dv)
    kv_len = k.shape[2]
    outs = []
    for start in range(0, q_len, _SOFTCAP_CHUNK):
        rows = torch.arange(start, min(start + _SOFTCAP_CHUNK, q_len), device=query.device)  # (C,)
        w = torch.matmul(query[:, :, start:start + rows.numel()], k.transpose(2, 3)) * scaling  # (B, H, C, S)
        w = torch.tanh(w / softcap) * softcap
        allowed = allowed_keys(attention_mask, q_len, kv_len, is_causal, w.device, rows)  # (B|1, 1|H, C, S)
        w = w.masked_fill(~allowed, torch.finfo(w.dtype).min)
        w = torch.softmax(w, dim=-1, dtype=torch.float32).to(query.dtype)
        w = nn.functional.dropout(w, p=dropout, training=module.training)
        outs.append(torch.matmul(w, v))  # (B, H, C, Dv)
    return torch.cat(outs, dim=2).transpose(1, 2).contiguous()  # (B, H, N, Dv) -> (B, N, H, Dv)


# --- observers -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class AttentionCall:
    """What one attention-module forward hands its observers (tensors are the model's own: do not modify).

    ``query`` (B, H, N, D) and ``key`` (B, Hkv, S, D) are after rope/norms, keys including the cache;
    query head h reads KV head ``h // (H // Hkv)``. ``attention_mask`` is what the module got (bool, additive
    float, or None); read it through :func:`allowed_keys` with ``is_causal``. ``scaling`` is the factor on
    ``q @ k^T`` and ``softcap`` the logit cap (None: none), so the module's attention weights are
    ``softmax(cap(q @ k^T * scaling) masked to allowed_keys)``.
    """

    module: nn.Module
    query: torch.Tensor
    key: torch.Tensor
    attention_mask: torch.Tensor | None
    scaling: float
    is_causal: bool
    softcap: float | None


@contextmanager
def observe_attention(observer: Callable[[AttentionCall], None]) -> Iterator[None]:
    """Call ``observer(call)`` once per attention-module forward that runs :data:`IMPL_NAME` while inside.

    The call comes before the module's output is computed, under ``torch.no_grad()``; an exception it
    raises stops the forward. Only modules switched to :data:`IMPL_NAME` (see
    :func:`language_model_uses_vrh`) are seen, and the observer filters modules itself (by identity).
    Nests: observers are called in subscription order; the previous set is restored on exit, also on error.
    """
    global _OBSERVERS
    previous = _OBSERVERS
    try:
        _OBSERVERS = previous + (observer,)
        yield
    finally:
        _OBSERVERS = previous


def active_observers() -> tuple[Callable[[AttentionCall], None], ...]:
    """The observers subscribed right now, in call order (empty outside ``observe_attention`` blocks)."""
    return _OBSERVERS


@contextmanager
def rewrite_attention(rewriter: Callable[[AttentionCall, torch.Tensor, torch.Tensor], torch.Tensor]
                      ) -> Iterator[None]:
    """Let ``rewriter(call, value, out)`` replace the output ``out`` (B, N, H, Dv) of every attention-module
    forward that runs :data:`IMPL_NAME` while inside (``value`` (B, Hkv, S, Dv), as the module computed it).

    Called after the fused output and the uniform overwrite, in subscription order; it returns the output to
    use (``out`` itself when it changes nothing) and must not write into its arguments. The site of the
    knockout mask modes (:mod:`vrh.core.knockout`), which re-run a few heads' rows with keys blocked; this
    module knows nothing about them. Nests; the previous set is restored on exit, also on error.
    """
    global _REWRITERS
    previous = _REWRITERS
    try:
        _REWRITERS = previous + (rewriter,)
        yield
    finally:
        _REWRITERS = previous


# --- the registered function ---------------------------------------------------------------------
def vrh_attention_forward(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                          attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                          is_causal: bool | None = None, softcap: float | None = None,
                          **kwargs: Any) -> tuple[torch.Tensor, None]:
    """Fused attention output ``(B, N, H, D)``, observers called first, uniform-masked heads overwritten,
    then the rewriters (:func:`rewrite_attention`) applied.

    Returns ``(attn_output, None)`` like sdpa: weights are never returned (observers read them instead).
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    scaling = scaling if scaling is not None else query.shape[-1] ** -0.5
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    if _OBSERVERS:
        call = AttentionCall(module, query, key, attention_mask, scaling, causal, softcap)
        with torch.no_grad():
            for observer in _OBSERVERS:
                observer(call)

    if softcap is None:
        kwargs.pop("output_attentions", None)  # weights are never returned; avoid sdpa's warning
        out, _ = sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                        scaling=scaling, is_causal=is_causal, **kwargs)
    else:
        out = _softcap_output(module, query, key, value, attention_mask, scaling, causal, softcap, dropout)

    heads = _UNIFORM.get(id(module))
    if heads is not None and heads.numel():
        n_heads, q_len = query.shape[1], query.shape[2]  # query (B, H, N, D)
        allowed = allowed_keys(attention_mask, q_len, key.shape[2], causal, query.device)  # (B|1, 1|H, N, S)
        unif = _uniform_output(value, allowed, heads, n_heads // key.shape[1])  # (B, N, h, D)
        out = out.index_copy(2, heads.to(out.device), unif.to(out.dtype))  # (B, N, H, D)
    if _REWRITERS:
        call = AttentionCall(module, query, key, attention_mask, scaling, causal, softcap)
        for rewriter in _REWRITERS:
            out = rewriter(call, value, out)
    return out, None


# --- registration and switching ------------------------------------------------------------------
def ensure_registered() -> None:
    """Register :data:`IMPL_NAME` with transformers (idempotent; called lazily, never at import)."""
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    from transformers.modeling_utils import AttentionInterface

    if AttentionInterface._global_mapping.get(IMPL_NAME) is not vrh_attention_forward:
        AttentionInterface.register(IMPL_NAME, vrh_attention_forward)
    # The sdpa mask, so masks are built exactly as for sdpa. Must be in the global mapping: transformers
    # skips mask creation for implementations it does not find there.
    if AttentionMaskInterface._global_mapping.get(IMPL_NAME) is not sdpa_mask:
        AttentionMaskInterface.register(IMPL_NAME, sdpa_mask)


def language_configs(model: nn.Module, adapter: LanguageModelLayout) -> list[Any]:
    """The config objects the language model reads its attention implementation from (deduplicated).

    The attention modules read ``self.config._attn_implementation`` and the mask builder reads the text
    model's config; both are the text config, which is a different object from the vision config.
    """
    configs = {id(c): c for c in [adapter.text_config(model)]}
    for layer in range(adapter.num_layers(model)):
        cfg = getattr(adapter.attention_module(model, layer), "config", None)
        if cfg is not None:
            configs.setdefault(id(cfg), cfg)
    return list(configs.values())


@contextmanager
def language_model_uses_vrh(model: nn.Module, adapter: LanguageModelLayout) -> Iterator[None]:
    """Switch the language model (only) to :data:`IMPL_NAME`; restore its previous implementation on exit.

    Nests: an inner block restores what it found (possibly already :data:`IMPL_NAME`).
    """
    ensure_registered()
    configs = language_configs(model, adapter)
    previous = [cfg._attn_implementation_internal for cfg in configs]
    try:
        for cfg in configs:
            # The internal attribute, not the setter: the setter recurses into sub-configs, and only the
            # language model must switch.
            cfg._attn_implementation_internal = IMPL_NAME
        yield
    finally:
        for cfg, impl in zip(configs, previous):
            cfg._attn_implementation_internal = impl
