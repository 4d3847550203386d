"""``knockout-image``: a masked head's logits from the blocked queries to every visual token are ``-inf``.

The head still attends to the text, renormalised over it (:mod:`vrh.core.knockout`, which queries:
``--blocked-queries``). A cross-attention head (Llama 3.2 Vision), whose keys are all vision states, has no
key left: its output at those queries is zero, as in ``zero`` mode; that family's self-attention heads have
no visual key in their text, so the mode changes nothing there.
"""

from __future__ import annotations

from typing import Any

from vrh.core.masking import register_mask_mode


def knockout_image(model: Any, adapter: Any, heads: list) -> Any:
    """Block every visual token for ``heads`` in every row of the batches generated inside."""
    from vrh.core.knockout import image_keys, knockout_heads

    return knockout_heads(model, adapter, [heads], image_keys, every_row=True)


def knockout_image_rows(model: Any, adapter: Any, row_heads: list, subset: Any = None) -> Any:
    """Per batch row b: block row b's visual tokens for ``row_heads[b]`` (its per-row application)."""
    from vrh.core.knockout import image_keys, knockout_heads

    return knockout_heads(model, adapter, row_heads, image_keys, subset=subset)


register_mask_mode("knockout-image", per_row=knockout_image_rows,
                   help="attention to every visual token blocked (-inf before the softmax; it still reads the "
                        "text)")(knockout_image)
