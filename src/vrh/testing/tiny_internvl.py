"""Tiny random-init InternVL (``InternVLForConditionalGeneration``) with a locally built processor: the real
``InternVLProcessor`` over the PIL ``GotOcr2ImageProcessorPil`` (no torchvision) and an in-memory BPE tokenizer
carrying InternVL's special tokens (``<img>``, ``</img>``, ``<IMG_CONTEXT>``, ``<ref>``, ``<box>``, ...) and a
chat template shaped like the -hf checkpoints' (Qwen-style turns, the image as ``<IMG_CONTEXT>\\n``).

Shapes: 2 Qwen2 LM layers with 4q/2kv heads; a 1-layer ViT on 112-px tiles of 14-px patches, so the 0.5 pixel
shuffle gives 4 x 4 = 16 tokens of 28 tile pixels per tile (the released models: 448-px tiles, 16 x 16). The
tiling rules are the real ones (1-12 tiles plus a thumbnail), only the tile is smaller.
"""

from __future__ import annotations

import functools
import json

import torch

INTERNVL_SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<img>", "</img>", "<IMG_CONTEXT>", "<quad>", "</quad>",
    "<ref>", "</ref>", "<box>", "</box>", "<video>",
]
# the processor reads these tokenizer attributes (``tokenizer.start_image_token`` ...), as in the -hf tokenizers
INTERNVL_TOKEN_ROLES = {"start_image_token": "<img>", "end_image_token": "</img>",
                        "context_image_token": "<IMG_CONTEXT>", "video_token": "<video>"}
INTERNVL_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'image' %}<IMG_CONTEXT>\n"
    "{% elif part['type'] == 'video' %}<video>\n{% elif part['type'] == 'text' %}{{ part['text'] }}"
    "{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
IMAGENET_MEAN, IMAGENET_STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]  # InternVL's normalization


def internvl_tokenizer():
    from vrh.testing.tiny_models import build_tokenizer

    return build_tokenizer(INTERNVL_SPECIAL_TOKENS, pad="<|endoftext|>", eos="<|im_end|>",
                           extra=INTERNVL_TOKEN_ROLES, chat_template=INTERNVL_CHAT_TEMPLATE)


def internvl_processor(tokenizer, *, tile: int = 448, tokens_per_tile: int = 256, max_patches: int = 12):
    """The real processor pair, image-only (its video processor needs torchvision). ``tile=448`` and
    ``tokens_per_tile=256`` are the released checkpoints' settings."""
    from transformers import GotOcr2ImageProcessorPil, InternVLProcessor

    from vrh.models.adapters.base import image_only

    ip = GotOcr2ImageProcessorPil(size={"height": tile, "width": tile}, crop_to_patches=False, min_patches=1,
                                  max_patches=max_patches, image_mean=IMAGENET_MEAN, image_std=IMAGENET_STD)
    return image_only(InternVLProcessor)(image_processor=ip, tokenizer=tokenizer, image_seq_length=tokens_per_tile,
                                         chat_template=tokenizer.chat_template)


@functools.lru_cache(maxsize=None)
def _tiny_internvl(seed: int, overrides_json: str):
    from transformers import InternVLConfig, InternVLForConditionalGeneration

    from vrh.testing.tiny_models import finish_tiny_model, tiny_text_config

    ov = json.loads(overrides_json)
    text_ov, vision_ov = ov.pop("text_config", {}), ov.pop("vision_config", {})
    tile, max_patches = ov.pop("tile", 112), ov.pop("max_patches", 12)
    tok = internvl_tokenizer()
    text = tiny_text_config(tok, text_ov, model_type="qwen2")
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                  image_size=tile, patch_size=14)
    vision.update(vision_ov)
    tokens_per_tile = (tile // vision["patch_size"] // 2) ** 2  # pixel shuffle 0.5 halves each side
    config = InternVLConfig(text_config=text, vision_config=vision, downsample_ratio=0.5,
                            image_token_id=tok.convert_tokens_to_ids("<IMG_CONTEXT>"),
                            image_seq_length=tokens_per_tile, **ov)
    torch.manual_seed(seed)
    model = InternVLForConditionalGeneration._from_config(config, attn_implementation="sdpa", dtype=torch.float32)
    processor = internvl_processor(tok, tile=tile, tokens_per_tile=tokens_per_tile, max_patches=max_patches)
    return finish_tiny_model(model, tok), processor


def tiny_internvl(seed: int = 0, **overrides):
    """InternVLForConditionalGeneration: 2 Qwen2 LM layers, 4q/2kv heads, 1 ViT layer, 112-px tiles of 4x4 tokens."""
    return _tiny_internvl(seed, json.dumps(overrides, sort_keys=True))
