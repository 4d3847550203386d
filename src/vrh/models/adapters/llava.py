"""LLaVA (``LlavaForConditionalGeneration``): a CLIP-style tower whose patch grid becomes the visual tokens.

The processor turns the image into one fixed-size ``pixel_values`` crop (optional pad-to-square, resize,
center crop) and expands ``<image>`` to one token per patch (plus CLS under the "full" feature strategy).
Each visual token is one ``patch x patch`` square of that crop, row-major; mapping it to the original image
undoes the crop offset, the resize and the padding, all read from the image processor's settings and the
``pixel_values`` shape, never from a token count. A patch wholly in the padding (pad-to-square, or a centre
crop larger than the resized image) shows no pixel of the image: it keeps its place in the patch grid
(``meta["token_grid"]``, which detection reads as the grid) with a zero-area rectangle on the image's edge, and
is no cell (:class:`vrh.models.adapters.base.VisionBatch`), so it never enters K.

Per-checkpoint settings (our model organism uses them): a ``vrh`` dict either in ``vrh.json`` next to the
weights or as ``config.vrh`` in ``config.json``, read by :meth:`LlavaAdapter.load`, with any of the keys

* ``grounding_prompt``: template with ``{expression}`` (default :attr:`LlavaAdapter.prompt_template`),
* ``vqa_prompt``: template with ``{question}``,
* ``box_template``: how answers write a box, with ``{x1} {y1} {x2} {y2}`` as integer pixels of the
  original image, e.g. ``"[ {x1} , {y1} , {x2} , {y2} ]"`` (default ``"[{x1}, {y1}, {x2}, {y2}]"``).

Reading a box back uses :func:`vrh.data.boxes.parse_box`, so any template it can parse round-trips.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from vrh.models.adapters.base import Box, ChatTemplateAdapter, register_adapter
from vrh.models.answer_formats import NATIVE, shared

if TYPE_CHECKING:
    import torch
    from torch import nn

_EDGE = 1e-6  # original px: a side this short is float rounding of a patch edge on the padding's border


def _resized_hw(ip: Any, height: int, width: int) -> tuple[int, int]:
    """(height, width) after the image processor's resize step, using transformers' own size helpers."""
    import numpy as np
    from transformers.image_transforms import get_resize_output_image_size, get_size_with_aspect_ratio
    from transformers.image_utils import ChannelDimension, get_image_size_for_max_height_width

    s = ip.size
    get = (lambda k: s.get(k)) if isinstance(s, dict) else (lambda k: getattr(s, k, None))
    if not getattr(ip, "do_resize", True):
        return height, width
    if get("shortest_edge") and get("longest_edge"):
        return tuple(get_size_with_aspect_ratio((height, width), get("shortest_edge"), get("longest_edge")))
    if get("shortest_edge"):
        dummy = np.empty((1, height, width), dtype=np.uint8)  # only its shape is read
        return tuple(get_resize_output_image_size(dummy, size=get("shortest_edge"), default_to_square=False,
                                                  input_data_format=ChannelDimension.FIRST))
    if get("max_height") and get("max_width"):
        return tuple(get_image_size_for_max_height_width((height, width), get("max_height"), get("max_width")))
    return int(get("height")), int(get("width"))


def complete_processor(processor: Any, model: nn.Module) -> None:
    """Fill in the settings older LLaVA / LLaVA-NeXT processor configs omit, from the model (which is
    authoritative): ``patch_size``, ``vision_feature_select_strategy`` and ``num_additional_image_tokens``.
    The last defaults to 0 in the processor, so an absent one cannot be told from a written one: it is always
    set to the tower's own count (:func:`tower_class_tokens`) where the tower says it."""
    if getattr(processor, "patch_size", None) is None:
        processor.patch_size = model.config.vision_config.patch_size
    if getattr(processor, "vision_feature_select_strategy", None) is None:
        processor.vision_feature_select_strategy = model.config.vision_feature_select_strategy
    extra = tower_class_tokens(model)
    if extra is not None and hasattr(processor, "num_additional_image_tokens"):
        processor.num_additional_image_tokens = extra


def tower_class_tokens(model: nn.Module) -> int | None:
    """How many tokens the vision tower outputs besides its patches (CLIP: 1, its class token; SigLIP: 0), read
    off its embeddings' ``num_positions - num_patches``; None for a tower that does not say."""
    tower = getattr(getattr(model, "model", model), "vision_tower", None)
    for module in tower.modules() if tower is not None else ():
        positions, patches = getattr(module, "num_positions", None), getattr(module, "num_patches", None)
        if isinstance(positions, int) and isinstance(patches, int):
            return positions - patches
    return None


