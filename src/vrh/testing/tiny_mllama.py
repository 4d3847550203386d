"""Tiny random-init Llama 3.2 Vision (``MllamaForConditionalGeneration``) with a locally built processor: the
real ``MllamaProcessor`` over the PIL ``MllamaImageProcessorPil`` (no torchvision) and an in-memory BPE tokenizer
with Llama 3's chat tokens (``<|begin_of_text|>``, ``<|start_header_id|>``, ``<|end_header_id|>``, ``<|eot_id|>``,
``<|image|>``, ``<|finetune_right_pad_id|>`` as padding, ``<|python_tag|>`` which the processor looks up) and a
chat template shaped like Llama-3.2-11B-Vision-Instruct's.

Shapes: 4 LM layers of 4q/2kv heads, layers 1 and 3 cross-attention (the 11B: 40 layers, 8 of them
cross-attention, 32q/8kv heads); a 2-layer local + 1-layer global vision tower on 28-px tiles of 7-px patches,
so 4 x 4 patches + CLS = 17 keys per tile, up to 4 tiles (the 11B: 560-px tiles of 14-px patches, 1601).

The tanh gates of the cross-attention blocks are zero at initialisation (as in transformers' init), which
makes cross-attention a no-op: masking a cross-attention head would change nothing. The build sets them to
1.0 (``tanh = 0.76``), so the image reaches the language model.
"""

from __future__ import annotations

import functools
import json

import torch

MLLAMA_SPECIAL_TOKENS = ["<|begin_of_text|>", "<|eot_id|>", "<|finetune_right_pad_id|>", "<|start_header_id|>",
                         "<|end_header_id|>", "<|image|>", "<|python_tag|>"]
# Llama-3.2-11B-Vision-Instruct's template shape: BOS, header-wrapped turns, the image where the content puts it
MLLAMA_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.index0 == 0 %}{{ bos_token }}{% endif %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' %}{{ '<|image|>' }}{% elif content['type'] == 'text' %}{{ content['text'] }}"
    "{% endif %}{% endfor %}{% endif %}{{ '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
TILE, PATCH = 28, 7
GATE = 1.0  # the cross-attention blocks' attn and mlp gates (tanh(0) = 0 would switch the image off)


def mllama_processor(*, tile: int = TILE, patch: int = PATCH, max_tiles: int = 4):
    """The real processor pair, with ``patch_size`` set as :meth:`MllamaAdapter.on_load` sets it."""
    from transformers import MllamaImageProcessorPil, MllamaProcessor

    from vrh.testing.tiny_models import build_tokenizer

    tok = build_tokenizer(MLLAMA_SPECIAL_TOKENS, pad="<|finetune_right_pad_id|>", eos="<|eot_id|>",
                          bos="<|begin_of_text|>", chat_template=MLLAMA_CHAT_TEMPLATE)
    ip = MllamaImageProcessorPil(size={"height": tile, "width": tile}, max_image_tiles=max_tiles)
    processor = MllamaProcessor(image_processor=ip, tokenizer=tok, chat_template=MLLAMA_CHAT_TEMPLATE)
    processor.patch_size = patch
    return processor


@functools.lru_cache(maxsize=None)
def _tiny_mllama(seed: int, overrides_json: str):
    from transformers import MllamaConfig, MllamaForConditionalGeneration

    from vrh.testing.tiny_models import finish_tiny_model, tiny_text_config

    ov = json.loads(overrides_json)
    text_ov, vision_ov = ov.pop("text_config", {}), ov.pop("vision_config", {})
    gate = ov.pop("gate", GATE)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_global_layers=1, attention_heads=2,
                  image_size=TILE, patch_size=PATCH, max_num_tiles=4, intermediate_layers_indices=[0],
                  vision_output_dim=64)  # hidden_size * (1 + len(intermediate_layers_indices))
    vision.update(vision_ov)
    processor = mllama_processor(tile=vision["image_size"], patch=vision["patch_size"],
                                 max_tiles=vision["max_num_tiles"])
    tok = processor.tokenizer
    text = tiny_text_config(tok, dict(dict(num_hidden_layers=4, cross_attention_layers=[1, 3]), **text_ov),
                            rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    config = MllamaConfig(text_config=text, vision_config=vision, image_token_index=processor.image_token_id, **ov)
    torch.manual_seed(seed)
    model = MllamaForConditionalGeneration._from_config(config, attn_implementation="sdpa", dtype=torch.float32)
    with torch.no_grad():
        for layer in config.text_config.cross_attention_layers:
            block = model.model.language_model.layers[layer]
            block.cross_attn_attn_gate.fill_(gate)
            block.cross_attn_mlp_gate.fill_(gate)
    return finish_tiny_model(model, tok), processor


def tiny_mllama(seed: int = 0, **overrides):
    """MllamaForConditionalGeneration: 4 LM layers (1 and 3 cross-attention, gates 1.0), 4q/2kv heads, a tiny
    tower on 28-px tiles of 7-px patches (17 keys per tile, <= 4 tiles). ``gate=0.0`` keeps transformers' init."""
    return _tiny_mllama(seed, json.dumps(overrides, sort_keys=True))

