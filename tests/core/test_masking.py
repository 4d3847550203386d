import copy
import dataclasses
import re

import pytest
import torch
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

from vrh.core.masking import mask_heads, validate_heads

NUM_LAYERS, NUM_HEADS, NUM_KV, HIDDEN = 3, 4, 2, 32
HEAD_DIM = HIDDEN // NUM_HEADS
PAD = 0


class StandInAdapter:
    """The slice of the Adapter interface mask_heads uses (real Qwen adapter is written elsewhere)."""

    def __init__(self, head_dim: int = HEAD_DIM):
        self._head_dim = head_dim

    def num_layers(self, model):
        return model.config.text_config.num_hidden_layers

    def num_heads(self, model):
        return model.config.text_config.num_attention_heads

    def head_dim(self, model):
        return self._head_dim

    def o_proj(self, model, layer):
        return model.model.language_model.layers[layer].self_attn.o_proj


ADAPTER = StandInAdapter()


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(1234)
    cfg = Qwen2_5_VLConfig(
        text_config=dict(
            vocab_size=128, hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=NUM_LAYERS,
            num_attention_heads=NUM_HEADS, num_key_value_heads=NUM_KV, max_position_embeddings=256,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [1, 1, 2]},
            pad_token_id=PAD, bos_token_id=1, eos_token_id=2,
            # large init so every head visibly moves the logits
            initializer_range=0.3,
        ),
        vision_config=dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=HIDDEN,
                           patch_size=14, spatial_merge_size=2, temporal_patch_size=2, fullatt_block_indexes=[0]),
        image_token_id=120, video_token_id=121, vision_start_token_id=122, vision_end_token_id=123,
        pad_token_id=PAD, bos_token_id=1, eos_token_id=2,
    )
    return Qwen2_5_VLForConditionalGeneration(cfg).eval()


def weight_zeroed(model, heads):
    """Independent reference: a copy whose o_proj input columns for ``heads`` are zero."""
    ref = copy.deepcopy(model)
    with torch.no_grad():
        for layer, head in heads:
            w = ref.model.language_model.layers[layer].self_attn.o_proj.weight  # [hidden, H*d_head]
            w[:, head * HEAD_DIM:(head + 1) * HEAD_DIM] = 0
    return ref


def logits(model, ids, mask=None):
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask).logits


