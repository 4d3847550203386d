"""DeepSeek-VL2 (``deepseek_vl_v2``: deepseek-ai/deepseek-vl2-tiny, -small, deepseek-vl2), served without remote
code: vrh composes native transformers parts and loads the published safetensors strictly
(:mod:`vrh.models.adapters.deepseek_vl2.modeling`, :class:`vrh.models.adapters.composed_base.ComposedAdapter`).

How an image becomes tokens (the remote ``DeepseekVLV2Processor``): a *global view*, the image letterboxed onto
one ``S``-px tile (``ImageOps.pad``, bicubic, centred, grey ``mean * 255`` bars), and *local tiles*, the image
letterboxed onto the candidate canvas (multiples of ``S``) that keeps the most pixels, cut row-major. Each tile
goes through SigLIP (``S // 14`` patches a side; the last ``S mod 14`` tile pixels are never read) and the 2 x 2
downsampling projector, so a token is a ``28 x 28``-px cell of its tile (the last row and column: the remaining
``14`` seen pixels). Sequence per image: the global view's ``g`` rows of ``g`` tokens plus a newline each, one
view separator, then the local tiles stitched into ``(nh * g) x (nw * g)`` rows plus a newline each. Every one of
those positions is an ``<image>`` token.

Token map: a local token is one *cell*, its tile cell mapped back through the letterbox to the original image
(clipped to it; a cell of bars only has no area and is not a cell). Global-view tokens keep their coarse
rectangle of the whole image and are not cells (like InternVL's thumbnail); newline and separator tokens get the
whole image and are not cells.

Grounding (README, ``serve/app_modules/utils.py``): the prompt ``<|ref|>{expression}<|/ref|>.`` after the image
in the ``deepseek`` chat format ``<|User|>: <image>\\n{prompt}\\n\\n<|Assistant|>:``; the model answers
``<|ref|>{expression}<|/ref|><|det|>[[x1, y1, x2, y2]]<|/det|>`` with integers 0-999 of the original image
(``x / 999 * W``). :meth:`DeepseekVL2Adapter.format_box` writes the ``<|det|>`` part only (the teacher-forced
GT answer; the expression is not an argument there).

Answer variants (``vrh probe-format``, ``--answer-format``): ``native`` is the documented format above;
``grounding`` adds the README's ``<|grounding|>`` tag (its grounded-conversation mode, which answers in the same
``<|ref|>..<|det|>`` form) to a plain request; then plain ``[x1, y1, x2, y2]`` in the documented 0-999 frame, 0-1000
and pixels, in case a fine-tune writes no ``<|det|>`` tags.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vrh.models.adapters.base import Box, VisionBatch, register_adapter
from vrh.models.adapters.composed_base import ComposedAdapter
from vrh.models.answer_formats import NATIVE, AnswerFormat, shared

if TYPE_CHECKING:
    import torch

NORM = 999  # the answer frame: 0-999 relative to the original image
USER = "<|User|>: "  # text before the image
ASSISTANT = "\n\n<|Assistant|>:"  # after the prompt: the generation prompt


@register_adapter
class DeepseekVL2Adapter(ComposedAdapter):
    name = "deepseek_vl2"
    model_types = ("deepseek_vl_v2",)
    box_convention = "<|ref|>expr<|/ref|><|det|>[[x1, y1, x2, y2]]<|/det|>, integers 0-999 of the original image"
    token_layout = ("global view (letterboxed 384-px tile) g x g tokens + a newline per row (no cells), a view "
                    "separator, then the local 384-px tiles stitched row-major + a newline per row (cells)")
    prompt_template = "<|ref|>{expression}<|/ref|>."
    answer_formats = (NATIVE,
                      AnswerFormat("grounding", "<|grounding|>Locate <|ref|>{expression}<|/ref|> in the image.",
                                   about="<|grounding|> (the README's grounded-conversation tag) and the family's "
                                         "own <|ref|>..<|det|> 0-999 answer"),
                      *shared("norm999", "norm1000", "pixels"))
    ported_remote_code = ("config.json",)  # names the remote code (the published file)
    config_gaps = ("DeepSeek-VL2-Small: its published config.json was seen only as an excerpt that stops at "
                   "language_config.q_lora_rank (qk_*/v_head_dim, topk_method, norm_topk_prob, rope_scaling are the "
                   "remote code's defaults, unverified) and its processor_config.json not at all (Tiny's assumed); "
                   "Tiny's excerpt (a third-party re-upload) stops inside vision_config")

    # --- model ---------------------------------------------------------------------------------
    def build_model(self, config: dict[str, Any]):
        from vrh.models.adapters.deepseek_vl2.modeling import DeepseekVL2ForCausalLM

        return DeepseekVL2ForCausalLM.from_published(config)

    def convert_state(self, tensors, config: dict[str, Any]) -> dict[str, torch.Tensor]:
        from vrh.models.adapters.deepseek_vl2.checkpoint import convert_state

        return convert_state(tensors, config)

    def processor_for(self, path: str) -> Any:
        from vrh.models.adapters.deepseek_vl2.processing import DeepseekVL2Processor

        return DeepseekVL2Processor.from_pretrained(path)

    def head_dim(self, model) -> int:
        """MLA heads write ``v_head_dim`` columns of ``o_proj``'s input (q/k are wider); MHA as usual."""
        cfg = self.text_config(model)
        return int(cfg.v_head_dim) if getattr(cfg, "use_mla", False) else super().head_dim(model)

    # --- inputs --------------------------------------------------------------------------------
    def feature_token_id(self, processor: Any) -> int:
        """``<image>``: every image position (cells, global view, newlines, separator) is one."""
        return int(processor.image_token_id)

    def build_batch(self, processor: Any, images: list, prompts: list[str],
                    answers: list[str] | None = None, expressions: list[str] | None = None) -> VisionBatch:
        """``BOS, <|User|>: , <image> x n, \\n{prompt}\\n\\n<|Assistant|>:[answer]``, each text piece tokenized
        on its own as the remote processor does, left-padded."""
        import torch

        tok = processor.tokenizer
        if tok.bos_token_id is None or tok.pad_token_id is None:
            raise ValueError("DeepSeek-VL2's tokenizer needs a BOS and a pad token")
        seqs, tiles, crops, maps, expr, ans = [], [], [], [], [], []
        for i, (image, prompt) in enumerate(zip(images, prompts, strict=True)):
            pixels, (nw, nh), geometry = processor.views(image)
            n_img = processor.num_image_tokens(nw, nh)
            head = [tok.bos_token_id] + processor.encode(USER)[0] + [processor.image_token_id] * n_img
            after = "\n" + prompt + ASSISTANT
            after_ids, offsets = processor.encode(after)
            if expressions is not None:
                e0 = 1 + self.expression_offset(prompt, expressions[i])
                e1 = e0 + len(expressions[i])
                expr.append(torch.tensor([len(head) + k for k, (a, b) in enumerate(offsets) if a < e1 and b > e0],
                                         dtype=torch.long))
            ids = head + after_ids
            if answers is not None:
                answer_ids = processor.encode(answers[i])[0]
                ans.append(torch.arange(len(ids), len(ids) + len(answer_ids)))
                ids = ids + answer_ids
            seqs.append(ids)
            tiles.append(pixels)
            crops.append((nw, nh))
            maps.append(self.visual_map(processor, image.size, nw, nh, geometry))
        width = max(map(len, seqs))
        pads = [width - len(s) for s in seqs]
        ids = torch.tensor([[tok.pad_token_id] * p + s for p, s in zip(pads, seqs)])  # [B, S], left-padded
        mask = torch.tensor([[0] * p + [1] * len(s) for p, s in zip(pads, seqs)])
        images_seq_mask = (ids == processor.image_token_id) & mask.bool()
        most = max(len(t) for t in tiles)
        pixel_values = torch.stack([torch.cat([t, t.new_zeros(most - len(t), *t.shape[1:])]) for t in tiles])
        inputs = {"input_ids": ids, "attention_mask": mask, "pixel_values": pixel_values,
                  "images_seq_mask": images_seq_mask, "images_spatial_crop": torch.tensor(crops)}
        return VisionBatch(inputs=inputs, visual_positions=[images_seq_mask[b].nonzero().flatten()
                                                            for b in range(len(seqs))],
                           visual_rects=[m[0] for m in maps],
                           expression_positions=[e + p for e, p in zip(expr, pads)] if expressions is not None
                           else [torch.zeros(0, dtype=torch.long)] * len(seqs),
                           answer_positions=[a + p for a, p in zip(ans, pads)] if answers is not None else None,
                           image_sizes=[tuple(im.size) for im in images], meta=[m[1] for m in maps],
                           cell_tokens=[m[2] for m in maps])

    @staticmethod
    def visual_map(processor: Any, size: tuple[int, int], nw: int, nh: int, geometry: dict[str, Any]
                   ) -> tuple[torch.Tensor, dict[str, Any], torch.Tensor]:
        """Rectangles (original pixels) and cell flags of one image's tokens, in sequence order."""
        import torch

        width, height = size
        s, g, seen = processor.image_size, processor.grid, processor.seen_px
        step = processor.patch_size * processor.downsample_ratio  # tile pixels per token side (28)
        whole = torch.tensor([[0.0, 0.0, width, height]], dtype=torch.float64)

        def cells(tiles_w: int, tiles_h: int, place: tuple[int, ...]) -> torch.Tensor:
            """[rows, cols, 4] the tile cells of a letterboxed canvas, in original pixels, clipped."""
            k = torch.arange(g, dtype=torch.float64)
            lo, hi = k * step, torch.clamp((k + 1) * step, max=seen)  # [g] within a tile
            xs0 = (torch.arange(tiles_w)[:, None] * s + lo).flatten()  # [tiles_w * g] canvas px
            xs1 = (torch.arange(tiles_w)[:, None] * s + hi).flatten()
            ys0 = (torch.arange(tiles_h)[:, None] * s + lo).flatten()
            ys1 = (torch.arange(tiles_h)[:, None] * s + hi).flatten()
            x0, y0, rw, rh = place

            def back(v: torch.Tensor, offset: int, resized: int, full: int) -> torch.Tensor:
                return ((v - offset) * full / resized).clamp(0, full)

            x_lo, x_hi = back(xs0, x0, rw, width), back(xs1, x0, rw, width)
            y_lo, y_hi = back(ys0, y0, rh, height), back(ys1, y0, rh, height)
            rows, cols = len(y_lo), len(x_lo)
            return torch.stack([x_lo.expand(rows, cols), y_lo[:, None].expand(rows, cols),
                                x_hi.expand(rows, cols), y_hi[:, None].expand(rows, cols)], dim=-1)

        def with_newlines(grid: torch.Tensor) -> torch.Tensor:  # [rows, cols, 4] -> [rows * (cols + 1), 4]
            return torch.cat([grid, whole.expand(grid.shape[0], 1, 4)], dim=1).reshape(-1, 4)

        glob = cells(1, 1, geometry["global_place"])  # [g, g, 4]
        local = cells(nw, nh, geometry["local_place"])  # [nh * g, nw * g, 4]
        rects = torch.cat([with_newlines(glob), whole, with_newlines(local)])
        area = (local[..., 2] - local[..., 0]) * (local[..., 3] - local[..., 1])  # [nh * g, nw * g]
        local_cell = torch.cat([area > 0, torch.zeros(nh * g, 1, dtype=torch.bool)], dim=1).flatten()
        cell = torch.cat([torch.zeros(g * (g + 1) + 1, dtype=torch.bool), local_cell])
        meta = {"tile_grid": (nh, nw), "token_grid": (nh * g, nw * g), "local_canvas": geometry["local_canvas"],
                "global_place": geometry["global_place"], "local_place": geometry["local_place"],
                "cell_px": step}
        return rects.float(), meta, cell

    # --- answers -------------------------------------------------------------------------------
    def decode(self, processor: Any, token_ids: torch.Tensor) -> list[str]:
        """Keep ``<|ref|>`` / ``<|det|>`` (special tokens here), drop padding, BOS and EOS."""
        tok = processor.tokenizer
        texts = processor.batch_decode(token_ids, skip_special_tokens=False)
        for t in {t for t in (tok.pad_token, tok.eos_token, tok.bos_token) if t}:
            texts = [s.replace(t, "") for s in texts]
        return texts

    def parse_box(self, text: str, meta: dict[str, Any], image_size: tuple[int, int]) -> Box | None:
        from vrh.data import boxes as grounding

        found = grounding.parse_box(text)
        return None if found is None else grounding.from_normalized(found[1], NORM, image_size)

    def format_box(self, box: Box, meta: dict[str, Any], image_size: tuple[int, int]) -> str:
        from vrh.data import boxes as grounding

        x1, y1, x2, y2 = (int(round(v)) for v in grounding.to_normalized(box, NORM, image_size))
        return f"<|det|>[[{x1}, {y1}, {x2}, {y2}]]<|/det|>"
