"""Shared prompt work across the rows of one batch: what no masking condition can change is computed once.

A batch of :func:`vrh.experiments.evaluation.evaluate_rows` holds several rows per sample, one per masking
condition (unmasked, top-1 ... top-k, random sets). Two parts of a row's prompt forward do not depend on its
condition:

* **the vision features** (``share_vision``). Masking acts on the language model's attention heads; the vision
  encoder sees the same pixels under every condition. The adapter's :meth:`~vrh.models.adapters.base.Adapter.
  vision_encoder` runs on the distinct images of the batch only (found by content: equal bytes), and every row
  gets its image's output; a family that encodes row by row gets each repeated call answered from the first;
* **the prompt below the row's first masked layer** (``share_prefix``). A row whose heads all sit at layer L or
  above computes layers 0 .. L-1 exactly as the sample's unmasked row: the same inputs through the same weights
  with nothing zeroed. So in the prompt forward, layer l runs only on the rows that differ there
  (:func:`prefix_plan`): per sample, one row standing for all its rows not masked below l + 1, plus every row
  already masked at or below l. The other rows take their stand-in's output, and the layer's KV cache is
  filled from the computed rows (a view, no copy, where one row stands for the whole batch).

Why exact: a row that is not computed takes the output of a row with bitwise-equal inputs (same sample in the
same left-padded batch: same ids, positions, mask, image features, and no head zeroed yet), computed by the same
kernels; what changes is only how many rows a kernel call holds, as between any two batches of vrh's batched
conditions. Only a ``generate``'s first forward (the prompt) is shared; decoding runs every row as before
(greedy, per-row masks), as does every later forward of a family that generates without a KV cache. Tests compare
the prompt's logits bit for bit and records
and ``samples.jsonl`` byte for byte, sharing on and off, on every family's tiny build and on the organism.

When a share does not apply it is off, never approximate: a family with no vision encoder found (the vision
share; :func:`sharing_refusals` says why), a layer call whose inputs this module does not know how to split by
row (an extra tensor argument such as mllama's cross-attention states) or whose cache is not a growing
(``DynamicCache``-like) one: that layer runs on every row, as without sharing.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from vrh.core.heads import Head
from vrh.core.masking import RowSubset

# keyword arguments of a decoder layer known to carry the batch in dim 0, with the ranks they may have
_ROW_KWARGS = {"attention_mask": (2, 4), "position_ids": (2,)}  # [B, S] (flash attention) or [B, 1, S, S]; [B, S]
_ROW_TUPLE_KWARGS = {"position_embeddings": (3,)}  # (cos, sin), each [B, S, d]


@dataclass(frozen=True)
class PrefixPlan:
    """Which rows a batch's prompt forward computes at each layer (:func:`prefix_plan`)."""

    computed: tuple[tuple[int, ...], ...]  # layer -> rows computed there, ascending
    source: tuple[tuple[int, ...], ...]  # layer -> for each row, the index into computed[layer] of its output

    @property
    def n_rows(self) -> int:
        return len(self.source[0]) if self.source else 0

    @property
    def started_above_0(self) -> float:
        """Fraction of rows whose prompt forward starts above layer 0 (another row computes their bottom)."""
        return 1 - len(self.computed[0]) / self.n_rows if self.n_rows else 0.0

    @property
    def computed_fraction(self) -> float:
        """Row-layers of the prompt forward computed / row-layers without sharing."""
        return sum(map(len, self.computed)) / (self.n_rows * len(self.computed)) if self.n_rows else 1.0


def first_masked_layer(heads: Sequence[Head], num_layers: int) -> int:
    """The lowest layer of ``heads``; ``num_layers`` for no heads (the row is never masked).

    >>> first_masked_layer([(5, 1), (3, 0)], 8), first_masked_layer([], 8)
    (3, 8)
    """
    return min((int(layer) for layer, _ in heads), default=num_layers)


