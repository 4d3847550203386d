"""DeepSeek-VL2's published tensor names <-> the names of the module vrh builds
(:class:`~vrh.models.adapters.deepseek_vl2.modeling.DeepseekVL2ForCausalLM`): the stacked MoE experts, the
timm ``qkv`` rows, the MAP head's ``q``/``kv``, and the one-to-one renames."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

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
    # the remote default of n_routed_experts is None (modeling.REMOTE_LM_DEFAULTS); read here without importing the
    # model, which imports this module
    n_experts = (config.get("language_config") or {}).get("n_routed_experts")
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


def published_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The inverse of :func:`convert_state`: a :class:`DeepseekVL2ForCausalLM`'s tensors under the published names."""
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
