"""Phi-4-Reasoning-Vision-15B (``microsoft/Phi-4-reasoning-vision-15B``, model type ``phi4-siglip``) rebuilt from
native parts, without its remote code.

What the checkpoint is, read from the remote code (github.com/microsoft/Phi-4-reasoning-vision-15B @ 1190d40,
``huggingface-transformers/modeling_phi4_visionr.py`` and ``processing_phi4_visionr.py``), with vLLM's
``phi4siglip.py`` weight mapping as a second reading:

* The language model is a Phi-3 (``Phi4ForCausalLMV(Phi3ForCausalLM)`` keeps ``self.model``): native
  :class:`~transformers.Phi3ForCausalLM` keys ``model.embed_tokens``, ``model.layers.{i}.*`` (fused ``qkv_proj`` and
  ``gate_up_proj``), ``model.norm``, ``lm_head`` (untied).
* ``model.vision_tower`` is a wrapper whose ``.vision_tower`` is a transformers-4.x ``Siglip2VisionModel`` (SigLIP2
  so400m patch16 NaFlex) built from ``config.vision_config`` (``patch_size`` 16 unless the tower name says
  ``patch14``), its vision transformer under ``.vision_model``: keys ``model.vision_tower.vision_tower.vision_model.*``,
  ``post_layernorm`` and the pooling ``head`` included although neither runs. Here the native 5.x
  :class:`~transformers.Siglip2VisionModel` (which dropped the ``vision_model`` level) sits in a holder of that name. The features are ``hidden_states[-2]`` (the input of the last encoder layer, no
  post-layernorm), the rows of padding patches dropped with ``pixel_attention_mask``.
* ``model.mm_projector``: ``mlp2x_gelu`` = Linear(mm_hidden_size -> hidden), GELU, Linear(hidden -> hidden)
  (keys ``model.mm_projector.0.*``, ``model.mm_projector.2.*``).

The module tree below has exactly those names, so the published tensors load one-to-one. The remote
``from_pretrained`` reads the fine-tuned tower from these keys only when given a local folder; given a hub id it
silently loads the original ``google/siglip2-so400m-patch16-naflex`` weights instead. Here the tower is always
the checkpoint's own (loaded strictly with everything else by :class:`vrh.models.adapters.composed_base.ComposedAdapter`).

The image and text processing is :mod:`vrh.models.adapters.phi4_vision.processing`.
"""

from __future__ import annotations

import re
from typing import Any

import torch
from huggingface_hub.dataclasses import strict
from torch import nn
from transformers import Phi3Config, Phi3ForCausalLM, Siglip2VisionConfig, Siglip2VisionModel
from transformers.models.phi3.modeling_phi3 import Phi3Model, Phi3PreTrainedModel

NAFLEX_TOWER = "google/siglip2-so400m-patch16-naflex"  # the tower the released config names


@strict
class Phi4VisionConfig(Phi3Config):
    """The checkpoint's ``config.json``: a Phi-3 config plus the vision fields of the remote ``Phi4VisionR``.
    ``image_token_id`` is vrh's: the id of the placeholder its processor splices (set by the adapter on load)."""

    model_type = "phi4-siglip"
    mm_vision_tower: str | None = None
    mm_projector_type: str = "mlp2x_gelu"
    mm_hidden_size: int = 1152
    min_num_patches: int = 256
    max_num_patches: int = 3600
    vision_config: dict | None = None
    image_token_id: int | None = None


def phi4_vision_config(raw: dict[str, Any]) -> Phi4VisionConfig:
    """The config of a checkpoint's raw ``config.json``, with generation's KV cache on: the release says
    ``use_cache: false`` (a training setting), under which ``generate`` re-runs the whole prompt, thousands of
    visual tokens, for every new token. ``rope_scaling: null`` is dropped (transformers' deprecated spelling of
    no scaling; ``rope_theta`` stays)."""
    fields = {k: v for k, v in raw.items() if not (k == "rope_scaling" and v is None)}
    return Phi4VisionConfig(**{**fields, "use_cache": True})