def prefix_plan(groups: Sequence[Hashable], first_masked: Sequence[int], num_layers: int) -> PrefixPlan:
    """Row b (of sample ``groups[b]``, first masked at layer ``first_masked[b]``) is computed at layer l when it
    is masked at or below l, or when it is the first row of its sample that is not: that row stands for the
    sample's other unmasked-so-far rows, which take its output.

    >>> p = prefix_plan(["a", "a", "a", "b"], [4, 2, 0, 4], num_layers=4)
    >>> p.computed
    ((0, 2, 3), (0, 2, 3), (0, 1, 2, 3), (0, 1, 2, 3))
    >>> p.source[0]
    (0, 0, 1, 2)
    """
    if len(groups) != len(first_masked):
        raise ValueError(f"{len(groups)} groups for {len(first_masked)} rows")
    computed, source = [], []
    for layer in range(num_layers):
        stand_in: dict[Hashable, int] = {}
        rows = []
        for b, (g, first) in enumerate(zip(groups, first_masked)):
            if first <= layer:
                rows.append(b)
            elif g not in stand_in:
                stand_in[g] = b
                rows.append(b)
        at = {b: i for i, b in enumerate(rows)}
        computed.append(tuple(rows))
        source.append(tuple(at[b] if b in at else at[stand_in[g]] for b, g in enumerate(groups)))
    return PrefixPlan(tuple(computed), tuple(source))


def sharing_refusals(model: nn.Module, adapter: Any) -> dict[str, str]:
    """Share -> why it cannot apply to this model (an empty dict: both apply): the adapter finds no vision
    encoder (``vision``), or no decoder layer list with one layer per vrh layer (``prefix``)."""
    out = {}
    if adapter.vision_encoder(model) is None:
        out["vision"] = f"{type(adapter).__name__}.vision_encoder() finds no vision encoder on this model"
    try:
        layers = adapter.decoder_layers(model)
        ok = isinstance(layers, nn.ModuleList) and len(layers) == adapter.num_layers(model)
    except (AttributeError, NotImplementedError, TypeError):
        ok = False
    if not ok:
        out["prefix"] = (f"{type(adapter).__name__}.decoder_layers() gives no list of the language model's "
                         f"{adapter.num_layers(model)} decoder layers")
    return out


@contextmanager
def shared_prefill(model: nn.Module, adapter: Any, row_groups: Sequence[Hashable],
                   row_heads: Sequence[Sequence[Head]], subset: RowSubset, *, vision: bool = True,
                   prefix: bool = True) -> Iterator[PrefixPlan | None]:
    """Within the context, the prompt forward of a batch whose row b (of group ``row_groups[b]``: the sample;
    rows of a group have the same inputs) is masked with ``row_heads[b]`` shares among the rows of a group
    their vision features (``vision``) and their prompt below each row's first masked layer (``prefix``). The
    masks are the caller's: :func:`vrh.core.masking.mask_heads_per_row` with the same ``subset``, which this
    context points at the rows a layer computes. Yields the prefix plan (None: no
    prefix share). Hooks are removed on exit, also on error.

    Example::

        subset = RowSubset()
        heads = [[], [(3, 1)], []]
        with mask_heads_per_row(model, adapter, heads, subset), \\
                shared_prefill(model, adapter, ["s0", "s0", "s1"], heads, subset):
            out = model.generate(**inputs_of_3_rows, max_new_tokens=32, do_sample=False)
    """
    if len(row_groups) != len(row_heads):
        raise ValueError(f"{len(row_groups)} row groups for {len(row_heads)} head sets")
    plan = None
    shared = len(set(row_groups)) < len(row_groups)
    with ExitStack() as stack:
        if shared and (vision or prefix):
            refused = sharing_refusals(model, adapter)
            if vision and "vision" not in refused:
                stack.enter_context(_distinct_images(adapter.vision_encoder(model)))
            if prefix and "prefix" not in refused:
                num_layers = adapter.num_layers(model)
                plan = prefix_plan(list(row_groups), [first_masked_layer(hs, num_layers) for hs in row_heads],
                                   num_layers)
                stack.enter_context(_prefix_hooks(adapter.decoder_layers(model), plan, subset))
        yield plan


# --- the prefix share: decoder-layer hooks -----------------------------------------------------------------
@contextmanager
def _prefix_hooks(layers: nn.ModuleList, plan: PrefixPlan, subset: RowSubset) -> Iterator[None]:
    handles = []
    try:
        for layer, module in enumerate(layers):
            if len(plan.computed[layer]) == plan.n_rows:  # every row differs here: nothing to share
                continue
            pre, post = _layer_hooks(layer, plan, subset)
            handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
            handles.append(module.register_forward_hook(post, with_kwargs=True))
        yield
    finally:
        for h in handles:
            h.remove()
        subset.rows = None


