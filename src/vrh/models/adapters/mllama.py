"""Llama 3.2 Vision (``MllamaForConditionalGeneration``): the image reaches the language model only through its
cross-attention layers (``text_config.cross_attention_layers``: 3, 8, ..., 38 of the 11B's 40), whose keys are
the vision states; the text holds one ``<|image|>`` token and no visual token. So this adapter's head grid is
every decoder layer x 32 heads, layer ``l``'s attention module being ``cross_attn`` for a cross-attention layer
and ``self_attn`` otherwise (:meth:`MllamaAdapter.attention_module`), and its ``VisionBatch.visual_positions``
are indices into the cross-attention keys, not text positions (:func:`vrh.core.layout.visual_key_space` says
so to capture and detection). A self-attention head never sees a vision state: its rows over these keys are
zero and its detection score is 0 by construction.

How an image becomes keys (``MllamaImageProcessor``): the image is resized, aspect preserved, into the
smallest canvas of ``nh x nw`` tiles (one of ``supported_aspect_ratios``, at most ``max_image_tiles``) that
holds it (or the largest downscale), zero-padded at the bottom and right to ``(nh * T, nw * T)`` (``T`` = 560
px) and cut into tiles row-major; ``aspect_ratio_ids`` names the tiling (index + 1). The tower gives each tile
``num_patches = (T / P)^2 + 1`` states (a CLS first, then the ``P``-px patches row-major; 1601 at 560 / 14), and
cross-attention key ``((image * max_tiles) + tile) * num_patches + p`` is state ``p`` of that tile (tiles past
the image's own are padding, masked by ``cross_attention_mask``).

Token map: patch ``(i, j)`` of tile ``t = r * nw + c`` covers canvas pixels ``[c T + j P, +P) x [r T + i P, +P)``,
mapped back by the resize's own per-axis scale (``get_image_size_fit_to_canvas``, the processor's arithmetic,
on the tiling the processor reported) and clipped to the image. Cells are the patches holding image pixels;
a CLS key (rectangle: the whole image), a patch of zero padding only (a zero-area rectangle on the image's
border) and every key of a padded tile (zero-area at the origin) are no cells and never enter K.

Text rows before ``<|image|>`` see no image (their cross-attention rows are fully masked, which
``_prepare_cross_attention_mask`` turns into attention over every key, padded tiles included, with only the
MLP output zeroed): :meth:`MllamaAdapter.build_batch` refuses an expression or answer token there.

Grounding: Meta documents no box format for Llama 3.2 Vision; vrh uses lmms-eval's generic REC task as for
LLaVA-NeXT and Idefics3: an answer ``[x1, y1, x2, y2]`` of floats in ``[0, 1]``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vrh.models.adapters.base import Adapter, VisionBatch, register_adapter
from vrh.models.adapters.llava_next import LlavaNextAdapter

if TYPE_CHECKING:
    import torch
    from torch import nn


@register_adapter
class MllamaAdapter(Adapter):
    name = "mllama"
    model_types = ("mllama",)
    box_convention = ("[x1, y1, x2, y2] floats in 0-1 (x / width, y / height); vrh's choice (lmms-eval REC), "
                      "none official")
    token_layout = ("one <|image|> token in the text; visual tokens are cross-attention keys: per tile a CLS + "
                    "(T/P)^2 patches row-major (1601 at 560 px), tiles row-major, <= 4 tiles (padded ones masked)")
    model_class = "MllamaForConditionalGeneration"
    processor_class = "MllamaProcessor"
    prompt_template = LlavaNextAdapter.prompt_template  # lmms-eval's refcoco_bbox_rec prompt (module docstring)
    answer_sep = ""  # the generation prompt ends on "\n\n"

    # --- loading -------------------------------------------------------------------------------
    def on_load(self, model: nn.Module, processor: Any) -> None:
        """The patch size is the vision config's alone; the processor's tile must be the tower's image size."""
        vision = model.config.vision_config
        tile = int(processor.image_processor.size["height"])
        if tile != int(vision.image_size):
            raise ValueError(f"the processor's {tile}-px tiles differ from the vision tower's image_size "
                             f"{vision.image_size}")
        processor.patch_size = int(vision.patch_size)

    # --- structure -----------------------------------------------------------------------------
    def cross_attention_layers(self, model: nn.Module) -> tuple[int, ...]:
        return tuple(int(x) for x in self.text_config(model).cross_attention_layers)

    def attention_module(self, model: nn.Module, layer: int) -> nn.Module:
        block = self.decoder_layers(model)[layer]
        return block.cross_attn if layer in self.cross_attention_layers(model) else block.self_attn

    # --- inputs --------------------------------------------------------------------------------
    def chat_text(self, processor: Any, prompt: str) -> str:
        """The rendered chat (user turn: the image, then ``prompt``; plus the generation prompt), with the BOS
        the processor would add itself (``build_string_from_input``), so the offsets are those of this text."""
        from transformers.models.mllama.processing_mllama import build_string_from_input

        from vrh.models import chat_templates

        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]}]
        with chat_templates.bounded(chat_templates.whose(processor)):
            chat = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return build_string_from_input(chat, processor.bos_token, processor.image_token)

    def build_batch(self, processor: Any, images: list, prompts: list[str],
                    answers: list[str] | None = None, expressions: list[str] | None = None) -> VisionBatch:
        import torch

        images = [im.convert("RGB") if hasattr(im, "convert") else im for im in images]
        texts, spans = self.chat_spans(prompts, answers, expressions, lambda p: self.chat_text(processor, p),
                                       image_token=processor.image_token)
        # the chat carries its BOS: no second one from the tokenizer (as apply_chat_template(tokenize=True))
        enc = processor(images=[[im] for im in images], text=texts, padding=True, return_tensors="pt",
                        return_offsets_mapping=True, add_special_tokens=False)
        offsets = enc.pop("offset_mapping")  # [B, S, 2] char offsets into `texts`
        ids, mask = enc["input_ids"], enc["attention_mask"].bool()  # [B, S]
        if not bool(mask[:, -1].all()):
            raise ValueError("vrh needs left padding; set tokenizer.padding_side = 'left'")
        vis, rects, cells, expr, ans, metas = [], [], [], [], [], []
        for b in range(len(texts)):
            def tokens_in(c0: int, c1: int) -> torch.Tensor:  # [S]: overlaps chars [c0, c1) of texts[b]
                return (offsets[b, :, 0] < c1) & (offsets[b, :, 1] > c0) & mask[b]

            image_pos = int((ids[b] == processor.image_token_id).nonzero().flatten()[0])
            r, cell, meta = self.key_map(processor, enc, b, images[b])
            meta["image_token_position"] = image_pos
            vis.append(torch.arange(len(r)))  # indices into the cross-attention keys (module docstring)
            rects.append(r)
            cells.append(cell)
            metas.append(meta)
            for kind, out in (("expression", expr), ("answer", ans)):
                if kind not in spans[b]:
                    out.append(torch.zeros(0, dtype=torch.long))
                    continue
                pos = tokens_in(*spans[b][kind]).nonzero().flatten()
                if pos.numel() and int(pos.min()) <= image_pos:
                    raise ValueError(f"sample {b}: {kind} tokens at or before <|image|> (position {image_pos}) get no "
                                     "cross-attention to the image; put the image first in the prompt")
                out.append(pos)
        return VisionBatch(inputs=dict(enc), visual_positions=vis, visual_rects=rects, expression_positions=expr,
                           answer_positions=ans if answers is not None else None,
                           image_sizes=[tuple(im.size) for im in images], meta=metas, cell_tokens=cells)

    def key_map(self, processor: Any, enc: Any, b: int, image: Any) -> tuple[torch.Tensor, torch.Tensor, dict]:
        """Sample ``b``'s cross-attention keys: rectangles ``[V, 4]`` (original-image pixels), cell flags ``[V]``
        and the meta dict; ``V = max_images * max_tiles * num_patches`` (see the module docstring)."""
        import torch
        from transformers.models.mllama.image_processing_pil_mllama import (get_all_supported_aspect_ratios,
                                                                           get_image_size_fit_to_canvas)

        patch = getattr(processor, "patch_size", None)
        if patch is None:
            raise ValueError("the processor has no patch_size: load the model through the mllama adapter, which "
                             "reads it from the vision config")
        _, n_images, n_tiles, _, tile, tile_w = enc["pixel_values"].shape  # [B, images, tiles, C, T, T]
        if tile != tile_w or tile % patch:
            raise ValueError(f"{tile_w} x {tile} tiles of {patch}-px patches: vrh needs square tiles of whole patches")
        n = tile // patch  # patches per tile side
        per_tile = n * n + 1  # CLS + patches
        nh, nw = get_all_supported_aspect_ratios(n_tiles)[int(enc["aspect_ratio_ids"][b, 0]) - 1]
        if int(enc["aspect_ratio_mask"][b, 0].sum()) != nh * nw:
            raise ValueError(f"aspect ratio id {int(enc['aspect_ratio_ids'][b, 0])} ({nh} x {nw} tiles) disagrees "
                             f"with aspect_ratio_mask {enc['aspect_ratio_mask'][b, 0].tolist()}")
        width, height = image.size
        new_h, new_w = get_image_size_fit_to_canvas(height, width, nh * tile, nw * tile, tile)
        sx, sy = new_w / width, new_h / height  # the resize's scale per axis
        i, j = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
        i, j = i.flatten().double(), j.flatten().double()  # [n*n] patch row, column (row-major)
        rects = torch.zeros(n_images * n_tiles * per_tile, 4, dtype=torch.double)  # padded tiles: zero-area at 0
        cell = torch.zeros(len(rects), dtype=torch.bool)
        for t in range(nh * nw):  # the image's own tiles (image 0: one image per sample)
            r, c = divmod(t, nw)
            x0, y0 = c * tile + j * patch, r * tile + i * patch  # [n*n] canvas corner of each patch
            box = torch.stack([x0.clamp(max=new_w) / sx, y0.clamp(max=new_h) / sy,
                               (x0 + patch).clamp(max=new_w) / sx, (y0 + patch).clamp(max=new_h) / sy], dim=1)
            start = t * per_tile
            rects[start] = torch.tensor([0.0, 0.0, width, height])  # the tile's CLS: the whole image
            rects[start + 1:start + per_tile] = box.clamp(min=0).minimum(torch.tensor([width, height] * 2))
            cell[start + 1:start + per_tile] = (x0 < new_w) & (y0 < new_h)  # holds image pixels
        meta = {"tile_grid": (nh, nw), "resized_size": (new_w, new_h), "canvas_size": (nw * tile, nh * tile),
                "num_patches": per_tile, "patch_px": patch, "max_tiles": n_tiles}
        return rects.float(), cell, meta

    # --- answers: lmms-eval's REC box, [x1, y1, x2, y2] in 0-1 floats, as LLaVA-NeXT ----------------
    parse_box = LlavaNextAdapter.parse_box
    format_box = LlavaNextAdapter.format_box
