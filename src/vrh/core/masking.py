"""Head ablation: knock chosen attention heads out, the one mechanism every causal test uses.

The ways of knocking a head out are *mask modes*, registered here and nowhere else
(:func:`register_mask_mode`; :func:`mask_mode_names` is what ``--mask-mode`` and
:class:`vrh.experiments.conditions.Condition` accept); :func:`mask_heads` is the one entry point for all of them:

* ``"zero"`` (default): the head's output is zeroed at ``o_proj``'s input (below).
* ``"knockout-image"`` / ``"knockout-referent"`` (one file each in :mod:`vrh.core.mask_modes`, mechanism in
  :mod:`vrh.core.knockout`): the head's logits to the visual tokens (the referent's) are ``-inf`` before
  its softmax, at the queries ``--knockout-queries`` names.
* ``"uniform"`` (Retrieval Heads' public code): the head keeps writing to the residual stream, but attends
  uniformly to every key it may see (unmasked and causal), i.e. its output at a query is the plain mean of
  the visible values. It removes *where* the head looks while keeping its average contribution, so a
  method's heads can be tested against that weaker ablation too. It runs inside vrh's registered attention
  function (:mod:`vrh.core.attention`): the language model is switched to it for the block and restored after.

Zero mode:

A head's contribution to the residual stream is ``o_proj`` applied to its slice of the concatenated
per-head attention outputs. Zeroing that slice of ``o_proj``'s *input* removes the head exactly (bias,
if any, is kept: it does not belong to any head) and is equivalent to zeroing the head's input columns
of ``o_proj.weight``, without touching the weights. Because the hook sits on ``o_proj``, it sees every
query position of every forward call: full prompts, single-token decode steps with a KV cache, and
left-padded batches alike. (It does not change what the *other* heads attend to, and the head's keys
and values still enter the KV cache; only its output is removed.)

Several conditions in one batch: a mode may register its *per-row application* (``per_row=``), a context
manager that masks a different head set in each batch row; only such modes are batchable
(:attr:`MaskMode.batchable`), and the runner calls that very function for their rows. Zero mode registers
:func:`mask_heads_per_row`, so zero-mode conditions share one left-padded ``generate``; uniform registers
none and runs one head set at a time.

torch is imported inside the functions that use it: :mod:`vrh.options` reads the mode registry to build
``--mask-mode``, and ``vrh --help`` must not import torch.

Example::

    with mask_heads(model, adapter, [(3, 1), (10, 4)]):
        out = model.generate(**inputs, max_new_tokens=32, do_sample=False)
    # hooks are gone here, also if generate raised

    with mask_heads(model, adapter, [(3, 1)], mode="uniform"):
        out = model.generate(**inputs, max_new_tokens=32, do_sample=False)
"""

from __future__ import annotations

import operator
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vrh.core.layout import LanguageModelLayout

if TYPE_CHECKING:
    import torch
    from torch import nn

    from vrh.core.heads import Head


# --- the mask modes: one registry ------------------------------------------------------------------------
@dataclass(frozen=True)
class MaskMode:
    """One way of knocking a head out, as :func:`register_mask_mode` recorded it.

    ``apply(model, adapter, heads)``: a context manager that masks ``heads`` (a non-empty list of
    ``(layer, head)``) for its block and restores everything on exit, also on error -- what
    :func:`mask_heads` enters. ``help``: what the mode does to a head, as ``--mask-mode``'s help lists it after
    the name ("'zero' *its output*"). ``apply_rows(model, adapter, row_heads, subset)``: the mode's own per-row
    application (None: it has none), a context manager that masks ``row_heads[b]`` in batch row b exactly as
    ``apply`` alone would mask that row (leaving rows with no heads, and every layer below a row's first masked
    layer, untouched) and honours ``subset`` (:class:`RowSubset`) as :func:`mask_heads_per_row` does.
    """

    name: str
    apply: Callable[[nn.Module, Any, list[Head]], AbstractContextManager[None]]
    help: str
    apply_rows: Callable[[nn.Module, Any, list[list[Head]], RowSubset | None], AbstractContextManager[None]] | None \
        = None

    @property
    def batchable(self) -> bool:
        """Rows of several head sets may share one batch: only if the mode registered its per-row application
        (the runner calls :attr:`apply_rows` for them; a mode without one runs one head set at a time)."""
        return self.apply_rows is not None