def _layer_hooks(layer: int, plan: PrefixPlan, subset: RowSubset):
    """The pre-hook (keep the rows computed at ``layer``) and forward hook (every row's output and KV from them)
    of one decoder layer, active on prompt forwards of the whole batch only."""
    n_rows = plan.n_rows
    rows = torch.tensor(plan.computed[layer], dtype=torch.long)
    source = torch.tensor(plan.source[layer], dtype=torch.long)
    one_source = len(plan.computed[layer]) == 1  # every row takes row 0's output: a view, no copy
    state: dict[str, Any] = {"active": False, "done": False}

    def pre(module: nn.Module, args: tuple, kwargs: dict[str, Any]):
        state["active"] = False
        subset.rows = None
        if state["done"]:  # only the first forward is the prompt's: later ones (a family generating without a
            return None    # KV cache re-runs prompt + answer) hold tokens that differ between a sample's rows
        split = _split_call(args, kwargs, n_rows, layer)
        if split is not None:
            state["done"] = True
        if isinstance(split, str):
            _state_once(f"{type(module).__name__}: {split}")
        if not callable(split):
            return None
        state["active"] = True
        subset.rows = rows
        return split(rows)

    def post(module: nn.Module, args: tuple, kwargs: dict[str, Any], output: Any):
        if not state["active"]:
            return None
        state["active"] = False
        subset.rows = None
        for cache in _caches(kwargs):
            for cl in cache.layers:
                if getattr(cl, "is_initialized", False) and cl.keys is not None and cl.keys.shape[0] == len(rows) \
                        and cl.keys.shape[0] != n_rows:
                    cl.keys, cl.values = (_rows_from(t, source, one_source, n_rows) for t in (cl.keys, cl.values))
        if isinstance(output, torch.Tensor):
            return _rows_from(output, source, False, n_rows)
        if isinstance(output, tuple):
            return tuple(_rows_from(o, source, False, n_rows) if isinstance(o, torch.Tensor) and o.shape[:1] ==
                         (len(rows),) else o for o in output)
        raise TypeError(f"layer {layer}: unexpected decoder-layer output {type(output).__name__}")

    return pre, post


def _rows_from(t: torch.Tensor, source: torch.Tensor, one_source: bool, n_rows: int) -> torch.Tensor:
    """``t`` of the computed rows -> every row's (row b is ``t[source[b]]``); an expanded view when one row
    serves all (``DynamicLayer.update`` concatenates into a new tensor, so the view is never written)."""
    if one_source:
        return t[:1].expand(n_rows, *t.shape[1:])
    return t.index_select(0, source.to(t.device))


def _caches(kwargs: dict[str, Any]) -> list[Any]:
    from transformers.cache_utils import Cache

    return [v for v in kwargs.values() if isinstance(v, Cache)]


FALLBACKS: set[str] = set()  # why a layer ran on every row although rows could share it (stated once each)


def _state_once(reason: str) -> None:
    if reason not in FALLBACKS:
        from rich.text import Text

        from vrh.infra.console import console

        FALLBACKS.add(reason)
        console.print(Text(f"prefix share off for this layer (it runs on every row, exactly as unshared): {reason}",
                           style="yellow"))


def _split_call(args: tuple, kwargs: dict[str, Any], n_rows: int, layer: int):
    """A function ``rows -> (args, kwargs)`` of the layer call restricted to ``rows``; None where the call is
    not a whole-batch prompt forward; a reason (str) where it carries an input this module cannot split by row
    or a cache it cannot fill (the layer then runs on every row: exact, only not shared)."""
    from transformers.cache_utils import DynamicLayer

    if args and isinstance(args[0], torch.Tensor):
        hidden, rest = args[0], args[1:]
    elif "hidden_states" in kwargs and not args:
        hidden, rest = kwargs["hidden_states"], ()
    else:
        return None
    if hidden.dim() != 3 or hidden.shape[0] != n_rows or hidden.shape[1] < 2 or rest:
        return None  # a decode step (one token) or another batch
    for cache in _caches(kwargs):
        layers = getattr(cache, "layers", None)
        if not isinstance(layers, list) or not all(isinstance(cl, DynamicLayer) for cl in layers):
            return f"its cache ({type(cache).__name__}) is not made of growing DynamicLayer layers"
        if layer < len(layers) and layers[layer].get_seq_length() > 0:
            return None  # not the prompt forward
    splits: dict[str, str] = {}
    for name, value in kwargs.items():
        if name == "hidden_states" or value is None or isinstance(value, (bool, int, float, str)):
            continue
        if name in _ROW_KWARGS and isinstance(value, torch.Tensor) and value.dim() in _ROW_KWARGS[name]:
            if value.shape[0] == n_rows:
                splits[name] = "tensor"
            elif value.shape[0] != 1:
                return f"input {name!r} of shape {tuple(value.shape)} has no row per batch row"
        elif name in _ROW_TUPLE_KWARGS and isinstance(value, tuple) and all(
                isinstance(v, torch.Tensor) and v.dim() in _ROW_TUPLE_KWARGS[name] and v.shape[0] in (1, n_rows)
                for v in value):
            splits[name] = "tuple"
        elif _caches({name: value}):
            continue
        else:
            return f"input {name!r} is not one this module knows how to split by row"

    def split(rows: torch.Tensor) -> tuple[tuple, dict[str, Any]]:
        def take(t: torch.Tensor) -> torch.Tensor:
            return t.index_select(0, rows.to(t.device)) if t.shape[0] == n_rows else t

        new = dict(kwargs)
        for name, kind in splits.items():
            new[name] = take(kwargs[name]) if kind == "tensor" else tuple(take(v) for v in kwargs[name])
        if args:
            return (take(hidden),), new
        new["hidden_states"] = take(hidden)
        return (), new

    return split


