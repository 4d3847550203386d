"""The one attention function vrh registers with transformers, and switching the language model to it.

Two features need to act *inside* attention, where transformers offers no hook: row capture
(:mod:`vrh.capture`, softmax rows of a few queries) and the uniform-attention ablation
(:func:`vrh.masking.mask_heads` with ``mode="uniform"``, Retrieval Heads' way of knocking a head out).
Both go through this single registered function (name :data:`IMPL_NAME`) so they compose -- rows can be
captured while heads are uniform-masked -- and the language model is switched and restored in one place.

The function computes the layer output with the fused sdpa kernel (so logits equal a plain sdpa forward
when nothing is active), then, if heads of this layer are uniform-masked, overwrites their outputs with the
mean of the values each query may see, and, if a capture is active, hands the query/key tensors to it.
Each feature owns its own state (``vrh.capture._ACTIVE``, :data:`_UNIFORM` here); the function only reads
them, so nothing runs differently unless a context manager set them.

Only the language model's config is switched; the vision encoder keeps its own implementation. The mask
function registered for :data:`IMPL_NAME` is transformers' own sdpa mask, so the model builds exactly the
masks it would build for sdpa (padding, sliding windows, or ``None`` for plain causal).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

IMPL_NAME = "vrh_attention"

# id(attention module) -> LongTensor of query heads whose attention is uniform. Module-level because
# transformers calls the attention function without any handle of ours; set only by
# ``uniform_heads`` and always restored.
_UNIFORM: dict[int, torch.Tensor] = {}

# Query rows of the uniform output computed at once; bounds its float (B, h, chunk, S) weight buffer.
_UNIFORM_CHUNK = 512


# --- uniform attention ---------------------------------------------------------------------------
def allowed_keys(attention_mask: torch.Tensor | None, q_len: int, kv_len: int, is_causal: bool,
                 device: torch.device) -> torch.Tensor:
    """Which keys each query may see, bool ``(B or 1, 1 or H, N, S)``: exactly the keys sdpa attends to.

    A materialized mask is read as sdpa reads it (bool: True = attend; additive float: anything above the
    dtype's most negative half counts as visible) and cut to ``kv_len`` like the capture path does. Without
    a mask: every key for one query or a non-causal module, else sdpa's ``is_causal`` (key j <= query i,
    upper-left aligned; transformers passes no mask only when nothing is cached before the queries).
    """
    if attention_mask is not None:
        m = attention_mask[..., :kv_len]  # (B or 1, 1 or H, N or 1, S)
        if m.dtype != torch.bool:
            m = m > torch.finfo(m.dtype).min / 2
        return m.expand(m.shape[0], m.shape[1], q_len, kv_len)
    if q_len == 1 or not is_causal:
        return torch.ones(1, 1, q_len, kv_len, dtype=torch.bool, device=device)
    q = torch.arange(q_len, device=device)
    k = torch.arange(kv_len, device=device)
    return (k[None, :] <= q[:, None])[None, None]  # (1, 1, N, S)


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


# --- the registered function ---------------------------------------------------------------------
def vrh_attention_forward(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                          attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                          is_causal: bool | None = None, softcap: float | None = None,
                          **kwargs: Any) -> tuple[torch.Tensor, None]:
    """Fused attention output ``(B, N, H, D)`` with uniform-masked heads overwritten and rows captured.

    Returns ``(attn_output, None)`` like sdpa: weights are never returned (captured rows go to the active
    :class:`vrh.capture.RowCapture`).
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from vrh import capture as cap_mod

    scaling = scaling if scaling is not None else query.shape[-1] ** -0.5
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    capture = cap_mod._ACTIVE
    layer = capture._layer_of(module) if capture is not None else None
    if layer is not None:
        capture._start_layer(layer)

    if softcap is None:
        kwargs.pop("output_attentions", None)  # weights are never returned; avoid sdpa's warning
        out, _ = sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                        scaling=scaling, is_causal=is_causal, **kwargs)
    else:
        out = cap_mod._softcap_output(module, query, key, value, attention_mask, scaling, causal, softcap,
                                      dropout)

    heads = _UNIFORM.get(id(module))
    if heads is not None and heads.numel():
        n_heads, q_len = query.shape[1], query.shape[2]  # query (B, H, N, D)
        allowed = allowed_keys(attention_mask, q_len, key.shape[2], causal, query.device)
        unif = _uniform_output(value, allowed, heads, n_heads // key.shape[1])  # (B, N, h, D)
        out = out.index_copy(2, heads.to(out.device), unif.to(out.dtype))  # (B, N, H, D)

    if layer is not None and layer in capture._slot:
        with torch.no_grad():
            capture._store(layer, query, key, attention_mask, scaling, causal, softcap)
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


def language_configs(model: nn.Module, adapter: Any) -> list[Any]:
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
def language_model_uses_vrh(model: nn.Module, adapter: Any) -> Iterator[None]:
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
