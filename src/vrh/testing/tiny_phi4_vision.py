"""Tiny random-init Phi-4-Reasoning-Vision (model type ``phi4-siglip``, :mod:`vrh.models.adapters.phi4_vision.modeling`) with its
processor over an in-memory BPE tokenizer carrying Phi-4's chat tokens and a small chat template of the released
shape (system turn, ``<|im_start|>role<|im_sep|>...<|im_end|>``). No download.

The config has the released ``config.json``'s schema (:func:`tiny_phi4_vision_config`); the sizes are tiny: 2 Phi-3
layers of 4 query / 2 KV heads of 16, a 3-layer SigLIP2 tower of width 32 on 16-px patches (a 4 x 4 position grid,
resized per image as NaFlex does) and 8 to 32 patches per image (released: 256 to 3,600), so the shared suite's
150 x 100 image is shrunk to the budget and its 70 x 90 one stays in range.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import torch

PHI4_SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_sep|>", "<|im_end|>", "<|dummy_84|>", "<|dummy_85|>",
                       "<think>", "</think>"]
PHI4_CHAT_TEMPLATE = (
    "<|im_start|>system<|im_sep|>You are a helpful assistant.<|im_end|>"
    "{% for message in messages %}{% if message['role'] == 'user' %}"
    "{{ '<|im_start|>user<|im_sep|>' + message['content'] + '<|im_end|>' }}"
    "{% elif message['role'] == 'assistant' %}{{ '<|im_start|>assistant<|im_sep|>' + message['content'] + "
    "'<|im_end|>' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant<|im_sep|>' }}{% endif %}"
)


def tiny_phi4_vision_config(vocab_size: int, **overrides: Any) -> dict[str, Any]:
    """A ``config.json`` of the released schema (the keys of microsoft/Phi-4-reasoning-vision-15B's) at tiny sizes."""
    config = {
        "architectures": ["Phi4ForCausalLMV"], "model_type": "phi4-siglip",
        "auto_map": {"AutoConfig": "modeling_phi4_visionr.Phi4VisionR",
                     "AutoModelForCausalLM": "modeling_phi4_visionr.Phi4ForCausalLMV",
                     "AutoProcessor": "processing_phi4_visionr.Phi4VisionRProcessor"},
        "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 0, "eos_token_id": 3, "pad_token_id": 5,
        "embd_pdrop": 0.0, "resid_pdrop": 0.0, "hidden_act": "silu", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 2048,
        "original_max_position_embeddings": 2048, "partial_rotary_factor": 1.0, "rms_norm_eps": 1e-5,
        "rope_scaling": None, "rope_theta": 500000, "sliding_window": None, "tie_word_embeddings": False,
        "initializer_range": 0.02, "use_cache": False, "vocab_size": vocab_size,
        "freeze_mm_mlp_adapter": False, "image_aspect_ratio": "square", "mm_projector_lr": 2e-05,
        "mm_projector_type": "mlp2x_gelu", "mm_vision_tower": "google/siglip2-so400m-patch16-naflex",
        "mm_hidden_size": 32, "min_num_patches": 8, "max_num_patches": 32, "tokenizer_model_max_length": 8192,
        "tokenizer_padding_side": "right", "tune_mm_mlp_adapter": False, "unfreeze_vision_tower": True,
        "use_mm_proj": True, "use_s2": False,
        "vision_config": {"hidden_size": 32, "intermediate_size": 64, "model_type": "siglip2_vision_model",
                          "num_attention_heads": 2, "num_hidden_layers": 3, "num_patches": 16},
    }
    config.update(overrides)
    return config


def phi4_vision_tokenizer():
    from vrh.testing.tiny_models import build_tokenizer

    return build_tokenizer(PHI4_SPECIAL_TOKENS, pad="<|dummy_85|>", eos="<|im_end|>", bos="<|endoftext|>",
                           chat_template=PHI4_CHAT_TEMPLATE)


@functools.lru_cache(maxsize=None)
def _tiny_phi4_vision(seed: int, overrides_json: str):
    from vrh.models.adapters.phi4_vision.modeling import Phi4VisionForCausalLM, phi4_vision_config
    from vrh.models.adapters.phi4_vision.processing import Phi4VisionImageProcessor, Phi4VisionProcessor
    from vrh.testing.tiny_models import finish_tiny_model

    tok = phi4_vision_tokenizer()
    processor = Phi4VisionProcessor(Phi4VisionImageProcessor(), tok)  # adds <image> to the tokenizer
    raw = tiny_phi4_vision_config(len(tok), **json.loads(overrides_json))
    ids = {k: tok.convert_tokens_to_ids(t) for k, t in
           (("bos_token_id", "<|endoftext|>"), ("eos_token_id", "<|im_end|>"), ("pad_token_id", "<|dummy_85|>"))}
    raw = {**raw, **ids}
    processor.image_processor = Phi4VisionImageProcessor.from_config(raw)
    torch.manual_seed(seed)
    model = Phi4VisionForCausalLM(phi4_vision_config({**raw, "image_token_id": processor.image_token_id}))
    return finish_tiny_model(model, tok), processor


def tiny_phi4_vision(seed: int = 0, **overrides):
    """Phi4VisionForCausalLM: 2 Phi-3 layers, 4q/2kv heads, 3-layer SigLIP2 NaFlex tower, 8-32 patches of 16 px."""
    return _tiny_phi4_vision(seed, json.dumps(overrides, sort_keys=True))
