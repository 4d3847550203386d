"""Tiny random-init DeepSeek-VL2 (:class:`vrh.models.adapters.deepseek_vl2.modeling.DeepseekVL2ForCausalLM`) built from a config in
the *published* schema (``language_config`` / ``vision_config`` / ``projector_config`` as deepseek-ai's
config.json writes them), with :class:`~vrh.models.adapters.deepseek_vl2.processing.DeepseekVL2Processor` over an in-memory BPE
tokenizer carrying DeepSeek-VL2's special tokens.

Shapes: 2 LM layers (layer 0 dense, layer 1 MoE: 4 routed experts, top-2, 1 shared), 4 query heads; a 1-layer
SigLIP on 72-px tiles of 14-px patches (5 x 5: like 384 / 14, the tile's last pixels are never read, and the
odd grid is zero-padded to 6 x 6 before the 2 x 2 projector), so 3 x 3 tokens per tile. ``mla=False`` is the Tiny
checkpoint's attention (Llama-style MHA, here with 2 KV heads so the suite exercises GQA), ``mla=True`` the Small
checkpoint's MLA (KV heads = heads, as in the real config).
"""

from __future__ import annotations

import functools
import json
from typing import Any

import torch

BOS, EOS, PAD = "<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>", "<\uff5c\u2581pad\u2581\uff5c>"
DEEPSEEK_VL2_SPECIAL_TOKENS = [BOS, EOS, PAD, "<image>", "<|ref|>", "<|/ref|>", "<|det|>", "<|/det|>", "<|grounding|>",
                               "<|User|>", "<|Assistant|>"]
TINY_CANDIDATES = [[72, 72], [72, 144], [144, 72], [144, 144], [72, 216], [216, 72]]


def deepseek_vl2_tokenizer():
    from vrh.testing.tiny_models import build_tokenizer

    return build_tokenizer(DEEPSEEK_VL2_SPECIAL_TOKENS, pad=PAD, eos=EOS, bos=BOS)


def tiny_published_config(tokenizer, *, mla: bool = False, **language: Any) -> dict[str, Any]:
    """A tiny config.json in the published schema (the keys of deepseek-vl2-tiny's / -small's)."""
    lang = dict(architectures=["DeepseekV2ForCausalLM"], model_type="deepseek_v2", vocab_size=len(tokenizer),
                bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, hidden_size=64,
                intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, first_k_dense_replace=1, n_group=1, topk_group=1, n_routed_experts=4,
                n_shared_experts=1, num_experts_per_tok=2, topk_method="greedy", max_position_embeddings=4096,
                lm_head=True, rm_head=False, torch_dtype="float32")
    if mla:  # Small: MLA, q without LoRA, qk = 8 + 4 (rope part even), v 8
        lang.update(use_mla=True, kv_lora_rank=16, q_lora_rank=None, qk_nope_head_dim=8, qk_rope_head_dim=4,
                    v_head_dim=8, num_key_value_heads=4)
    else:  # Tiny: Llama attention
        lang.update(use_mla=False, kv_lora_rank=None, q_lora_rank=None, qk_nope_head_dim=0, qk_rope_head_dim=0,
                    v_head_dim=0)
    lang.update(language)
    return {"architectures": ["DeepseekVLV2ForCausalLM"], "model_type": "deepseek_vl_v2",
            "candidate_resolutions": TINY_CANDIDATES, "global_view_pos": "head", "tile_tag": "2D",
            "language_config": lang,
            "projector_config": {"model_type": "mlp_projector", "projector_type": "downsample_mlp_gelu",
                                 "input_dim": 32, "n_embed": 64, "depth": 2, "mlp_ratio": 1, "downsample_ratio": 2},
            "vision_config": {"model_type": "vision", "model_name": "siglip_so400m_patch14_384", "layers": 1,
                              "width": 32, "heads": 2, "mlp_ratio": 2.0, "image_size": 72, "patch_size": 14,
                              "global_pool": "map", "ignore_head": True, "class_token": False},
            "torch_dtype": "float32"}


