"""Phi-4-Reasoning-Vision-15B (model type ``phi4-siglip``), served without its remote code.

The model is composed from native parts (:mod:`vrh.models.adapters.phi4_vision.modeling`: a Phi-3 LM, a SigLIP2 NaFlex tower whose
``hidden_states[-2]`` go through an MLP projector) and loaded strictly from the checkpoint's own safetensors by
:class:`~vrh.models.adapters.composed_base.ComposedAdapter`: the parameter names are the published ones, so every tensor is consumed
as is, the fine-tuned vision tower included (the remote code would silently use the original SigLIP2 weights when
loaded by hub id).

Token map: one visual token per 16 x 16 patch of the resized image (aspect kept, sides multiples of 16, between
``min_num_patches`` and ``max_num_patches`` patches), row-major over the ``h x w`` grid of ``spatial_shapes``; token
``(i, j)`` covers the original-image rectangle ``[j W/w, i H/h, (j + 1) W/w, (i + 1) H/h]``. Every token is a cell;
``meta["token_grid"] = (h, w)``.

Answer format: **unverified**. Nothing published documents how Phi-4-RV writes a box (the VRH paper's RefCOCO
baseline of 74.2 % used a "model-specific output format" it does not state). The default here asks for
``[x1, y1, x2, y2]`` as integers on a 0-1000 grid relative to the image's width and height (the frame of Qwen2-VL and
InternVL) and reads any box of numbers in that frame, under vrh's one parsing policy (:mod:`vrh.data.boxes`).
Probing the real model on a GPU settles it: ``vrh probe-format`` tries the candidates
:attr:`Phi4VisionAdapter.answer_formats` declares (0-1 floats, 0-1000 integers in JSON, pixels of the original and
of the resized image, JSON pixels).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vrh.models.adapters.base import Box, VisionBatch, register_adapter
from vrh.models.adapters.composed_base import ComposedAdapter
from vrh.models.answer_formats import NATIVE, shared

if TYPE_CHECKING:
    import torch
    from torch import nn

GRID = 1000  # the default answer frame: integers 0-1000 relative to the image (unverified, see above)
NOTHINK = "<|dummy_84|>"  # opens a direct (NOTHINK) answer, as the released chat template's system prompt asks


@register_adapter
class Phi4VisionAdapter(ComposedAdapter):
    name = "phi4_reasoning_vision"
    model_types = ("phi4-siglip",)
    box_convention = "[x1, y1, x2, y2], 0-1000 relative (unverified default)"
    token_layout = "one token per 16-px patch of the aspect-kept resized image, row-major (spatial_shapes)"
    prompt_template = ("Locate the {expression} in the image. Output its bounding box as [x1, y1, x2, y2] with "
                       "integer coordinates from 0 to 1000 relative to the image width and height.")
    answer_sep = ""  # the answer follows "<|im_start|>assistant<|im_sep|>" directly
    # the format is undocumented: the candidates a researcher tries first (module docstring), NATIVE the default
    answer_formats = (NATIVE, *shared("norm1", "json_norm1000", "pixels", "resized", "json_pixels", "json_resized"))
    ported_remote_code = ("config.json", "preprocessor_config.json")  # both name the remote code (published files)
    config_gaps = ("Phi-4-Reasoning-Vision-15B: config.json, preprocessor config and chat template are the released "
                   "files; its tokenizer files were not seen (whether it adds a BOS)")

    # --- building and loading --------------------------------------------------------------------
    def build_model(self, config: dict[str, Any]) -> nn.Module:
        from vrh.models.adapters.phi4_vision.modeling import Phi4VisionForCausalLM, phi4_vision_config

        return Phi4VisionForCausalLM(phi4_vision_config(config))

    def convert_state(self, tensors, config: dict[str, Any]) -> dict[str, torch.Tensor]:
        """The published names are the module's names (see :mod:`vrh.models.adapters.phi4_vision.modeling`): nothing to rename."""
        return dict(tensors)

    def processor_for(self, path: str) -> Any:
        from vrh.models.adapters.phi4_vision.processing import Phi4VisionProcessor

        return Phi4VisionProcessor.from_pretrained(path)

    def on_load(self, model: nn.Module, processor: Any) -> None:
        model.config.image_token_id = processor.image_token_id  # where the model scatters the image features

    def decoder_layers(self, model: nn.Module) -> nn.ModuleList:
        return model.model.layers

    # --- inputs ----------------------------------------------------------------------------------
    def feature_token_id(self, processor: Any) -> int:
        return processor.image_token_id

    def build_batch(self, processor: Any, images: list, prompts: list[str],
                    answers: list[str] | None = None, expressions: list[str] | None = None) -> VisionBatch:
        import torch

        images = [im.convert("RGB") for im in images]
        texts, spans = self.chat_spans(prompts, answers, expressions, processor.chat_text)
        enc = processor(texts, images)
        offsets = enc.pop("offset_mapping")  # [B, S, 2] characters of `texts`
        ids, mask = enc["input_ids"], enc["attention_mask"].bool()  # [B, S]
        if processor.tokenizer.padding_side != "left" and not bool(mask[:, -1].all()):
            raise ValueError("vrh needs left padding; set tokenizer.padding_side = 'left'")
        is_image = ids == processor.image_token_id  # [B, S]
        vis, rects, metas, expr, ans = [], [], [], [], []
        for b in range(len(texts)):
            def tokens_in(c0: int, c1: int) -> torch.Tensor:  # [S] text tokens overlapping chars [c0, c1)
                return (offsets[b, :, 0] < c1) & (offsets[b, :, 1] > c0) & mask[b] & ~is_image[b]

            vis.append(is_image[b].nonzero().flatten())
            r, meta = self.visual_map(processor, enc, b, images[b])
            if len(r) != len(vis[-1]):
                raise ValueError(f"{len(vis[-1])} visual tokens but the processor outputs map {len(r)}")
            rects.append(r)
            metas.append(meta)
            expr.append(tokens_in(*spans[b]["expression"]).nonzero().flatten() if expressions is not None
                        else torch.zeros(0, dtype=torch.long))
            if answers is not None:
                ans.append(tokens_in(*spans[b]["answer"]).nonzero().flatten())
        return VisionBatch(inputs=enc, visual_positions=vis, visual_rects=rects, expression_positions=expr,
                           answer_positions=ans if answers is not None else None,
                           image_sizes=[tuple(im.size) for im in images], meta=metas)

    def visual_map(self, processor: Any, enc: dict[str, torch.Tensor], b: int, image: Any
                   ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Rectangles of sample ``b``'s tokens: patch ``(k // w, k % w)`` of the resized image, scaled back."""
        import torch

        p = processor.image_processor.patch_size
        rows, cols = (int(v) for v in enc["spatial_shapes"][b])  # patches of the resized image
        width, height = image.size
        i, j = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")  # [rows, cols] each
        i, j = i.flatten().double(), j.flatten().double()  # [V], row-major
        sx, sy = width / cols, height / rows  # original px per patch
        rect = torch.stack([j * sx, i * sy, (j + 1) * sx, (i + 1) * sy], dim=1)  # [V, 4] original px
        meta = {"resized_size": (cols * p, rows * p), "token_grid": (rows, cols), "cell_px": p}
        return rect.float(), meta

    # --- answers -------------------------------------------------------------------------------
    def decode(self, processor: Any, token_ids: torch.Tensor) -> list[str]:
        """Special tokens kept but the turn markers and padding (and NOTHINK's ``<|dummy_84|>``): the reasoning
        tags of a THINK answer may be special tokens, and :func:`vrh.data.boxes.parse_box` must see them to drop
        the thought (a box the model only considered is not its answer)."""
        tok = processor.tokenizer
        drop = {t for t in (tok.pad_token, tok.eos_token, tok.bos_token, "<|im_end|>", "<|endoftext|>",
                            NOTHINK) if t}
        texts = processor.batch_decode(token_ids, skip_special_tokens=False)
        for t in drop:
            texts = [s.replace(t, "") for s in texts]
        return texts

    def parse_box(self, text: str, meta: dict[str, Any], image_size: tuple[int, int]) -> Box | None:
        from vrh.data import boxes as grounding

        found = grounding.parse_box(text)
        return None if found is None else grounding.from_normalized(found[1], GRID, image_size)

    def format_box(self, box: Box, meta: dict[str, Any], image_size: tuple[int, int]) -> str:
        from vrh.data import boxes as grounding

        x1, y1, x2, y2 = (min(max(round(v), 0), GRID) for v in grounding.to_normalized(box, GRID, image_size))
        return f"[{x1}, {y1}, {x2}, {y2}]"
