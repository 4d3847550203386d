"""LLaVA-OneVision (``LlavaOnevisionForConditionalGeneration``; Qwen2 LM, SigLIP tower), e.g.
``llava-hf/llava-onevision-qwen2-7b-ov-hf``.

The image side is LLaVA-NeXT's anyres (see :mod:`vrh.models.adapters.llava_next`): a *base* tile, the whole image
squashed to ``S x S`` (384 px, 27 x 27 = 729 tokens: SigLIP has no CLS and the released checkpoints use the
"full" feature strategy), then the image resized (aspect kept) into the best canvas among
``image_grid_pinpoints`` (up to 6 x 6 tiles), centred on a zero-padded canvas, cut into ``S x S`` tiles whose
patch tokens are stitched into one grid, unpadded by the model's ``unpad_image``, and each row followed by a
newline token. What OneVision adds (``vision_aspect_ratio = "anyres_max_9"``): when the unpadded grid holds
more than 1.1^2 x 9 tiles' worth of tokens, the model shrinks it bilinearly (``align_corners=False``) by
``ratio = sqrt(rows * cols / (9 * g^2))`` to ``int(rows // ratio) x int(cols // ratio)`` before adding the
newlines.

Token map (:meth:`LlavaOnevisionAdapter.visual_map`, recomputed with transformers' own helpers from the
processor's ``image_sizes`` and settings): base tokens are not cells (each keeps the coarse rectangle of its
patch of the squashed image); grid tokens are cells; newline tokens are not cells and get the whole image.
A token of a shrunk grid is a bilinear blend of the (up to) 2 x 2 patches around its sample point; vrh gives
it the rectangle it stands for, cell ``(i, j)`` of the regular ``rows' x cols'`` grid laid over the unpadded
region, whose centre *is* that sample point (``align_corners=False`` samples at ``(i + 1/2) * rows / rows'``
in cell units). test_llava_onevision.py proves it by the blended patch centres, and the exact layout of an
unshrunk grid by pixel content.

Grounding follows lmms-eval's ``refcoco_bbox_rec`` task (``lmms_eval/tasks/refcoco/utils_rec.py``), the
evaluation LLaVA-OneVision is reported with: the same prompt and ``[x1, y1, x2, y2]`` answer in 0-1 floats as
LLaVA-NeXT (checked: the task normalises the ground truth by the image width and height and reads the first
bracketed four numbers), so the prompt and box methods are inherited from :class:`LlavaNextAdapter`.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

from vrh.models.adapters.base import register_adapter
from vrh.models.adapters.llava_next import LlavaNextAdapter, anyres_canvas, tile_side

if TYPE_CHECKING:
    import torch
    from torch import nn


def max_tiles(vision_aspect_ratio: str) -> int:
    """The tile budget of ``anyres_max_N``.

    >>> max_tiles("anyres_max_9")
    9
    """
    found = re.fullmatch(r"anyres_max_(\d+)", vision_aspect_ratio or "")
    if not found:
        raise ValueError(f"vision_aspect_ratio={vision_aspect_ratio!r}: the llava_onevision adapter supports "
                         "'anyres_max_N' (the released checkpoints use anyres_max_9)")
    return int(found.group(1))


def shrunk_shape(rows: int, cols: int, g: int, budget: int) -> tuple[int, int]:
    """The grid shape after the model's bilinear shrink (unchanged when within 1.1 x the budget).

    >>> shrunk_shape(9, 12, 3, 9), shrunk_shape(6, 9, 3, 9)
    ((7, 10), (6, 9))
    """
    ratio = math.sqrt(rows * cols / (budget * g * g))
    return (int(rows // ratio), int(cols // ratio)) if ratio > 1.1 else (rows, cols)


@register_adapter
class LlavaOnevisionAdapter(LlavaNextAdapter):
    name = "llava_onevision"
    model_types = ("llava_onevision",)
    answer_sep = ""  # the Qwen2 template ends the generation prompt on "assistant\n"; on_load() re-checks
    token_layout = ('base tile g x g tokens (squashed image, no cells), then the unpadded anyres grid, bilinearly '
                    'shrunk past anyres_max_9, row-major with one newline token per row (no cells)')
    model_class = "LlavaOnevisionForConditionalGeneration"
    processor_class = "LlavaOnevisionProcessor"  # loaded without its video processor where torchvision is missing

    # --- loading -------------------------------------------------------------------------------
    def on_load(self, model: nn.Module, processor: Any) -> None:
        if processor.vision_aspect_ratio != model.config.vision_aspect_ratio:
            raise ValueError(f"{model.config.name_or_path}: the processor's vision_aspect_ratio "
                             f"{processor.vision_aspect_ratio!r} differs from the model's "
                             f"{model.config.vision_aspect_ratio!r}")
        self.answer_sep = self.template_answer_sep(processor)

    # --- token -> image map --------------------------------------------------------------------
    def visual_map(self, processor: Any, enc: Any, b: int, image: Any
                   ) -> tuple[torch.Tensor, dict[str, Any], torch.Tensor]:
        import torch
        from transformers.models.llava_onevision.modeling_llava_onevision import unpad_image

        ip, tile = processor.image_processor, tile_side(processor)
        g = math.isqrt(int(processor.num_image_tokens))  # tokens per tile side; "default" counts a CLS too
        if g * g != int(processor.num_image_tokens) - (processor.vision_feature_select_strategy == "default"):
            raise ValueError(f"num_image_tokens={processor.num_image_tokens} with strategy "
                             f"{processor.vision_feature_select_strategy!r} is not a square tile of tokens")
        if tile % g or tuple(enc["pixel_values"].shape[-2:]) != (tile, tile):  # [B, N, C, S, S]
            raise ValueError(f"pixel_values tiles {tuple(enc['pixel_values'].shape[-2:])} do not match the tile side "
                             f"{tile} and {g} x {g} tokens per tile")
        patch = tile // g
        h, w = (int(v) for v in enc["image_sizes"][b])  # original (height, width), as the model reads it
        if image.size != (w, h):
            raise ValueError(f"image_sizes says {w}x{h} but the image is {image.size[0]}x{image.size[1]}")
        # 1) base tile: the image squashed to tile x tile, g x g patches
        base = _cells(torch.arange(g).double(), torch.arange(g).double(), 1.0, 1.0)  # [g*g, 4] base-grid units
        base = base * torch.tensor([w / g, h / g] * 2, dtype=torch.double)  # original px
        # 2) the tiles' grid, unpadded as the model does: its extent in full-grid cells
        (ch, cw), (rh, rw), (py, px) = anyres_canvas((h, w), ip.image_grid_pinpoints, tile)
        rows, cols = ch // tile * g, cw // tile * g  # full grid, in patches
        idx = torch.arange(rows * cols).view(1, rows, cols)  # [1, rows, cols] "feature map" of token indices
        kept = unpad_image(idx, [h, w])[0]  # [rows', cols'] indices into the full grid
        r0, c0 = int(kept[0, 0]) // cols, int(kept[0, 0]) % cols
        kr, kc = kept.shape
        # 3) the bilinear shrink: a regular grid of nr x nc cells over the kept region
        nr, nc = shrunk_shape(kr, kc, g, max_tiles(processor.vision_aspect_ratio))
        grid = _cells(r0 + torch.arange(nr).double() * kr / nr, c0 + torch.arange(nc).double() * kc / nc,
                      kr / nr, kc / nc)  # [nr*nc, 4] full-grid cell units
        grid = (grid * patch - torch.tensor([px, py, px, py])) * torch.tensor([w / rw, h / rh] * 2)  # original px
        grid = grid.clamp(min=0).minimum(torch.tensor([w, h, w, h], dtype=torch.double)).view(nr, nc, 4)
        whole = torch.tensor([0.0, 0.0, w, h], dtype=torch.double).expand(nr, 1, 4)  # [nr, 1, 4] newlines
        rects = torch.cat([base, torch.cat([grid, whole], dim=1).reshape(-1, 4)])  # [g*g + nr*(nc+1), 4]
        is_cell = torch.ones(nr, nc + 1, dtype=torch.bool)  # [nr, nc + 1]
        is_cell[:, -1] = False
        is_cell = torch.cat([torch.zeros(g * g, dtype=torch.bool), is_cell.flatten()])  # [V] base tokens first
        meta = {"token_grid": (nr, nc), "unpadded_grid": (kr, kc), "shrunk": (nr, nc) != (kr, kc),
                "base_grid": (g, g), "canvas_size": (cw, ch), "anyres_size": (rw, rh), "paste_offset": (px, py),
                "cell_px": patch}
        return rects.float(), meta, is_cell


def _cells(top: torch.Tensor, left: torch.Tensor, height: float, width: float) -> torch.Tensor:
    """Row-major ``[len(top) * len(left), 4]`` xyxy cells of the given size at every (top, left) pair."""
    import torch

    y, x = torch.meshgrid(top, left, indexing="ij")  # [R, C] each
    y, x = y.flatten(), x.flatten()
    return torch.stack([x, y, x + width, y + height], dim=1)