def deepseek_vl2_processor(tokenizer, config: dict[str, Any]):
    from vrh.models.adapters.deepseek_vl2.processing import DeepseekVL2Processor

    return DeepseekVL2Processor(tokenizer, candidate_resolutions=config["candidate_resolutions"], patch_size=14,
                                downsample_ratio=2, image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5],
                                pad_token=PAD, sft_format="deepseek", add_special_token=False, mask_prompt=False,
                                ignore_id=-100)


@functools.lru_cache(maxsize=None)
def _tiny_deepseek_vl2(seed: int, mla: bool, overrides_json: str):
    from vrh.models.adapters.deepseek_vl2.modeling import DeepseekVL2ForCausalLM
    from vrh.testing.tiny_models import finish_tiny_model

    tok = deepseek_vl2_tokenizer()
    config = tiny_published_config(tok, mla=mla, **json.loads(overrides_json))
    torch.manual_seed(seed)
    model = DeepseekVL2ForCausalLM.from_published(config)
    with torch.no_grad():  # random init everywhere (the glue and router start at zero): images and routing matter
        for name, p in model.named_parameters():
            if "norm" not in name:
                p.normal_(0.0, 0.5 if name.endswith(("image_newline", "view_seperator")) else 0.1)
    return finish_tiny_model(model, tok), deepseek_vl2_processor(tok, config)


def tiny_deepseek_vl2(seed: int = 0, mla: bool = False, **language: Any):
    """DeepseekVL2ForCausalLM: 2 LM layers (dense, MoE), 4 heads (``mla=False``: 2 KV heads), 72-px tiles of 3 x 3
    tokens. ``language``: overrides of the published ``language_config``."""
    return _tiny_deepseek_vl2(seed, mla, json.dumps(language, sort_keys=True))


def deepseek_vl2_pixels(batch, b: int, processor) -> list:
    """The shared suite's pixel reader (tests/models/adapters/pixels.py), written from the remote model's
    ``prepare_inputs_embeds``, not from the adapter: ``pixel_values`` [B, T, C, S, S] holds the global view then
    the local tiles row-major (``images_spatial_crop`` [B, 2] = (nw, nh)). Token (i, j) of a tile's g x g grid
    reads tile pixels ``[i * 28, (i + 1) * 28) x [j * 28, ...)``, cut at the ``S // 14 * 14`` pixels the ViT's
    patches cover. Sequence: global rows + a newline each (None), the separator (None), then the stitched local
    rows + a newline each (None). A window the letterbox's bars cut is trimmed to its image pixels (the suite's
    blue marker), so the check's pixels-per-rectangle scale is that of the image part."""
    import numpy as np

    s, p, r = processor.image_size, processor.patch_size, processor.downsample_ratio
    seen, step = s // p * p, p * r
    g = -(-(s // p) // r)
    nw, nh = (int(v) for v in batch.inputs["images_spatial_crop"][b])
    tiles = batch.inputs["pixel_values"][b, :1 + nw * nh].double().numpy().transpose(0, 2, 3, 1)  # [T, S, S, C]
    tiles = (tiles * np.asarray(processor.image_std) + np.asarray(processor.image_mean)) * 255

    def cell(tile: np.ndarray, i: int, j: int) -> np.ndarray:
        window = tile[i * step:min((i + 1) * step, seen), j * step:min((j + 1) * step, seen)]  # [<=28, <=28, C]
        rows, cols = np.nonzero(window[..., 2] >= 254)  # the letterbox: only these pixels show the image
        if len(rows) == 0:
            return window
        return window[rows.min():rows.max() + 1, cols.min():cols.max() + 1]

    out: list = []
    for i in range(g):
        out += [cell(tiles[0], i, j) for j in range(g)] + [None]
    out.append(None)
    for row in range(nh * g):
        out += [cell(tiles[1 + (row // g) * nw + col // g], row % g, col % g) for col in range(nw * g)] + [None]
    return out
