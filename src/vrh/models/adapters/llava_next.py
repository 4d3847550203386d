"""LLaVA-NeXT / LLaVA-1.6 (``LlavaNextForConditionalGeneration``; Mistral, Vicuna and Llama-3 backbones).

The processor ("anyres") turns one image into tiles of the vision tower's size: first the *base* tile, the
whole image squashed to ``S x S``; then the image resized (aspect kept) into the best canvas among
``image_grid_pinpoints``, centred on a zero-padded canvas and cut row-major into ``S x S`` tiles. The model
lays the visual tokens out as

1. the base tile's ``g x g`` patch tokens (``g = S / patch``), row-major: each covers its ``patch x patch``
   square of the squashed image, i.e. a ``W/g x H/g`` rectangle of the original image (coarse cells);
2. the tiles' patch tokens stitched into one ``(tiles_h * g) x (tiles_w * g)`` grid, minus the rows (or
   columns) the model's ``unpad_image`` drops as padding, row-major, **each row followed by one newline
   token** (``image_newline``, a learned vector that shows no pixels).

:meth:`LlavaNextAdapter.visual_map` recomputes this layout with transformers' own helpers
(``select_best_resolution``, ``get_patch_output_size``, and the model's ``unpad_image`` applied to a grid of
token indices), from the processor's ``image_sizes`` and settings, never from a token count; the
pixel-content test proves it. Cell tokens (:class:`vrh.models.adapters.base.VisionBatch`) are the unpadded grid's
tokens only, a row-major ``rows' x cols'`` grid (``meta["token_grid"]``): they alone may enter K. The base
tokens are not cells (like InternVL's thumbnail): each keeps its own coarse rectangle, the ``W/g x H/g`` part
of the original image its patch of the squashed image shows. A newline token shows no pixels: it is not a
cell and gets the whole image. Only the ``"default"`` feature strategy (CLS dropped) is supported, as in
every released checkpoint: under ``"full"`` the model cannot stitch the tiles.

Grounding follows lmms-eval's ``refcoco_bbox_rec`` task (``lmms_eval/tasks/refcoco/utils_rec.py``), the
evaluation LLaVA-NeXT is reported with: the prompt below, and a box ``[x1, y1, x2, y2]`` of floats in
``[0, 1]``, x divided by the image width and y by the height (lmms-eval normalises the ground truth that
way). vrh writes two decimals, as LLaVA's grounding data does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vrh.models.adapters.base import Box, ChatTemplateAdapter, register_adapter
from vrh.models.adapters.llava import complete_processor

if TYPE_CHECKING:
    import torch
    from torch import nn


def _side(size: Any, *keys: str) -> int | None:
    get = (lambda k: size.get(k)) if isinstance(size, dict) else (lambda k: getattr(size, k, None))
    return next((int(get(k)) for k in keys if get(k)), None)


def tile_side(processor: Any) -> int:
    """The vision tower's input side S: the tile size, the base squash size and the crop must all be S."""
    ip = processor.image_processor
    size = (_side(ip.size, "height", "shortest_edge"), _side(ip.size, "width", "shortest_edge"))
    crop = ((_side(ip.crop_size, "height"), _side(ip.crop_size, "width")) if getattr(ip, "do_center_crop", True)
            else size)
    sides = {*size, *crop}
    if len(sides) != 1:
        raise ValueError(f"LLaVA-NeXT image processor with size={ip.size} crop_size={ip.crop_size}: vrh needs one "
                         "square tile side for the base image, the anyres tiles and the crop")
    return sides.pop()


