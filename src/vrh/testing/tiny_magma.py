"""Tiny random-init Magma (:class:`vrh.models.adapters.magma.modeling.MagmaForCausalLM`) with its ported processor: 64-px crops (2 x 2
features each, up to 4 crops), a ConvNeXt trunk of one block per stage (widths 16-16-32-32), a tiny Llama LM, and an
in-memory BPE tokenizer with Llama 3's chat format and Magma's ``<image_start>``/``<image>``/``<image_end>`` tokens.
Its config has the published schema (``text_config``, ``vision_config``, ``image_token_index``) plus two vrh keys
that shrink the tower (``convnext_depths``, ``convnext_widths``). No download, no torchvision, no timm.
"""

from __future__ import annotations

import functools
import json

import torch

# Llama 3's chat template (Magma-8B's own template, in its 52 kB tokenizer_config.json, was not retrieved)
LLAMA3_CHAT_TEMPLATE = (
    "{% for message in messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    " + message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
    "{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
MAGMA_SPECIAL_TOKENS = ["<|begin_of_text|>", "<|eot_id|>", "<pad>", "<image>", "<image_start>", "<image_end>",
                        "<|start_header_id|>", "<|end_header_id|>"]
CROP = 64  # base_img_size: 2 x 2 features per crop


@functools.lru_cache(maxsize=None)
def _tiny_magma(seed: int, overrides_json: str):
    from vrh.models.adapters.magma.modeling import MagmaForCausalLM, magma_config
    from vrh.models.adapters.magma.processing import MagmaImageProcessor, MagmaProcessor
    from vrh.testing.tiny_models import build_tokenizer, finish_tiny_model, tiny_text_config

    ov = json.loads(overrides_json)
    text_ov, vision_ov = ov.pop("text_config", {}), ov.pop("vision_config", {})
    num_crops = ov.pop("num_crops", 4)
    tok = build_tokenizer(MAGMA_SPECIAL_TOKENS, pad="<pad>", eos="<|eot_id|>", bos="<|begin_of_text|>",
                          chat_template=LLAMA3_CHAT_TEMPLATE)
    vision = dict(vision_backbone="convnextxxlarge", convnext_depths=[1, 1, 1, 1], convnext_widths=[16, 16, 32, 32],
                  mm_hidden_size=32, mm_projector_type="mlp2x_gelu", mm_use_im_start_end=False,
                  img_anyres_strategy="crop", img_size=CROP, max_num_crops=num_crops,
                  vision_feature_layer="clip_vis_dense")
    vision.update(vision_ov)
    text = tiny_text_config(tok, text_ov, model_type="llama")
    config = magma_config({"model_type": "magma", "text_config": text, "vision_config": vision,
                           "image_token_index": tok.convert_tokens_to_ids("<image>"), **ov})
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    model = MagmaForCausalLM(config)
    with torch.no_grad():  # timm's layer scale starts at 1e-6: make the random blocks matter
        for name, p in model.named_parameters():
            if name.endswith(".gamma"):
                p.normal_(1.0, 0.1)
    processor = MagmaProcessor(MagmaImageProcessor(base_img_size=CROP, num_crops=num_crops, anyres_strategy="crop"),
                               tok, row_separator=vision.get("mm_use_row_seperator", True))
    return finish_tiny_model(model, tok), processor


def tiny_magma(seed: int = 0, **overrides):
    """Magma: tiny Llama LM (2 layers, 4q/2kv heads) + a 4-stage ConvNeXt (stride 32) on up to 4 crops of 64 px,
    MLP projector and a row separator after each feature row."""
    return _tiny_magma(seed, json.dumps(overrides, sort_keys=True))


def magma_pixels(batch, b: int, processor) -> list:
    """Per visual token of sample ``b``: the ``[32, 32, C]`` input pixels (0-255) it is computed from, or None for a
    row separator: read off the model's own :func:`~vrh.models.adapters.magma.modeling.stitch` run on features that carry their (crop,
    row, column) index, so the pixel-content test checks the adapter against what the model does."""
    import numpy as np

    from vrh.models.adapters.magma.modeling import CONVNEXT_STRIDE, stitch

    ip = processor.image_processor
    rows, cols = (int(v) for v in batch.inputs["image_sizes"][b])
    s, p = ip.base_img_size, CONVNEXT_STRIDE
    g = s // p
    n, i, j = torch.meshgrid(torch.arange(rows * cols), torch.arange(g), torch.arange(g), indexing="ij")  # [N, g, g]
    feats = torch.stack([n, i, j], dim=-1).float()  # [N, g, g, 3]: each feature says where it came from
    sep = torch.full((3,), -1.0) if processor.row_separator else None
    order = stitch(feats, rows, cols, sep).long().tolist()  # [V, 3]
    mean, std = np.asarray(ip.image_mean, dtype=np.float64), np.asarray(ip.image_std, dtype=np.float64)
    pv = (batch.inputs["pixel_values"][b].double().numpy().transpose(0, 2, 3, 1) * std + mean) * 255  # [N, S, S, C]
    return [None if k < 0 else pv[k, y * p:(y + 1) * p, x * p:(x + 1) * p] for k, y, x in order]
