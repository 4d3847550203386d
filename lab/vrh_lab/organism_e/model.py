"""Organism E's architecture: a real ``LlavaForConditionalGeneration`` composed of two pretrained parts from the
package index (:mod:`vrh.models.organism_e_base`): DINOv2-S/14 as the vision tower (frozen; its 37 x 37
position grid interpolated by ``Dinov2Model`` to the image's: 8 x 8 patches at 112 px, the CLS dropped by the
"default" feature strategy) and SmolLM2-135M-Instruct as the language model, joined by LLaVA's own projector
(Linear-GELU-Linear, 384 -> 576 -> 576). Training follows LLaVA: the projector aligned first with the LM
frozen, then low-rank adapters (``peft``) on the LM's linear maps.

Nothing here refers to particular heads: every layer's targeted projections get the same adapter.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from vrh.models import organism_e_base as parts

LORA_TARGETS = {
    "attn": r".*language_model\.layers\.\d+\.self_attn\.(q_proj|k_proj|v_proj|o_proj)",
    "all": r".*language_model\.layers\.\d+\.(self_attn\.(q_proj|k_proj|v_proj|o_proj)|mlp\.(gate_proj|up_proj|down_proj))",
}
IMAGENET_MEAN, IMAGENET_STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


@dataclass(frozen=True)
class LoraSpec:
    rank: int = 8  # 0: no adapters (the LM frozen as published)
    alpha: int = 16
    dropout: float = 0.0
    targets: str = "all"  # a key of LORA_TARGETS


def processor(lm_folder: Path, image_size: int = 112):
    """``LlavaProcessor``: the image resized and centre-cropped to ``image_size`` px with ImageNet's mean and
    std (DINOv2's), one ``<image>`` token per 14-px patch (the CLS dropped), SmolLM2's tokenizer + ChatML."""
    from transformers import AutoTokenizer, LlavaProcessor

    tok = AutoTokenizer.from_pretrained(str(lm_folder))
    return LlavaProcessor(image_processor=image_processor(image_size), tokenizer=tok, patch_size=parts.DINOV2_S14["patch_size"],
                          vision_feature_select_strategy="default", num_additional_image_tokens=1,
                          image_token=parts.IMAGE_TOKEN, chat_template=parts.CHAT_TEMPLATE)


def image_processor(image_size: int = 112):
    """Resize + centre crop to ``image_size`` px (bicubic), ImageNet's mean and std (DINOv2's)."""
    from transformers import CLIPImageProcessorPil

    return CLIPImageProcessorPil(size={"shortest_edge": image_size}, crop_size={"height": image_size, "width": image_size},
                                 image_mean=IMAGENET_MEAN, image_std=IMAGENET_STD, resample=3)


def e_config(lm_folder: Path, vision_folder: Path, feature_layer: int = -1):
    from transformers import AutoTokenizer, LlavaConfig

    tok = AutoTokenizer.from_pretrained(str(lm_folder))
    text = parts.text_config(lm_folder)
    text.vocab_size = len(tok)  # + <image>
    vision = parts.dinov2_config(**json.loads((vision_folder / parts.VISION_CONFIG).read_text()))
    return LlavaConfig(vision_config=vision.to_dict(), text_config=text.to_dict(),
                       image_token_index=tok.convert_tokens_to_ids(parts.IMAGE_TOKEN),
                       vision_feature_select_strategy="default", vision_feature_layer=feature_layer,
                       projector_hidden_act="gelu", tie_word_embeddings=True)


def build(lm_folder: Path, vision_folder: Path, seed: int = 0, feature_layer: int = -1) -> nn.Module:
    """The composed VLM: both parts' weights loaded, the ``<image>`` embedding row the mean of the text rows
    (it is replaced by image features before the LM reads it), the projector drawn with ``nn.Linear``'s own
    initialisation from ``seed``."""
    from safetensors.torch import load_file
    from transformers import LlavaForConditionalGeneration
    from transformers.models.llava.modeling_llava import LlavaMultiModalProjector

    from vrh.models.composed import empty_parameters, load_strict

    cfg = e_config(lm_folder, vision_folder, feature_layer)
    with empty_parameters():
        model = LlavaForConditionalGeneration(cfg)
    state = {"model.language_model." + k[len("model."):]: v for k, v in parts.lm_state(lm_folder).items()}
    emb = state["model.language_model.embed_tokens.weight"]
    extra = cfg.text_config.vocab_size - emb.shape[0]
    if extra > 0:
        state["model.language_model.embed_tokens.weight"] = emb = torch.cat([emb, emb.mean(0, keepdim=True).expand(extra, -1)])
    state["lm_head.weight"] = emb
    vision = load_file(str(vision_folder / parts.VISION_WEIGHTS))
    state.update({f"model.vision_tower.{k}": v for k, v in vision.items()})
    state["model.vision_tower.embeddings.mask_token"] = torch.zeros(1, cfg.vision_config.hidden_size)
    torch.manual_seed(seed + 1)
    proj = LlavaMultiModalProjector(cfg)
    state.update({f"model.multi_modal_projector.{k}": v for k, v in proj.state_dict().items()})
    load_strict(model, state, what="organism E's parts")
    model.tie_weights()
    tok_eos = _eos_ids(lm_folder)
    model.generation_config.eos_token_id = tok_eos
    model.generation_config.pad_token_id = tok_eos[0]
    model.generation_config.do_sample = False
    return model


def _eos_ids(lm_folder: Path) -> list[int]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(lm_folder))
    ids = [tok.convert_tokens_to_ids("<|im_end|>"), tok.eos_token_id]
    return list(dict.fromkeys(i for i in ids if i is not None and i != tok.unk_token_id))


def add_lora(model: nn.Module, spec: LoraSpec) -> nn.Module:
    """Adapters on the LM's linear maps (:data:`LORA_TARGETS`, B = 0: the model unchanged); every weight frozen
    but the projector's. :func:`set_phase` chooses what trains."""
    for p in model.parameters():
        p.requires_grad_(False)
    if spec.rank > 0:
        from peft import LoraConfig, inject_adapter_in_model

        model = inject_adapter_in_model(
            LoraConfig(r=spec.rank, lora_alpha=spec.alpha, lora_dropout=spec.dropout,
                       target_modules=LORA_TARGETS[spec.targets], bias="none"), model)
        for p in model.parameters():
            p.requires_grad_(False)
    return model


def trainable_names(model: nn.Module) -> list[str]:
    """Every weight training may change, in a fixed order: the projector's, then the adapters'."""
    names = [n for n, _ in model.named_parameters()]
    return [n for n in names if ".multi_modal_projector." in f".{n}"] + [n for n in names if "lora_" in n]


def set_phase(model: nn.Module, adapters: bool) -> None:
    """The projector always trains; the adapters only once ``adapters`` (LLaVA's second stage)."""
    for n, p in model.named_parameters():
        p.requires_grad_(".multi_modal_projector." in f".{n}" or (adapters and "lora_" in n))


def trainable_state(model: nn.Module) -> dict[str, torch.Tensor]:
    params = dict(model.named_parameters())
    return {n: params[n].detach().clone() for n in trainable_names(model)}
