"""Idefics3 and SmolVLM (``Idefics3ForConditionalGeneration``: Idefics3-8B and the SmolVLM v1 checkpoints;
``SmolVLMForConditionalGeneration``: SmolVLM2). The language model lives at ``model.model.text_model`` (a Llama
or SmolLM2 decoder), not ``language_model``: :meth:`Idefics3Adapter.decoder_layers` says so.

How an image becomes tokens (``Idefics3ImageProcessor``, SmolVLM's is the same code): the image is resized to
a longest edge of ``size["longest_edge"]`` (4 x 364 px for Idefics3), then each side is stretched up to a
multiple of the frame side ``F = max_image_size["longest_edge"]`` (364; SmolVLM 384 or 512) and the canvas is
cut into ``rows x cols`` frames, row-major; a *global* frame, the whole image squashed to ``F x F``, comes
last. An image no larger than one frame (or ``do_image_splitting=False``) gives the global frame alone. Each
frame goes through the SigLIP tower (row-major patches) and the connector's pixel shuffle, which merges every
``s x s`` patch window into one token, row-major (``Idefics3Connector.pixel_shuffle``; test_idefics3.py checks
the order through the model), so a frame is ``n x n = image_seq_len`` tokens of ``F / n`` frame pixels. The
text gets, per tile, ``<fake_token_around_image><row_i_col_j>`` + ``<image>`` x n^2, a newline after each row
of tiles, then ``\\n<fake_token_around_image><global-img>`` + ``<image>`` x n^2 + ``<fake_token_around_image>``.

The processor drops its ``rows``/``cols`` outputs; the ``<row_i_col_j>`` tags it wrote into the text are its
record of the grid, so :meth:`Idefics3Adapter.visual_map` reads the grid from them (never from a token count)
and checks it against the number of ``<image>`` tokens, rather than re-deriving the grid from the resize
rules (the image processor's ``get_number_of_image_patches`` re-derives it with slightly different arithmetic).

Token map: a tile token is one cell of the ``(rows * n) x (cols * n)`` grid over the stretched canvas, scaled
back to the original image (a *cell* token). A global-frame token is a cell of an ``n x n`` grid over the
whole image: a coarse view overlapping the tile cells, so it keeps that rectangle but is marked
``cell_tokens = False`` and never enters K. When there are no tiles the global frame is the only view and
its tokens are the cells.

Grounding: neither Idefics3 nor SmolVLM documents a grounding prompt or box format, and neither reports
RefCOCO with an official script. vrh uses lmms-eval's generic ``refcoco_bbox_rec`` task
(``lmms_eval/tasks/refcoco/utils_rec.py``), the harness these models are commonly evaluated with, as for
LLaVA-NeXT / OneVision: the prompt :attr:`Idefics3Adapter.prompt_template` and an answer ``[x1, y1, x2, y2]``
of floats in ``[0, 1]`` (x over the image width, y over the height), written with two decimals.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

from vrh.models.adapters.base import ChatTemplateAdapter, image_only, register_adapter
from vrh.models.adapters.llava_next import LlavaNextAdapter

if TYPE_CHECKING:
    import torch
    from torch import nn

_TAG = re.compile(r"<row_(\d+)_col_(\d+)>")


def tile_tags(text: str) -> tuple[int, int]:
    """``(rows, cols)`` of the tile grid from the ``<row_i_col_j>`` tags the processor wrote; ``(0, 0)`` when
    there are none (the global frame alone). Every tag of the grid must appear exactly once.

    >>> tile_tags("<row_1_col_1>..<row_1_col_2>..\\n<row_2_col_1>..<row_2_col_2>..\\n\\n<global-img>")
    (2, 2)
    >>> tile_tags("<global-img>")
    (0, 0)
    """
    tags = [(int(r), int(c)) for r, c in _TAG.findall(text)]
    if not tags:
        return 0, 0
    rows, cols = max(r for r, _ in tags), max(c for _, c in tags)
    if sorted(tags) != [(r, c) for r in range(1, rows + 1) for c in range(1, cols + 1)]:
        raise ValueError(f"the tile tags {tags} do not form one {rows} x {cols} grid (a prompt that contains a "
                         "<row_i_col_j> tag itself cannot be mapped)")
    return rows, cols


def grid_cells(rows: int, cols: int, width: float, height: float) -> torch.Tensor:
    """The cells of a ``rows x cols`` grid over a ``width x height`` image, row-major: ``[rows * cols, 4]`` xyxy."""
    import torch

    i, j = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")  # [rows, cols] each
    i, j = i.flatten().double(), j.flatten().double()  # [rows * cols], row-major
    cw, ch = width / cols, height / rows
    return torch.stack([j * cw, i * ch, (j + 1) * cw, (i + 1) * ch], dim=1)  # [rows * cols, 4]


@register_adapter
class Idefics3Adapter(ChatTemplateAdapter):
    name = "idefics3"
    model_types = ("idefics3", "smolvlm")
    answer_sep = " "  # "...Assistant:" + " " + answer, as the models answer
    box_convention = '[x1, y1, x2, y2] floats in 0-1 (x / width, y / height); vrh\'s choice (lmms-eval REC), none official'
    token_layout = ('rows x cols frames tagged <row_i_col_j>, n x n pixel-shuffled tokens each, row-major; then the '
                    'global frame (whole image squashed, no cells unless it is the only frame)')
    prompt_template = LlavaNextAdapter.prompt_template  # lmms-eval's refcoco_bbox_rec prompt (module docstring)
    model_class = "Idefics3ForConditionalGeneration"  # load() picks these two by the checkpoint's model_type
    processor_class = "Idefics3Processor"

    _CLASSES = {"idefics3": ("Idefics3ForConditionalGeneration", "Idefics3Processor"),
                "smolvlm": ("SmolVLMForConditionalGeneration", "SmolVLMProcessor")}

    # --- loading -------------------------------------------------------------------------------
    def load(self, path: str, *, dtype: torch.dtype | None = None, device: str = "cpu",
             attn_implementation: str = "sdpa", device_map: str | dict | None = None) -> tuple[nn.Module, Any]:
        """Pick the classes from the checkpoint's ``model_type`` (idefics3 or smolvlm)."""
        from transformers import AutoConfig

        model_type = AutoConfig.from_pretrained(path, trust_remote_code=False).model_type
        if model_type not in self._CLASSES:
            raise ValueError(f"the idefics3 adapter serves model types {sorted(self._CLASSES)}, not {model_type!r}")
        self.model_class, self.processor_class = self._CLASSES[model_type]
        return super().load(path, dtype=dtype, device=device, attn_implementation=attn_implementation,
                            device_map=device_map)

    def processor_for(self, path: str) -> Any:
        """The saved processor class itself. SmolVLM's carries a video processor that needs torchvision: vrh
        loads it with ``video_processor=None`` (images only)."""
        import transformers

        processor_class = getattr(transformers, self.processor_class)
        if self.processor_class != "SmolVLMProcessor":
            return processor_class.from_pretrained(path, trust_remote_code=False)
        try:
            return image_only(processor_class).from_pretrained(path, video_processor=None, trust_remote_code=False)
        except ImportError as err:  # SmolVLMProcessor refuses to build without num2words (used for videos)
            raise ImportError(f"loading the SmolVLM processor of {path} failed: {err} (SmolVLMProcessor needs "
                              "the num2words package even for images: pip install num2words)") from err

    # --- structure -----------------------------------------------------------------------------
    def decoder_layers(self, model: nn.Module) -> nn.ModuleList:
        return model.model.text_model.layers

    # --- prompts -------------------------------------------------------------------------------
    def chat_text(self, processor: Any, prompt: str) -> str:
        """The rendered chat. An image-only SmolVLM processor (no video processor) is rendered by the generic
        ``ProcessorMixin.apply_chat_template``: SmolVLM's override reads the video processor's frame settings."""
        if getattr(processor, "video_processor", ...) is not None:
            return super().chat_text(processor, prompt)
        from transformers import ProcessorMixin

        from vrh.models import chat_templates

        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]}]
        with chat_templates.bounded(chat_templates.whose(processor)):
            return ProcessorMixin.apply_chat_template(processor, messages, tokenize=False, add_generation_prompt=True)

    # --- token -> image map --------------------------------------------------------------------
    def visual_map(self, processor: Any, enc: Any, b: int, image: Any
                   ) -> tuple[torch.Tensor, dict[str, Any], torch.Tensor]:
        """Tile cells (row-major within each tile, tiles row-major), then the global frame's cells."""
        import torch

        per_frame = int(processor.image_seq_len)
        n = math.isqrt(per_frame)  # tokens per frame side: the connector reshapes a frame square
        frame_h, frame_w = (int(v) for v in enc["pixel_values"].shape[-2:])  # pixel_values: [B, N, C, F, F]
        if n * n != per_frame or frame_h != frame_w or frame_w % n:
            raise ValueError(f"image_seq_len {per_frame} on {frame_w} x {frame_h} frames: vrh needs square frames of "
                             "n x n tokens")
        ids = enc["input_ids"][b][enc["attention_mask"][b].bool()]  # [S_b]
        rows, cols = tile_tags(processor.tokenizer.decode(ids, skip_special_tokens=False))
        n_img = int((ids == self.feature_token_id(processor)).sum())
        if n_img != (rows * cols + 1) * per_frame:
            raise ValueError(f"the tags say {rows} x {cols} tiles + a global frame = {rows * cols + 1} x {per_frame} "
                             f"tokens, but the processor emitted {n_img} image tokens")
        width, height = image.size
        tiles = grid_cells(rows * n, cols * n, width, height) if rows else torch.zeros(0, 4, dtype=torch.double)
        if rows:  # grid_cells is row-major over the whole canvas; the sequence goes tile by tile
            t, k = torch.meshgrid(torch.arange(rows * cols), torch.arange(per_frame), indexing="ij")  # [T, n*n]
            gy = (t // cols) * n + k // n  # [T, n*n] canvas cell row of token k of tile t
            gx = (t % cols) * n + k % n
            tiles = tiles[(gy * cols * n + gx).flatten()]  # [T*n*n, 4] in sequence order
        glob = grid_cells(n, n, width, height)  # [n*n, 4] the global frame: the whole image squashed
        cell = torch.cat([torch.ones(len(tiles), dtype=torch.bool), torch.full((len(glob),), not rows)])
        meta = {"tile_grid": (rows, cols), "token_grid": (rows * n, cols * n) if rows else (n, n),
                "resized_size": (cols * frame_w, rows * frame_h) if rows else (frame_w, frame_h),
                "cell_px": frame_w // n}
        return torch.cat([tiles, glob]).float(), meta, cell

    # --- answers: lmms-eval's REC box, [x1, y1, x2, y2] in 0-1 floats, as LLaVA-NeXT ----------------
    parse_box = LlavaNextAdapter.parse_box
    format_box = LlavaNextAdapter.format_box
