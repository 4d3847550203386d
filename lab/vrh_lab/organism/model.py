"""The organism's architecture: a real ``LlavaForConditionalGeneration`` (CLIP tower + MLP projector +
Llama LM), small enough to train on two CPU cores.

The vision tower has *absolute* learned position embeddings, so each visual token's value vector carries
its location; the LM (rotary) only has to copy it into coordinate tokens. Organism B has its own
tower/projector and either shares A's LM module (joint training, ``share_language_model``) or starts
from A's LM weights (the shipped B, ``TrainConfig.lm_init``).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

from vrh_lab.organism.arch import TextArch, VisionArch  # noqa: F401 (the shapes, re-exported here)
from vrh_lab.organism.processor import ImageSpec, build_tokenizer


def llava_config(vision: VisionArch, text: TextArch, image_size: int) -> LlavaConfig:
    tok = build_tokenizer()
    spec = ImageSpec(image_size=image_size, patch_size=vision.patch_size)
    vcfg = CLIPVisionConfig(
        hidden_size=vision.hidden, intermediate_size=vision.intermediate, num_hidden_layers=vision.layers,
        num_attention_heads=vision.heads, image_size=image_size, patch_size=vision.patch_size,
        projection_dim=vision.hidden, hidden_act="gelu")
    tcfg = LlamaConfig(
        vocab_size=len(tok), hidden_size=text.hidden, intermediate_size=text.intermediate,
        num_hidden_layers=text.layers, num_attention_heads=text.heads, num_key_value_heads=text.heads,
        max_position_embeddings=text.max_positions, rms_norm_eps=1e-5, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": text.rope_theta},
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    cfg = LlavaConfig(
        vision_config=vcfg, text_config=tcfg, image_token_index=tok.convert_tokens_to_ids("<image>"),
        image_seq_length=spec.num_image_tokens, projector_hidden_act="gelu",
        vision_feature_select_strategy="default", vision_feature_layer=-1)
    cfg.pad_token_id = tok.pad_token_id
    return cfg


def build_model(vision: VisionArch, text: TextArch, image_size: int, seed: int) -> LlavaForConditionalGeneration:
    """A freshly initialised organism; the LM attention is eager so training can read attention weights."""
    torch.manual_seed(seed)
    cfg = llava_config(vision, text, image_size)
    model = LlavaForConditionalGeneration(cfg)
    if vision.pos_init == "sincos":
        emb = model.model.vision_tower.embeddings
        with torch.no_grad():
            grid = sincos_2d(image_size // vision.patch_size, vision.hidden)  # [g*g, D]
            emb.position_embedding.weight[1:] = grid  # row 0 is CLS, dropped by the projector anyway
    set_attention(model, text="eager", vision="eager")
    tok = build_tokenizer()
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.bos_token_id = tok.bos_token_id
    return model


def sincos_2d(grid: int, dim: int) -> torch.Tensor:
    """[grid*grid, dim] row-major patch codes: half the dims encode x, half y, as sin/cos pairs whose
    lowest frequency spans a quarter period over the image (monotone, so a centroid is readable)."""
    n_freq = dim // 4
    freqs = (torch.pi / 2) * 2.0 ** torch.linspace(0, 4, n_freq)  # [F]
    pos = torch.arange(grid, dtype=torch.float) / max(1, grid - 1)  # [g] in [0, 1]
    ang = pos[:, None] * freqs[None, :]  # [g, F]
    code = torch.cat([ang.sin(), ang.cos()], dim=1)  # [g, 2F]
    ys, xs = torch.meshgrid(torch.arange(grid), torch.arange(grid), indexing="ij")  # [g, g]
    out = torch.cat([code[xs.reshape(-1)], code[ys.reshape(-1)]], dim=1)  # [g*g, 4F]
    return torch.nn.functional.pad(out, (0, dim - out.shape[1]))


def set_attention(model: LlavaForConditionalGeneration, text: str = "eager", vision: str = "sdpa") -> None:
    model.set_attn_implementation({"text_config": text, "vision_config": vision})


def share_language_model(dst: LlavaForConditionalGeneration, src: LlavaForConditionalGeneration) -> None:
    """Make ``dst`` use ``src``'s LM and LM head modules (one set of weights trained by both)."""
    dst.model.language_model = src.model.language_model
    dst.lm_head = src.lm_head


def lm_o_projs(model: LlavaForConditionalGeneration) -> list[nn.Linear]:
    return [layer.self_attn.o_proj for layer in model.model.language_model.layers]