_MODES: dict[str, MaskMode] = {}
_MORE_MODES = "vrh.core.mask_modes"  # the package of the other built-in modes, one file each (knockouts)


def _load_more_modes() -> None:
    """Import :data:`_MORE_MODES` (its files register themselves here) on the registry's first lookup; by name,
    because they import this module."""
    import importlib
    import sys

    if _MORE_MODES not in sys.modules:
        importlib.import_module(_MORE_MODES)


def register_mask_mode(name: str, *, help: str, per_row: Callable | None = None, batchable: bool | None = None
                       ) -> Callable:
    """Decorator: register an ``apply(model, adapter, heads)`` context manager as the mask mode ``name``.

    ``per_row``: its per-row application (:attr:`MaskMode.apply_rows`), which makes the mode batchable.
    ``batchable=True`` without one is refused: a mode batches only through its own per-row function."""
    if name in _MODES:
        raise ValueError(f"mask mode {name!r} is already registered")
    if batchable and per_row is None:
        raise ValueError(f"mask mode {name!r}: batchable=True needs the mode's own per-row application "
                         "(per_row=...); without one its conditions run one head set at a time")
    if batchable is False and per_row is not None:
        raise ValueError(f"mask mode {name!r}: batchable=False contradicts the per-row application given")

    def register(apply: Callable) -> Callable:
        if name in _MODES:
            raise ValueError(f"mask mode {name!r} is already registered")
        _MODES[name] = MaskMode(name, apply, help, per_row)
        return apply

    return register


def mask_modes() -> tuple[MaskMode, ...]:
    """Every registered mask mode, in registration order (the default, ``zero``, first)."""
    _load_more_modes()
    return tuple(_MODES.values())


def mask_mode_names() -> tuple[str, ...]:
    """The names ``--mask-mode`` and a condition's ``mask_mode`` accept, the default first.

    >>> mask_mode_names()[0]
    'zero'
    """
    _load_more_modes()
    return tuple(_MODES)


def get_mask_mode(name: str) -> MaskMode:
    """The registered mode ``name``; ``ValueError`` listing the registered ones otherwise."""
    _load_more_modes()
    mode = _MODES.get(name)
    if mode is None:
        raise ValueError(f"unknown mask mode {name!r}; choose from {mask_mode_names()}")
    return mode


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


def _o_proj_input(args: tuple, kwargs: dict[str, Any]) -> tuple[torch.Tensor, str | None]:
    """``o_proj``'s input and where it came from (``None``: positional, as every HF attention calls it)."""
    if args:
        return args[0], None
    return kwargs["input"], "input"


def _with_input(args: tuple, kwargs: dict[str, Any], key: str | None, x: torch.Tensor) -> tuple[tuple, dict]:
    """The pre-hook's return value: the call's arguments with ``o_proj``'s input replaced by ``x``."""
    if key is None:
        return (x, *args[1:]), kwargs
    return args, {**kwargs, key: x}


def _check_width(x: torch.Tensor, num_heads: int, head_dim: int, layer: int, who: str) -> None:
    if x.shape[-1] != num_heads * head_dim:
        raise RuntimeError(
            f"{who}: o_proj input of layer {layer} has last dim {x.shape[-1]}, expected "
            f"num_heads*head_dim = {num_heads}*{head_dim} = {num_heads * head_dim}")


def _zero_heads_hook(head_idx: list[int], num_heads: int, head_dim: int, layer: int):
    """A ``with_kwargs`` forward pre-hook for ``o_proj`` that zeroes the given heads' input slices."""
    import torch

    cache: dict[torch.device, torch.Tensor] = {}  # index tensor per device, built once

    def hook(module: nn.Module, args: tuple, kwargs: dict[str, Any]):
        x, key = _o_proj_input(args, kwargs)
        _check_width(x, num_heads, head_dim, layer, "mask_heads")
        idx = cache.get(x.device)
        if idx is None:
            idx = cache[x.device] = torch.tensor(head_idx, dtype=torch.long, device=x.device)
        # [..., H*d_head] -> [..., H, d_head]; leading dims are [B, S] (S=1 when decoding with a cache)
        per_head = x.reshape(*x.shape[:-1], num_heads, head_dim)
        # index_fill is out of place and writes exact zeros (x*0 would keep NaN/inf)
        per_head = per_head.index_fill(-2, idx, 0.0)
        return _with_input(args, kwargs, key, per_head.reshape(x.shape))  # [..., H, d_head] -> [..., H*d_head]

    return hook


