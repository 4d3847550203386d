"""DeepSeek-VL2 (``model_type: deepseek_vl_v2``) composed from native transformers parts: no remote code.

The published checkpoints (deepseek-ai/deepseek-vl2-tiny, -small, deepseek-vl2) ship ``trust_remote_code``
modeling files that do not import under transformers 5 (``transformers.modeling_attn_mask_utils``, xformers).
Underneath they are (deepseek-ai/DeepSeek-VL2 @ ef9f91e, ``deepseek_vl2/models/``):

* ``language``: a DeepSeek-V2 decoder with MoE MLPs. With ``use_mla`` (Small, the paper's model) the attention is
  MLA, native :class:`~transformers.DeepseekV2Model`. Without (Tiny: ``use_mla: false``, ``kv_lora_rank: null``)
  the remote code runs transformers-4.38 ``LlamaAttention`` (rotate-half RoPE, ``head_dim = hidden / heads``)
  over the same MoE MLPs: that is native ``DeepseekOcr2TextModel``, DeepSeek-OCR-2's text stack (Llama attention +
  DeepSeek-V2 MoE). Both stacks get :class:`Router`, a port of the remote ``MoEGate`` (``norm_topk_prob``,
  sigmoid scoring, ``noaux_tc``), because the native router ignores ``norm_topk_prob``; with the native router's
  settings the two are the same function (tests/models/adapters/test_deepseek_vl2.py).
* ``vision``: timm-style SigLIP ViT (so400m, 384 px, patch 14), ``ignore_head``, final norm applied, which is
  native :class:`~transformers.SiglipVisionModel` (``last_hidden_state`` includes ``post_layernorm``). Its unused
  MAP head (``global_pool: map``) is in the checkpoint and is loaded into the native head, which never feeds the
  language model.
* ``projector``: ``downsample_mlp_gelu``: the ``g x g`` feature grid zero-padded to even sides, 2 x 2 windows
  concatenated channel-major (``F.unfold``), then Linear-GELU-Linear.
* ``image_newline`` and ``view_seperator`` (sic): two learned embeddings.

Token layout of one image (``tile_tag: 2D``, ``global_view_pos: head``): the global view (the image letterboxed
onto one tile) as ``h`` rows of ``w`` tokens plus a newline each; one separator; the local tiles stitched into one
``(nh * h) x (nw * w)`` grid plus a newline per row. Every one of these positions is an ``<image>`` token in the
text (:class:`DeepseekVL2Processor`).

The published tensor names <-> the module's: :mod:`vrh.models.adapters.deepseek_vl2.checkpoint`; the
processor: :mod:`vrh.models.adapters.deepseek_vl2.processing`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import MoeCausalLMOutputWithPast

# defaults of the remote DeepseekV2Config (configuration_deepseek.py) for keys a config.json leaves out
REMOTE_LM_DEFAULTS = dict(vocab_size=102400, hidden_size=4096, intermediate_size=11008, moe_intermediate_size=1407,
                          num_hidden_layers=30, num_attention_heads=32, num_key_value_heads=None,
                          n_shared_experts=None, n_routed_experts=None, routed_scaling_factor=1.0, kv_lora_rank=512,
                          q_lora_rank=1536, qk_rope_head_dim=64, v_head_dim=128, qk_nope_head_dim=128,
                          topk_method="gready", n_group=None, topk_group=None, num_experts_per_tok=None,
                          moe_layer_freq=1, first_k_dense_replace=0, norm_topk_prob=False, scoring_func="softmax",
                          hidden_act="silu", max_position_embeddings=2048, rms_norm_eps=1e-6, bos_token_id=100000,
                          eos_token_id=100001, pad_token_id=None, tie_word_embeddings=False, rope_theta=10000.0,
                          rope_scaling=None, attention_bias=False, use_mla=True)
# defaults of the remote VisionEncoderConfig and MlpProjectorConfig (modeling_deepseek_vl_v2.py)
REMOTE_VISION_DEFAULTS = dict(image_size=384, patch_size=16, width=1024, layers=24, heads=16, mlp_ratio=4,
                              global_pool="map", ignore_head=True, class_token=False)
REMOTE_PROJECTOR_DEFAULTS = dict(projector_type="downsample_mlp_gelu", input_dim=1152, n_embed=2048, depth=2,
                                 mlp_ratio=1, downsample_ratio=2, token_pooling=False)
TOPK_METHODS = ("greedy", "group_limited_greedy", "noaux_tc")


def _section(raw: dict[str, Any], key: str, defaults: dict[str, Any]) -> dict[str, Any]:
    return {**defaults, **{k: v for k, v in (raw.get(key) or {}).items() if k in defaults}}


def language_config(raw: dict[str, Any]) -> PretrainedConfig:
    """The native text config for the checkpoint's ``language_config``: ``DeepseekV2Config`` (MLA) or
    ``DeepseekOcr2TextConfig`` (``use_mla: false``, Llama attention). Missing keys take the remote defaults."""
    from transformers import DeepseekV2Config
    from transformers.models.deepseek_ocr2.configuration_deepseek_ocr2 import DeepseekOcr2TextConfig

    c = _section(raw, "language_config", REMOTE_LM_DEFAULTS)
    if c["topk_method"] not in TOPK_METHODS:
        raise ValueError(f"language_config.topk_method {c['topk_method']!r} is not one the remote MoEGate runs "
                         f"({', '.join(TOPK_METHODS)})")
    if c["scoring_func"] not in ("softmax", "sigmoid"):
        raise ValueError(f"language_config.scoring_func {c['scoring_func']!r} is not softmax or sigmoid")
    if c["n_routed_experts"] and not c["n_shared_experts"]:
        raise ValueError("language_config without shared experts (n_shared_experts null) is not a released "
                         "DeepSeek-VL2 layout; the native MoE always has them")
    n, freq, first = c["num_hidden_layers"], c["moe_layer_freq"], c["first_k_dense_replace"]
    sparse = [c["n_routed_experts"] is not None and i >= first and i % freq == 0 for i in range(n)]
    rope = {"rope_type": "default", "rope_theta": float(c["rope_theta"])}
    if c["rope_scaling"]:
        scaling = dict(c["rope_scaling"])
        rope = {**rope, "rope_type": scaling.pop("type", scaling.pop("rope_type", "default")), **scaling}
    common = dict(vocab_size=c["vocab_size"], hidden_size=c["hidden_size"], intermediate_size=c["intermediate_size"],
                  moe_intermediate_size=c["moe_intermediate_size"], num_hidden_layers=n,
                  num_attention_heads=c["num_attention_heads"],
                  num_key_value_heads=c["num_key_value_heads"] or c["num_attention_heads"],
                  n_routed_experts=c["n_routed_experts"] or 1, n_shared_experts=c["n_shared_experts"],
                  num_experts_per_tok=c["num_experts_per_tok"], routed_scaling_factor=c["routed_scaling_factor"],
                  topk_method="greedy" if c["topk_method"] == "noaux_tc" else c["topk_method"],
                  n_group=c["n_group"], topk_group=c["topk_group"], hidden_act=c["hidden_act"],
                  max_position_embeddings=c["max_position_embeddings"], rms_norm_eps=float(c["rms_norm_eps"]),
                  attention_bias=c["attention_bias"], tie_word_embeddings=c["tie_word_embeddings"],
                  bos_token_id=c["bos_token_id"], eos_token_id=c["eos_token_id"], pad_token_id=c["pad_token_id"],
                  rope_parameters=rope)
    if not c["use_mla"]:
        cfg = DeepseekOcr2TextConfig(**common, mlp_layer_types=["sparse" if s else "dense" for s in sparse])
    else:
        if any(s != (i >= first) for i, s in enumerate(sparse)):
            raise ValueError("native DeepseekV2 places MoE layers by first_k_dense_replace only; this config's "
                             f"moe_layer_freq={freq} / n_routed_experts={c['n_routed_experts']} differ")
        cfg = DeepseekV2Config(**common, kv_lora_rank=c["kv_lora_rank"], q_lora_rank=c["q_lora_rank"],
                               qk_rope_head_dim=c["qk_rope_head_dim"], qk_nope_head_dim=c["qk_nope_head_dim"],
                               v_head_dim=c["v_head_dim"], first_k_dense_replace=first)
    cfg.use_mla, cfg.norm_topk_prob, cfg.scoring_func = bool(c["use_mla"]), bool(c["norm_topk_prob"]), c["scoring_func"]
    cfg.router_topk_method = c["topk_method"]
    return cfg


def vision_config(raw: dict[str, Any]) -> PretrainedConfig:
    """Native ``SiglipVisionConfig`` for the timm ViT the checkpoint's ``vision_config`` describes."""
    from transformers import SiglipVisionConfig

    v = _section(raw, "vision_config", REMOTE_VISION_DEFAULTS)
    if v["class_token"] or not v["ignore_head"]:
        raise ValueError("vision_config with a class token or ignore_head=false is not DeepSeek-VL2's layout")
    return SiglipVisionConfig(hidden_size=v["width"], intermediate_size=int(v["width"] * v["mlp_ratio"]),
                              num_hidden_layers=v["layers"], num_attention_heads=v["heads"],
                              image_size=v["image_size"], patch_size=v["patch_size"], layer_norm_eps=1e-6,
                              hidden_act="gelu_pytorch_tanh", vision_use_head=v["global_pool"] == "map")