def tower_config(config: Phi4VisionConfig) -> Siglip2VisionConfig:
    """The tower's config as the remote ``Siglip2VisionTower`` builds it: ``config.vision_config`` with
    ``patch_size`` 14 or 16 from the tower name when absent. Refuses what the remote code would not build as a
    NaFlex SigLIP2 tower (the fixed-size SigLIP path and S2 multi-scale are not in the released checkpoint)."""
    name = config.mm_vision_tower or ""
    if "siglip" not in name.lower() or "naflex" not in name.lower():
        raise ValueError(f"mm_vision_tower {name!r}: vrh builds the SigLIP2 NaFlex tower of Phi-4-Reasoning-Vision "
                         f"only (a name containing 'siglip' and 'naflex', e.g. {NAFLEX_TOWER!r})")
    if getattr(config, "use_s2", False):
        raise ValueError("use_s2 = true (S2 multi-scale features) is not supported; the released checkpoint has false")
    if config.vision_config is None:
        raise ValueError("config.json has no vision_config; vrh builds the tower from it and never downloads "
                         f"{name!r}'s config")
    fields = dict(config.vision_config)
    fields.setdefault("patch_size", 14 if "patch14" in name.lower() else 16)
    vision = Siglip2VisionConfig(**fields)
    if config._attn_implementation_internal is not None:
        vision._attn_implementation_internal = config._attn_implementation_internal
    return vision


def build_projector(config: Phi4VisionConfig) -> nn.Module:
    """``mm_projector`` as the remote ``build_vision_projector``: ``linear``, ``identity`` or ``mlpNx_gelu``
    (Linear, then N-1 times GELU + Linear)."""
    kind = config.mm_projector_type
    if kind == "linear":
        return nn.Linear(config.mm_hidden_size, config.hidden_size)
    if kind == "identity":
        return nn.Identity()
    mlp = re.fullmatch(r"mlp(\d+)x_gelu", kind or "")
    if not mlp:
        raise ValueError(f"mm_projector_type {kind!r}: expected 'linear', 'identity' or 'mlpNx_gelu'")
    layers: list[nn.Module] = [nn.Linear(config.mm_hidden_size, config.hidden_size)]
    for _ in range(1, int(mlp.group(1))):
        layers += [nn.GELU(), nn.Linear(config.hidden_size, config.hidden_size)]
    return nn.Sequential(*layers)


class Siglip2Checkpoint(nn.Module):
    """transformers 4.x's ``Siglip2VisionModel`` layout, which the checkpoint was saved from: the vision transformer
    under ``.vision_model`` (5.x flattened that level away; its own loader strips the prefix, vrh keeps the names)."""

    def __init__(self, vision_config: Siglip2VisionConfig):
        super().__init__()
        self.vision_model = Siglip2VisionModel(vision_config)


class Siglip2Tower(nn.Module):
    """The remote ``Siglip2VisionTower``'s weights (``.vision_tower.vision_model`` = the native SigLIP2 vision model)
    and its features, ``hidden_states[-2]``: the input of the last encoder layer, no post-layernorm."""

    def __init__(self, config: Phi4VisionConfig):
        super().__init__()
        self.vision_tower = Siglip2Checkpoint(tower_config(config))

    def forward(self, pixel_values: torch.Tensor, pixel_attention_mask: torch.Tensor,
                spatial_shapes: torch.Tensor) -> torch.Tensor:
        """``pixel_values`` [B, N, p*p*C], ``pixel_attention_mask`` [B, N] (1 = a patch of the image), ``spatial_shapes``
        [B, 2] (h, w) -> ``hidden_states[-2]`` [B, N, D], padding rows included: one entry per image, so that
        :mod:`vrh.core.sharing` can encode each distinct image of a batch once.

        The encoder layers but the last run here, not through ``output_hidden_states=True``: transformers 5's
        output-capturing hooks get installed twice on a vision model nested in a language model that records its
        own hidden states, after which ``hidden_states[-2]`` silently names another layer (and the last layer
        is not needed anyway)."""
        from transformers.masking_utils import create_bidirectional_mask

        tower = self.vision_tower.vision_model
        hidden = tower.embeddings(pixel_values.to(tower.dtype), spatial_shapes)  # [B, N, D]
        mask = create_bidirectional_mask(config=tower.config, inputs_embeds=hidden,
                                         attention_mask=pixel_attention_mask)
        for layer in tower.encoder.layers[:-1]:
            hidden = layer(hidden, mask)  # [B, N, D]
        return hidden


