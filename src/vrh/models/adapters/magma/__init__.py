"""Magma-8B (model type ``magma``), served without its remote code: :mod:`vrh.models.adapters.magma.modeling` rebuilds it from a native
``LlamaForCausalLM``, a ConvNeXt-XXLarge trunk under timm's names, the MLP projector and the row separator, and
loads the checkpoint's own safetensors strictly (:class:`~vrh.models.adapters.composed_base.ComposedAdapter`).

Token layout (see :mod:`vrh.models.adapters.magma.modeling`): the image is resized, without keeping its aspect ratio, to
``cols * S x rows * S`` (``S = base_img_size``, 512 for Magma-8B) and cut into ``rows x cols`` crops; each crop gives
``g x g`` features (``g = S / 32``), stitched into one ``R x C`` grid (``R = rows * g``, ``C = cols * g``) and read
row-major with a ``row_seperator`` after each row: ``R * (C + 1)`` tokens, all ``<image>`` tokens of the expanded
prompt. Token ``(r, c)`` covers resized pixels ``[32 c, 32 c + 32) x [32 r, 32 r + 32)``, i.e. the original
rectangle scaled by ``W / (cols * S)`` and ``H / (rows * S)``. The separators show no pixels: they are no cells and
get the whole image. ``meta["token_grid"]`` is ``(R, C + 1)``: the tokens are exactly that grid, row-major, its
last column the separators.

Prompt: the model card's, a Llama 3 chat with system "You are agent that can see, talk and act." and the user turn
``<image_start><image><image_end>\\n{prompt}`` (plain ``<image>\\n`` when the config sets ``mm_use_image_start_end``
false, as Magma's lmms-eval wrapper does). **Grounding format: unverified.** Magma documents no box syntax; vrh
defaults to lmms-eval's ``refcoco_bbox_rec`` prompt and answer (``[x1, y1, x2, y2]`` floats in 0-1), which Magma's
own lmms-eval wrapper (``tools/lmms-eval-magma``) would be scored with. Check on a GPU with the real weights:
``vrh probe-format`` tries the candidates :attr:`MagmaAdapter.answer_formats` declares (LLaVA-1.5's RefCOCO prompt,
Magma's lineage, with 0-1 floats; 0-1000 integers; pixels of the original and of the resized image; JSON).

BOS: the prompt is tokenized as the authors' code tokenizes it (``bos = "template"``): the model card's
``processor.apply_chat_template(..., tokenize=False)`` writes Llama 3's ``<|begin_of_text|>`` and the processor's
tokenizer, which adds its own, puts a second one before it; Magma's lmms-eval wrapper does the same. Two BOS, then,
on the only paths Magma's authors publish, which is where the paper's "model-specific format" (App. E.3) points:
vrh's default for this family is the authors' (a reading of the paper, not a measurement: it does not say which
code ran, and only the real weights on a GPU could show which gives its numbers). ``--answer-format native_one_bos`` is the other: the same prompt and answer with
one BOS (:meth:`~vrh.models.adapters.base.ChatTemplateAdapter.one_bos`, every other family's rule and
transformers' own ``apply_chat_template(tokenize=True)``). Both are recorded (``model.answer_format.bos``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from vrh.models.adapters.base import ChatTemplateAdapter, register_adapter
from vrh.models.adapters.composed_base import ComposedAdapter
from vrh.models.adapters.llava_next import LlavaNextAdapter
from vrh.models.answer_formats import NATIVE, AnswerFormat, shared

if TYPE_CHECKING:
    import torch
    from torch import nn

SYSTEM_PROMPT = "You are agent that can see, talk and act."  # model card, lmms-eval wrapper
# open_clip's pooled head (timm head.norm, the CLIP projection): in the tower's state dict, never run by Magma
UNUSED_PREFIXES = ("vision_tower.clip_vision_model.trunk.head.", "vision_tower.clip_vision_model.head.")


@register_adapter
class MagmaAdapter(ComposedAdapter, ChatTemplateAdapter):
    name = "magma"
    model_types = ("magma",)
    box_convention = "[x1, y1, x2, y2] floats in 0-1 (x / width, y / height); unverified: Magma documents none"
    token_layout = ("crops of base_img_size (512) stitched into one grid of 32-px cells, row-major, a row "
                    "separator after each row (no cell, whole image)")
    answer_sep = ""  # Llama 3's generation prompt ends with "\n\n"
    image_prefix = "<image_start><image><image_end>\n"
    prompt_template = LlavaNextAdapter.prompt_template  # lmms-eval's refcoco_bbox_rec prompt (module docstring)
    # the format is undocumented: the candidates a researcher tries first (module docstring), NATIVE the default
    bos = "template"  # the authors' path: two BOS with Llama 3's tokenizer (module docstring)
    answer_formats = (NATIVE,
                      AnswerFormat("native_one_bos", bos="one",
                                   about="the native prompt and answer with one BOS (vrh's one_bos), where the "
                                         "authors' path gives two"),
                      AnswerFormat("llava_refcoco", "Please provide the bounding box coordinate of the region this "
                                   "sentence describes: {expression}", "norm1",
                                   about="LLaVA-1.5's RefCOCO prompt (no frame stated), 0-1 floats read"),
                      *shared("norm1", "norm1000", "pixels", "resized", "json_norm1000", "json_pixels"))
    ported_remote_code = ("config.json", "preprocessor_config.json")  # both name the remote code (published files)
    config_gaps = ("Magma-8B: its published config.json was seen only as an excerpt (lines 1-17 and one commit's "
                   "diff): vocab_size and the vision_config (img_anyres_strategy 'crop' or 'global': both built) are "
                   "not in it; its tokenizer_config.json (the chat template: Llama 3's assumed) was not seen")

    # --- building and loading ------------------------------------------------------------------
    def build_model(self, config: dict[str, Any]) -> nn.Module:
        from vrh.models.adapters.magma.modeling import MagmaForCausalLM, magma_config

        return MagmaForCausalLM(magma_config(config))

    def convert_state(self, tensors: Iterator[tuple[str, torch.Tensor]], config: dict[str, Any]
                      ) -> dict[str, torch.Tensor]:
        """The published names are the module's (it is built under them); open_clip's unused pooled head is
        dropped by name. Anything else that does not match is left for ``load_strict`` to refuse."""
        return {k: v for k, v in tensors if not k.startswith(UNUSED_PREFIXES)}

    def processor_for(self, path: str) -> Any:
        from vrh.models.adapters.magma.processing import MagmaProcessor

        return MagmaProcessor.from_pretrained(path)

    def load(self, path: str, *, dtype: torch.dtype | None = None, device: str = "cpu",
             attn_implementation: str = "sdpa", device_map: str | dict | None = None) -> tuple[nn.Module, Any]:
        """The composed load and a check that the tokenizer's ``<image>`` is
        the id the model scatters features into (here, not in :meth:`on_load`: inspect counts with a stand-in)."""
        model, processor = super().load(path, dtype=dtype, device=device, attn_implementation=attn_implementation,
                                        device_map=device_map)
        image_id = processor.tokenizer.convert_tokens_to_ids(processor.image_token)
        if image_id != model.config.image_token_index:
            raise ValueError(f"the tokenizer's {processor.image_token} is id {image_id} but config.json says "
                             f"image_token_index {model.config.image_token_index}")
        return model, processor

    def on_load(self, model: nn.Module, processor: Any) -> None:
        cfg = model.config
        processor.row_separator = bool(cfg.vision_config.get("mm_use_row_seperator", True))
        tagged = getattr(cfg, "mm_use_image_start_end", True) is not False  # absent: the model card's prompt
        self.image_prefix = type(self).image_prefix if tagged else "<image>\n"

    # --- structure -----------------------------------------------------------------------------
    def decoder_layers(self, model: nn.Module) -> nn.ModuleList:
        return model.language_model.model.layers

    # --- prompts and the token -> image map ----------------------------------------------------
    def chat_text(self, processor: Any, prompt: str) -> str:
        messages = [{"role": "system", "content": SYSTEM_PROMPT},
                    {"role": "user", "content": self.image_prefix + prompt}]
        from vrh.models import chat_templates

        with chat_templates.bounded(chat_templates.whose(processor)):
            return processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def visual_map(self, processor: Any, enc: Any, b: int, image: Any
                   ) -> tuple[torch.Tensor, dict[str, Any], torch.Tensor]:
        import torch

        from vrh.models.adapters.magma.modeling import CONVNEXT_STRIDE

        s, p = processor.image_processor.base_img_size, CONVNEXT_STRIDE
        if tuple(enc["pixel_values"].shape[-2:]) != (s, s):  # [B, N, C, S, S]
            raise ValueError(f"pixel_values crops {tuple(enc['pixel_values'].shape[-2:])} are not {s} x {s}")
        rows, cols = (int(v) for v in enc["image_sizes"][b])
        width, height = image.size
        big_r, big_c = rows * (s // p), cols * (s // p)  # the stitched feature grid
        r, c = torch.meshgrid(torch.arange(big_r), torch.arange(big_c), indexing="ij")  # [R, C] each
        cell = torch.stack([c, r, c + 1, r + 1], dim=-1).double() * p  # [R, C, 4] resized px
        cell = cell * torch.tensor([width / (cols * s), height / (rows * s)] * 2, dtype=torch.double)  # original px
        is_cell = torch.ones(big_r, big_c, dtype=torch.bool)
        if processor.row_separator:
            whole = torch.tensor([0.0, 0.0, width, height], dtype=torch.double).expand(big_r, 1, 4)  # [R, 1, 4]
            cell = torch.cat([cell, whole], dim=1)  # [R, C + 1, 4]
            is_cell = torch.cat([is_cell, torch.zeros(big_r, 1, dtype=torch.bool)], dim=1)
        meta = {"token_grid": tuple(is_cell.shape), "crop_grid": (rows, cols), "resized_size": (cols * s, rows * s),
                "cell_px": p}
        return cell.reshape(-1, 4).float(), meta, is_cell.flatten()

    # --- answers: lmms-eval's REC box, [x1, y1, x2, y2] in 0-1 floats, as LLaVA-NeXT ----------------
    parse_box = LlavaNextAdapter.parse_box
    format_box = LlavaNextAdapter.format_box

