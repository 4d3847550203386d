"""What the mechanisms need of a model family's adapter: where its language model's attention is, and its
head grid. The ``adapter`` argument of every function in :mod:`vrh.core` is typed with this protocol, so a
reader sees what capture and masking use of it (seven methods), and a type checker holds a custom adapter to
them. Every :class:`vrh.models.adapters.Adapter` satisfies it (a test checks each registered family).

Where a head's attention lives: layer ``l``'s attention module is either a self-attention over the text
sequence (keys = sequence positions, the visual tokens among them) or, in a cross-attention VLM (Llama 3.2
Vision), a cross-attention whose keys are the vision states (:data:`VISION`): the layout lists those layers
(``cross_attention_layers``). Capture reads rows over one *key space* at a time (:func:`layer_key_space`);
masking needs nothing more, since either module's ``o_proj`` input is ``[B, S, H * d_head]``.

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

    def cross_attention_layers(self, model: nn.Module) -> tuple[int, ...]:
        """Layers whose attention module is a cross-attention over the vision states (keys: :data:`VISION`);
        empty for a decoder-only VLM, whose visual tokens are positions of the text sequence."""


SEQUENCE = "sequence"  # keys are positions of the text sequence (self-attention)
VISION = "vision"  # keys are the vision states a cross-attention reads
KEY_SPACES = (SEQUENCE, VISION)


def cross_layers(adapter: Any, model: nn.Module) -> frozenset[int]:
    """The adapter's cross-attention layers; a stand-in layout without the method has none."""
    method = getattr(adapter, "cross_attention_layers", None)
    return frozenset(int(x) for x in method(model)) if method is not None else frozenset()


def layer_key_space(adapter: Any, model: nn.Module, layer: int) -> str:
    """The keys layer ``layer``'s attention module reads: :data:`VISION` or :data:`SEQUENCE`."""
    return VISION if layer in cross_layers(adapter, model) else SEQUENCE


def visual_key_space(adapter: Any, model: nn.Module) -> str:
    """Where the visual tokens of a :class:`~vrh.models.adapters.VisionBatch` are keys: :data:`VISION` for a
    cross-attention VLM (``visual_positions`` index the cross-attention keys), else :data:`SEQUENCE`."""
    return VISION if cross_layers(adapter, model) else SEQUENCE