class DeepseekVL2Config(PretrainedConfig):
    """The composite config: native ``text_config`` and ``vision_config`` plus the glue's settings; ``published``
    keeps the checkpoint's own ``config.json`` (what :meth:`DeepseekVL2ForCausalLM.save_pretrained` writes)."""

    model_type = "deepseek_vl_v2"

    def __init__(self, published: dict[str, Any] | None = None, **kwargs):
        published = dict(published or {})
        published.pop("_attn_implementation", None)
        self.published = published
        self.text_config = language_config(published)
        self.vision_config = vision_config(published)
        self.projector = _section(published, "projector_config", REMOTE_PROJECTOR_DEFAULTS)
        self.tile_tag = published.get("tile_tag", "2D")
        self.global_view_pos = published.get("global_view_pos", "head")
        if self.tile_tag != "2D" or self.global_view_pos != "head":
            raise ValueError(f"tile_tag {self.tile_tag!r} / global_view_pos {self.global_view_pos!r}: vrh serves "
                             "the released layout only ('2D', 'head')")
        p = self.projector
        if p["projector_type"] != "downsample_mlp_gelu" or p["token_pooling"] or p["depth"] < 1:
            raise ValueError(f"projector {p['projector_type']!r} (token_pooling={p['token_pooling']}) is not the "
                             "released downsample_mlp_gelu projector")
        super().__init__(**kwargs)
        self.tie_word_embeddings = False