@dataclass
class RowSubset:
    """Which of the batch's rows the forward call running now computes: ``rows`` (ascending row indices), or
    every row (None). Set by whoever runs a layer on part of the batch (the shared prompt prefill,
    :mod:`vrh.core.sharing`) so that :func:`mask_heads_per_row` masks each computed row with its own heads."""

    rows: torch.Tensor | None = None  # LongTensor [B_computed]


def _zero_rows_hook(masked: torch.Tensor, head_dim: int, layer: int, subset: RowSubset | None = None):
    """A ``with_kwargs`` pre-hook for ``o_proj`` zeroing, in batch row b, the heads where ``masked[b]`` is True.

    ``masked``: bool ``[B, H]``. The batch dim of every call must be B (or, while ``subset.rows`` is set, the
    number of rows it names): greedy ``generate`` keeps it through its KV-cached decode steps (no beams, no
    expansion), and anything else is an error, not a silent broadcast of one row's mask onto another."""
    n_all, num_heads = masked.shape
    cache: dict[torch.device, torch.Tensor] = {}  # the mask per device, built once

    def hook(module: nn.Module, args: tuple, kwargs: dict[str, Any]):
        x, key = _o_proj_input(args, kwargs)
        _check_width(x, num_heads, head_dim, layer, "mask_heads_per_row")
        rows = subset.rows if subset is not None else None
        n_rows = n_all if rows is None else len(rows)
        if x.dim() != 3 or x.shape[0] != n_rows:
            raise RuntimeError(
                f"mask_heads_per_row: o_proj input of layer {layer} has shape {tuple(x.shape)}, expected "
                f"[{n_rows}, seq, {num_heads * head_dim}] (one row per head set given; beam search or "
                "num_return_sequences > 1 change the batch and are not supported)")
        m = cache.get(x.device)
        if m is None:
            m = cache[x.device] = masked.to(x.device)[:, None, :, None]  # [B, H] -> [B, 1, H, 1]
        if rows is not None:
            m = m[rows.to(x.device)]  # [B, 1, H, 1] -> [B_computed, 1, H, 1]
        per_head = x.reshape(*x.shape[:-1], num_heads, head_dim)  # [B, S, H*d_head] -> [B, S, H, d_head]
        per_head = per_head.masked_fill(m, 0.0)  # exact zeros, like index_fill in mask_heads
        return _with_input(args, kwargs, key, per_head.reshape(x.shape))  # -> [B, S, H*d_head]

    return hook


@contextmanager
def mask_heads(model: nn.Module, adapter: LanguageModelLayout, heads: Iterable[Head], mode: str = "zero"
               ) -> Iterator[None]:
    """Within the context, the language model's ``heads`` (``(layer, head)``, 0-based) are knocked out.

    ``mode``: a registered mask mode (:func:`mask_mode_names`): ``"zero"``, their outputs are zero
    (``o_proj`` pre-hooks); ``"uniform"``, they attend uniformly over their visible keys (see the module
    docstring). ``adapter`` supplies ``num_layers``, ``num_heads``, ``head_dim``, ``o_proj`` (zero) and
    ``attention_module`` / ``text_config`` (uniform), see :class:`vrh.models.adapters.base.Adapter`. Indices are
    validated before anything is installed; an empty ``heads`` is a no-op. Hooks and the attention
    implementation are restored on exit, also on error. Contexts nest (masks add up, also across modes).
    """
    apply = get_mask_mode(mode).apply  # an unknown mode is refused even with no heads
    heads = list(heads)
    if not heads:
        yield
        return
    with apply(model, adapter, heads):
        yield


@contextmanager
def _zero_mask(model: nn.Module, adapter: LanguageModelLayout, heads: list[Head]) -> Iterator[None]:
    num_layers, num_heads = adapter.num_layers(model), adapter.num_heads(model)
    head_dim = adapter.head_dim(model)
    by_layer = validate_heads(heads, num_layers, num_heads)
    hooks = {layer: _zero_heads_hook(idx, num_heads, head_dim, layer) for layer, idx in by_layer.items()}
    with _o_proj_pre_hooks(model, adapter, hooks):
        yield


