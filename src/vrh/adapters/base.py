"""What vrh needs to know about a model family, in one small declarative class per family.

An adapter answers: how to load the model, how to turn (image, prompt[, answer]) into model inputs, where
the language model's attention modules and ``o_proj`` layers are, how many layers/heads there are, which
rectangle of the *original* image each visual token covers (taken from the processor's outputs, never
guessed from a token count), and how the family writes a box in its answers.

Register an adapter in its own file with ``@register_adapter``; :func:`get_adapter` picks it by the
checkpoint's ``config.model_type``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

Box = tuple[float, float, float, float]  # (x1, y1, x2, y2), original-image pixels


@dataclass
class VisionBatch:
    """Model inputs for B samples plus the per-sample token maps vrh needs.

    Sequences are left-padded to one length S; every position below is an index into that padded
    sequence (0 <= pos < S), per sample.
    """

    inputs: dict[str, torch.Tensor]  # kwargs for model(**inputs) and model.generate(**inputs)
    visual_positions: list[torch.Tensor]  # per sample: LongTensor [V_b] positions of visual tokens
    visual_rects: list[torch.Tensor]  # per sample: FloatTensor [V_b, 4] xyxy original-image pixels
    expression_positions: list[torch.Tensor]  # per sample: LongTensor [E_b] positions of the expression
    answer_positions: list[torch.Tensor] | None  # per sample: LongTensor [A_b] teacher-forced answer tokens
    image_sizes: list[tuple[int, int]]  # per sample: original (width, height)
    meta: list[dict[str, Any]] = field(default_factory=list)  # per sample, adapter-specific (resized size)

    @property
    def batch_size(self) -> int:
        return len(self.visual_positions)

    @property
    def seq_len(self) -> int:
        return int(self.inputs["input_ids"].shape[1])


class Adapter:
    """Base class; subclasses set the class attributes and override what differs."""

    name: str = ""  # short id used in run folders and on the CLI
    model_types: tuple[str, ...] = ()  # config.model_type values this adapter serves

    # --- loading -------------------------------------------------------------------------------
    def load(self, path: str, *, dtype: torch.dtype = torch.float32, device: str = "cpu",
             attn_implementation: str = "sdpa") -> tuple[nn.Module, Any]:
        """Load (model, processor) from a local path or hub id; offline when HF_HUB_OFFLINE is set."""
        raise NotImplementedError

    # --- structure -----------------------------------------------------------------------------
    def text_config(self, model: nn.Module):
        cfg = model.config
        return getattr(cfg, "text_config", cfg)

    def num_layers(self, model: nn.Module) -> int:
        return int(self.text_config(model).num_hidden_layers)

    def num_heads(self, model: nn.Module) -> int:
        return int(self.text_config(model).num_attention_heads)

    def head_dim(self, model: nn.Module) -> int:
        cfg = self.text_config(model)
        return int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)

    def decoder_layers(self, model: nn.Module) -> nn.ModuleList:
        """The language model's decoder layers, index = vrh layer index."""
        return model.model.language_model.layers

    def attention_module(self, model: nn.Module, layer: int) -> nn.Module:
        return self.decoder_layers(model)[layer].self_attn

    def o_proj(self, model: nn.Module, layer: int) -> nn.Linear:
        return self.attention_module(model, layer).o_proj

    # --- prompts and inputs --------------------------------------------------------------------
    def grounding_prompt(self, expression: str) -> str:
        raise NotImplementedError

    def vqa_prompt(self, question: str) -> str:
        return question

    def build_batch(self, processor: Any, images: list, prompts: list[str],
                    answers: list[str] | None = None, expressions: list[str] | None = None) -> VisionBatch:
        """Chat-format, tokenize and left-pad. With ``answers``, append them teacher-forced and fill
        ``answer_positions``; ``expressions`` (substrings of the prompts) fill ``expression_positions``."""
        raise NotImplementedError

    # --- answers -------------------------------------------------------------------------------
    def decode(self, processor: Any, token_ids: torch.Tensor) -> list[str]:
        """Generated ids ``[B, T]`` (new tokens only) -> answer strings. Families whose box format uses
        special tokens (Qwen2-VL's ``<|box_start|>``) override this to keep them."""
        return processor.batch_decode(token_ids, skip_special_tokens=True)

    def parse_box(self, text: str, meta: dict[str, Any], image_size: tuple[int, int]) -> Box | None:
        """The first valid box in the model's text, converted to original-image pixels, or None."""
        raise NotImplementedError

    def format_box(self, box: Box, meta: dict[str, Any], image_size: tuple[int, int]) -> str:
        """A GT box written the way this family answers (for teacher-forcing on the GT answer)."""
        raise NotImplementedError



