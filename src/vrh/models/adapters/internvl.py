"""InternVL 2.5 / 3 / 3.5 in transformers' native form (``InternVLForConditionalGeneration``, the ``-hf``
checkpoints such as ``OpenGVLab/InternVL3-8B-hf``).

How an image becomes tokens (``InternVLProcessor`` + ``GotOcr2ImageProcessor``): the processor picks a
grid of ``cols x rows`` square tiles (448 px in the released models) whose aspect ratio is closest to the
image's (``get_optimal_tiled_canvas``, between ``min_patches`` and ``max_patches`` tiles, 1-12 by default),
resizes the whole image onto that canvas and cuts it row-major; with more than one tile it appends a
thumbnail, the whole image squashed to one tile. Each tile goes through the ViT (14-px patches, 32 x 32)
and a 0.5 pixel shuffle that merges every 2 x 2 patch window into one token, row-major
(``InternVLModel.pixel_shuffle``; tests/models/adapters/test_internvl.py checks the order through the model's
own ``get_image_features``), so a
tile is 16 x 16 = ``image_seq_length`` = 256 tokens of 28 x 28 tile pixels. The text gets
``<img>`` + ``<IMG_CONTEXT>`` x 256 per tile + ``</img>``.

The processor returns only the tile count (and drops even that), so :func:`tile_grid` recomputes the grid
with the processor's own function and settings, and :meth:`InternVLAdapter.visual_map` checks the result
against the number of image tokens the processor emitted.

Token map: a tile token is one cell of the ``(rows * 16) x (cols * 16)`` grid over the resized canvas,
scaled back to the original image (a *cell* token). A thumbnail token is a cell of a 16 x 16 grid over the
whole image: a coarser view that overlaps the tile cells, so it keeps that coarse rectangle but is marked
``cell_tokens = False`` and never enters K.

Grounding, from the official evaluation (``OpenGVLab/InternVL internvl_chat/eval/refcoco/
evaluate_grounding.py``): the prompt ``Please provide the bounding box coordinate of the region this
sentence describes: <ref>{expression}</ref>``; the answer ``[[x1, y1, x2, y2]]`` (the model often wraps it
as ``<ref>...</ref><box>[[...]]</box>``) in 0-1000 coordinates relative to the original image's width and
height. Like the official judge, a box whose four numbers sum to less than 4 is read as 0-1 fractions
(so, there as here, a 0-1000 box such as ``[[0, 0, 1, 2]]`` is misread). The official evaluation tiles with
at most 6 tiles (``--max-num 6``); vrh uses the checkpoint's processor settings (``max_patches``, 12 in the
-hf processors): save a processor with ``max_patches=6`` to match the official numbers exactly.

Two chat templates ship with the -hf checkpoints: the current one writes the image as ``<IMG_CONTEXT>\n``, an
older one (InternVL3-78B-hf, some InternVL3.5 -hf) as ``<image>\n``; :meth:`InternVLAdapter.chat_text` serves
both (the same tokens either way).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from vrh.models.adapters.base import Box, ChatTemplateAdapter, register_adapter

if TYPE_CHECKING:
    import torch

NORM = 1000  # the answer frame: 0-1000 relative to the original image
LEGACY_IMAGE = "<image>"  # the image placeholder of the older -hf chat template


def tiling_settings(processor: Any) -> dict[str, Any]:
    """The tiling options the processor actually applies when called without image kwargs: its class
    defaults (``InternVLProcessor`` turns ``crop_to_patches`` on) over the image processor's attributes.
    Why not just the image processor's: an image processor saved with ``crop_to_patches: false`` still
    tiles, because ``InternVLProcessor`` passes its own default ``crop_to_patches=True``."""
    ip = processor.image_processor
    merged = processor._merge_kwargs(tokenizer_init_kwargs=processor.tokenizer.init_kwargs)["images_kwargs"]
    get = lambda key: merged[key] if merged.get(key) is not None else getattr(ip, key)  # noqa: E731
    size = get("size")
    height, width = (size["height"], size["width"]) if isinstance(size, dict) else (size.height, size.width)
    return {"crop_to_patches": bool(get("crop_to_patches")), "min_patches": int(get("min_patches")),
            "max_patches": int(get("max_patches")), "tile_size": (int(height), int(width))}


def tile_grid(image_size: tuple[int, int], settings: dict[str, Any]) -> tuple[int, int, bool]:
    """``(cols, rows, thumbnail)`` the processor uses for an image of ``(width, height)``: the same
    ``get_optimal_tiled_canvas`` call and the same single-tile and thumbnail rules as
    ``GotOcr2ImageProcessor.crop_image_to_patches``.

    >>> s = {"crop_to_patches": True, "min_patches": 1, "max_patches": 12, "tile_size": (448, 448)}
    >>> tile_grid((1000, 500), s), tile_grid((300, 300), s), tile_grid((300, 300), dict(s, max_patches=1))
    ((2, 1, True), (1, 1, False), (1, 1, False))
    """
    from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import get_optimal_tiled_canvas

    if not (settings["crop_to_patches"] and settings["max_patches"] > 1):
        return 1, 1, False
    width, height = image_size
    cols, rows = get_optimal_tiled_canvas((height, width), settings["tile_size"], settings["min_patches"],
                                          settings["max_patches"])
    return cols, rows, cols * rows > 1


@register_adapter
class InternVLAdapter(ChatTemplateAdapter):
    name = "internvl"
    model_types = ("internvl",)
    box_convention = '[[x1, y1, x2, y2]], 0-1000 relative to the original image'
    token_layout = '448-px tiles (1-12, row-major), 16x16 tokens of 28 px each (pixel shuffle), then a thumbnail tile (no cells) when tiled; <img>...</img>'
    prompt_template = ("Please provide the bounding box coordinate of the region this sentence describes: "
                       "<ref>{expression}</ref>")
    model_class = "InternVLForConditionalGeneration"
    processor_class = "InternVLProcessor"  # loaded without its video processor where torchvision is missing

    # --- prompts -------------------------------------------------------------------------------
    def chat_text(self, processor: Any, prompt: str) -> str:
        """The rendered chat, with the image as ``processor.image_token`` (``<IMG_CONTEXT>``) whichever of the two
        -hf templates the checkpoint ships: the older one (475 bytes; InternVL3-78B-hf, some InternVL3.5 -hf)
        writes ``<image>``, which the processor does not expand (nor does transformers' own pipeline)."""
        chat = super().chat_text(processor, prompt)
        head = chat[:max(chat.rfind(prompt), 0)]  # the template's text before the prompt: where it put the image
        if processor.image_token not in chat and head.count(LEGACY_IMAGE) == 1:
            chat = head.replace(LEGACY_IMAGE, processor.image_token) + chat[len(head):]
        return chat

    # --- token -> image map --------------------------------------------------------------------
    def visual_map(self, processor: Any, enc: Any, b: int, image: Any
                   ) -> tuple[torch.Tensor, dict[str, Any], torch.Tensor]:
        """Tile cells (row-major within each tile, tiles row-major), then the thumbnail's cells. Checked
        against the processor's output: tiles x ``image_seq_length`` must equal the sample's image tokens."""
        import torch

        settings = tiling_settings(processor)
        cols, rows, thumbnail = tile_grid(image.size, settings)
        n = math.isqrt(int(processor.image_seq_length))  # tokens per tile side: the model reshapes a tile square
        if n * n != processor.image_seq_length:
            raise ValueError(f"image_seq_length {processor.image_seq_length} is not a square number of tokens")
        n_tiles = cols * rows + int(thumbnail)
        ids = enc["input_ids"][b][enc["attention_mask"][b].bool()]
        n_img = int((ids == self.feature_token_id(processor)).sum())
        if n_img != n_tiles * n * n:
            raise ValueError(f"recomputed {cols}x{rows} tiles{' + thumbnail' if thumbnail else ''} = {n_tiles} x "
                             f"{n * n} tokens, but the processor emitted {n_img} image tokens")
        width, height = image.size
        i, j = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")  # [n, n] each
        i, j = i.flatten(), j.flatten()  # [n*n], row-major within a tile
        t = torch.arange(cols * rows)  # tiles, row-major
        gy = ((t // cols)[:, None] * n + i[None, :]).flatten().double()  # [T*n*n] global cell row
        gx = ((t % cols)[:, None] * n + j[None, :]).flatten().double()  # [T*n*n] global cell column
        cw, ch = width / (cols * n), height / (rows * n)  # a cell in original pixels
        tiles = torch.stack([gx * cw, gy * ch, (gx + 1) * cw, (gy + 1) * ch], dim=1)  # [T*n*n, 4]
        parts, cell = [tiles], [torch.ones(len(tiles), dtype=torch.bool)]
        if thumbnail:
            i, j = i.double(), j.double()
            tw, th = width / n, height / n
            parts.append(torch.stack([j * tw, i * th, (j + 1) * tw, (i + 1) * th], dim=1))  # [n*n, 4]
            cell.append(torch.zeros(n * n, dtype=torch.bool))
        tile_h, tile_w = settings["tile_size"]
        meta = {"tile_grid": (rows, cols), "thumbnail": thumbnail, "token_grid": (rows * n, cols * n),
                "resized_size": (cols * tile_w, rows * tile_h), "cell_px": tile_w // n}
        return torch.cat(parts).float(), meta, torch.cat(cell)

    # --- answers -------------------------------------------------------------------------------
    def parse_box(self, text: str, meta: dict[str, Any], image_size: tuple[int, int]) -> Box | None:
        from vrh.data import boxes as grounding

        found = grounding.parse_box(text)
        if found is None:
            return None
        box = found[1]
        scale = NORM if sum(box) >= 4 else 1  # the official judge: small sums are 0-1 fractions
        return grounding.from_normalized(box, scale, image_size)  # not clipped (the task's `clip` option)

    def format_box(self, box: Box, meta: dict[str, Any], image_size: tuple[int, int]) -> str:
        from vrh.data import boxes as grounding

        x1, y1, x2, y2 = (int(round(v)) for v in grounding.to_normalized(box, NORM, image_size))
        return f"[[{x1}, {y1}, {x2}, {y2}]]"