@contextmanager
def _uniform_mask(model: nn.Module, adapter: LanguageModelLayout, heads: list[Head]) -> Iterator[None]:
    from vrh.core.attention import language_model_uses_vrh, uniform_heads

    by_layer = validate_heads(heads, adapter.num_layers(model), adapter.num_heads(model))
    by_module = {id(adapter.attention_module(model, layer)): hs for layer, hs in by_layer.items()}
    with language_model_uses_vrh(model, adapter), uniform_heads(by_module):
        yield


@contextmanager
def mask_heads_per_row(model: nn.Module, adapter: LanguageModelLayout, row_heads: Sequence[Iterable[Head]],
                       subset: RowSubset | None = None) -> Iterator[None]:
    """Within the context, batch row ``b`` of every language-model forward has ``row_heads[b]`` zeroed.

    Why: several masking conditions (k values, detected vs random heads, seeds) can then share one
    left-padded batch and one KV-cached greedy ``generate`` instead of one ``generate`` each. Row b's
    output is the one :func:`mask_heads` (zero mode) gives for ``row_heads[b]`` -- same ``o_proj`` input,
    same exact zeros -- so only the batch composition changes, as it does between any two batches. Every
    forward inside must have exactly ``len(row_heads)`` rows (a mismatch raises instead of broadcasting).

    Zero mode's per-row application (:attr:`MaskMode.apply_rows`, what makes it batchable): the uniform
    ablation lives inside vrh's attention function, which masks one head set per module for the whole batch,
    so it registers none and uniform conditions run one head set at a time
    (:func:`vrh.experiments.runner.run_conditions` does that). Every row is validated before
    anything is installed; rows with no heads are left untouched; hooks are removed on exit, also on error;
    it nests with :func:`mask_heads` (masks add up). ``subset``: while its ``rows`` are set, a forward holds
    only those rows of the batch, each masked with its own heads (:class:`RowSubset`).

    Example::

        with mask_heads_per_row(model, adapter, [[], [(3, 1)], [(3, 1), (10, 4)]]):
            out = model.generate(**inputs_of_3_rows, max_new_tokens=32, do_sample=False)
    """
    import torch

    row_heads = [list(hs) for hs in row_heads]
    num_layers, num_heads = adapter.num_layers(model), adapter.num_heads(model)
    head_dim = adapter.head_dim(model)
    by_row = []
    for b, heads in enumerate(row_heads):
        try:
            by_row.append(validate_heads(heads, num_layers, num_heads))
        except ValueError as e:
            raise ValueError(f"row {b}: {e}") from None
    masked: dict[int, torch.Tensor] = {}  # layer -> bool [B, H], only layers some row masks
    for b, by_layer in enumerate(by_row):
        for layer, idx in by_layer.items():
            if layer not in masked:
                masked[layer] = torch.zeros(len(row_heads), num_heads, dtype=torch.bool)
            masked[layer][b, idx] = True
    hooks = {layer: _zero_rows_hook(m, head_dim, layer, subset) for layer, m in sorted(masked.items())}
    with _o_proj_pre_hooks(model, adapter, hooks):
        yield


@contextmanager
def _o_proj_pre_hooks(model: nn.Module, adapter: LanguageModelLayout, hooks: dict[int, Any]) -> Iterator[None]:
    """Install ``{layer: pre-hook}`` on the layers' ``o_proj`` (geometry checked first); removed in finally."""
    num_heads, head_dim = adapter.num_heads(model), adapter.head_dim(model)
    o_projs = {layer: adapter.o_proj(model, layer) for layer in hooks}
    for layer, o_proj in o_projs.items():
        in_features = getattr(o_proj, "in_features", None)
        if in_features is not None and in_features != num_heads * head_dim:
            raise ValueError(
                f"layer {layer}: o_proj.in_features={in_features} != num_heads*head_dim = "
                f"{num_heads}*{head_dim}; the adapter's head geometry does not match the model")
    handles = []
    try:
        for layer, hook in hooks.items():
            handles.append(o_projs[layer].register_forward_pre_hook(hook, with_kwargs=True))
        yield
    finally:
        for handle in handles:
            handle.remove()


# --- the registrations, the default first ----------------------------------------------------------------
register_mask_mode("zero", help="its output", per_row=mask_heads_per_row)(_zero_mask)
# the uniform ablation masks one head set per attention module for the whole batch: no per-row application
register_mask_mode("uniform", help="attention over the keys it may see (Retrieval Heads' ablation)")(_uniform_mask)
