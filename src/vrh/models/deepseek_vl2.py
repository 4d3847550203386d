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
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn
from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import MoeCausalLMOutputWithPast

from vrh.models.canvas import select_best_resolution  # the remote processor's canvas choice

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
        published names (:func:`published_state`), which :func:`convert_state` reads back."""
        from safetensors.torch import save_file

        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(self.config.published, indent=2), encoding="utf-8")
        state = {k: v.detach().contiguous() for k, v in published_state(self).items()}
        save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})


# --- checkpoint names <-> module names -----------------------------------------------------------

_VISION_RENAMES = [  # published (after "vision.") <-> module (after "model.vision."); {i} = block index
    ("patch_embed.proj.", "embeddings.patch_embedding."), ("blocks.{i}.norm1.", "encoder.layers.{i}.layer_norm1."),
    ("blocks.{i}.norm2.", "encoder.layers.{i}.layer_norm2."),
    ("blocks.{i}.attn.proj.", "encoder.layers.{i}.self_attn.out_proj."), ("blocks.{i}.mlp.", "encoder.layers.{i}.mlp."),
    ("norm.", "post_layernorm."), ("attn_pool.proj.", "head.attention.out_proj."), ("attn_pool.norm.", "head.layernorm."),
    ("attn_pool.mlp.", "head.mlp."),
]


def _swap(key: str, source: str, target: str) -> str | None:
    """``key`` with its prefix ``source`` (a template, ``{i}`` a number) replaced by ``target``, or None."""
    m = re.match(re.escape(source).replace(re.escape("{i}"), r"(\d+)"), key)
    if not m:
        return None
    return (target.replace("{i}", m[1]) if m.groups() else target) + key[m.end():]


_EXPERT = re.compile(r"language\.model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate|up|down)_proj\.weight")
_QKV = re.compile(r"vision\.blocks\.(\d+)\.attn\.qkv\.(weight|bias)")
_POOL_IN = re.compile(r"vision\.attn_pool\.(q|kv)\.(weight|bias)")


def _rename(key: str) -> str | None:
    """The module name of a published key that maps one to one, or None."""
    if key.startswith("language.model."):
        return "model.language_model." + key[len("language.model."):]
    if key == "language.lm_head.weight":
        return "lm_head.weight"
    if key.startswith("projector.") or key in ("image_newline", "view_seperator"):
        return "model." + key
    if key == "vision.attn_pool.latent":
        return "model.vision.head.probe"
    if key.startswith("vision."):
        for published, module in _VISION_RENAMES:
            if (new := _swap(key[len("vision."):], published, module)) is not None:
                return "model.vision." + new
    return None


def convert_state(tensors: Iterator[tuple[str, torch.Tensor]], config: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Published tensors -> :class:`DeepseekVL2ForCausalLM` state dict. Per-expert MoE weights are stacked into
    the native ``experts.gate_up_proj`` (E, 2I, H) and ``experts.down_proj`` (E, H, I); the timm ``qkv`` rows
    ``[q; k; v]`` split into ``q_proj/k_proj/v_proj``; the MAP head's ``q`` and ``kv`` join into
    ``attention.in_proj``. A key that maps to nothing keeps its published name (load_strict then names it)."""
    n_experts = _section(config, "language_config", REMOTE_LM_DEFAULTS)["n_routed_experts"]
    state: dict[str, torch.Tensor] = {}
    experts: dict[tuple[int, str], dict[int, torch.Tensor]] = {}
    pool: dict[tuple[str, str], torch.Tensor] = {}
    for key, t in tensors:
        if m := _EXPERT.fullmatch(key):
            experts.setdefault((int(m[1]), m[3]), {})[int(m[2])] = t
        elif m := _QKV.fullmatch(key):
            prefix = f"model.vision.encoder.layers.{m[1]}.self_attn."
            for name, part in zip("qkv", t.chunk(3, dim=0)):  # rows [q; k; v] (reshape (B, N, 3, heads, hd))
                state[f"{prefix}{name}_proj.{m[2]}"] = part
        elif m := _POOL_IN.fullmatch(key):
            pool[(m[1], m[2])] = t
        elif key == "vision.pos_embed":
            state["model.vision.embeddings.position_embedding.weight"] = t[0]  # (1, N, C) -> (N, C)
        else:
            state[_rename(key) or key] = t
    for kind in ("weight", "bias"):
        got = [pool.get((p, kind)) for p in ("q", "kv")]
        if any(g is not None for g in got):
            if any(g is None for g in got):
                raise ValueError(f"checkpoint has only one of vision.attn_pool.q/kv.{kind}")
            state[f"model.vision.head.attention.in_proj_{kind}"] = torch.cat(got)  # rows [q; k; v]
    for layer in sorted({layer for layer, _ in experts}):
        parts = {p: experts.get((layer, p), {}) for p in ("gate", "up", "down")}
        for p, found in parts.items():
            if sorted(found) != list(range(n_experts or 0)):
                raise ValueError(f"layer {layer}: checkpoint has {p}_proj for experts {sorted(found)[:8]}"
                                 f"{'...' if len(found) > 8 else ''}, expected 0..{(n_experts or 0) - 1}")
        prefix = f"model.language_model.layers.{layer}.mlp.experts."
        state[prefix + "gate_up_proj"] = torch.stack(
            [torch.cat([parts["gate"][e], parts["up"][e]]) for e in range(n_experts)])  # (E, 2I, H)
        state[prefix + "down_proj"] = torch.stack([parts["down"][e] for e in range(n_experts)])  # (E, H, I)
    return state