class Phi4VisionModel(Phi3Model):
    """The remote ``Phi4VisionRModel``: a Phi-3 model with ``vision_tower`` and ``mm_projector`` beside its layers."""

    config_class = Phi4VisionConfig

    def __init__(self, config: Phi4VisionConfig):
        super().__init__(config)
        self.vision_tower = Siglip2Tower(config)
        self.mm_projector = build_projector(config)

    def image_features(self, pixel_values: torch.Tensor, pixel_attention_mask: torch.Tensor,
                       spatial_shapes: torch.Tensor) -> torch.Tensor:
        """One projected feature per real patch, image after image: [sum_b h_b*w_b, hidden]."""
        hidden = self.vision_tower(pixel_values, pixel_attention_mask=pixel_attention_mask,
                                   spatial_shapes=spatial_shapes)  # [B, N, D]
        return self.mm_projector(hidden[pixel_attention_mask.bool()])  # padding rows dropped: [sum_b n_b, hidden]


class Phi4VisionForCausalLM(Phi3ForCausalLM):
    """The remote ``Phi4ForCausalLMV`` under the same parameter names: a native Phi-3 causal LM whose prompt
    embeddings get the image features at the placeholder positions (``config.image_token_id``) when
    ``pixel_values`` are given (the prefill); decode steps are plain Phi-3 steps."""

    config_class = Phi4VisionConfig

    def __init__(self, config: Phi4VisionConfig):
        Phi3PreTrainedModel.__init__(self, config)
        self.model = Phi4VisionModel(config)
        self.vocab_size = config.vocab_size
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def embed_with_images(self, input_ids: torch.Tensor, pixel_values: torch.Tensor,
                          pixel_attention_mask: torch.Tensor, spatial_shapes: torch.Tensor) -> torch.Tensor:
        """Token embeddings [B, S, hidden] with the image features scattered into the placeholder positions, in
        sequence order (sample 0's image first)."""
        image_id = self.config.image_token_id
        if image_id is None:
            raise ValueError("config.image_token_id is not set: the id of the processor's image placeholder (the "
                             "adapter sets it on load)")
        is_image = input_ids == image_id  # [B, S]
        # the placeholder id may lie beyond the embedding table (a token added to the tokenizer): embed 0 there
        embeds = self.model.embed_tokens(input_ids.masked_fill(is_image, 0))  # [B, S, hidden]
        features = self.model.image_features(pixel_values, pixel_attention_mask, spatial_shapes)  # [n, hidden]
        if features.shape[0] != int(is_image.sum()):
            raise ValueError(f"{int(is_image.sum())} image placeholder tokens but the images give {features.shape[0]} "
                             "features; build the inputs with the family's processor")
        return embeds.masked_scatter(is_image.unsqueeze(-1), features.to(embeds.dtype))

    def forward(self, input_ids: torch.Tensor | None = None, pixel_values: torch.Tensor | None = None,
                pixel_attention_mask: torch.Tensor | None = None, spatial_shapes: torch.Tensor | None = None,
                inputs_embeds: torch.Tensor | None = None, **kwargs: Any):
        if pixel_values is not None and inputs_embeds is None:
            inputs_embeds = self.embed_with_images(input_ids, pixel_values, pixel_attention_mask, spatial_shapes)
            input_ids = None
        return super().forward(input_ids=input_ids, inputs_embeds=inputs_embeds, **kwargs)