# --- the vision share: one encoder call on the distinct images ---------------------------------------------
@contextmanager
def _distinct_images(encoder: nn.Module) -> Iterator[None]:
    """Within the context, ``encoder`` computes each distinct input once: a call runs on the distinct entries of
    its input only (equal bytes: an image, tile or patch row; with ``grid_thw``, an image's patches) and hands
    every entry its output, and a call equal to an earlier one (a family that encodes row by row) gets that
    call's output again. Its ``forward`` is wrapped for the context (hooks still run) and restored after."""
    seen: list[tuple[tuple, dict[str, Any], Any]] = []  # (args, kwargs, output) of the calls made so far
    had_own = "forward" in vars(encoder)  # an instance forward (accelerate's hooks) is kept and called
    real = encoder.forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        for a, k, out in seen:
            if _same(a, args) and _same(k, kwargs):
                return _fresh(out)
        found = _distinct_call(args, kwargs)
        if found is None:
            out = real(*args, **kwargs)
        else:
            new_args, new_kwargs, expand = found
            out = _map_tensors(real(*new_args, **new_kwargs), expand)
        seen.append((args, kwargs, _fresh(out)))  # a copy: callers reassign fields of what they get
        return out

    encoder.forward = forward
    try:
        yield
    finally:
        if had_own:
            encoder.forward = real
        else:
            del encoder.forward


