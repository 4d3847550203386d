"""PaliGemma and PaliGemma 2 (``PaliGemmaForConditionalGeneration``; Gemma and Gemma 2 LMs).

PaliGemma has no chat template. Its input is a *prefix* and a *suffix*: the processor turns ``<image>`` +
prompt into ``<image> x n + <bos> + prompt + "\\n"`` (the image first, at position 0) and appends a suffix,
the answer, plus ``<eos>``. ``token_type_ids`` mark the prefix 0 and the suffix 1, and the model attends
*bidirectionally* over the whole prefix (image and prompt: every prefix token sees every other) and causally
over the suffix. So a teacher-forced answer must go in as the suffix, never appended to the prompt text: the
prompt tokens would otherwise see the answer. :meth:`PaliGemmaAdapter.build_batch` does that, then drops the
suffix's final ``<eos>`` so the answer ends the sequence as in every other family (the model's own answer is
scored up to its last token, and ``<eos>`` is no part of the box).

PaliGemma 2's Gemma 2 LM caps attention logits (``tanh(s / 50) * 50``) and alternates sliding-window and
global layers; sdpa can express neither the cap nor (in transformers) this model, so :meth:`load` runs the LM
eager and the SigLIP tower with the requested implementation. vrh's capture and uniform ablation replace the
LM's attention with their own softcap path (:func:`vrh.core.attention._softcap_output`) and read the model's own
bidirectional / sliding-window masks through :func:`vrh.core.attention.allowed_keys`.

Token map: the image is squashed (no crop, no padding, aspect not kept) to the tower's square side S (224,
448 or 896 px) and cut into ``n x n`` patches of 14 px, one LM token each, row-major (SigLIP's convolutional
patch embedding, flattened; tests/models/adapters/test_paligemma.py checks the order on the real embedding). Each
token is one cell; its rectangle is a ``W/n x H/n`` cell of the original image. ``n`` comes from the
processor's ``image_seq_length`` and the side from ``pixel_values``, never from the token count alone.

Grounding, from the model card and big_vision's evaluator (``big_vision/evaluators/proj/paligemma/transfers/
segmentation.py``): prompt ``detect {expression}``; answer four location tokens ``<locY1><locX1><locY2><locX2>``
then the label (``<loc0123><loc0045><loc0870><loc0512> red ball``), each ``<locNNNN>`` a bin in 0-1023 with
``coordinate = bin / 1023 * side`` (y against the height, x against the width of the original image, since
the squash keeps relative positions). A box is valid only with ``y2 > y1`` and ``x2 > x1`` (big_vision's
rule). :meth:`format_box` writes the four tokens without the label: teacher-forcing scores the box tokens.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

from vrh.models.adapters.base import Adapter, Box, VisionBatch, register_adapter

if TYPE_CHECKING:
    import torch
    from torch import nn

BINS = 1024  # <loc0000> ... <loc1023>
_LOC4_RE = re.compile(r"<loc(\d{4})>\s*<loc(\d{4})>\s*<loc(\d{4})>\s*<loc(\d{4})>")


def loc_tokens(box: Box, image_size: tuple[int, int]) -> str:
    """Original-pixel xyxy box -> PaliGemma's ``<locY1><locX1><locY2><locX2>`` (bins clipped to 0-1023).

    >>> loc_tokens((0, 25, 320, 100), (640, 100))
    '<loc0256><loc0000><loc1023><loc0512>'
    """
    width, height = image_size
    x1, y1, x2, y2 = box
    bins = [round(v / side * (BINS - 1)) for v, side in ((y1, height), (x1, width), (y2, height), (x2, width))]
    return "".join(f"<loc{min(max(b, 0), BINS - 1):04d}>" for b in bins)


def parse_loc_tokens(text: str, image_size: tuple[int, int]) -> Box | None:
    """The first valid run of four location tokens in ``text`` as an original-pixel xyxy box, else None.

    Valid: every bin in 0-1023 and ``y2 > y1``, ``x2 > x1``; an invalid run is skipped, like big_vision's
    evaluator marks it invalid. Reasoning is dropped first, as in every family
    (:func:`vrh.data.boxes.strip_reasoning`).

    >>> parse_loc_tokens("<loc0256><loc0000><loc1023><loc0512> red ball", (640, 100))  # doctest: +ELLIPSIS
    (0.0, 25.02..., 320.31..., 100.0)
    >>> parse_loc_tokens("<loc0500><loc0000><loc0100><loc0512>", (640, 100)) is None
    True
    """
    from vrh.data import boxes as grounding

    width, height = image_size
    for m in _LOC4_RE.finditer(grounding.strip_reasoning(text)):
        y1, x1, y2, x2 = (int(g) for g in m.groups())
        if max(y1, x1, y2, x2) < BINS and y2 > y1 and x2 > x1:
            return (x1 / (BINS - 1) * width, y1 / (BINS - 1) * height,
                    x2 / (BINS - 1) * width, y2 / (BINS - 1) * height)
    return None


@register_adapter
class PaliGemmaAdapter(Adapter):
    name = "paligemma"
    model_types = ("paligemma",)
    box_convention = "<locY1><locX1><locY2><locX2>, 1024 bins over the squashed image (big_vision), after 'detect EXPR'"
    token_layout = "image tokens first: n x n row-major cells of the image squashed to the tower's side; bidirectional image + prefix"
    prompt_template = "detect {expression}"
    model_class = "PaliGemmaForConditionalGeneration"

    # --- loading -------------------------------------------------------------------------------
    def load(self, path: str, *, dtype: torch.dtype | None = None, device: str = "cpu",
             attn_implementation: str = "sdpa", device_map: str | dict | None = None) -> tuple[nn.Module, Any]:
        """The LM always eager (Gemma 2 has no sdpa path: sdpa cannot softcap), the tower as requested."""
        impl = {"text_config": "eager", "vision_config": attn_implementation, "": attn_implementation}
        return super().load(path, dtype=dtype, device=device, attn_implementation=impl, device_map=device_map)

    # --- inputs --------------------------------------------------------------------------------
    def feature_token_id(self, processor: Any) -> int:
        """``<image>``: the placeholder the processor repeats, one per visual feature."""
        return int(processor.image_token_id)

    def build_batch(self, processor: Any, images: list, prompts: list[str],
                    answers: list[str] | None = None, expressions: list[str] | None = None) -> VisionBatch:
        """Prefix ``<image> + prompt`` and, with ``answers``, the answers as the causal suffix (its ``<eos>``
        dropped). Positions come from the processor's placeholder span and the tokenizer's offsets: prefix
        offsets index the expanded prefix text, suffix offsets the suffix text."""
        import torch

        images = [im.convert("RGB") if hasattr(im, "convert") else im for im in images]
        tok, image_token = processor.tokenizer, processor.image_token
        for prompt in prompts:
            if image_token in prompt:
                raise ValueError(f"prompt {prompt!r} contains the image placeholder {image_token!r}")
        offsets_in_prompt = ([self.expression_offset(p, e) for p, e in zip(prompts, expressions, strict=True)]
                             if expressions is not None else None)
        enc = processor(images=images, text=[image_token + p for p in prompts], suffix=answers, padding=True,
                        return_tensors="pt", return_offsets_mapping=True, return_text_replacement_offsets=True)
        enc.pop("labels", None)  # the processor's training labels; vrh never asks the model for a loss
        offsets = enc.pop("offset_mapping")  # [B, S, 2]
        replaced = enc.pop("text_replacement_offsets")  # per sample: [{"new_span", ...}] for the one image
        if tok.padding_side != "left" and not bool(enc["attention_mask"][:, -1].all()):
            raise ValueError("vrh needs left padding; set tokenizer.padding_side = 'left'")
        if answers is not None:  # left padding: every row ends on the suffix's <eos>; drop that column
            if not bool((enc["input_ids"][:, -1] == tok.eos_token_id).all()):
                raise ValueError("expected every suffix to end on <eos>")
            for key in ("input_ids", "attention_mask", "token_type_ids"):
                enc[key] = enc[key][:, :-1]  # [B, S - 1]
            offsets = offsets[:, :-1]
        ids, mask = enc["input_ids"], enc["attention_mask"].bool()  # [B, S]
        prefix = (enc["token_type_ids"] == 0) & mask  # [B, S]
        feature_id = self.feature_token_id(processor)
        vis, rects, expr, ans, metas = [], [], [], [], []
        for b in range(len(prompts)):
            spans = [r["new_span"] for r in replaced[b] if r["type"] == "image"]
            if len(spans) != 1:
                raise ValueError(f"sample {b}: the processor expanded {len(spans)} image placeholders, expected 1")
            # expanded prefix text: <image> x n, <bos>, prompt, "\n" (the processor adds <bos> and "\n")
            bos_at = (offsets[b, :, 0] == spans[0][1]) & prefix[b]
            if not bool((ids[b][bos_at] == tok.bos_token_id).all()) or int(bos_at.sum()) != 1:
                raise ValueError(f"sample {b}: expected <bos> right after the image tokens")
            p0 = spans[0][1] + len(tok.bos_token)  # the prompt's first char in the expanded prefix text
            in_image = (offsets[b, :, 0] < spans[0][1]) & (offsets[b, :, 1] > spans[0][0]) & prefix[b]
            vis.append((in_image & (ids[b] == feature_id)).nonzero().flatten())
            r, meta = self.visual_map(processor, enc, b, images[b])
            if r.shape[0] != len(vis[-1]):
                raise ValueError(f"{len(vis[-1])} visual tokens but the processor outputs map {r.shape[0]}")
            rects.append(r)
            metas.append(meta)
            if offsets_in_prompt is not None:
                c0 = p0 + offsets_in_prompt[b]
                c1 = c0 + len(expressions[b])
                hit = (offsets[b, :, 0] < c1) & (offsets[b, :, 1] > c0) & prefix[b]  # [S]
                expr.append(hit.nonzero().flatten())
            else:
                expr.append(torch.zeros(0, dtype=torch.long))
            if answers is not None:
                ans.append(((enc["token_type_ids"][b] == 1) & mask[b]).nonzero().flatten())
        return VisionBatch(inputs=dict(enc), visual_positions=vis, visual_rects=rects, expression_positions=expr,
                           answer_positions=ans if answers is not None else None,
                           image_sizes=[tuple(im.size) for im in images], meta=metas)

    def visual_map(self, processor: Any, enc: Any, b: int, image: Any) -> tuple[torch.Tensor, dict[str, Any]]:
        """n x n cells of the squashed image, row-major, scaled to the original (every token a cell)."""
        import torch

        ip = processor.image_processor
        side_h, side_w = (int(v) for v in enc["pixel_values"].shape[-2:])  # pixel_values: [B, C, S, S]
        if getattr(ip, "do_center_crop", False) or getattr(ip, "do_pad", False) or side_h != side_w:
            raise ValueError(f"PaliGemma image processor gave {side_w}x{side_h} pixels (crop/pad settings "
                             f"do_center_crop={getattr(ip, 'do_center_crop', None)}, do_pad={getattr(ip, 'do_pad', None)});"
                             " the paligemma adapter needs the plain square squash of the released checkpoints")
        n = math.isqrt(int(processor.image_seq_length))  # tokens per side
        if n * n != processor.image_seq_length or side_h % n:
            raise ValueError(f"image_seq_length {processor.image_seq_length} is not an n x n grid of patches "
                             f"of the {side_w}-px input")
        width, height = image.size
        i, j = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")  # [n, n] each
        i, j = i.flatten().double(), j.flatten().double()  # [n*n], row-major
        cw, ch = width / n, height / n  # a cell in original pixels
        rect = torch.stack([j * cw, i * ch, (j + 1) * cw, (i + 1) * ch], dim=1).float()  # [n*n, 4]
        return rect, {"resized_size": (side_w, side_h), "token_grid": (n, n), "cell_px": side_w // n}

    # --- answers -------------------------------------------------------------------------------
    def parse_box(self, text: str, meta: dict[str, Any], image_size: tuple[int, int]) -> Box | None:
        return parse_loc_tokens(text, image_size)

    def format_box(self, box: Box, meta: dict[str, Any], image_size: tuple[int, int]) -> str:
        return loc_tokens(box, image_size)