@register_adapter
class LlavaAdapter(ChatTemplateAdapter):
    name = "llava"
    model_types = ("llava",)
    box_convention = '[x1, y1, x2, y2] integer pixels of the original image (box_template in vrh.json may change it)'
    token_layout = ("one token per patch of the processor's crop, row-major (patches wholly in the padding: no cells); "
                    "CLS first under the 'full' strategy (whole image, no cell)")
    answer_sep = " "  # "... ASSISTANT:" + " " + answer, as LLaVA-1.5 answers
    prompt_template = "Locate the {expression} in the image. Answer with its bounding box [x1, y1, x2, y2] in pixels."
    vqa_template = "{question}"
    box_template = "[{x1}, {y1}, {x2}, {y2}]"
    model_class = "LlavaForConditionalGeneration"
    # LLaVA fine-tunes answer boxes in many frames; the shared variants vrh probe-format tries besides its own
    answer_formats = (NATIVE, *shared("pixels", "norm1", "norm1000"))

    # --- loading -------------------------------------------------------------------------------
    def load(self, path: str, *, dtype: torch.dtype | None = None, device: str = "cpu",
             attn_implementation: str = "sdpa", device_map: str | dict | None = None) -> tuple[nn.Module, Any]:
        """The default load, then the checkpoint's ``vrh`` settings (``vrh.json`` over ``config.vrh``)."""
        model, processor = super().load(path, dtype=dtype, device=device, attn_implementation=attn_implementation,
                                        device_map=device_map)
        self.configure({**(getattr(model.config, "vrh", None) or {}), **self._vrh_json(path)})
        return model, processor

    def on_load(self, model: nn.Module, processor: Any) -> None:
        complete_processor(processor, model)

    @staticmethod
    def _vrh_json(path: str) -> dict[str, Any]:
        from vrh.infra.json_text import read_json

        f = Path(path) / "vrh.json"  # a checkpoint's file: bounded, an object, or one line naming it
        return read_json(f, max_bytes=2**20, max_depth=8, expect=dict) if f.is_file() else {}

    def configure(self, settings: dict[str, Any]) -> None:
        """Apply a checkpoint's ``vrh`` settings (see the module docstring) to this adapter instance."""
        for key, attr in [("grounding_prompt", "prompt_template"), ("vqa_prompt", "vqa_template"),
                          ("box_template", "box_template")]:
            if key in settings:
                setattr(self, attr, settings[key])

    # --- prompts -------------------------------------------------------------------------------
    def vqa_prompt(self, question: str) -> str:
        return self.vqa_template.format(question=question)

    # --- token -> image map --------------------------------------------------------------------
    def visual_map(self, processor: Any, enc: Any, b: int, image: Any) -> tuple[torch.Tensor, dict[str, Any], torch.Tensor]:
        import torch

        ip, patch = processor.image_processor, int(processor.patch_size)
        crop_h, crop_w = (int(v) for v in enc["pixel_values"].shape[-2:])  # pixel_values: [B, C, H, W]
        rows, cols = crop_h // patch, crop_w // patch
        width, height = image.size
        # 1) optional pad to a centred square (LlavaImageProcessor do_pad)
        side = max(width, height) if getattr(ip, "do_pad", False) else None
        pad_w, pad_h = (side, side) if side else (width, height)
        off_x, off_y = ((side - width) // 2, (side - height) // 2) if side else (0, 0)
        # 2) resize, 3) center crop (negative offsets = the crop pads)
        res_h, res_w = _resized_hw(ip, pad_h, pad_w)
        top, left = ((res_h - crop_h) // 2, (res_w - crop_w) // 2) if getattr(ip, "do_center_crop", False) else (0, 0)
        i, j = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")  # [rows, cols] each
        i, j = i.flatten().double(), j.flatten().double()  # [V], row-major patch order
        rect = torch.stack([j * patch, i * patch, (j + 1) * patch, (i + 1) * patch], dim=1)  # [V, 4] crop px
        rect = rect + torch.tensor([left, top, left, top], dtype=torch.double)  # resized px
        rect = (rect * torch.tensor([pad_w / res_w, pad_h / res_h] * 2, dtype=torch.double)
                - torch.tensor([off_x, off_y] * 2, dtype=torch.double))
        rect = rect.clamp(min=0).minimum(torch.tensor([width, height] * 2, dtype=torch.double))  # [V, 4] original px
        # a patch wholly in the padding (do_pad, or a crop larger than the resize) shows no pixel of the image:
        # clamped to a zero-area rectangle at the image's edge, it is no cell (never in K), yet keeps its place
        # in the rows x cols patch grid (meta token_grid) that the model sees
        shows = ((rect[:, 2] - rect[:, 0]) > _EDGE) & ((rect[:, 3] - rect[:, 1]) > _EDGE)  # [V]
        # prefix tokens beyond the grid (CLS under the "full" strategy) see the whole image
        n_extra = int(getattr(processor, "num_additional_image_tokens", 0) or 0)
        n_extra -= 1 if processor.vision_feature_select_strategy == "default" else 0
        whole = torch.tensor([[0.0, 0.0, width, height]], dtype=torch.double).expand(max(n_extra, 0), 4)  # [n_extra, 4]
        meta = {"input_size": (crop_w, crop_h), "resized_size": (res_w, res_h), "crop_offset": (left, top),
                "pad_offset": (off_x, off_y), "token_grid": (rows, cols), "cell_px": patch}
        cell = torch.cat([torch.zeros(len(whole), dtype=torch.bool), shows])
        return torch.cat([whole, rect]).float(), meta, cell  # CLS is no cell: never in K

    # --- answers -------------------------------------------------------------------------------
    def parse_box(self, text: str, meta: dict[str, Any], image_size: tuple[int, int]) -> Box | None:
        from vrh.data import boxes as grounding

        found = grounding.parse_box(text)  # already original pixels: no frame change
        return None if found is None else found[1]  # not clipped: that is the task's `clip` option

    def format_box(self, box: Box, meta: dict[str, Any], image_size: tuple[int, int]) -> str:
        x1, y1, x2, y2 = (int(round(v)) for v in box)
        return self.box_template.format(x1=x1, y1=y1, x2=x2, y2=y2)
