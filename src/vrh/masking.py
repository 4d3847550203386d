"""Head ablation: zero chosen attention heads' outputs, the one mechanism every causal test uses.

A head's contribution to the residual stream is ``o_proj`` applied to its slice of the concatenated
per-head attention outputs. Zeroing that slice of ``o_proj``'s *input* removes the head exactly (bias,
if any, is kept: it does not belong to any head) and is equivalent to zeroing the head's input columns
of ``o_proj.weight``, without touching the weights. Because the hook sits on ``o_proj``, it sees every
query position of every forward call: full prompts, single-token decode steps with a KV cache, and
left-padded batches alike. (It does not change what the *other* heads attend to, and the head's keys
and values still enter the KV cache; only its output is removed.)

Example::

    with mask_heads(model, adapter, [(3, 1), (10, 4)]):
        out = model.generate(**inputs, max_new_tokens=32, do_sample=False)
    # hooks are gone here, also if generate raised

The Retrieval-Heads-style "uniform attention" ablation is a different mechanism (it lives in the
attention function) and is deliberately not provided here.
"""

from __future__ import annotations

import operator
from collections import defaultdict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from vrh.heads import Head


def validate_heads(heads: Iterable[Head], num_layers: int, num_heads: int) -> dict[int, list[int]]:
    """Check ``(layer, head)`` pairs and group them by layer: ``{layer: sorted unique heads}``.

    Duplicates are allowed (masking a head twice is masking it once); anything out of range, or not a
    pair of integers, raises ``ValueError`` naming the offending entry.

    >>> validate_heads([(1, 0), (0, 3), (1, 0)], num_layers=2, num_heads=4)
    {0: [3], 1: [0]}
    """
    by_layer: dict[int, set[int]] = defaultdict(set)
    for entry in heads:
        try:
            layer, head = entry
            if isinstance(layer, bool) or isinstance(head, bool):  # True would pass as 1 below
                raise TypeError
            # operator.index accepts ints (and numpy/torch integer scalars) but rejects floats like 1.0
            layer, head = operator.index(layer), operator.index(head)
        except (TypeError, ValueError):
            raise ValueError(f"bad head {entry!r}: expected a (layer, head) pair of integers") from None
        if not 0 <= layer < num_layers:
            raise ValueError(f"head {(layer, head)}: layer {layer} out of range [0, {num_layers})")
        if not 0 <= head < num_heads:
            raise ValueError(f"head {(layer, head)}: head {head} out of range [0, {num_heads}) "
                             f"(query heads, not KV heads)")
        by_layer[layer].add(head)
    return {layer: sorted(hs) for layer, hs in sorted(by_layer.items())}


def _zero_heads_hook(head_idx: list[int], num_heads: int, head_dim: int, layer: int):
    """A ``with_kwargs`` forward pre-hook for ``o_proj`` that zeroes the given heads' input slices."""
    width = num_heads * head_dim
    cache: dict[torch.device, torch.Tensor] = {}  # index tensor per device, built once

    def hook(module: nn.Module, args: tuple, kwargs: dict[str, Any]):
        # nn.Linear is called positionally in every HF attention, but accept input= too
        if args:
            x, key = args[0], None
        else:
            key = "input"
            x = kwargs[key]
        if x.shape[-1] != width:
            raise RuntimeError(
                f"mask_heads: o_proj input of layer {layer} has last dim {x.shape[-1]}, expected "
                f"num_heads*head_dim = {num_heads}*{head_dim} = {width}")
        idx = cache.get(x.device)
        if idx is None:
            idx = cache[x.device] = torch.tensor(head_idx, dtype=torch.long, device=x.device)
        # [..., H*d_head] -> [..., H, d_head]; leading dims are [B, S] (S=1 when decoding with a cache)
        per_head = x.reshape(*x.shape[:-1], num_heads, head_dim)
        # index_fill is out of place and writes exact zeros (x*0 would keep NaN/inf)
        per_head = per_head.index_fill(-2, idx, 0.0)
        x = per_head.reshape(x.shape)  # [..., H, d_head] -> [..., H*d_head]
        if key is None:
            return (x, *args[1:]), kwargs
        return args, {**kwargs, key: x}

    return hook


@contextmanager
def mask_heads(model: nn.Module, adapter: Any, heads: Iterable[Head]) -> Iterator[None]:
    """Within the context, the language model's ``heads`` (``(layer, head)``, 0-based) output zero.

    ``adapter`` supplies ``num_layers(model)``, ``num_heads(model)``, ``head_dim(model)`` and
    ``o_proj(model, layer)`` (see :class:`vrh.adapters.base.Adapter`). Indices are validated before any
    hook is installed; an empty ``heads`` is a no-op. Every hook is removed on exit, also on error.
    Contexts nest (masks add up).
    """
    heads = list(heads)
    if not heads:
        yield
        return
    num_layers, num_heads = adapter.num_layers(model), adapter.num_heads(model)
    head_dim = adapter.head_dim(model)
    by_layer = validate_heads(heads, num_layers, num_heads)

    handles = []
    try:
        for layer, head_idx in by_layer.items():
            o_proj = adapter.o_proj(model, layer)
            in_features = getattr(o_proj, "in_features", None)
            if in_features is not None and in_features != num_heads * head_dim:
                raise ValueError(
                    f"layer {layer}: o_proj.in_features={in_features} != num_heads*head_dim = "
                    f"{num_heads}*{head_dim}; the adapter's head geometry does not match the model")
            hook = _zero_heads_hook(head_idx, num_heads, head_dim, layer)
            handles.append(o_proj.register_forward_pre_hook(hook, with_kwargs=True))
        yield
    finally:
        for handle in handles:
            handle.remove()