class Router(nn.Module):
    """The remote ``MoEGate`` at inference (port): scores (softmax or sigmoid), top-k by ``greedy``,
    ``group_limited_greedy`` or ``noaux_tc``, weights renormalised when ``norm_topk_prob``, times
    ``routed_scaling_factor``. Returns ``(router_logits, topk_weights, topk_indices)`` like the native router."""

    def __init__(self, config: PretrainedConfig):
        super().__init__()
        self.top_k, self.num_experts = config.num_experts_per_tok, config.n_routed_experts
        self.method, self.scoring = config.router_topk_method, config.scoring_func
        self.norm, self.scale = config.norm_topk_prob, config.routed_scaling_factor
        self.n_group, self.topk_group = config.n_group, config.topk_group
        self.weight = nn.Parameter(torch.zeros(self.num_experts, config.hidden_size))
        if self.method == "noaux_tc":
            self.e_score_correction_bias = nn.Parameter(torch.zeros(self.num_experts))

    def forward(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = hidden_states.reshape(-1, hidden_states.shape[-1]).float()  # (N, hidden)
        logits = F.linear(x, self.weight.float())  # (N, E)
        scores = logits.softmax(-1) if self.scoring == "softmax" else logits.sigmoid()
        choice = scores + self.e_score_correction_bias.float() if self.method == "noaux_tc" else scores
        if self.method != "greedy":
            grouped = choice.view(len(x), self.n_group, -1)  # (N, groups, E / groups)
            group_score = grouped.topk(2, -1)[0].sum(-1) if self.method == "noaux_tc" else grouped.amax(-1)
            keep = torch.zeros_like(group_score).scatter_(1, group_score.topk(self.topk_group, -1, sorted=False)[1], 1)
            choice = choice.masked_fill(~keep.bool().repeat_interleave(grouped.shape[-1], dim=1), 0.0)
        weights, idx = torch.topk(choice, self.top_k, dim=-1, sorted=False)
        if self.method == "noaux_tc":
            weights = scores.gather(1, idx)
        if self.top_k > 1 and self.norm:
            weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
        return logits, weights * self.scale, idx


class Projector(nn.Module):
    """``downsample_mlp_gelu``: (T, g*g, C) ViT features -> (T, ceil(g/2)^2, n_embed)."""

    def __init__(self, p: dict[str, Any]):
        super().__init__()
        self.ratio = p["downsample_ratio"]
        width = p["n_embed"] * p["mlp_ratio"]
        mods: list[nn.Module] = [nn.Linear(p["input_dim"] * self.ratio ** 2, width)]
        for _ in range(1, p["depth"] - 1):
            mods += [nn.GELU(), nn.Linear(width, width)]
        self.layers = nn.Sequential(*mods, nn.GELU(), nn.Linear(width, p["n_embed"]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t, hw, c = x.shape
        g = math.isqrt(hw)
        pad = -g % self.ratio
        x = F.pad(x.view(t, g, g, c), (0, 0, 0, pad, 0, pad))  # (T, g', g', C), zeros bottom and right
        x = F.unfold(x.permute(0, 3, 1, 2), kernel_size=self.ratio, stride=self.ratio)  # (T, C*r*r, g'^2/r^2)
        return self.layers(x.transpose(1, 2))


class DeepseekVL2Model(nn.Module):
    """Vision tower, projector, the two layout embeddings and the language model (no LM head)."""

    def __init__(self, config: DeepseekVL2Config):
        super().__init__()
        from transformers import DeepseekV2Model, SiglipVisionModel
        from transformers.models.deepseek_ocr2.modeling_deepseek_ocr2 import DeepseekOcr2TextModel

        text = config.text_config
        self.vision = SiglipVisionModel(config.vision_config)
        self.projector = Projector(config.projector)
        n_embed = config.projector["n_embed"]
        self.image_newline = nn.Parameter(torch.zeros(n_embed))
        self.view_seperator = nn.Parameter(torch.zeros(n_embed))  # the checkpoint's spelling
        self.language_model = (DeepseekV2Model if text.use_mla else DeepseekOcr2TextModel)(text)
        for layer in self.language_model.layers:
            if hasattr(layer.mlp, "gate"):
                layer.mlp.gate = Router(text)

    def image_sequence(self, tiles: torch.Tensor, nw: int, nh: int) -> torch.Tensor:
        """(1 + nh*nw, 3, S, S) global view then local tiles row-major -> the image's token embeddings
        (h*(w+1) + 1 + nh*h*(nw*w+1), D) in sequence order."""
        feats = self.projector(self.vision(pixel_values=tiles.to(self.vision.dtype)).last_hidden_state)  # (T, h*w, D)
        t, hw, d = feats.shape
        h = math.isqrt(hw)
        newline = self.image_newline.to(feats.dtype)
        glob = torch.cat([feats[0].view(h, h, d), newline.expand(h, 1, d)], dim=1).reshape(-1, d)  # (h*(h+1), D)
        local = feats[1:].view(nh, nw, h, h, d).permute(0, 2, 1, 3, 4).reshape(nh * h, nw * h, d)  # stitched
        local = torch.cat([local, newline.expand(nh * h, 1, d)], dim=1).reshape(-1, d)  # (nh*h*(nw*h+1), D)
        return torch.cat([glob, self.view_seperator.to(feats.dtype)[None], local])


class DeepseekVL2ForCausalLM(PreTrainedModel, GenerationMixin):
    """DeepSeek-VL2 for generation: image features spliced into the embeddings at the ``images_seq_mask``
    positions (the processor's ``<image>`` tokens), then the native language model and ``lm_head``."""

    config_class = DeepseekVL2Config
    base_model_prefix = "model"
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True

    def __init__(self, config: DeepseekVL2Config):
        super().__init__(config)
        self.model = DeepseekVL2Model(config)
        self.lm_head = nn.Linear(config.text_config.hidden_size, config.text_config.vocab_size, bias=False)
        self.post_init()

    @classmethod
    def from_published(cls, published: dict[str, Any]) -> DeepseekVL2ForCausalLM:
        """The model a checkpoint's raw ``config.json`` describes (``_attn_implementation`` honoured)."""
        attn = published.get("_attn_implementation", "sdpa")
        config = DeepseekVL2Config(published)
        config.text_config._attn_implementation = attn
        config.vision_config._attn_implementation = "sdpa" if attn == "eager" else attn
        config._attn_implementation = attn
        return cls(config)

    def get_input_embeddings(self) -> nn.Module:
        return self.model.language_model.embed_tokens

    def forward(self, input_ids: torch.LongTensor | None = None, pixel_values: torch.Tensor | None = None,
                images_seq_mask: torch.Tensor | None = None, images_spatial_crop: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, position_ids: torch.LongTensor | None = None,
                cache: Any = None, inputs_embeds: torch.Tensor | None = None, use_cache: bool | None = None,
                logits_to_keep: int | torch.Tensor = 0, **kwargs) -> MoeCausalLMOutputWithPast:
        if "past_key_values" in kwargs:
            cache = kwargs.pop("past_key_values")
        if inputs_embeds is None:
            inputs_embeds = self.get_input_embeddings()(input_ids)
        if pixel_values is not None and images_seq_mask is not None:
            extra = inputs_embeds.shape[1] - images_seq_mask.shape[1]  # > 0: tokens generated since (no cache)
            if extra < 0:
                raise ValueError(f"images_seq_mask covers {images_seq_mask.shape[1]} positions, the input "
                                 f"{inputs_embeds.shape[1]}")
            images_seq_mask = F.pad(images_seq_mask, (0, extra))
            inputs_embeds = inputs_embeds.clone()
            for b in range(inputs_embeds.shape[0]):
                nw, nh = (int(v) for v in images_spatial_crop[b])
                seq = self.model.image_sequence(pixel_values[b, :1 + nw * nh], nw, nh)
                where = images_seq_mask[b].bool()
                if int(where.sum()) != len(seq):
                    raise ValueError(f"sample {b}: {int(where.sum())} image positions but the image gives "
                                     f"{len(seq)} embeddings")
                inputs_embeds[b, where] = seq.to(inputs_embeds.dtype)
        out = self.model.language_model(inputs_embeds=inputs_embeds, attention_mask=attention_mask,
                                        position_ids=position_ids, cache=cache, use_cache=use_cache, **kwargs)
        keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        logits = self.lm_head(out.last_hidden_state[:, keep])
        return MoeCausalLMOutputWithPast(logits=logits, cache=out.cache, hidden_states=out.hidden_states,
                                         attentions=out.attentions)

    def prepare_inputs_for_generation(self, input_ids, pixel_values=None, images_seq_mask=None,
                                      images_spatial_crop=None, is_first_iteration=False, **kwargs):
        inputs = super().prepare_inputs_for_generation(input_ids, is_first_iteration=is_first_iteration, **kwargs)
        if is_first_iteration or not kwargs.get("use_cache", True):  # the image enters at the prefill only
            inputs.update(pixel_values=pixel_values, images_seq_mask=images_seq_mask,
                          images_spatial_crop=images_spatial_crop)
        return inputs

    def save_pretrained(self, directory: str | Path, **_: Any) -> None:
        """Write the checkpoint as DeepSeek publishes it: its ``config.json`` and ``model.safetensors`` under the
        published names (:func:`~vrh.models.adapters.deepseek_vl2.checkpoint.published_state`), which
        :func:`~vrh.models.adapters.deepseek_vl2.checkpoint.convert_state` reads back."""
        from safetensors.torch import save_file

        from vrh.models.adapters.deepseek_vl2.checkpoint import published_state

        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(self.config.published, indent=2), encoding="utf-8")
        state = {k: v.detach().contiguous() for k, v in published_state(self).items()}
        save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
