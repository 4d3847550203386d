"""Gemma 3 (``Gemma3ForConditionalGeneration``: 4B, 12B, 27B; SigLIP tower, Gemma 3 LM).

How an image becomes tokens (``Gemma3Processor`` + ``Gemma3ImageProcessor``): the image is squashed (aspect
not kept, no crop or padding) to the tower's square side S (896 px), cut into 14-px patches (64 x 64), and
the projector average-pools every 4 x 4 window of patches into one *soft token*, row-major
(``Gemma3MultiModalProjector``: reshape to ``[D, 64, 64]``, ``AvgPool2d(4)``, flatten; tests/models/adapters/
test_gemma3.py checks the order through the model's own projector): 16 x 16 = ``image_seq_length`` = 256
tokens of 56 px. The chat holds ``<start_of_image>`` (BOI), which the processor expands to
``\\n\\n<start_of_image>`` + ``<image_soft_token>`` x 256 + ``<end_of_image>\\n\\n``. So ``processor.image_token``
is the BOI, *not* the token carrying a feature: :meth:`Gemma3Adapter.feature_token_id` returns the soft token.
The soft tokens of one image attend to each other bidirectionally (``token_type_ids``); the LM alternates
sliding-window (5 of 6 layers, 1,024 tokens) and global layers. Capture reads both from the model's own masks.

Pan-and-scan is supported, off by default: ``Gemma3Processor`` applies it only when a call asks
(``do_pan_and_scan=True``; its own default False overrides a saved image-processor setting), and vrh asks when
:attr:`Gemma3Adapter.pan_and_scan` is True (set it on the instance or in a subclass): an elongated image also gets 2-4 crops, contiguous strips of the
original image cut along its long side (each ``ceil(side / crops)`` px; the last one may be narrower),
each squashed to S and given its own 256 tokens after the whole image's. The number of views is the
sample's soft-token count over ``image_seq_length`` (every view has exactly that many) and each crop's
strip is recomputed from it, as ``pan_and_scan`` cuts them. With crops, the crop tokens are the cell tokens (a finer grid); the whole image's
tokens keep their coarse rectangles but are not cells (like InternVL's thumbnail). Without crops every
token is a cell.

Grounding: Gemma 3 has no official grounding format. vrh asks for the format Google documents for Gemini's
object detection, ``{"box_2d": [ymin, xmin, ymax, xmax]}`` normalized to 0-1000 (y first, like PaliGemma's
location tokens, both from Google's detection lineage), because it is the format a Google model is most
likely to have seen, it does not depend on the 896-px squash, and a JSON list is parsed by vrh's robust
parser. The first valid 4-list in the answer is read in that order (``box_2d`` or a bare list).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from vrh.models.adapters.base import Box, ChatTemplateAdapter, VisionBatch, register_adapter

if TYPE_CHECKING:
    import torch

NORM = 1000  # the answer frame: 0-1000 relative to the original image


class _PerSampleImages:
    """A processor view that passes each sample's image as its own list: ``Gemma3Processor`` nests a flat
    image list into ONE sample, while ``ChatTemplateAdapter.build_batch`` passes one image per sample."""

    def __init__(self, processor: Any, **images_kwargs: Any):
        self._processor = processor
        self._images_kwargs = images_kwargs

    def __getattr__(self, name: str) -> Any:
        return getattr(self._processor, name)

    def __call__(self, images: list, **kwargs: Any) -> Any:
        return self._processor(images=[[im] for im in images], **self._images_kwargs, **kwargs)


def crop_boxes(image_size: tuple[int, int], n_crops: int) -> list[tuple[int, int, int, int]]:
    """Pan-and-scan's crops of an image of ``(width, height)`` as xyxy pixel boxes, in the processor's order:
    ``n_crops`` strips along the long side (width when ``width >= height``), each ``ceil(side / n_crops)`` px,
    the last clipped to the image.

    >>> crop_boxes((250, 80), 2), crop_boxes((30, 100), 3)
    ([(0, 0, 125, 80), (125, 0, 250, 80)], [(0, 0, 30, 34), (0, 34, 30, 68), (0, 68, 30, 100)])
    """
    width, height = image_size
    if n_crops == 0:
        return []
    if width >= height:
        step = math.ceil(width / n_crops)
        return [(k * step, 0, min((k + 1) * step, width), height) for k in range(n_crops)]
    step = math.ceil(height / n_crops)
    return [(0, k * step, width, min((k + 1) * step, height)) for k in range(n_crops)]


@register_adapter
class Gemma3Adapter(ChatTemplateAdapter):
    name = "gemma3"
    model_types = ("gemma3",)
    box_convention = '{"box_2d": [ymin, xmin, ymax, xmax]} in 0-1000 (Gemini convention); vrh\'s choice, none official'
    token_layout = '16 x 16 pooled cells of the 896-px squashed image, row-major, between <start_of_image> and <end_of_image>; pan-and-scan crops (off by default) add their own cells'
    prompt_template = ('Detect "{expression}" in the image. Answer with its bounding box as JSON '
                       '{{"box_2d": [ymin, xmin, ymax, xmax]}}, coordinates normalized to 0-1000.')
    pan_and_scan: bool = False  # also feed 2-4 crops of an elongated image (Gemma3Processor's do_pan_and_scan)
    model_class = "Gemma3ForConditionalGeneration"

    # --- prompts and inputs (the template's <bos> and the tokenizer's: ChatTemplateAdapter.one_bos) ------
    def feature_token_id(self, processor: Any) -> int:
        """``<image_soft_token>``: ``processor.image_token`` is the begin-of-image marker (BOI)."""
        return int(processor.tokenizer.image_token_id)

    def build_batch(self, processor: Any, images: list, prompts: list[str],
                    answers: list[str] | None = None, expressions: list[str] | None = None) -> VisionBatch:
        view = _PerSampleImages(processor, do_pan_and_scan=self.pan_and_scan)
        return super().build_batch(view, images, prompts, answers, expressions)

    # --- token -> image map --------------------------------------------------------------------
    def visual_map(self, processor: Any, enc: Any, b: int, image: Any
                   ) -> tuple[torch.Tensor, dict[str, Any], torch.Tensor]:
        """The whole image's n x n cells, then each pan-and-scan crop's n x n cells, row-major."""
        import torch

        # every view (the whole image, then each crop) is image_seq_length soft tokens
        n_views = int((enc["input_ids"][b] == self.feature_token_id(processor)).sum()) // processor.image_seq_length
        n = math.isqrt(int(processor.image_seq_length))  # tokens per side: the projector pools a square
        if n * n != processor.image_seq_length:
            raise ValueError(f"image_seq_length {processor.image_seq_length} is not a square number of tokens")
        width, height = image.size
        views = [(0, 0, width, height), *crop_boxes(image.size, n_views - 1)]  # xyxy original px
        i, j = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")  # [n, n] each
        i, j = i.flatten().double(), j.flatten().double()  # [n*n], row-major
        parts = []
        for x0, y0, x1, y1 in views:
            cw, ch = (x1 - x0) / n, (y1 - y0) / n  # a cell of this view in original pixels
            parts.append(torch.stack([x0 + j * cw, y0 + i * ch, x0 + (j + 1) * cw, y0 + (i + 1) * ch], dim=1))
        cell = torch.ones(len(views), n * n, dtype=torch.bool)  # [views, n*n]
        if len(views) > 1:
            cell[0] = False  # the whole image overlaps the crops' finer cells
        crops = len(views) - 1
        rows, cols = (n, n) if not crops else (n, n * crops) if width >= height else (n * crops, n)  # cell grid
        side = int(enc["pixel_values"].shape[-1])  # pixel_values: [sum views, C, S, S]
        meta = {"resized_size": (side, side), "token_grid": (rows, cols), "crops": crops, "cell_px": side // n}
        return torch.cat(parts).float(), meta, cell.flatten()

    # --- answers -------------------------------------------------------------------------------
    def parse_box(self, text: str, meta: dict[str, Any], image_size: tuple[int, int]) -> Box | None:
        from vrh.data import boxes as grounding

        found = grounding.parse_box(text)  # its validity rule (3rd > 1st, 4th > 2nd) holds for y-first too
        if found is None:
            return None
        y1, x1, y2, x2 = found[1]
        return grounding.from_normalized((x1, y1, x2, y2), NORM, image_size)

    def format_box(self, box: Box, meta: dict[str, Any], image_size: tuple[int, int]) -> str:
        from vrh.data import boxes as grounding

        x1, y1, x2, y2 = (int(round(v)) for v in grounding.to_normalized(box, NORM, image_size))
        return f'{{"box_2d": [{y1}, {x1}, {y2}, {x2}]}}'
