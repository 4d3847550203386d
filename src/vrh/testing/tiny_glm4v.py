"""Tiny random-init GLM-4.1V / GLM-4.6V (``Glm4vForConditionalGeneration`` / ``Glm46VForConditionalGeneration``)
with a locally built processor: the real ``Glm4vImageProcessorPil`` (28-px cells), an in-memory BPE
tokenizer carrying GLM's special tokens, and a chat template shaped like GLM-4.5V/4.6V's (``[gMASK]<sop>``,
``<|user|>``, the image as ``<|begin_of_image|><|image|><|end_of_image|>``, ``<|assistant|>`` and, with
``enable_thinking=False``, an empty think block). No download, no torchvision.
"""

from __future__ import annotations

import functools
import json

import torch

GLM_SPECIAL_TOKENS = [
    "<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>",
    "<|assistant|>", "<|observation|>", "<|begin_of_image|>", "<|end_of_image|>", "<|begin_of_video|>",
    "<|end_of_video|>", "<|image|>", "<|video|>", "<|begin_of_box|>", "<|end_of_box|>", "<think>", "</think>",
]

GLM_CHAT_TEMPLATE = (
    "[gMASK]<sop>{% for message in messages %}<|{{ message['role'] }}|>\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'image' %}"
    "<|begin_of_image|><|image|><|end_of_image|>{% elif part['type'] == 'text' %}{{ part['text'] }}"
    "{% endif %}{% endfor %}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>"
    "{% if enable_thinking is defined and not enable_thinking %}{{ '\\n<think></think>' }}{% endif %}{% endif %}"
)


def glm_tokenizer():
    from vrh.testing.tiny_models import build_tokenizer

    return build_tokenizer(GLM_SPECIAL_TOKENS, pad="<|endoftext|>", eos="<|user|>", chat_template=GLM_CHAT_TEMPLATE)


@functools.lru_cache(maxsize=None)
def _tiny_glm(family: str, seed: int, overrides_json: str):
    import transformers
    from transformers import Glm4vImageProcessorPil

    from vrh.models.adapters.base import image_only
    from vrh.testing.tiny_models import finish_tiny_model, tiny_text_config

    model_cls, config_cls, proc_cls = (getattr(transformers, n) for n in {
        "glm4v": ("Glm4vForConditionalGeneration", "Glm4vConfig", "Glm4vProcessor"),
        "glm46v": ("Glm46VForConditionalGeneration", "Glm46VConfig", "Glm46VProcessor")}[family])
    ov = json.loads(overrides_json)
    text_ov, vision_ov = ov.pop("text_config", {}), ov.pop("vision_config", {})
    max_pixels = ov.pop("max_pixels", 112 * 112)
    tok = glm_tokenizer()
    # GLM rotates half of each head (partial_rotary_factor 0.5): 16 / 2 = 8 dims = 4 frequencies over (t, h, w)
    rope = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5, "mrope_section": [2, 1, 1]}
    text = tiny_text_config(tok, text_ov, model_type="glm4v_text", rope_parameters=rope)
    for k in ("bos_token_id", "eos_token_id"):  # Glm4vTextConfig declares neither
        text.pop(k)
    vision = dict(model_type="glm4v_vision", depth=1, hidden_size=32, intermediate_size=64, num_heads=2,
                  out_hidden_size=64, patch_size=14, image_size=56, spatial_merge_size=2, temporal_patch_size=2)
    vision.update(vision_ov)
    ids = {k: tok.convert_tokens_to_ids(t) for k, t in [
        ("image_token_id", "<|image|>"), ("video_token_id", "<|video|>"),
        ("image_start_token_id", "<|begin_of_image|>"), ("image_end_token_id", "<|end_of_image|>"),
        ("video_start_token_id", "<|begin_of_video|>"), ("video_end_token_id", "<|end_of_video|>")]}
    config = config_cls(text_config=text, vision_config=vision, **ids, **ov)
    torch.manual_seed(seed)
    model = model_cls._from_config(config, attn_implementation="sdpa", dtype=torch.float32)
    ip = Glm4vImageProcessorPil(patch_size=14, merge_size=2, temporal_patch_size=2,
                                size={"shortest_edge": 4 * 28 * 28, "longest_edge": max_pixels})
    processor = image_only(proc_cls)(image_processor=ip, tokenizer=tok, chat_template=tok.chat_template)
    return finish_tiny_model(model, tok), processor


def tiny_glm4v(seed: int = 0, **overrides):
    """Glm4vForConditionalGeneration: 2 LM layers, 4q/2kv heads with q/k/v bias, 1 vision block, 28-px cells."""
    return _tiny_glm("glm4v", seed, json.dumps(overrides, sort_keys=True))


def tiny_glm46v(seed: int = 0, **overrides):
    """Glm46VForConditionalGeneration: the same tiny shapes under GLM-4.6V's classes (served by the glm4v adapter)."""
    return _tiny_glm("glm46v", seed, json.dumps(overrides, sort_keys=True))