def anyres_canvas(image_hw: tuple[int, int], pinpoints: list, tile: int):
    """Where the processor put the image: ``(canvas_hw, resized_hw, paste_yx)`` in canvas pixels."""
    import numpy as np
    from transformers.image_processing_utils import get_patch_output_size, select_best_resolution
    from transformers.image_utils import ChannelDimension

    canvas = tuple(int(v) for v in select_best_resolution(image_hw, pinpoints))
    if canvas[0] % tile or canvas[1] % tile:
        raise ValueError(f"image_grid_pinpoints entry {list(canvas)} is not a multiple of the tile side {tile}")
    dummy = np.empty((1, *image_hw), dtype=np.uint8)  # only its shape is read
    resized = tuple(int(v) for v in get_patch_output_size(dummy, canvas, input_data_format=ChannelDimension.FIRST))
    paste = ((canvas[0] - resized[0]) // 2, (canvas[1] - resized[1]) // 2)  # the processor's centred paste
    return canvas, resized, paste


def kept_grid(image_hw: tuple[int, int], rows: int, cols: int) -> torch.Tensor:
    """Row-major indices into the full ``rows x cols`` tile grid of the tokens the model keeps, as a
    ``[rows', cols']`` LongTensor: the model's own ``unpad_image`` applied to a grid of indices."""
    import torch
    from transformers.models.llava_next.modeling_llava_next import unpad_image

    idx = torch.arange(rows * cols).view(1, rows, cols)  # [1, rows, cols] "feature map" of token indices
    return unpad_image(idx, list(image_hw))[0]  # [rows', cols']


@register_adapter
class LlavaNextAdapter(ChatTemplateAdapter):
    name = "llava_next"
    model_types = ("llava_next",)
    box_convention = '[x1, y1, x2, y2] floats in 0-1 (x / width, y / height)'
    token_layout = 'base tile g x g tokens (squashed image, no cells), then the unpadded anyres grid row-major with one newline token per row (no cells)'
    answer_sep = " "  # "[/INST]" / "ASSISTANT:" + " " + answer; on_load() drops it when the template ends blank
    prompt_template = ("Bounding box coordinates are specified in the format (top-left x, top-left y, bottom-right "
                       "x, bottom-right y). All values are floating point numbers bounded between 0 and 1. Please "
                       "provide the bounding box coordinate of the region this sentence describes: {expression}")
    model_class = "LlavaNextForConditionalGeneration"

    # --- loading -------------------------------------------------------------------------------
    def on_load(self, model: nn.Module, processor: Any) -> None:
        complete_processor(processor, model)
        self.answer_sep = self.template_answer_sep(processor)

    def template_answer_sep(self, processor: Any) -> str:
        """The separator the chat template implies: none when the generation prompt ends on white space
        (Llama-3's "\\n\\n", Qwen2's "assistant\\n"), else one space ("[/INST]", "ASSISTANT:")."""
        return "" if self.chat_text(processor, "x")[-1:].isspace() else " "

    # --- token -> image map --------------------------------------------------------------------
    def visual_map(self, processor: Any, enc: Any, b: int, image: Any
                   ) -> tuple[torch.Tensor, dict[str, Any], torch.Tensor]:
        import torch

        if processor.vision_feature_select_strategy != "default":
            raise ValueError(f"vision_feature_select_strategy={processor.vision_feature_select_strategy!r}: the "
                             "llava_next adapter supports 'default' (CLS dropped) only")
        ip, patch, tile = processor.image_processor, int(processor.patch_size), tile_side(processor)
        if tile % patch or tuple(enc["pixel_values"].shape[-2:]) != (tile, tile):  # [B, N, C, S, S]
            raise ValueError(f"pixel_values tiles {tuple(enc['pixel_values'].shape[-2:])} do not match the tile side "
                             f"{tile} and patch size {patch}")
        g = tile // patch  # patches per tile side
        h, w = (int(v) for v in enc["image_sizes"][b])  # original (height, width), as the model reads it
        width, height = image.size
        if (width, height) != (w, h):
            raise ValueError(f"image_sizes says {w}x{h} but the image is {width}x{height}")
        # 1) base tile: the image squashed to tile x tile, g x g patches
        i, j = torch.meshgrid(torch.arange(g), torch.arange(g), indexing="ij")  # [g, g] each
        i, j = i.flatten().float(), j.flatten().float()  # [g*g], row-major
        base = torch.stack([j, i, j + 1, i + 1], dim=1) * torch.tensor([w / g, h / g] * 2)  # [g*g, 4] original px
        # 2) anyres tiles stitched into one grid, unpadded as the model does, a newline after each row
        (ch, cw), (rh, rw), (py, px) = anyres_canvas((h, w), ip.image_grid_pinpoints, tile)
        rows, cols = ch // tile * g, cw // tile * g  # full grid, in patches
        kept = kept_grid((h, w), rows, cols)  # [rows', cols'] indices into the full grid
        r, c = (kept // cols).float(), (kept % cols).float()  # [rows', cols'] each
        cell = torch.stack([c, r, c + 1, r + 1], dim=-1) * patch  # [rows', cols', 4] canvas px
        cell = (cell - torch.tensor([px, py, px, py])) * torch.tensor([w / rw, h / rh] * 2)  # original px
        cell = cell.clamp(min=0).minimum(torch.tensor([w, h, w, h], dtype=torch.float))
        whole = torch.tensor([0.0, 0.0, w, h]).expand(cell.shape[0], 1, 4)  # [rows', 1, 4] newline: whole image
        grid = torch.cat([cell, whole], dim=1).reshape(-1, 4)  # [rows' * (cols' + 1), 4], row-major + newlines
        is_cell = torch.ones(cell.shape[0], cell.shape[1] + 1, dtype=torch.bool)  # [rows', cols' + 1]
        is_cell[:, -1] = False
        is_cell = torch.cat([torch.zeros(g * g, dtype=torch.bool), is_cell.flatten()])  # [V] base tokens first
        meta = {"token_grid": tuple(kept.shape), "base_grid": (g, g), "canvas_size": (cw, ch),
                "anyres_size": (rw, rh), "paste_offset": (px, py), "cell_px": patch}
        return torch.cat([base, grid]), meta, is_cell

    # --- answers -------------------------------------------------------------------------------
    def parse_box(self, text: str, meta: dict[str, Any], image_size: tuple[int, int]) -> Box | None:
        from vrh.data import boxes as grounding

        found = grounding.parse_box(text)
        return None if found is None else grounding.from_normalized(found[1], 1.0, image_size)

    def format_box(self, box: Box, meta: dict[str, Any], image_size: tuple[int, int]) -> str:
        from vrh.data import boxes as grounding

        x1, y1, x2, y2 = grounding.to_normalized(box, 1.0, image_size)
        return f"[{x1:.2f}, {y1:.2f}, {x2:.2f}, {y2:.2f}]"
