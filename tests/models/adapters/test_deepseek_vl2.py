"""DeepSeek-VL2 without remote code: the published checkpoint layout loads strictly, the MoE and the MAP head are
assembled exactly, the MLA build (Small) passes the shared adapter checks like the MHA build (Tiny) does in
test_adapters.py, and ``inspect`` reads the real configs' head counts.

The checkpoint layout here is written from the remote code's modules (deepseek-ai/DeepSeek-VL2 @ ef9f91e:
``modeling_deepseek_vl_v2.py``, ``siglip_vit.py``, ``modeling_deepseek.py``; the prefixes are listed in
../shared/real/checkpoints/deepseek_vl2_*/modeling_key_prefixes.md), not from vrh's converter.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

import vrh
from vrh.models.adapters import get_adapter
from vrh.testing.tiny_deepseek_vl2 import (deepseek_vl2_processor, deepseek_vl2_tokenizer, tiny_deepseek_vl2,
                                           tiny_published_config)

from . import test_adapters as suite

REAL = Path(__file__).resolve().parents[4] / "shared" / "real" / "checkpoints"


def remote_shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    """Every tensor of the remote ``DeepseekVLV2ForCausalLM`` state dict for ``cfg`` (published schema)."""
    lang, vis, proj = cfg["language_config"], cfg["vision_config"], cfg["projector_config"]
    w, p = vis["width"], vis["patch_size"]
    hid = int(w * vis["mlp_ratio"])
    out: dict[str, tuple[int, ...]] = {"vision.patch_embed.proj.weight": (w, 3, p, p), "vision.patch_embed.proj.bias": (w,),
                                       "vision.pos_embed": (1, (vis["image_size"] // p) ** 2, w)}

    def linear(name: str, o: int, i: int, bias: bool = True) -> None:
        out[name + ".weight"] = (o, i)
        if bias:
            out[name + ".bias"] = (o,)

    def norm(name: str, n: int, bias: bool = True) -> None:
        out[name + ".weight"] = (n,)
        if bias:
            out[name + ".bias"] = (n,)

    for i in range(vis["layers"]):
        b = f"vision.blocks.{i}"
        norm(b + ".norm1", w), linear(b + ".attn.qkv", 3 * w, w), linear(b + ".attn.proj", w, w)
        norm(b + ".norm2", w), linear(b + ".mlp.fc1", hid, w), linear(b + ".mlp.fc2", w, hid)
    norm("vision.norm", w)
    out["vision.attn_pool.latent"] = (1, 1, w)  # timm AttentionPoolLatent (global_pool "map")
    linear("vision.attn_pool.q", w, w), linear("vision.attn_pool.kv", 2 * w, w), linear("vision.attn_pool.proj", w, w)
    norm("vision.attn_pool.norm", w), linear("vision.attn_pool.mlp.fc1", hid, w), linear("vision.attn_pool.mlp.fc2", w, hid)
    e = proj["n_embed"]
    linear("projector.layers.0", e * proj["mlp_ratio"], proj["input_dim"] * proj["downsample_ratio"] ** 2)
    linear("projector.layers.2", e, e * proj["mlp_ratio"])
    out["image_newline"] = out["view_seperator"] = (e,)
    d, heads, kv = lang["hidden_size"], lang["num_attention_heads"], lang["num_key_value_heads"]
    out["language.model.embed_tokens.weight"] = (lang["vocab_size"], d)
    for i in range(lang["num_hidden_layers"]):
        b = f"language.model.layers.{i}"
        norm(b + ".input_layernorm", d, False), norm(b + ".post_attention_layernorm", d, False)
        if lang["use_mla"]:  # DeepseekV2Attention, q_lora_rank None
            qk, r = lang["qk_nope_head_dim"] + lang["qk_rope_head_dim"], lang["kv_lora_rank"]
            linear(b + ".self_attn.q_proj", heads * qk, d, False)
            linear(b + ".self_attn.kv_a_proj_with_mqa", r + lang["qk_rope_head_dim"], d, False)
            norm(b + ".self_attn.kv_a_layernorm", r, False)
            linear(b + ".self_attn.kv_b_proj", heads * (lang["qk_nope_head_dim"] + lang["v_head_dim"]), r, False)
            linear(b + ".self_attn.o_proj", d, heads * lang["v_head_dim"], False)
        else:  # transformers 4.38 LlamaAttention
            hd = d // heads
            for name, rows in (("q", heads), ("k", kv), ("v", kv)):
                linear(f"{b}.self_attn.{name}_proj", rows * hd, d, False)
            linear(b + ".self_attn.o_proj", d, heads * hd, False)
        if i < lang["first_k_dense_replace"]:
            mlps = [(b + ".mlp", lang["intermediate_size"])]
        else:
            out[b + ".mlp.gate.weight"] = (lang["n_routed_experts"], d)
            mlps = [(f"{b}.mlp.experts.{x}", lang["moe_intermediate_size"]) for x in range(lang["n_routed_experts"])]
            mlps.append((b + ".mlp.shared_experts", lang["moe_intermediate_size"] * lang["n_shared_experts"]))
        for name, inter in mlps:
            linear(name + ".gate_proj", inter, d, False), linear(name + ".up_proj", inter, d, False)
            linear(name + ".down_proj", d, inter, False)
    norm("language.model.norm", d, False)
    out["language.lm_head.weight"] = (lang["vocab_size"], d)
    return out


def write_checkpoint(folder: Path, *, mla: bool, drop: str | None = None, extra: str | None = None,
                     **language) -> dict[str, torch.Tensor]:
    """A tiny checkpoint folder as deepseek-ai publishes one: config.json, model.safetensors under the remote
    names (random values), tokenizer files and processor_config.json. Returns the tensors written."""
    tok = deepseek_vl2_tokenizer()
    cfg = tiny_published_config(tok, mla=mla, **language)
    gen = torch.Generator().manual_seed(0)
    tensors = {k: torch.randn(s, generator=gen) * 0.2 for k, s in remote_shapes(cfg).items()}
    if drop:
        del tensors[drop]
    if extra:
        tensors[extra] = torch.zeros(3)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    save_file(tensors, str(folder / "model.safetensors"))
    deepseek_vl2_processor(tok, cfg).save_pretrained(folder)
    return tensors


@pytest.mark.parametrize("mla", [False, True], ids=["tiny_mha", "small_mla"])
def test_published_layout_loads_strictly_and_exactly(tmp_path, mla):
    """vrh.load_model on the published layout: every tensor consumed (numel conserved), each where the remote
    module would use it: qkv rows [q; k; v], pos_embed, the MAP head's q/kv, experts stacked per index."""
    written = write_checkpoint(tmp_path, mla=mla)
    lm = vrh.load_model(str(tmp_path))
    model, state = lm.model, lm.model.state_dict()
    assert sum(t.numel() for t in written.values()) == sum(p.numel() for p in model.parameters())
    w = 32
    qkv = written["vision.blocks.0.attn.qkv.weight"]
    for i, name in enumerate("qkv"):
        assert torch.equal(state[f"model.vision.encoder.layers.0.self_attn.{name}_proj.weight"], qkv[i * w:(i + 1) * w])
    assert torch.equal(state["model.vision.embeddings.position_embedding.weight"], written["vision.pos_embed"][0])
    assert torch.equal(state["model.vision.head.attention.in_proj_bias"],
                       torch.cat([written["vision.attn_pool.q.bias"], written["vision.attn_pool.kv.bias"]]))
    gate_up, down = state["model.language_model.layers.1.mlp.experts.gate_up_proj"], \
        state["model.language_model.layers.1.mlp.experts.down_proj"]
    for x in range(4):
        p = f"language.model.layers.1.mlp.experts.{x}."
        assert torch.equal(gate_up[x], torch.cat([written[p + "gate_proj.weight"], written[p + "up_proj.weight"]]))
        assert torch.equal(down[x], written[p + "down_proj.weight"])
    assert torch.equal(state["lm_head.weight"], written["language.lm_head.weight"])
    assert torch.equal(state["model.view_seperator"], written["view_seperator"])
    assert lm.adapter.name == "deepseek_vl2" and not any(p.is_meta for p in model.parameters())


