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
