"""``knockout-referent``: a masked head's logits from the blocked queries to the referent's visual tokens are
``-inf``.

The referent's tokens are, per sample, the key set of Eq. 1 (cell tokens whose rectangle overlaps the
sample's box, :func:`vrh.core.regions.box_token_mask`, detection's rule; ``--referent-min-overlap`` its
``min_overlap``), so each row of a batch carries its own key set. The head still attends to the rest of the
image and to the text. A sample without a box (VQA) is refused. See :mod:`vrh.core.knockout`.
"""

from __future__ import annotations

from typing import Any

from vrh.core.masking import register_mask_mode


def knockout_referent(model: Any, adapter: Any, heads: list) -> Any:
    """Block each row's referent tokens for ``heads`` in the batches generated inside."""
    from vrh.core.knockout import knockout_heads, referent_keys

    return knockout_heads(model, adapter, [heads], referent_keys, every_row=True)


def knockout_referent_rows(model: Any, adapter: Any, row_heads: list, subset: Any = None) -> Any:
    """Per batch row b: block row b's referent tokens for ``row_heads[b]`` (its per-row application)."""
    from vrh.core.knockout import knockout_heads, referent_keys

    return knockout_heads(model, adapter, row_heads, referent_keys, subset=subset)


register_mask_mode("knockout-referent", per_row=knockout_referent_rows,
                   help="attention to the referent's visual tokens (Eq. 1's key set) blocked")(knockout_referent)
