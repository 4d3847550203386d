"""Tiny random-init LLaVA-OneVision (``LlavaOnevisionForConditionalGeneration``) with a locally built processor:
the real ``LlavaOnevisionProcessor`` without its video processor (which needs torchvision) over the PIL
``LlavaOnevisionImageProcessorPil`` (anyres), a 1-layer SigLIP tower on 48-px tiles of 16-px patches (3 x 3
tokens per tile, no CLS: the "full" feature strategy of the released checkpoints), a tiny Qwen2 LM and an
in-memory BPE tokenizer with a chat template shaped like ``llava-hf/llava-onevision-qwen2-7b-ov-hf``'s
(``<|im_start|>user <image>\\n...<|im_end|>\\n<|im_start|>assistant\\n``). No download, no torchvision.

The default pinpoints allow up to 3 x 3 tiles, so the unpadded grid never exceeds ``anyres_max_9`` and is
never shrunk; ``image_grid_pinpoints=BIG_PINPOINTS`` (up to 4 x 4 tiles, like the released 6 x 6 of 384 px)
makes wide images exceed it, so the model shrinks their grid bilinearly.
"""

from __future__ import annotations

import functools
import json

import torch

ONEVISION_SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "<video>"]
ONEVISION_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + ' ' }}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] | selectattr('type', 'equalto', 'image') %}{{ '<image>\n' }}{% endfor %}"
    "{% for part in message['content'] | selectattr('type', 'equalto', 'text') %}{{ part['text'] }}{% endfor %}"
    "{% endif %}{{ '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
TILE, PATCH = 48, 16
PINPOINTS = [[TILE * i, TILE * j] for i in range(1, 4) for j in range(1, 4)]  # (height, width), up to 3 x 3 tiles
BIG_PINPOINTS = [[TILE * i, TILE * j] for i in range(1, 5) for j in range(1, 5)]  # up to 4 x 4: may be shrunk


@functools.lru_cache(maxsize=None)
def _tiny_llava_onevision(seed: int, overrides_json: str):
    from transformers import (LlavaOnevisionConfig, LlavaOnevisionForConditionalGeneration,
                              LlavaOnevisionImageProcessorPil, LlavaOnevisionProcessor)

    from vrh.models.adapters.base import image_only
    from vrh.testing.tiny_models import build_tokenizer, finish_tiny_model, tiny_text_config

    ov = json.loads(overrides_json)
    text_ov, vision_ov = ov.pop("text_config", {}), ov.pop("vision_config", {})
    pinpoints = ov.pop("image_grid_pinpoints", PINPOINTS)
    aspect = ov.pop("vision_aspect_ratio", "anyres_max_9")
    tok = build_tokenizer(ONEVISION_SPECIAL_TOKENS, pad="<|endoftext|>", eos="<|im_end|>",
                          chat_template=ONEVISION_CHAT_TEMPLATE)
    vision = dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                  num_attention_heads=2, image_size=TILE, patch_size=PATCH)
    vision.update(vision_ov)
    text = tiny_text_config(tok, text_ov, model_type="qwen2")
    g = vision["image_size"] // vision["patch_size"]  # tokens per tile side
    config = LlavaOnevisionConfig(text_config=text, vision_config=vision, image_grid_pinpoints=pinpoints,
                                  image_token_index=tok.convert_tokens_to_ids("<image>"),
                                  video_token_index=tok.convert_tokens_to_ids("<video>"),
                                  vision_feature_select_strategy="full", vision_feature_layer=-1,
                                  vision_aspect_ratio=aspect, **ov)
    torch.manual_seed(seed)
    model = LlavaOnevisionForConditionalGeneration._from_config(config, attn_implementation="sdpa",
                                                                dtype=torch.float32)
    side = vision["image_size"]
    ip = LlavaOnevisionImageProcessorPil(size={"height": side, "width": side}, image_grid_pinpoints=pinpoints)
    processor = image_only(LlavaOnevisionProcessor)(image_processor=ip, tokenizer=tok, num_image_tokens=g * g,
                                                    vision_feature_select_strategy="full", vision_aspect_ratio=aspect,
                                                    chat_template=tok.chat_template)
    return finish_tiny_model(model, tok), processor


def tiny_llava_onevision(seed: int = 0, **overrides):
    """LlavaOnevisionForConditionalGeneration: tiny Qwen2 LM (2 layers, 4q/2kv heads) + 1-layer SigLIP tower on
    48-px anyres tiles (3 x 3 tokens each, plus one newline per grid row)."""
    return _tiny_llava_onevision(seed, json.dumps(overrides, sort_keys=True))