def published_state(model: DeepseekVL2ForCausalLM) -> dict[str, torch.Tensor]:
    """The inverse of :func:`convert_state`: the model's tensors under the published names."""
    qkv: dict[str, dict[str, torch.Tensor]] = {}  # published qkv name -> its q, k, v parts
    out: dict[str, torch.Tensor] = {}
    for key, t in model.state_dict().items():
        if m := re.fullmatch(r"model\.language_model\.layers\.(\d+)\.mlp\.experts\.(gate_up|down)_proj", key):
            base = f"language.model.layers.{m[1]}.mlp.experts."
            for e in range(t.shape[0]):
                if m[2] == "down":
                    out[f"{base}{e}.down_proj.weight"] = t[e]
                else:
                    gate, up = t[e].chunk(2)
                    out[f"{base}{e}.gate_proj.weight"], out[f"{base}{e}.up_proj.weight"] = gate, up
        elif m := re.fullmatch(r"model\.vision\.encoder\.layers\.(\d+)\.self_attn\.([qkv])_proj\.(weight|bias)", key):
            qkv.setdefault(f"vision.blocks.{m[1]}.attn.qkv.{m[3]}", {})[m[2]] = t
        elif m := re.fullmatch(r"model\.vision\.head\.attention\.in_proj_(weight|bias)", key):
            d = t.shape[0] // 3
            out[f"vision.attn_pool.q.{m[1]}"], out[f"vision.attn_pool.kv.{m[1]}"] = t[:d], t[d:]
        elif key == "model.vision.embeddings.position_embedding.weight":
            out["vision.pos_embed"] = t[None]
        else:
            out[_published_name(key)] = t
    for key, parts in qkv.items():
        out[key] = torch.cat([parts[p] for p in "qkv"])
    return out


def _published_name(module_key: str) -> str:
    if module_key == "lm_head.weight":
        return "language.lm_head.weight"
    if module_key == "model.vision.head.probe":
        return "vision.attn_pool.latent"
    if module_key.startswith("model.language_model."):
        return "language.model." + module_key[len("model.language_model."):]
    if module_key.startswith("model.vision."):
        for published, module in _VISION_RENAMES:
            if (new := _swap(module_key[len("model.vision."):], module, published)) is not None:
                return "vision." + new
        raise ValueError(f"no published name for {module_key}")
    return module_key[len("model."):]


# --- processor -------------------------------------------------------------------------------------

GROUNDING_TOKENS = ["<|ref|>", "<|/ref|>", "<|det|>", "<|/det|>", "<|grounding|>"]
CHAT_TOKENS = ["<|User|>", "<|Assistant|>"]
PROCESSOR_FILE = "processor_config.json"


def contain_size(size: tuple[int, int], box: tuple[int, int]) -> tuple[int, int]:
    """The size ``PIL.ImageOps.contain`` resizes a ``size`` image to inside ``box`` (its rounding)."""
    (w, h), (bw, bh) = size, box
    if w / h > bw / bh:
        return bw, round(h / w * bw)
    if w / h < bw / bh:
        return round(w / h * bh), bh
    return bw, bh


def letterbox(image: Image.Image, box: tuple[int, int], color: tuple[int, ...]) -> tuple[Image.Image, tuple[int, ...]]:
    """``ImageOps.pad(image, box, color=color)`` (bicubic, centred) and where the image went:
    ``(x0, y0, resized_w, resized_h)`` on the canvas."""
    rw, rh = contain_size(image.size, box)
    x0, y0 = round((box[0] - rw) * 0.5), round((box[1] - rh) * 0.5)
    canvas = Image.new("RGB", box, color)
    canvas.paste(image.resize((rw, rh), Image.Resampling.BICUBIC), (x0, y0))
    return canvas, (x0, y0, rw, rh)


