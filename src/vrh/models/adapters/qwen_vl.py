"""Qwen2-VL, Qwen2.5-VL and Qwen3-VL: one adapter family, three registered subclasses.

All three share the processor mechanics: an image is resized (``smart_resize``) to a multiple of
``patch_size * merge_size``, patchified, and every ``merge_size x merge_size`` window of patches becomes
one LM token, in row-major order over the merged grid. So a visual token is one square *cell* of the
resized image (28 px for Qwen2/2.5: patch 14 x merge 2; 32 px for Qwen3: patch 16 x merge 2), and the map to
original pixels only needs ``image_grid_thw`` and the original->resized scale. The families differ in
how they are asked to ground and in the coordinate frame of their answers:

* Qwen2-VL: ``<|object_ref_start|>expr<|object_ref_end|>`` in the prompt, answers
  ``<|box_start|>(x1,y1),(x2,y2)<|box_end|>`` in 0-1000 relative coordinates.
* Qwen2.5-VL: JSON ``bbox_2d`` in absolute pixels of the *resized* input image.
* Qwen3-VL: JSON ``bbox_2d`` in 0-1000 relative coordinates.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from vrh.models.adapters.base import Box, ChatTemplateAdapter, register_adapter

if TYPE_CHECKING:
    import torch


class QwenVLAdapter(ChatTemplateAdapter):
    """Base of the three Qwen-VL adapters; subclasses set ``model_class``, ``processor_class`` (the
    processor is loaded without its video processor where torchvision is missing) and the attributes below."""

    box_frame: str = "norm1000"  # "norm1000" (0-1000 relative) or "resized" (pixels of the resized image)

    # --- prompts -------------------------------------------------------------------------------
    def grounding_prompt(self, expression: str) -> str:
        """The template with the expression in its slot; Qwen's templates say "Locate the {object}" (written
        for category names), so an expression that brings its own article does not get a second one."""
        template = self.prompt_template
        if "the {expression}" in template and expression.lower().startswith(("the ", "a ", "an ")):
            template = template.replace("the {expression}", "{expression}")
        return template.format(expression=expression)

    # --- token -> image map --------------------------------------------------------------------
    def visual_map(self, processor: Any, enc: Any, b: int, image: Any) -> tuple[torch.Tensor, dict[str, Any]]:
        """Each LM visual token is one merged cell of the resized image, row-major over the merged grid
        (the vision tower merges consecutive ``merge**2`` patches, and the image processor emits patches
        grouped by merge window). Cells are scaled back to the original image."""
        import torch

        ip = processor.image_processor
        patch, merge = int(ip.patch_size), int(ip.merge_size)
        t, gh, gw = (int(v) for v in enc["image_grid_thw"][b])  # one image per sample -> row b; patch units
        if t != 1:
            raise ValueError(f"expected a single-frame image grid, got grid_t={t}")
        rows, cols, cell = gh // merge, gw // merge, patch * merge  # merged grid; cell side in resized px
        resized_w, resized_h = gw * patch, gh * patch
        width, height = image.size
        i, j = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")  # [rows, cols] each
        i, j = i.flatten().float(), j.flatten().float()  # [V], row-major token order
        rect = torch.stack([j * cell, i * cell, (j + 1) * cell, (i + 1) * cell], dim=1)  # [V, 4] resized px
        scale = torch.tensor([width / resized_w, height / resized_h] * 2)  # [4]
        meta = {"resized_size": (resized_w, resized_h), "token_grid": (rows, cols), "cell_px": cell}
        return rect * scale, meta

    # --- answers -------------------------------------------------------------------------------
    def _to_frame(self, box: Box, meta: dict[str, Any], image_size: tuple[int, int]) -> list[int]:
        """Original pixels -> integer coordinates in this family's answer frame."""
        from vrh.data import boxes as grounding

        if self.box_frame == "resized":
            return [int(round(v)) for v in grounding.to_resized(box, self._resized(meta, image_size), image_size)]
        return [int(round(v)) for v in grounding.to_normalized(box, 1000, image_size)]

    @staticmethod
    def _resized(meta: dict[str, Any], image_size: tuple[int, int]) -> tuple[int, int]:
        """The resized (width, height) from ``build_batch``'s meta; without it, assume no resize."""
        return tuple(meta.get("resized_size") or image_size)

    def parse_box(self, text: str, meta: dict[str, Any], image_size: tuple[int, int]) -> Box | None:
        from vrh.data import boxes as grounding

        found = grounding.parse_box(text)
        if found is None:
            return None
        _, box = found
        if self.box_frame == "resized":
            return grounding.from_resized(box, self._resized(meta, image_size), image_size)
        return grounding.from_normalized(box, 1000, image_size)

    def format_box(self, box: Box, meta: dict[str, Any], image_size: tuple[int, int]) -> str:
        coords = json.dumps(self._to_frame(box, meta, image_size))  # "[x1, y1, x2, y2]"
        return '```json\n[\n\t{"bbox_2d": ' + coords + '}\n]\n```'


@register_adapter
class Qwen2VLAdapter(QwenVLAdapter):
    name = "qwen2_vl"
    model_types = ("qwen2_vl",)
    box_convention = '<|box_start|>(x1,y1),(x2,y2)<|box_end|>, 0-1000 relative'
    token_layout = 'one token per 28-px merged cell (14-px patches, 2x2 merge) of the resized image, row-major (image_grid_thw)'
    model_class = "Qwen2VLForConditionalGeneration"
    processor_class = "Qwen2VLProcessor"
    prompt_template = "Output the bounding box of <|object_ref_start|>{expression}<|object_ref_end|> in the image."

    def format_box(self, box: Box, meta: dict[str, Any], image_size: tuple[int, int]) -> str:
        x1, y1, x2, y2 = self._to_frame(box, meta, image_size)
        return f"<|box_start|>({x1},{y1}),({x2},{y2})<|box_end|>"

    def decode(self, processor: Any, token_ids: torch.Tensor) -> list[str]:
        """Keep the box tokens (special in Qwen's tokenizer), drop padding and end-of-turn markers."""
        tok = processor.tokenizer
        drop = {t for t in (tok.pad_token, tok.eos_token, "<|im_end|>", "<|endoftext|>") if t}
        texts = processor.batch_decode(token_ids, skip_special_tokens=False)
        for t in drop:
            texts = [s.replace(t, "") for s in texts]
        return texts


@register_adapter
class Qwen2_5_VLAdapter(QwenVLAdapter):
    name = "qwen2_5_vl"
    model_types = ("qwen2_5_vl",)
    box_convention = 'JSON bbox_2d [x1, y1, x2, y2], pixels of the resized input image'
    token_layout = 'one token per 28-px merged cell (14-px patches, 2x2 merge) of the resized image, row-major (image_grid_thw)'
    model_class = "Qwen2_5_VLForConditionalGeneration"
    processor_class = "Qwen2_5_VLProcessor"
    box_frame = "resized"
    prompt_template = "Locate the {expression} in the image and output its bbox coordinates in JSON format."


@register_adapter
class Qwen3VLAdapter(QwenVLAdapter):
    name = "qwen3_vl"
    model_types = ("qwen3_vl",)
    box_convention = 'JSON bbox_2d [x1, y1, x2, y2], 0-1000 relative'
    token_layout = 'one token per 32-px merged cell (16-px patches, 2x2 merge), row-major; DeepStack adds vision features to them after the first LM layers'
    model_class = "Qwen3VLForConditionalGeneration"
    processor_class = "Qwen3VLProcessor"
    prompt_template = "Locate the {expression} in the image, output its bbox coordinates using JSON format."