def test_the_checkpoints_generation_config_is_read(tmp_path):
    """The stop tokens in the checkpoint's generation_config.json reach generate(): read by the composed families'
    shared load, not by each family (no DeepSeek-VL2 code names the file)."""
    write_checkpoint(tmp_path, mla=False)
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [3, 5], "pad_token_id": 0}))
    assert vrh.load_model(str(tmp_path)).model.generation_config.eos_token_id == [3, 5]


@pytest.mark.parametrize("norm_topk_prob", [False, True])
def test_moe_layer_is_the_remote_moe(tmp_path, norm_topk_prob):
    """The loaded MoE layer == the remote DeepseekV2MoE computed by hand from the published per-expert tensors
    (MoEGate: softmax, greedy top-2, renormalised when norm_topk_prob, times routed_scaling_factor)."""
    written = write_checkpoint(tmp_path, mla=False, norm_topk_prob=norm_topk_prob, routed_scaling_factor=1.5)
    model = vrh.load_model(str(tmp_path)).model
    x = torch.randn(7, 64, generator=torch.Generator().manual_seed(1))
    p = "language.model.layers.1.mlp."

    def mlp(prefix: str, h: torch.Tensor) -> torch.Tensor:
        return F.linear(F.silu(F.linear(h, written[prefix + "gate_proj.weight"])) * F.linear(h, written[prefix + "up_proj.weight"]),
                        written[prefix + "down_proj.weight"])

    scores = F.linear(x, written[p + "gate.weight"]).softmax(-1)  # (N, E)
    weight, idx = scores.topk(2, dim=-1)
    if norm_topk_prob:
        weight = weight / weight.sum(-1, keepdim=True)
    weight = weight * 1.5
    want = torch.stack([sum(weight[n, k] * mlp(f"{p}experts.{int(idx[n, k])}.", x[n]) for k in range(2))
                        for n in range(len(x))]) + mlp(p + "shared_experts.", x)
    with torch.no_grad():
        got = model.model.language_model.layers[1].mlp(x[None])[0]
    assert torch.allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("mla", [False, True], ids=["tiny_mha", "small_mla"])