class DeepseekVL2Processor:
    """The remote ``DeepseekVLV2Processor`` without torchvision: the same special tokens added in the same order,
    the same views (global letterbox + local tiles on the best candidate canvas) and the same ``<image>`` count.
    Reads and writes the published ``processor_config.json`` next to the tokenizer files."""

    def __init__(self, tokenizer: Any, candidate_resolutions: list[list[int]], patch_size: int, downsample_ratio: int,
                 image_mean=(0.5, 0.5, 0.5), image_std=(0.5, 0.5, 0.5), normalize: bool = True,
                 image_token: str = "<image>", pad_token: str = "<\uff5c\u2581pad\u2581\uff5c>", **settings: Any):
        self.tokenizer = tokenizer
        self.candidate_resolutions = [list(map(int, c)) for c in candidate_resolutions]
        self.patch_size, self.downsample_ratio = int(patch_size), int(downsample_ratio)
        self.image_mean, self.image_std, self.normalize = list(image_mean), list(image_std), bool(normalize)
        self.image_token, self.pad_token, self.settings = image_token, pad_token, settings
        if tokenizer.pad_token is None:
            tokenizer.add_special_tokens({"pad_token": pad_token})
        if image_token not in tokenizer.get_vocab():
            tokenizer.add_special_tokens({"additional_special_tokens": [image_token]})
        for group in (GROUNDING_TOKENS, CHAT_TOKENS):  # as the remote processor: appended when missing
            tokenizer.add_special_tokens({"additional_special_tokens": group})
        self.image_token_id = int(tokenizer.convert_tokens_to_ids(image_token))

    @property
    def image_size(self) -> int:
        return self.candidate_resolutions[0][0]

    @property
    def grid(self) -> int:
        """Tokens per tile side: ceil((S // patch) / downsample)."""
        return math.ceil((self.image_size // self.patch_size) / self.downsample_ratio)

    @property
    def seen_px(self) -> int:
        """Tile pixels the ViT's patches cover (384 // 14 * 14 = 378; the rest of the tile is never read)."""
        return self.image_size // self.patch_size * self.patch_size

    def num_image_tokens(self, nw: int, nh: int) -> int:
        g = self.grid
        return g * (g + 1) + 1 + nh * g * (nw * g + 1)

    def views(self, image: Image.Image) -> tuple[torch.Tensor, tuple[int, int], dict[str, Any]]:
        """``(tiles (1 + nw*nh, 3, S, S), (nw, nh), geometry)``: the global view, then the local tiles row-major."""
        image = image.convert("RGB")
        s = self.image_size
        color = tuple(int(m * 255) for m in self.image_mean)
        best = select_best_resolution(image.size, self.candidate_resolutions)
        glob, gplace = letterbox(image, (s, s), color)
        local, lplace = letterbox(image, best, color)
        nw, nh = best[0] // s, best[1] // s
        crops = [glob] + [local.crop((j * s, i * s, (j + 1) * s, (i + 1) * s)) for i in range(nh) for j in range(nw)]
        arr = np.stack([np.asarray(c, dtype=np.float32) / 255.0 for c in crops])  # (T, S, S, 3)
        if self.normalize:
            arr = (arr - np.asarray(self.image_mean, np.float32)) / np.asarray(self.image_std, np.float32)
        geometry = {"global_place": gplace, "local_place": lplace, "local_canvas": best}
        return torch.from_numpy(arr).permute(0, 3, 1, 2).contiguous(), (nw, nh), geometry

    def encode(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Ids without BOS/EOS, and each token's character span in ``text``."""
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]

    def batch_decode(self, ids: Any, **kwargs: Any) -> list[str]:
        return self.tokenizer.batch_decode(ids, **kwargs)

    def decode(self, ids: Any, **kwargs: Any) -> str:
        return self.tokenizer.decode(ids, **kwargs)

    def save_pretrained(self, directory: str | Path) -> None:
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        self.tokenizer.save_pretrained(str(folder))
        config = {**self.settings, "candidate_resolutions": self.candidate_resolutions,
                  "patch_size": self.patch_size, "downsample_ratio": self.downsample_ratio,
                  "image_mean": self.image_mean, "image_std": self.image_std, "normalize": self.normalize,
                  "image_token": self.image_token, "pad_token": self.pad_token,
                  "processor_class": "DeepseekVLV2Processor"}
        (folder / PROCESSOR_FILE).write_text(json.dumps(config, indent=2), encoding="utf-8")

    @classmethod
    def from_pretrained(cls, directory: str | Path) -> DeepseekVL2Processor:
        from transformers import AutoTokenizer

        folder = Path(directory)
        file = folder / PROCESSOR_FILE
        if not file.is_file():
            raise FileNotFoundError(f"{folder} has no {PROCESSOR_FILE} (DeepSeek-VL2's processor settings)")
        from vrh.infra.json_text import read_json

        config = read_json(file, max_bytes=2**20, max_depth=16, expect=dict)
        missing = [k for k in ("candidate_resolutions", "patch_size", "downsample_ratio") if k not in config]
        if missing:
            raise ValueError(f"{file} lacks {', '.join(missing)}")
        config.pop("processor_class", None)
        from vrh.models.composed import tokenizer_config

        return cls(AutoTokenizer.from_pretrained(str(folder), config=tokenizer_config(folder), trust_remote_code=False), **config)
