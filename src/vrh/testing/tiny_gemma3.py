"""Tiny random-init Gemma 3 (``Gemma3ForConditionalGeneration``) with a locally built processor: the real
``Gemma3Processor`` over the PIL ``Gemma3ImageProcessorPil`` (no torchvision) and an in-memory BPE tokenizer
carrying Gemma 3's special tokens (``<start_of_image>`` = BOI, ``<image_soft_token>``, ``<end_of_image>``,
turn markers) and a chat template shaped like the released one (``<bos><start_of_turn>user\\n`` ...
``<start_of_turn>model\\n``, the image as ``<start_of_image>``). No download.

Shapes: a 1-layer SigLIP tower on 112-px images of 7-px patches (16 x 16 patches) pooled 4 x 4, as released,
into 4 x 4 = 16 soft tokens of 28 px (the released models: 896 px, 64 x 64 patches, 16 x 16 = 256 tokens of
56 px); 2 Gemma 3 LM layers (sliding window of 12 tokens, then global), 4q/2kv heads of 16. The image
projector is drawn at random (transformers initialises it to zeros, which would leave the image tokens without
pixels).
"""

from __future__ import annotations

import functools
import json

import torch

from vrh.models.gemma_base import CHAT_TEMPLATE, TOKEN_ROLES

GEMMA3_SPECIAL_TOKENS = ["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>",
                         "<end_of_image>", "<image_soft_token>"]
# the processor reads these tokenizer attributes (``tokenizer.boi_token`` ...), as in the released tokenizer;
# the chat template is shaped like the released one (organism D's base uses the same)
GEMMA3_TOKEN_ROLES, GEMMA3_CHAT_TEMPLATE = TOKEN_ROLES, CHAT_TEMPLATE
TOWER, PATCH, TOKENS = 112, 7, 16


def gemma3_processor(*, tower: int = TOWER, tokens: int = TOKENS):
    from transformers import Gemma3ImageProcessorPil, Gemma3Processor

    from vrh.testing.tiny_models import build_tokenizer

    tok = build_tokenizer(GEMMA3_SPECIAL_TOKENS, pad="<pad>", eos="<eos>", bos="<bos>", extra=GEMMA3_TOKEN_ROLES,
                          chat_template=GEMMA3_CHAT_TEMPLATE)
    ip = Gemma3ImageProcessorPil(size={"height": tower, "width": tower}, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    return Gemma3Processor(image_processor=ip, tokenizer=tok, chat_template=tok.chat_template,
                           image_seq_length=tokens)


@functools.lru_cache(maxsize=None)
def _tiny_gemma3(seed: int, overrides_json: str):
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    from vrh.testing.tiny_models import finish_tiny_model, tiny_text_config

    ov = json.loads(overrides_json)
    text_ov, vision_ov = ov.pop("text_config", {}), ov.pop("vision_config", {})
    tokens = ov.pop("mm_tokens_per_image", TOKENS)
    vision = dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                  num_attention_heads=2, image_size=TOWER, patch_size=PATCH, vision_use_head=False)
    vision.update(vision_ov)
    processor = gemma3_processor(tower=vision["image_size"], tokens=tokens)
    tok = processor.tokenizer
    text = tiny_text_config(tok, text_ov, model_type="gemma3_text", head_dim=16, query_pre_attn_scalar=16,
                     sliding_window=12, layer_types=["sliding_attention", "full_attention"])
    ids = {k: tok.convert_tokens_to_ids(t) for k, t in [
        ("boi_token_index", "<start_of_image>"), ("eoi_token_index", "<end_of_image>"),
        ("image_token_index", "<image_soft_token>")]}
    config = Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=tokens, **ids, **ov)
    torch.manual_seed(seed)
    model = Gemma3ForConditionalGeneration._from_config(config, attn_implementation="sdpa", dtype=torch.float32)
    # Gemma 3 initialises its image projector to zeros (the released weights replace it): the image tokens of a
    # random build would carry no pixels at all, so draw it like the other weights
    with torch.no_grad():
        torch.nn.init.normal_(model.model.multi_modal_projector.mm_input_projection_weight,
                              std=config.text_config.initializer_range)
    return finish_tiny_model(model, tok), processor


def tiny_gemma3(seed: int = 0, **overrides):
    """Gemma3ForConditionalGeneration: 2 LM layers (sliding + global), 4q/2kv heads, 1-layer SigLIP on 112-px
    images pooled 4 x 4 into 4 x 4 soft tokens."""
    return _tiny_gemma3(seed, json.dumps(overrides, sort_keys=True))
