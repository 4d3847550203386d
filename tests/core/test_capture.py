"""capture_attention_rows against eager ``output_attentions=True`` on tiny random-init real architectures.

Why these cases: each one exercises a different way transformers hands the mask (or no mask) and the
keys to the attention function: GQA + left padding + real images (Qwen2.5-VL), q/k-normed interleaved
mrope (Qwen3-VL), sliding-window layers with a window shorter than the sequence (Qwen2), logit
softcapping (Gemma2, which sdpa cannot run), ``attention_mask=None`` (pure causal, sdpa's is_causal),
and a KV cache (q_len != kv_len, materialized offset mask; and one-token decode with no mask).
"""

from __future__ import annotations

import copy

import pytest
import torch

import vrh.core.capture as capture_mod
from vrh.core.attention import active_observers, observe_attention
from vrh.core.capture import IMPL_NAME, MultipleForwardsError, capture_attention_rows

TOL = 1e-5
IMG, VIDEO, VSTART, VEND, PAD = 5, 6, 3, 4, 0
TEXT = dict(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=512, pad_token_id=PAD, bos_token_id=1, eos_token_id=2)
MROPE = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]}


class StandIn:
    """Minimal adapter: where the language model's layers are (real adapters land in vrh.models.adapters)."""

    def __init__(self, layers_of):
        self._layers_of = layers_of

    def text_config(self, model):
        return getattr(model.config, "text_config", model.config)

    def decoder_layers(self, model):
        return self._layers_of(model)

    def num_layers(self, model):
        return len(self.decoder_layers(model))

    def attention_module(self, model, layer):
        return self.decoder_layers(model)[layer].self_attn


VLM = StandIn(lambda m: m.model.language_model.layers)
LM = StandIn(lambda m: m.model.layers)


# --- tiny models ------------------------------------------------------------------------------------
def _build(cls, config, impl="sdpa"):
    torch.manual_seed(0)
    return cls._from_config(config, attn_implementation=impl, dtype=torch.float32).eval()


def qwen2_5_vl():
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                  patch_size=14, window_size=56, fullatt_block_indexes=[1])
    cfg = Qwen2_5_VLConfig(text_config=dict(TEXT, rope_parameters=MROPE), vision_config=vision,
                           image_token_id=IMG, video_token_id=VIDEO, vision_start_token_id=VSTART,
                           vision_end_token_id=VEND)
    return _build(Qwen2_5_VLForConditionalGeneration, cfg)


def qwen3_vl():
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                  patch_size=16, num_position_embeddings=64, deepstack_visual_indexes=[0])
    text = dict(TEXT, head_dim=16, rope_parameters=dict(MROPE, mrope_interleaved=True))
    cfg = Qwen3VLConfig(text_config=text, vision_config=vision, image_token_id=IMG, video_token_id=VIDEO,
                        vision_start_token_id=VSTART, vision_end_token_id=VEND)
    return _build(Qwen3VLForConditionalGeneration, cfg)


def qwen2_sliding():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(**dict(TEXT, num_hidden_layers=3), use_sliding_window=True, sliding_window=4,
                      max_window_layers=1)
    assert cfg.layer_types == ["full_attention", "sliding_attention", "sliding_attention"]
    return _build(Qwen2ForCausalLM, cfg)


def gemma2_softcap():
    from transformers import Gemma2Config, Gemma2ForCausalLM

    # initializer_range 0.5 so attention logits reach the softcap (tanh is ~identity for tiny logits)
    cfg = Gemma2Config(**dict(TEXT, head_dim=16), attn_logit_softcapping=5.0, final_logit_softcapping=30.0,
                       query_pre_attn_scalar=16, sliding_window=4, initializer_range=0.5)
    return _build(Gemma2ForCausalLM, cfg, impl="eager")


# --- inputs -----------------------------------------------------------------------------------------
def _left_pad(seqs):
    width = max(len(s) for s in seqs)
    ids = torch.tensor([[PAD] * (width - len(s)) + s for s in seqs])  # (B, S)
    mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in seqs])  # (B, S)
    return ids, mask


