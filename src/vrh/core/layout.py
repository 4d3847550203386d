"""What the mechanisms need of a model family's adapter: where its language model's attention is, and its
head grid. The ``adapter`` argument of every function in :mod:`vrh.core` is typed with this protocol, so a
reader sees what capture and masking use of it (six methods), and a type checker holds a custom adapter to
them. Every :class:`vrh.models.adapters.Adapter` satisfies it (a test checks each registered family).

No torch at import: :mod:`vrh.core.masking`, which uses it, is read by ``vrh --help``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from torch import nn


@runtime_checkable
class LanguageModelLayout(Protocol):
    """The language model of a loaded VLM as the mechanisms see it: ``L`` decoder layers of ``H`` query heads of
    size ``d_head`` each, layer ``l``'s attention module and its output projection (whose input is
    ``[B, S, H * d_head]``, head ``h`` in columns ``h * d_head : (h + 1) * d_head``)."""

    def text_config(self, model: nn.Module) -> Any:
        """The language model's config (the attention implementation is read from it)."""

    def num_layers(self, model: nn.Module) -> int:
        """``L``: decoder layers of the language model."""

    def num_heads(self, model: nn.Module) -> int:
        """``H``: query heads per layer."""

    def head_dim(self, model: nn.Module) -> int:
        """``d_head``: each head's size."""

    def attention_module(self, model: nn.Module, layer: int) -> nn.Module:
        """Layer ``layer``'s self-attention module (0-based)."""

    def o_proj(self, model: nn.Module, layer: int) -> nn.Linear:
        """Layer ``layer``'s output projection, whose input columns are the heads' outputs."""