def _same(a: Any, b: Any) -> bool:
    """Whether two call arguments are equal: tensors by shape, dtype and every value; containers item by item."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape \
            and a.dtype == b.dtype and a.device == b.device and torch.equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    try:
        return bool(a == b)
    except (RuntimeError, ValueError, TypeError):
        return a is b


def _fresh(out: Any) -> Any:
    """A shallow copy of an encoder output (its tensors shared, its fields and sequences new)."""
    if isinstance(out, dict):
        return type(out)(**out) if hasattr(out, "to_tuple") else type(out)(out)
    if isinstance(out, (tuple, list)) and not hasattr(out, "_fields"):
        return type(out)(_fresh(o) for o in out)
    return out


def _distinct_call(args: tuple, kwargs: dict[str, Any]):
    """``(args, kwargs, expand)`` of the encoder call on its distinct entries, ``expand`` mapping an output
    tensor back to every entry; None when every entry is distinct or the call has no pixel input."""
    if args and isinstance(args[0], torch.Tensor):
        pixels, where = args[0], 0
    else:
        where = next((k for k in ("pixel_values", "hidden_states") if isinstance(kwargs.get(k), torch.Tensor)), None)
        if where is None:
            return None
        pixels = kwargs[where]
    grid = kwargs.get("grid_thw")
    if isinstance(grid, torch.Tensor):
        return _distinct_grid_call(args, kwargs, pixels, where, grid)
    n = pixels.shape[0]
    aligned = {k: v for k, v in kwargs.items() if k != where and isinstance(v, torch.Tensor) and v.dim() > 0
               and v.shape[0] == n}
    extra_args = [i for i, a in enumerate(args) if i != where and isinstance(a, torch.Tensor)]
    if extra_args:
        return None
    keep, inverse = _distinct([pixels, *aligned.values()], [slice(i, i + 1) for i in range(n)])
    if len(keep) == n:
        return None
    idx = torch.tensor(keep, dtype=torch.long, device=pixels.device)
    new_kwargs = {**kwargs, **{k: v.index_select(0, idx.to(v.device)) for k, v in aligned.items()}}
    new_args = args
    if where == 0:
        new_args = (pixels.index_select(0, idx), *args[1:])
    else:
        new_kwargs[where] = pixels.index_select(0, idx)
    inv = torch.tensor(inverse, dtype=torch.long)
    n_keep = len(keep)

    def expand(t: torch.Tensor) -> torch.Tensor:
        return t.index_select(0, inv.to(t.device)) if t.dim() > 0 and t.shape[0] == n_keep else t

    return new_args, new_kwargs, expand


def _distinct_grid_call(args: tuple, kwargs: dict[str, Any], pixels: torch.Tensor, where: Any, grid: torch.Tensor):
    """:func:`_distinct_call` for Qwen-style encoders: ``pixels`` [sum_i t_i*h_i*w_i, P] holds image i's patches
    in order, ``grid`` [n_images, 3] their (t, h, w); outputs hold each image's rows in the same order, at any
    fixed number of rows per patch (patches, merged tokens, DeepStack features)."""
    sizes = [int(v) for v in grid.prod(-1).tolist()]
    if sum(sizes) != pixels.shape[0] or any(isinstance(a, torch.Tensor) for a in args[1:]):
        return None
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    pieces = [slice(s, s + n) for s, n in zip(starts, sizes)]
    keep, inverse = _distinct([pixels], pieces, keys=[tuple(g) for g in grid.tolist()])
    if len(keep) == len(sizes):
        return None
    new_pixels = torch.cat([pixels[pieces[i]] for i in keep])
    new_grid = grid.index_select(0, torch.tensor(keep, dtype=torch.long, device=grid.device))
    new_kwargs = {**kwargs, "grid_thw": new_grid}
    new_args = args
    if where == 0:
        new_args = (new_pixels, *args[1:])
    else:
        new_kwargs[where] = new_pixels
    kept_sizes = [sizes[i] for i in keep]
    total = sum(kept_sizes)

    def expand(t: torch.Tensor) -> torch.Tensor:
        if t.dim() == 0 or any(s * t.shape[0] % total for s in kept_sizes):
            return t
        parts = torch.split(t, [s * t.shape[0] // total for s in kept_sizes])
        return torch.cat([parts[j] for j in inverse])

    return new_args, new_kwargs, expand


def _distinct(tensors: Sequence[torch.Tensor], pieces: Sequence[slice], keys: Sequence[Any] | None = None
              ) -> tuple[list[int], list[int]]:
    """Indices of the distinct pieces (first of each, in order) and, per piece, the index into that list of
    its equal. Equality is exact (``torch.equal`` of every tensor's piece); a few sampled values of each piece
    only decide which pieces are compared."""
    def probe(i: int) -> tuple:
        parts = []
        for t in tensors:
            flat = t[pieces[i]].reshape(-1)
            step = max(1, flat.numel() // 64)
            parts.append((tuple(t[pieces[i]].shape), tuple(flat[::step][:64].tolist())))
        return (keys[i] if keys is not None else None, *parts)

    keep: list[int] = []
    inverse: list[int] = []
    by_probe: dict[tuple, list[int]] = {}  # probe -> positions in keep
    for i in range(len(pieces)):
        found = None
        same_probe = by_probe.setdefault(probe(i), [])
        for j in same_probe:
            if all(torch.equal(t[pieces[keep[j]]], t[pieces[i]]) for t in tensors):
                found = j
                break
        if found is None:
            found = len(keep)
            keep.append(i)
            same_probe.append(found)
        inverse.append(found)
    return keep, inverse


def _map_tensors(out: Any, fn) -> Any:
    """``out`` (a tensor, tuple, list or ``ModelOutput``) with ``fn`` applied to every tensor in it."""
    if isinstance(out, torch.Tensor):
        return fn(out)
    if isinstance(out, dict):  # ModelOutput is an OrderedDict whose items are its fields
        for k in list(out.keys()):
            out[k] = _map_tensors(out[k], fn)
        return out
    if isinstance(out, (tuple, list)):
        return type(out)(_map_tensors(o, fn) for o in out) if not hasattr(out, "_fields") else out
    return out
