"""Tiny random-init LLaVA-NeXT (``LlavaNextForConditionalGeneration``) with a locally built processor: the real
``LlavaNextImageProcessorPil`` (anyres) with 48-px tiles and pinpoints of 1x2, 2x1 and 2x2 tiles, a 2-layer
CLIP tower with 16-px patches (3 x 3 tokens per tile, CLS dropped), a tiny Mistral LM and an in-memory BPE
tokenizer with LLaVA-1.6-Mistral's ``[INST] <image>\\n... [/INST]`` chat format. No download, no torchvision.
"""

from __future__ import annotations

import functools
import json

import torch

# LLaVA-1.6-Mistral style: "[INST] <image>\n{text} [/INST]"; the processor expands <image>.
MISTRAL_LLAVA_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}[INST] {% endif %}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'image' %}<image>\n"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "{% if message['role'] == 'user' %} [/INST]{% else %}</s>{% endif %}{% endfor %}"
)
TILE, PATCH = 48, 16
PINPOINTS = [[TILE, 2 * TILE], [2 * TILE, TILE], [2 * TILE, 2 * TILE]]


@functools.lru_cache(maxsize=None)
def _tiny_llava_next(seed: int, overrides_json: str):
    from transformers import (LlavaNextConfig, LlavaNextForConditionalGeneration, LlavaNextImageProcessorPil,
                              LlavaNextProcessor)

    from vrh.testing.tiny_models import LLAVA_SPECIAL_TOKENS, build_tokenizer, finish_tiny_model, tiny_text_config

    ov = json.loads(overrides_json)
    text_ov, vision_ov = ov.pop("text_config", {}), ov.pop("vision_config", {})
    pinpoints = ov.pop("image_grid_pinpoints", PINPOINTS)
    tok = build_tokenizer(LLAVA_SPECIAL_TOKENS, pad="<pad>", eos="</s>", bos="<s>",
                          chat_template=MISTRAL_LLAVA_CHAT_TEMPLATE)
    vision = dict(model_type="clip_vision_model", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=2, image_size=TILE, patch_size=PATCH, projection_dim=32)
    vision.update(vision_ov)
    text = tiny_text_config(tok, text_ov, model_type="mistral", sliding_window=None)
    config = LlavaNextConfig(text_config=text, vision_config=vision,
                             image_token_index=tok.convert_tokens_to_ids("<image>"), image_grid_pinpoints=pinpoints,
                             vision_feature_select_strategy="default", vision_feature_layer=-2,
                             image_seq_length=(TILE // PATCH) ** 2, **ov)
    torch.manual_seed(seed)
    model = LlavaNextForConditionalGeneration._from_config(config, attn_implementation="sdpa", dtype=torch.float32)
    ip = LlavaNextImageProcessorPil(size={"shortest_edge": vision["image_size"]}, image_grid_pinpoints=pinpoints,
                                    crop_size={"height": vision["image_size"], "width": vision["image_size"]})
    processor = LlavaNextProcessor(image_processor=ip, tokenizer=tok, patch_size=vision["patch_size"],
                                   vision_feature_select_strategy="default", num_additional_image_tokens=1,
                                   chat_template=tok.chat_template)
    return finish_tiny_model(model, tok), processor


def tiny_llava_next(seed: int = 0, **overrides):
    """LlavaNextForConditionalGeneration: tiny Mistral LM (2 layers, 4q/2kv heads) + 2-layer CLIP tower on
    48-px anyres tiles (3 x 3 tokens each, plus one newline per grid row)."""
    return _tiny_llava_next(seed, json.dumps(overrides, sort_keys=True))