def snapshot(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def assert_clean(model, before):
    after = model.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert all(len(m._forward_pre_hooks) == 0 for m in model.modules())
    assert all(len(m._forward_hooks) == 0 for m in model.modules())


def ids(n=9, batch=1):
    return torch.randint(3, 120, (batch, n))


# --- validation ---------------------------------------------------------------------------------


def test_validate_groups_and_allows_duplicates():
    assert validate_heads([(2, 1), (0, 3), (2, 1), (2, 0)], 3, 4) == {0: [3], 2: [0, 1]}


@pytest.mark.parametrize("bad, msg", [
    ((3, 0), "layer 3 out of range"),
    ((-1, 0), "layer -1 out of range"),
    ((0, 4), "head 4 out of range"),
    ((0, -1), "head -1 out of range"),
    ((0.0, 1), "pair of integers"),
    ((True, 1), "pair of integers"),
    ((1, 2, 3), "pair of integers"),
    ("ab", "pair of integers"),
])
def test_validate_rejects(bad, msg):
    with pytest.raises(ValueError, match=msg):
        validate_heads([(0, 0), bad], 3, 4)


def test_bad_heads_install_nothing(model):
    before = snapshot(model)
    with pytest.raises(ValueError, match="out of range"):
        with mask_heads(model, ADAPTER, [(0, 0), (0, NUM_HEADS)]):
            pytest.fail("body must not run")
    assert_clean(model, before)


def test_geometry_mismatch_is_reported(model):
    before = snapshot(model)
    with pytest.raises(ValueError, match="head geometry"):
        with mask_heads(model, StandInAdapter(head_dim=HEAD_DIM * 2), [(0, 0), (1, 0)]):
            pass
    assert_clean(model, before)


# --- equivalence with weight zeroing --------------------------------------------------------------


def test_empty_is_noop(model):
    x = ids()
    base = logits(model, x)
    with mask_heads(model, ADAPTER, []):
        assert len(model.model.language_model.layers[0].self_attn.o_proj._forward_pre_hooks) == 0
        assert torch.equal(logits(model, x), base)


@pytest.mark.parametrize("heads", [
    [(0, 0)],
    [(1, 3)],
    [(0, 1), (2, 2), (2, 0)],
    [(1, h) for h in range(NUM_HEADS)],  # a whole layer
    [(2, 1), (2, 1)],  # duplicates
])
def test_matches_weight_zeroed_copy(model, heads):
    x = ids()
    before = snapshot(model)
    ref = logits(weight_zeroed(model, heads), x)
    with mask_heads(model, ADAPTER, heads):
        got = logits(model, x)
    assert torch.allclose(got, ref, rtol=0, atol=1e-6)
    # and the mask actually did something
    assert (got - logits(model, x)).abs().max() > 1e-3
    assert_clean(model, before)


def test_nested_contexts_add_up(model):
    x = ids()
    ref = logits(weight_zeroed(model, [(0, 1), (2, 3)]), x)
    with mask_heads(model, ADAPTER, [(0, 1)]):
        with mask_heads(model, ADAPTER, [(2, 3)]):
            got = logits(model, x)
    assert torch.allclose(got, ref, rtol=0, atol=1e-6)


def test_clean_after_exception(model):
    before = snapshot(model)
    with pytest.raises(RuntimeError, match="boom"):
        with mask_heads(model, ADAPTER, [(0, 0), (1, 2)]):
            assert len(model.model.language_model.layers[1].self_attn.o_proj._forward_pre_hooks) == 1
            logits(model, ids())
            raise RuntimeError("boom")
    assert_clean(model, before)


# --- generation with a KV cache ---------------------------------------------------------------------


def test_generate_with_kv_cache(model):
    heads = [(0, 2), (1, 0), (2, 3)]
    x = ids(6)
    kw = dict(max_new_tokens=5, do_sample=False, use_cache=True, return_dict_in_generate=True,
              output_logits=True, attention_mask=torch.ones_like(x))
    seen_lengths = []
    spy = ADAPTER.o_proj(model, 0).register_forward_pre_hook(lambda m, a: seen_lengths.append(a[0].shape[1]))
    try:
        with torch.no_grad(), mask_heads(model, ADAPTER, heads):
            got = model.generate(input_ids=x, **kw)
    finally:
        spy.remove()
    with torch.no_grad():
        ref = weight_zeroed(model, heads).generate(input_ids=x, **kw)
        plain = model.generate(input_ids=x, **kw)
    assert seen_lengths[0] == 6 and set(seen_lengths[1:]) == {1}  # decode steps see S=1
    assert got.sequences.shape == (1, 11)
    assert torch.equal(got.sequences, ref.sequences)
    for step_got, step_ref in zip(got.logits, ref.logits):
        assert torch.allclose(step_got, step_ref, rtol=0, atol=1e-6)
    assert any((a - b).abs().max() > 1e-3 for a, b in zip(got.logits, plain.logits))
    assert all(len(m._forward_pre_hooks) == 0 for m in model.modules())


# --- batching with left padding ---------------------------------------------------------------------


def test_left_padded_batch_matches_single_runs(model):
    heads = [(0, 1), (1, 3)]
    rows = [ids(7)[0], ids(4)[0], ids(5)[0]]
    S = max(len(r) for r in rows)
    batch = torch.full((len(rows), S), PAD)
    attn = torch.zeros((len(rows), S), dtype=torch.long)
    for b, r in enumerate(rows):
        batch[b, S - len(r):] = r  # left padding
        attn[b, S - len(r):] = 1
    with mask_heads(model, ADAPTER, heads):
        batched = logits(model, batch, attn)
        singles = [logits(model, r[None]) for r in rows]
        gen_batched = model.generate(input_ids=batch, attention_mask=attn, max_new_tokens=4, do_sample=False)
        gen_single = [model.generate(input_ids=r[None], attention_mask=torch.ones_like(r[None]),
                                     max_new_tokens=4, do_sample=False) for r in rows]
    unmasked = logits(model, batch, attn)
    for b, r in enumerate(rows):
        assert torch.allclose(batched[b, S - len(r):], singles[b][0], rtol=0, atol=1e-4)
        assert torch.equal(gen_batched[b, S:], gen_single[b][0, len(r):])
    assert (batched - unmasked)[attn.bool()].abs().max() > 1e-3


def test_real_qwen_adapter_agrees_with_stand_in(model):
    from vrh.models.adapters import get_adapter

    adapter = get_adapter("qwen2_5_vl")
    assert (adapter.num_layers(model), adapter.num_heads(model), adapter.head_dim(model)) == (
        NUM_LAYERS, NUM_HEADS, HEAD_DIM)
    x = ids()
    with mask_heads(model, adapter, [(1, 2), (2, 0)]):
        got = logits(model, x)
    assert torch.allclose(got, logits(weight_zeroed(model, [(1, 2), (2, 0)]), x), rtol=0, atol=1e-6)


# --- uniform mode (Retrieval Heads' ablation): attention made uniform over the visible keys ----------
import vrh.core.attention as attention_mod  # noqa: E402
from transformers.masking_utils import AttentionMaskInterface, eager_mask  # noqa: E402
from transformers.modeling_utils import AttentionInterface  # noqa: E402

REF_IMPL = "vrh_test_uniform_reference"
REF_HEADS: dict[int, list[int]] = {}  # layer -> heads the reference makes uniform


def reference_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """Eager attention written out weights-first: softmax weights, except that the chosen heads' weights
    are 1/count on every visible key (eager's additive mask is 0 there) -- the definition of the ablation."""
    n_rep = query.shape[1] // key.shape[1]
    k = key.repeat_interleave(n_rep, dim=1)  # (B, H, S, D)
    v = value.repeat_interleave(n_rep, dim=1)  # (B, H, S, D)
    scores = torch.matmul(query, k.transpose(2, 3)) * scaling + attention_mask  # (B, H, N, S)
    w = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    visible = (attention_mask == 0).to(w.dtype).expand_as(w)  # (B, H, N, S)
    for h in REF_HEADS.get(module.layer_idx, []):
        w[:, h] = visible[:, h] / visible[:, h].sum(-1, keepdim=True).clamp_min(1)
    return torch.matmul(w, v).transpose(1, 2).contiguous(), w  # (B, N, H, D)


class FullStandIn(StandInAdapter):
    """Adds what uniform mode uses: the attention modules and the text config."""

    def text_config(self, model):
        return model.config.text_config

    def attention_module(self, model, layer):
        return model.model.language_model.layers[layer].self_attn


FULL = FullStandIn()


@pytest.fixture(scope="module")
def reference(model):
    AttentionInterface.register(REF_IMPL, reference_attention)
    AttentionMaskInterface.register(REF_IMPL, eager_mask)  # always materialized, additive 0 / min
    ref = copy.deepcopy(model)
    ref.config.text_config._attn_implementation_internal = REF_IMPL
    return ref


def left_padded(lengths):
    rows = [ids(n)[0] for n in lengths]
    S = max(lengths)
    batch = torch.full((len(rows), S), PAD)
    attn = torch.zeros((len(rows), S), dtype=torch.long)
    for b, r in enumerate(rows):
        batch[b, S - len(r):] = r
        attn[b, S - len(r):] = 1
    return batch, attn


def reference_logits(reference, heads, x, mask):
    REF_HEADS.clear()
    for layer, h in heads:
        REF_HEADS.setdefault(layer, []).append(h)
    try:
        return logits(reference, x, mask)
    finally:
        REF_HEADS.clear()


@pytest.mark.parametrize("heads", [[(0, 0)], [(1, 3), (2, 1)], [(2, h) for h in range(NUM_HEADS)]])
def test_uniform_matches_eager_reference_left_padded(model, reference, heads):
    x, attn = left_padded([7, 4, 6])
    before = snapshot(model)
    impl = model.config.text_config._attn_implementation
    with mask_heads(model, FULL, heads, mode="uniform"):
        assert model.config.text_config._attn_implementation == attention_mod.IMPL_NAME
        got = logits(model, x, attn)
    want = reference_logits(reference, heads, x, attn)
    real = attn.bool()
    assert (got - want)[real].abs().max() <= 1e-5
    assert (got - logits(model, x, attn))[real].abs().max() > 1e-3  # it did something
    with mask_heads(model, FULL, heads):  # and something else than zeroing
        assert (got - logits(model, x, attn))[real].abs().max() > 1e-3
    assert model.config.text_config._attn_implementation == impl and attention_mod.active_uniform_heads() == {}
    assert_clean(model, before)


def test_uniform_generate_with_kv_cache_matches_no_cache_reference(model, reference):
    heads = [(0, 1), (1, 2), (2, 0)]
    x, attn = left_padded([6, 3])
    kw = dict(max_new_tokens=5, do_sample=False, return_dict_in_generate=True, output_logits=True,
              attention_mask=attn, pad_token_id=PAD)
    with torch.no_grad(), mask_heads(model, FULL, heads, mode="uniform"):
        got = model.generate(input_ids=x, use_cache=True, **kw)
    REF_HEADS.update({0: [1], 1: [2], 2: [0]})
    try:
        with torch.no_grad():
            want = reference.generate(input_ids=x, use_cache=False, **kw)  # full forward every step
    finally:
        REF_HEADS.clear()
    assert torch.equal(got.sequences, want.sequences)
    for a, b in zip(got.logits, want.logits):
        assert (a - b).abs().max() <= 1e-5
    assert attention_mod.active_uniform_heads() == {}


def test_uniform_nests_restores_on_error_and_rejects_bad_mode(model):
    x, attn = left_padded([5, 4])
    before = snapshot(model)
    impl = model.config.text_config._attn_implementation
    with mask_heads(model, FULL, [(0, 1), (2, 2)], mode="uniform"):
        both = logits(model, x, attn)
    with mask_heads(model, FULL, [(0, 1)], mode="uniform"):
        with mask_heads(model, FULL, [(2, 2)], mode="uniform"):
            nested = logits(model, x, attn)
        assert set(attention_mod.active_uniform_heads()) == {id(FULL.attention_module(model, 0))}
    assert torch.equal(nested, both)
    with pytest.raises(RuntimeError, match="boom"):
        with mask_heads(model, FULL, [(1, 0)], mode="uniform"):
            raise RuntimeError("boom")
    with pytest.raises(ValueError, match="out of range"):
        with mask_heads(model, FULL, [(0, NUM_HEADS)], mode="uniform"):
            pass
    with pytest.raises(ValueError, match="mask mode"):
        with mask_heads(model, FULL, [(0, 0)], mode="mean"):
            pass
    assert model.config.text_config._attn_implementation == impl and attention_mod.active_uniform_heads() == {}
    assert_clean(model, before)


# --- a different head set per batch row (several conditions in one batch) ---------------------------
from vrh.core.masking import mask_heads_per_row  # noqa: E402

ROW_HEADS = [[], [(0, 1), (2, 3)], [(1, 0)], [(0, 1), (1, 0), (1, 2)]]  # row 0: unmasked


def test_per_row_masks_equal_each_row_masked_alone(model):
    x, attn = left_padded([7, 4, 6, 5])
    before = snapshot(model)
    with mask_heads_per_row(model, ADAPTER, ROW_HEADS):
        got = logits(model, x, attn)
    real = attn.bool()
    for b, heads in enumerate(ROW_HEADS):
        with mask_heads(model, ADAPTER, heads):
            same_batch = logits(model, x, attn)[b]  # every row masked with row b's heads
            alone = logits(model, x[b:b + 1, real[b]], None)[0]  # row b unpadded, alone
        assert torch.equal(got[b], same_batch)
        assert (got[b][real[b]] - alone).abs().max() <= 1e-5
    unmasked = logits(model, x, attn)
    assert torch.equal(got[0], unmasked[0])
    assert all((got[b] - unmasked[b])[real[b]].abs().max() > 1e-3 for b in range(1, len(ROW_HEADS)))
    assert_clean(model, before)


def test_per_row_generate_with_kv_cache_equals_each_row_alone(model):
    x, attn = left_padded([6, 3, 5, 6])
    kw = dict(max_new_tokens=5, do_sample=False, use_cache=True, return_dict_in_generate=True, output_logits=True,
              pad_token_id=PAD)
    with torch.no_grad():
        with mask_heads_per_row(model, ADAPTER, ROW_HEADS):
            got = model.generate(input_ids=x, attention_mask=attn, **kw)
        plain = model.generate(input_ids=x, attention_mask=attn, **kw)
        for b, heads in enumerate(ROW_HEADS):
            row = x[b:b + 1, attn[b].bool()]  # (1, n) without padding
            with mask_heads(model, ADAPTER, heads):
                alone = model.generate(input_ids=row, attention_mask=torch.ones_like(row), **kw)
            assert torch.equal(got.sequences[b, x.shape[1]:], alone.sequences[0, row.shape[1]:])  # greedy answers
            for step_got, step_alone in zip(got.logits, alone.logits):
                assert (step_got[b] - step_alone[0]).abs().max() <= 1e-5
    assert any((a - p)[1:].abs().max() > 1e-3 for a, p in zip(got.logits, plain.logits))
    assert all(len(m._forward_pre_hooks) == 0 for m in model.modules())


def test_per_row_validates_first_refuses_other_batch_sizes_and_cleans_up(model):
    before = snapshot(model)
    with pytest.raises(ValueError, match=r"row 1: head \(0, 4\): head 4 out of range"):
        with mask_heads_per_row(model, ADAPTER, [[(0, 0)], [(0, NUM_HEADS)]]):
            pytest.fail("body must not run")
    with pytest.raises(ValueError, match="head geometry"):
        with mask_heads_per_row(model, StandInAdapter(head_dim=HEAD_DIM * 2), [[(0, 0)], []]):
            pytest.fail("body must not run")
    assert_clean(model, before)
    with pytest.raises(RuntimeError, match=r"expected \[2, seq"):
        with mask_heads_per_row(model, ADAPTER, [[(0, 0)], []]):
            logits(model, ids(5, batch=3))
    with mask_heads_per_row(model, ADAPTER, [[], []]):  # nothing masked: nothing installed
        assert all(len(m._forward_pre_hooks) == 0 for m in model.modules())
    assert_clean(model, before)


def test_per_row_nests_with_mask_heads(model):
    x, attn = left_padded([5, 5])
    with mask_heads(model, ADAPTER, [(2, 2)]), mask_heads_per_row(model, ADAPTER, [[(0, 1)], []]):
        got = logits(model, x, attn)
    with mask_heads(model, ADAPTER, [(2, 2), (0, 1)]):
        assert torch.equal(got[0], logits(model, x, attn)[0])
    with mask_heads(model, ADAPTER, [(2, 2)]):
        assert torch.equal(got[1], logits(model, x, attn)[1])


# --- the mask-mode registry: the one list of modes --------------------------------------------------
def test_every_mode_is_declared_once_and_everything_asks_the_registry():
    from vrh.experiments import conditions
    from vrh.core import masking
    from vrh.options import MaskOptions, option_choices, option_help

    names = masking.mask_mode_names()
    assert names and len(set(names)) == len(names) and names[0] == MaskOptions.mask_mode  # the default first
    # a mode batches only through its own per-row application: zero's is mask_heads_per_row, uniform has none
    assert masking.get_mask_mode(MaskOptions.mask_mode).apply_rows is masking.mask_heads_per_row
    assert all(m.batchable == (m.apply_rows is not None) for m in masking.mask_modes())
    for name in names:
        assert conditions.explicit([(0, 0)], mask_mode=name).mask_mode == name
        assert masking.get_mask_mode(name).help.strip()
    field = next(f for f in dataclasses.fields(MaskOptions) if f.name == "mask_mode")
    assert option_choices(field) == names  # --mask-mode's choices, read from the registry
    assert all(f"'{m.name}' {m.help}" in option_help(field) for m in masking.mask_modes())
    with pytest.raises(ValueError, match=r"unknown mask mode 'mean'; choose from " + re.escape(str(names))):
        masking.get_mask_mode("mean")
    with pytest.raises(ValueError, match="already registered"):
        masking.register_mask_mode("zero", help="again")(lambda model, adapter, heads: None)
    with pytest.raises(ValueError, match="needs the mode's own per-row application"):  # batchable means per-row
        masking.register_mask_mode("zero_again", batchable=True, help="again")(lambda model, adapter, heads: None)
    assert "zero_again" not in masking.mask_mode_names()


def test_mask_heads_dispatches_through_the_registry(model, monkeypatch):
    from contextlib import contextmanager

    from vrh.core import masking

    seen = []

    @contextmanager
    def probe(model_, adapter, heads):
        seen.append(heads)
        yield

    monkeypatch.setitem(masking._MODES, "probe", masking.MaskMode("probe", probe, help="test"))
    with mask_heads(model, ADAPTER, [(1, 2)], mode="probe"), mask_heads(model, ADAPTER, [], mode="probe"):
        pass
    assert seen == [[(1, 2)]]  # an empty head list never reaches the mode