class ChatTemplateAdapter(Adapter):
    """Shared ``build_batch`` for families whose processor renders a chat template with one image and
    expands the image placeholder into one token per visual token (Qwen-VL, LLaVA).

    Subclasses provide :meth:`visual_map` (token -> original-image rectangle, from the processor outputs)
    and may set ``answer_sep`` (text between the generation prompt and a teacher-forced answer).
    Token positions of the prompt's expression and of the answer come from the tokenizer's character
    offsets on the *expanded* text (image placeholder repeated as the processor does), so they are exact
    whatever the tokenizer merges; a token that straddles a span edge counts as inside.
    """

    answer_sep: str = ""

    def chat_text(self, processor: Any, prompt: str) -> str:
        """The rendered chat (user turn with the image then ``prompt``, plus the generation prompt)."""
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]}]
        return processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def visual_map(self, processor: Any, enc: Any, b: int, image: Any) -> tuple[torch.Tensor, dict[str, Any]]:
        """FloatTensor [V_b, 4] original-pixel rectangles of sample ``b``'s visual tokens, in sequence
        order, and that sample's meta dict."""
        raise NotImplementedError

    def build_batch(self, processor: Any, images: list, prompts: list[str],
                    answers: list[str] | None = None, expressions: list[str] | None = None) -> VisionBatch:
        images = [im.convert("RGB") if hasattr(im, "convert") else im for im in images]
        tok = processor.tokenizer
        image_token = processor.image_token
        texts, spans = [], []  # spans: per sample {"expression": (c0, c1), "answer": (c0, c1)} in `texts`
        for i, prompt in enumerate(prompts):
            chat = self.chat_text(processor, prompt)
            if chat.count(image_token) != 1:
                raise ValueError(f"expected one {image_token!r} in the rendered chat, got {chat.count(image_token)}")
            p0 = chat.rfind(prompt)
            if p0 < 0:
                raise ValueError("the chat template altered the prompt text; cannot locate the expression")
            sp: dict[str, tuple[int, int]] = {}
            if expressions is not None:
                e0 = prompt.find(expressions[i])
                if e0 < 0:
                    raise ValueError(f"expression {expressions[i]!r} is not a substring of prompt {prompt!r}")
                sp["expression"] = (p0 + e0, p0 + e0 + len(expressions[i]))
            if answers is not None:
                chat = chat + self.answer_sep
                sp["answer"] = (len(chat), len(chat) + len(answers[i]))
                chat = chat + answers[i]
            texts.append(chat)
            spans.append(sp)
        enc = processor(images=images, text=texts, padding=True, return_tensors="pt", return_offsets_mapping=True)
        offsets = enc.pop("offset_mapping")  # [B, S, 2] char offsets into the expanded texts
        ids, mask = enc["input_ids"], enc["attention_mask"].bool()  # [B, S]
        image_token_id = tok.convert_tokens_to_ids(image_token)
        if tok.padding_side != "left" and not bool(mask[:, -1].all()):
            raise ValueError("vrh needs left padding; set tokenizer.padding_side = 'left'")
        vis, rects, expr, ans, metas = [], [], [], [], []
        for b, text in enumerate(texts):
            is_img = (ids[b] == image_token_id) & mask[b]
            n_img = int(is_img.sum())
            # the processor replaced the one placeholder by n_img copies: shift spans that follow it
            at, grow = text.find(image_token), (n_img - 1) * len(image_token)

            def token_positions(span: tuple[int, int]) -> torch.Tensor:
                c0, c1 = (c + grow if c > at else c for c in span)
                hit = (offsets[b, :, 0] < c1) & (offsets[b, :, 1] > c0) & mask[b] & ~is_img
                return hit.nonzero().flatten()

            vis.append(is_img.nonzero().flatten())
            r, meta = self.visual_map(processor, enc, b, images[b])
            if r.shape[0] != n_img:
                raise ValueError(f"{n_img} image tokens but the processor outputs map {r.shape[0]}")
            rects.append(r)
            metas.append(meta)
            expr.append(token_positions(spans[b]["expression"]) if expressions is not None
                        else torch.zeros(0, dtype=torch.long))
            if answers is not None:
                ans.append(token_positions(spans[b]["answer"]))
        return VisionBatch(inputs=dict(enc), visual_positions=vis, visual_rects=rects, expression_positions=expr,
                           answer_positions=ans if answers is not None else None,
                           image_sizes=[tuple(im.size) for im in images], meta=metas)


_REGISTRY: dict[str, type[Adapter]] = {}


def register_adapter(cls: type[Adapter]) -> type[Adapter]:
    if not cls.name or not cls.model_types:
        raise ValueError(f"{cls.__name__} must set name and model_types")
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"adapter name {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def registered_adapters() -> dict[str, type[Adapter]]:
    return dict(_REGISTRY)