def test_image_embeddings_sit_where_the_remote_model_puts_them(mla):
    """The LM's input at each image position, as the remote ``prepare_inputs_embeds`` lays it out: tile t's
    projected features (global view t = 0, then local tiles row-major), global rows + ``image_newline``, one
    ``view_seperator``, local tiles stitched ``(th h) (tw w)`` + a newline per row."""
    model, processor = tiny_deepseek_vl2(mla=mla)
    adapter = get_adapter("deepseek_vl_v2")
    batch = adapter.build_batch(processor, suite.IMAGES, [adapter.grounding_prompt("red ball")] * 2)
    with torch.no_grad():
        embeds = model(**batch.inputs, output_hidden_states=True).hidden_states[0]  # [B, S, D]
        for b in range(2):
            nw, nh = batch.inputs["images_spatial_crop"][b].tolist()
            tiles = batch.inputs["pixel_values"][b, :1 + nw * nh]
            feats = model.model.projector(model.model.vision(pixel_values=tiles).last_hidden_state)  # [T, g*g, D]
            g = 3
            newline, sep = model.model.image_newline, model.model.view_seperator
            want = [feats[0, i * g + j] if j < g else newline for i in range(g) for j in range(g + 1)] + [sep]
            for row in range(nh * g):
                for col in range(nw * g + 1):
                    tile, i, j = 1 + (row // g) * nw + col // g, row % g, col % g
                    want.append(newline if col == nw * g else feats[tile, i * g + j])
            got = embeds[b, batch.visual_positions[b]]
            assert torch.allclose(got, torch.stack(want), atol=1e-6)


def test_missing_and_extra_keys_are_refused(tmp_path):
    write_checkpoint(tmp_path / "missing", mla=True, drop="language.model.layers.1.self_attn.kv_b_proj.weight")
    with pytest.raises(ValueError, match=r"1 missing: model\.language_model\.layers\.1\.self_attn\.kv_b_proj\.weight"):
        vrh.load_model(str(tmp_path / "missing"))
    write_checkpoint(tmp_path / "extra", mla=False, extra="language.model.layers.0.self_attn.rotary_emb.inv_freq")
    with pytest.raises(ValueError, match=r"1 unexpected: model\.language_model\.layers\.0\.self_attn\.rotary_emb\.inv_freq"):
        vrh.load_model(str(tmp_path / "extra"))
    write_checkpoint(tmp_path / "expert", mla=False, drop="language.model.layers.1.mlp.experts.2.up_proj.weight")
    with pytest.raises(ValueError, match=r"layer 1: checkpoint has up_proj for experts \[0, 1, 3\]"):
        vrh.load_model(str(tmp_path / "expert"))


def test_unsupported_configs_are_refused_in_one_line():
    from vrh.models.adapters.deepseek_vl2.modeling import DeepseekVL2ForCausalLM

    tok = deepseek_vl2_tokenizer()
    bad = tiny_published_config(tok, topk_method="gready")  # the remote config class's default: it would not run
    with pytest.raises(ValueError, match="topk_method 'gready'"):
        DeepseekVL2ForCausalLM.from_published(bad)
    with pytest.raises(ValueError, match="tile_tag '1D'"):
        DeepseekVL2ForCausalLM.from_published(dict(tiny_published_config(tok), tile_tag="1D"))


# --- the MLA build (Small) through the shared suite's checks ------------------------------------

@pytest.fixture(scope="module")
def mla_family():
    model, processor = tiny_deepseek_vl2(mla=True)
    return "deepseek_vl2", get_adapter("deepseek_vl_v2"), model, processor


def test_mla_head_grid(mla_family):
    _, adapter, model, _ = mla_family
    assert type(adapter.attention_module(model, 0)).__name__ == "DeepseekV2Attention"
    assert adapter.num_heads(model) == 4 and adapter.head_dim(model) == 8  # v_head_dim, not q/k's 12
    assert adapter.o_proj(model, 1).in_features == 4 * 8


@pytest.mark.parametrize("check", ["test_capture_matches_eager", "test_masking_matches_zeroed_o_proj_columns",
                                   "test_visual_rects_match_pixel_content", "test_image_tokens_depend_on_pixels",
                                   "test_generate_runs", "test_format_parse_round_trip"])
def test_mla_build_passes_the_shared_checks(mla_family, check):
    getattr(suite, check)(mla_family)


def test_generation_without_cache_still_sees_the_image():
    """``use_cache=False`` re-runs the whole sequence each step: the image is spliced in every time, so the
    greedy answer is the cached one's."""
    model, processor = tiny_deepseek_vl2()
    adapter = get_adapter("deepseek_vl_v2")
    batch = adapter.build_batch(processor, suite.IMAGES, [adapter.grounding_prompt("red ball")] * 2)
    kw = dict(max_new_tokens=4, do_sample=False, pad_token_id=processor.tokenizer.pad_token_id)
    with torch.no_grad():
        cached = model.generate(**batch.inputs, **kw)
        plain = model.generate(**batch.inputs, use_cache=False, **kw)
        scores = model.generate(**batch.inputs, use_cache=False, output_scores=True, return_dict_in_generate=True,
                                **kw).scores
        blind = {k: v for k, v in batch.inputs.items() if k != "pixel_values"}
        blind_scores = model.generate(**blind, output_scores=True, return_dict_in_generate=True, **kw).scores
    assert torch.equal(cached, plain)
    assert not torch.allclose(scores[-1], blind_scores[-1])  # the last step still depends on the image


def test_mla_build_round_trips_through_the_published_layout(mla_family, tmp_path):
    suite.test_from_pretrained_round_trip(mla_family, tmp_path)


def test_mla_build_one_pass_rows_equal_teacher_forced(monkeypatch):
    """The one-pass check (rows captured while generating == teacher-forced rows; tests/core) on the MLA build,
    whose cache holds the compressed latents and re-expands keys at every step."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "core" / "test_generation_capture.py"
    spec = importlib.util.spec_from_file_location("_generation_capture_checks", path)
    checks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(checks)
    monkeypatch.setitem(checks.TINY_BUILDERS, "deepseek_vl2", lambda seed=0: tiny_deepseek_vl2(seed, mla=True))
    checks.test_rows_during_generation_equal_teacher_forced("deepseek_vl2", monkeypatch)


# --- inspect on the real configs -----------------------------------------------------------------

def _json_value(text: str, key: str):
    """The JSON value after ``"key":`` in a truncated excerpt (objects and lists by bracket matching)."""
    start = re.search(rf'"{key}"\s*:\s*', text).end()
    opener = text[start]
    if opener not in "[{":
        return json.loads(re.match(r'("[^"]*"|[^,}\s]+)', text[start:]).group(1))
    depth = 0
    for i, ch in enumerate(text[start:], start):
        depth += {"[": 1, "{": 1, "]": -1, "}": -1}.get(ch, 0)
        if depth == 0:
            return json.loads(text[start:i + 1])
    raise ValueError(f"{key} is truncated in the excerpt")


# SigLIP so400m as the remote code's SigLIP_MODEL_CONFIG gives it: the excerpts stop inside vision_config
SO400M = {"model_name": "siglip_so400m_patch14_384", "image_size": 384, "patch_size": 14, "width": 1152, "layers": 27,
          "heads": 16, "mlp_ratio": 3.7362, "global_pool": "map", "ignore_head": True}


def _real_checkpoint(tmp_path: Path, name: str) -> Path:
    src = REAL / name
    if not src.is_dir():
        pytest.skip(f"{src} absent (the shared real configs)")
    text = (src / "config.json.EXCERPT.txt").read_text(encoding="utf-8")
    body = text[text.index("(B)"):] if "(B)" in text else text
    body = body[body.index("{"):]
    if name == "deepseek_vl2_tiny":
        language = _json_value(body, "language_config")
        projector = _json_value(body, "projector_config")
    else:  # Small: language_config stops at "q_lora_rank"; take the keys it shows, the rest are remote defaults
        part = body[body.index('"language_config"'):body.index('"q_lora_rank')]
        language = {k: json.loads(v) for k, v in re.findall(r'"(\w+)":\s*(-?[\d.]+|true|false|null|"[^"]*")', part)}
        projector = {"n_embed": language["hidden_size"]}  # the projector feeds the LM
        language["topk_method"] = "greedy"  # not captured (DeepSeek-V2-Lite's); routing changes no head or token
    config = {"model_type": "deepseek_vl_v2", "candidate_resolutions": _json_value(body, "candidate_resolutions"),
              "global_view_pos": _json_value(body, "global_view_pos"), "tile_tag": "2D",
              "language_config": language, "projector_config": projector, "vision_config": SO400M}
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    processor = src / "processor_config.json"  # Small's is not in ../shared: Tiny's settings, its own canvases
    settings = json.loads((REAL / "deepseek_vl2_tiny" / "processor_config.json").read_text(encoding="utf-8"))
    if processor.is_file():
        settings = json.loads(processor.read_text(encoding="utf-8"))
    (folder / "processor_config.json").write_text(json.dumps({**settings, "candidate_resolutions":
                                                              config["candidate_resolutions"]}))
    return folder


@pytest.mark.parametrize("name, layers, heads, kv_heads, head_dim, attention", [
    ("deepseek_vl2_tiny", 12, 10, 10, 128, "DeepseekOcr2TextAttention"),
    ("deepseek_vl2_small", 27, 16, 16, 128, "DeepseekV2Attention")])
def test_inspect_real_configs(tmp_path, name, layers, heads, kv_heads, head_dim, attention):
    """Heads and visual tokens from the real configs (the paper's Tab. A7 lists only the four main models). A
    384 x 384 image: 14 x 15 global + 1 + 14 x 15 local = 421 tokens, 196 cells; 768 x 384: 210 + 1 + 14 x 29."""
    from vrh.models.inspect import inspect_checkpoint
    from vrh.testing.builders import stand_in_tokenizer

    folder = _real_checkpoint(tmp_path, name)
    got = inspect_checkpoint(str(folder), image_sizes=((384, 384), (768, 384)), stand_in=stand_in_tokenizer)
    assert (got.num_layers, got.num_heads, got.num_kv_heads, got.head_dim) == (layers, heads, kv_heads, head_dim)
    assert set(got.attention_classes) == {attention}
    assert [(v.tokens, v.cells) for v in got.visual] == [(421, 196), (617, 392)], [v.note for v in got.visual]
    if name == "deepseek_vl2_tiny":  # the README's "vl2-tiny, 3.37B-MoE in total" (Small's q_lora_rank is unknown)
        assert 3.365e9 < got.parameters < 3.375e9
