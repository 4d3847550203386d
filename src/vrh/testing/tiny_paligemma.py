"""Tiny random-init PaliGemma 2 (``PaliGemmaForConditionalGeneration`` over a Gemma 2 LM) with a locally built
processor: the real ``PaliGemmaProcessor`` over the PIL ``SiglipImageProcessorPil`` (no torchvision) and an
in-memory BPE tokenizer with Gemma's ``<pad>``/``<eos>``/``<bos>`` and ``<image>``; the processor itself adds the
1,024 ``<locNNNN>`` and 128 ``<segNNN>`` tokens, as it does for the released checkpoints. No download.

Shapes: a 1-layer SigLIP tower on 112-px images of 14-px patches, so 8 x 8 = 64 image tokens (the released
models: 224 / 448 / 896 px, 16 x 16 / 32 x 32 / 64 x 64 tokens); 2 Gemma 2 LM layers (one sliding-window,
one global), 4q/2kv heads of 16, attention logit softcap 50 and final logit softcap 30 as released, and a
sliding window of 24 tokens so the window cuts through the image and prompt of a tiny sequence.
"""

from __future__ import annotations

import functools
import json

import torch

PALIGEMMA_SPECIAL_TOKENS = ["<pad>", "<eos>", "<bos>", "<image>"]
TOWER, PATCH = 112, 14
# Gemma 2 has no sdpa path (sdpa cannot softcap): eager LM, sdpa tower, as PaliGemmaAdapter.load does
ATTN = {"text_config": "eager", "vision_config": "sdpa", "": "sdpa"}


def paligemma_processor(*, tower: int = TOWER, patch: int = PATCH):
    """The real processor pair; ``image_seq_length`` = (tower / patch)^2 as in the released configs."""
    from transformers import PaliGemmaProcessor, SiglipImageProcessorPil

    from vrh.testing.tiny_models import build_tokenizer

    tok = build_tokenizer(PALIGEMMA_SPECIAL_TOKENS, pad="<pad>", eos="<eos>", bos="<bos>",
                          extra={"image_token": "<image>"})
    ip = SiglipImageProcessorPil(size={"height": tower, "width": tower}, image_seq_length=(tower // patch) ** 2)
    return PaliGemmaProcessor(image_processor=ip, tokenizer=tok)  # adds the <loc>/<seg> tokens to tok


@functools.lru_cache(maxsize=None)
def _tiny_paligemma(seed: int, overrides_json: str):
    from transformers import PaliGemmaConfig, PaliGemmaForConditionalGeneration

    from vrh.testing.tiny_models import finish_tiny_model, tiny_text_config

    ov = json.loads(overrides_json)
    text_ov, vision_ov = ov.pop("text_config", {}), ov.pop("vision_config", {})
    vision = dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                  num_attention_heads=2, image_size=TOWER, patch_size=PATCH, vision_use_head=False)
    vision.update(vision_ov)
    processor = paligemma_processor(tower=vision["image_size"], patch=vision["patch_size"])
    tok = processor.tokenizer
    text = tiny_text_config(tok, text_ov, model_type="gemma2", head_dim=16, query_pre_attn_scalar=16,
                     sliding_window=24, layer_types=["sliding_attention", "full_attention"],
                     attn_logit_softcapping=50.0, final_logit_softcapping=30.0)
    config = PaliGemmaConfig(text_config=text, vision_config=vision, image_token_index=processor.image_token_id,
                             vocab_size=len(tok), projection_dim=text["hidden_size"],
                             hidden_size=text["hidden_size"], **ov)
    torch.manual_seed(seed)
    model = PaliGemmaForConditionalGeneration._from_config(config, attn_implementation=ATTN, dtype=torch.float32)
    return finish_tiny_model(model, tok), processor


def tiny_paligemma(seed: int = 0, **overrides):
    """PaliGemmaForConditionalGeneration: 2 Gemma 2 layers (sliding + global, softcapped), 4q/2kv heads,
    1-layer SigLIP on 112-px images, 8 x 8 image tokens."""
    return _tiny_paligemma(seed, json.dumps(overrides, sort_keys=True))
