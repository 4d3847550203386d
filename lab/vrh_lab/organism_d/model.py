"""Organism D's architecture: a real ``Gemma3ForConditionalGeneration`` composed of the pretrained Gemma 3 270M
language model (frozen), a small SigLIP tower on the world's 112-px images (16-px patches: 7 x 7 = 49 soft
tokens, no pooling, the same grid as organisms A and C), Gemma 3's own projector (RMSNorm + one matrix) and,
for D-LoRA, low-rank adapters on every linear map of the language model's layers (``peft``): the attention
projections and the MLP's. A first recipe adapted the attention projections only (rank 8); after 500 steps it
answered one box for every image (0% held-out grounding, lab/organism_runs/README.md, vD): turning a retrieved
feature into coordinate digits needs the MLPs, which it could not change.

Nothing here refers to particular heads: every layer's q/k/v/o and gate/up/down projections get the same adapter.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from vrh.models import gemma_base
from vrh.organism import world
from vrh_lab.organism.arch import VisionArch
from vrh_lab.organism.model import sincos_2d

VISION_D = VisionArch(patch_size=16, hidden=128, layers=3, heads=4, intermediate=512)
LORA_TARGETS = r".*language_model\.layers\.\d+\.(self_attn\.(q_proj|k_proj|v_proj|o_proj)|mlp\.(gate_proj|up_proj|down_proj))"
LORA_TARGETS_TEXT = "q_proj k_proj v_proj o_proj gate_proj up_proj down_proj of every LM layer"


@dataclass(frozen=True)
class LoraSpec:
    rank: int = 4  # 0: no adapters (organism D with the LM frozen as published); 4 keeps the deltas under 8 MB
    alpha: int = 8
    dropout: float = 0.0


def siglip_config(arch: VisionArch = VISION_D, image_size: int = world.IMAGE_SIZE):
    from transformers import SiglipVisionConfig

    return SiglipVisionConfig(hidden_size=arch.hidden, intermediate_size=arch.intermediate,
                              num_hidden_layers=arch.layers, num_attention_heads=arch.heads,
                              image_size=image_size, patch_size=arch.patch_size, vision_use_head=False)


def siglip_tower(seed: int, arch: VisionArch = VISION_D, image_size: int = world.IMAGE_SIZE) -> nn.Module:
    """A fresh SigLIP tower, its absolute position embeddings started as the organisms' smooth 2-D sin/cos
    code (:func:`vrh_lab.organism.model.sincos_2d`; SigLIP has no CLS row)."""
    from transformers import SiglipVisionModel

    torch.manual_seed(seed)
    tower = SiglipVisionModel(siglip_config(arch, image_size))
    with torch.no_grad():
        emb = tower.embeddings.position_embedding
        emb.weight.copy_(sincos_2d(image_size // arch.patch_size, arch.hidden))
    return tower


def d_config(folder: Path, arch: VisionArch = VISION_D, image_size: int = world.IMAGE_SIZE):
    """``Gemma3Config``: the base LM's text config, the tower's, one soft token per patch."""
    from transformers import AutoTokenizer, Gemma3Config

    tok = AutoTokenizer.from_pretrained(str(folder))
    text = gemma_base.text_config(folder)
    grid = image_size // arch.patch_size
    cfg = Gemma3Config(
        text_config=text.to_dict(), vision_config=siglip_config(arch, image_size).to_dict(),
        mm_tokens_per_image=grid * grid, boi_token_index=tok.convert_tokens_to_ids("<start_of_image>"),
        eoi_token_index=tok.convert_tokens_to_ids("<end_of_image>"),
        image_token_index=tok.convert_tokens_to_ids(gemma_base.IMAGE_SOFT_TOKEN))
    cfg.text_config.use_bidirectional_attention = False
    return cfg


def build(folder: Path, tower_state: dict | None = None, seed: int = 0,
          arch: VisionArch = VISION_D) -> nn.Module:
    """The composed VLM: base LM weights loaded (from :func:`vrh.models.gemma_base.base_folder`), the tower
    from ``tower_state`` (stage 1) or fresh, the projector drawn so its output matches the scale of the LM's
    (scaled) text embeddings."""
    from transformers import Gemma3ForConditionalGeneration

    from vrh.models.composed import empty_parameters

    cfg = d_config(folder, arch)
    with empty_parameters():
        model = Gemma3ForConditionalGeneration(cfg)
    lm = gemma_base.lm_state(folder)
    state = {("model.language_model." + k[len("model."):]): v for k, v in lm.items()}
    tower = siglip_tower(seed, arch)
    if tower_state is not None:
        tower.load_state_dict(tower_state)
    state.update({f"model.vision_tower.{k}": v for k, v in tower.state_dict().items()})
    proj = model.model.multi_modal_projector
    emb = state["model.language_model.embed_tokens.weight"]
    torch.manual_seed(seed + 1)
    target = float(emb[:32_000].pow(2).mean().sqrt()) * cfg.text_config.hidden_size ** 0.5  # scaled embedding RMS
    state["model.multi_modal_projector.mm_input_projection_weight"] = (
        torch.randn(proj.mm_input_projection_weight.shape) * target / arch.hidden ** 0.5)
    state["model.multi_modal_projector.mm_soft_emb_norm.weight"] = torch.zeros(arch.hidden)  # Gemma RMSNorm: x (1 + w)
    state["lm_head.weight"] = emb
    model.load_state_dict(state, strict=True, assign=True)
    model.tie_weights()
    for name, p in model.named_parameters():
        if p.is_meta:
            raise RuntimeError(f"organism D: {name} was not filled")
    model.generation_config.eos_token_id = [1, 106]  # <eos>, <end_of_turn>
    model.generation_config.pad_token_id = 0
    model.generation_config.bos_token_id = 2
    return model


def add_lora(model: nn.Module, spec: LoraSpec, train_tower: bool = False) -> nn.Module:
    """Wrap the language model's linear maps (:data:`LORA_TARGETS`) in low-rank adapters (``peft``); every
    other weight frozen except the projector and, with ``train_tower``, the vision tower (new modules, not the
    LM's). Returns the model with the adapters injected in place."""
    for p in model.parameters():
        p.requires_grad_(False)
    if spec.rank > 0:
        from peft import LoraConfig, inject_adapter_in_model

        model = inject_adapter_in_model(
            LoraConfig(r=spec.rank, lora_alpha=spec.alpha, lora_dropout=spec.dropout,
                       target_modules=LORA_TARGETS, bias="none"), model)
        for n, p in model.named_parameters():
            p.requires_grad_("lora_" in n)
    for p in model.model.multi_modal_projector.parameters():
        p.requires_grad_(True)
    for p in model.model.vision_tower.parameters():
        p.requires_grad_(train_tower)
    return model


def trainable_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """What training changes: the projector, the adapters (and the tower when it is trained)."""
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