def _text(n, seed):
    return torch.randint(10, 64, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _positions(mask, last):
    """The last ``last[b]`` positions of each sample plus its first real token."""
    s = mask.shape[1]
    return [torch.tensor([s - 1 - int(m.sum()) + 1] + list(range(s - k, s))) for m, k in zip(mask, last)]


def _eager_rows(model, inputs, positions, **kw):
    eager = copy.deepcopy(model)
    eager.set_attn_implementation("eager")
    with torch.no_grad():
        out = eager(**inputs, output_attentions=True, **kw)
    att = [a.float() for a in out.attentions]  # per layer (B, H, N, S)
    return [torch.stack([a[b][:, p] for a in att]) for b, p in enumerate(positions)], out  # (L, H, Q_b, S)


def _check(model, adapter, inputs, positions, sdpa_logits=None, **kw):
    """Capture vs eager rows, capture logits vs plain logits, and the restore; returns the capture."""
    observers = active_observers()
    with torch.no_grad():
        plain = model(**inputs, **kw).logits if sdpa_logits is None else sdpa_logits
        with capture_attention_rows(model, adapter, positions) as cap:
            logits = model(**inputs, **kw).logits
    want, _ = _eager_rows(model, inputs, positions, **kw)
    assert cap.num_forwards == 1
    for b, w in enumerate(want):
        got = cap.rows(b)
        assert got.dtype == torch.float32 and got.device.type == "cpu" and got.shape == w.shape
        assert (got - w).abs().max().item() <= TOL
    assert torch.equal(logits, plain)
    assert adapter.text_config(model)._attn_implementation != IMPL_NAME
    assert active_observers() == observers  # the capture unsubscribed
    return cap


# --- tests ------------------------------------------------------------------------------------------
def test_qwen2_5_vl_gqa_left_padded_with_images():
    model = qwen2_5_vl()
    seqs = [_text(3, 1) + [VSTART] + [IMG] * 4 + [VEND] + _text(7, 2),
            _text(2, 3) + [VSTART] + [IMG] * 4 + [VEND] + _text(3, 4)]
    ids, mask = _left_pad(seqs)
    assert mask[1, 0] == 0  # really left-padded
    pixels = torch.randn(32, 3 * 2 * 14 * 14, generator=torch.Generator().manual_seed(0))  # 2 images, 4x4 patches
    inputs = dict(input_ids=ids, attention_mask=mask, pixel_values=pixels,
                  image_grid_thw=torch.tensor([[1, 4, 4], [1, 4, 4]]))
    vision_impl = model.config.vision_config._attn_implementation
    seen = {}
    with torch.no_grad(), capture_attention_rows(model, VLM, _positions(mask, [3, 2])):
        seen["text"] = model.config.text_config._attn_implementation
        seen["vision"] = model.config.vision_config._attn_implementation
    assert seen == {"text": IMPL_NAME, "vision": vision_impl}  # only the language model switches
    _check(model, VLM, inputs, _positions(mask, [3, 2]))
    assert model.config.text_config._attn_implementation == "sdpa"


def test_qwen3_vl_text_only_left_padded():
    model = qwen3_vl()
    ids, mask = _left_pad([_text(12, 5), _text(8, 6)])
    _check(model, VLM, dict(input_ids=ids, attention_mask=mask), _positions(mask, [4, 2]))


def test_sliding_window_layers_padded():
    model = qwen2_sliding()
    ids, mask = _left_pad([_text(14, 7), _text(10, 8)])  # window 4 << 14
    _check(model, LM, dict(input_ids=ids, attention_mask=mask), _positions(mask, [5, 3]))


def test_softcapped_gemma2_against_eager_logits():
    model = gemma2_softcap()  # built eager: sdpa cannot softcap, so eager is the plain reference
    ids, mask = _left_pad([_text(12, 9), _text(9, 10)])
    inputs = dict(input_ids=ids, attention_mask=mask)
    positions = _positions(mask, [3, 3])
    with torch.no_grad():
        ref = model(**inputs).logits
        with capture_attention_rows(model, LM, positions) as cap:
            logits = model(**inputs).logits
    assert (logits - ref).abs().max().item() <= TOL
    want, _ = _eager_rows(model, inputs, positions)
    for b, w in enumerate(want):
        assert (cap.rows(b) - w).abs().max().item() <= TOL
    assert model.config._attn_implementation == "eager"


def test_mask_none_pure_causal():
    model = qwen2_5_vl()
    ids = torch.tensor([_text(11, 11)])  # batch 1, no padding, no attention_mask -> sdpa's is_causal path
    seen = []
    with observe_attention(lambda call: seen.append((call.attention_mask is None, call.is_causal))):
        _check(model, VLM, dict(input_ids=ids), [torch.tensor([0, 4, 10])])
    assert seen and all(none and causal for none, causal in seen)


def test_kv_cache_offset_and_decode():
    from transformers import DynamicCache

    model = qwen2_sliding()
    eager = copy.deepcopy(model)
    eager.set_attn_implementation("eager")
    ids, mask = _left_pad([_text(9, 12), _text(6, 13)])
    new_ids = torch.tensor([_text(3, 14), _text(3, 15)])
    full_mask = torch.cat([mask, torch.ones(2, 3, dtype=mask.dtype)], dim=1)
    positions = [torch.tensor([0, 2]), torch.tensor([1])]  # indices into this forward's 3 new tokens
    with torch.no_grad():
        cache, eager_cache = DynamicCache(config=model.config), DynamicCache(config=model.config)
        model(input_ids=ids, attention_mask=mask, cache=cache)
        eager(input_ids=ids, attention_mask=mask, cache=eager_cache)
        with capture_attention_rows(model, LM, positions) as cap:
            model(input_ids=new_ids, attention_mask=full_mask, cache=cache)
        out = eager(input_ids=new_ids, attention_mask=full_mask, cache=eager_cache, output_attentions=True)
    # the sliding layers' cache keeps only its last keys: 3 + 3 new instead of 9 + 3
    assert [a.shape[-1] for a in out.attentions] == [12, 6, 6]
    for b, p in enumerate(positions):
        got = cap.rows(b)  # (L, H, Q_b, 12), sliding layers right-aligned
        assert got.shape[-1] == 12 and got[1:, :, :, :6].abs().max() == 0
        for layer, a in enumerate(out.attentions):
            assert (got[layer, :, :, 12 - a.shape[-1]:] - a[b][:, p]).abs().max().item() <= TOL

    # one-token decode without padding: transformers passes no mask, all cached keys are visible
    one = torch.tensor([_text(7, 16)])
    with torch.no_grad():
        c1, c2 = DynamicCache(config=model.config), DynamicCache(config=model.config)
        model(input_ids=one, cache=c1)
        eager(input_ids=one, cache=c2)
        step = torch.tensor([[17]])
        with capture_attention_rows(model, LM, [torch.tensor([0])], layers=[0]) as cap:
            model(input_ids=step, cache=c1)
        out = eager(input_ids=step, cache=c2, output_attentions=True)
    assert (cap.rows(0)[0] - out.attentions[0][0]).abs().max().item() <= TOL


def test_only_requested_rows_and_layers_are_stored():
    model = qwen2_5_vl()
    ids, mask = _left_pad([_text(10, 17), _text(7, 18)])
    positions = [torch.tensor([9]), torch.tensor([5, 8, 9])]
    with torch.no_grad(), capture_attention_rows(model, VLM, positions, layers=[1]) as cap:
        model(input_ids=ids, attention_mask=mask)
    kept = [[tuple(part.shape) for part in parts] for parts in cap._parts]
    assert kept == [[(4, 1, 10)], [(4, 3, 10)]]  # all that is kept: one layer, the requested rows
    want, _ = _eager_rows(model, dict(input_ids=ids, attention_mask=mask), positions)
    for b in range(2):
        assert (cap.rows(b)[0] - want[b][1]).abs().max().item() <= TOL


def test_second_forward_raises_and_state_is_restored():
    model = qwen2_5_vl()
    ids = torch.tensor([_text(6, 19)])
    hooks_before = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())
    with pytest.raises(MultipleForwardsError), torch.no_grad():
        with capture_attention_rows(model, VLM, [torch.tensor([5])]):
            model(input_ids=ids)
            model(input_ids=ids)
    assert model.config.text_config._attn_implementation == "sdpa"
    assert active_observers() == ()
    assert sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules()) == hooks_before
    # registration is idempotent and leaves sdpa itself untouched
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.modeling_utils import AttentionInterface

    capture_mod.ensure_registered()
    capture_mod.ensure_registered()
    assert AttentionInterface._global_mapping["sdpa"] is sdpa_attention_forward
    with pytest.raises(RuntimeError, match="no language-model forward"):
        with capture_attention_rows(model, VLM, [torch.tensor([0])]) as cap:
            pass
        cap.rows(0)


@pytest.mark.parametrize("padded", [True, False])
def test_cpu_rows_larger_than_the_keys_are_computed_after_the_forward_and_exact(padded):
    # 9 rows x 4 heads in float32 outweigh 2 KV heads x 16 dims: the capture keeps the operands, not the rows,
    # until the block exits (so the rows do not stack on the forward's peak), and the rows are still eager's.
    model = qwen2_5_vl()
    ids, mask = _left_pad([_text(12, 21), _text(9, 22)] if padded else [_text(12, 21)])
    inputs = dict(input_ids=ids, attention_mask=mask) if padded else dict(input_ids=ids)
    positions = _positions(mask, [8] * len(ids))
    during = []
    with torch.no_grad():
        plain = model(**inputs).logits
        with capture_attention_rows(model, VLM, positions) as cap:
            with observe_attention(lambda call: during.append([p[0] is None for p in cap._parts])):
                model(**inputs)
    assert during == [[True] * len(ids)] * 2  # nothing computed while the forward ran (2 layers)
    assert cap._deferred == [] and all(p is not None for parts in cap._parts for p in parts)
    _check(model, VLM, inputs, positions, sdpa_logits=plain)
