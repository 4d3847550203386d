"""vrh.core.attention: the one visibility function on hand-built masks, the observer hook, and clean exits.

Why these cases: ``allowed_keys`` is what the uniform ablation, the softcap output and captured rows all
read, so each way transformers can hand a mask (bool, additive float, ``None`` with or without causality,
one decode query) is pinned here on tensors small enough to write out. The model tests check that capture
and uniform masking are both observers/state of the one registered function and leave nothing behind.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

import vrh.core.attention as attention
from vrh.core.attention import (AttentionCall, active_observers, active_uniform_heads, allowed_keys,
                           observe_attention)
from vrh.core.capture import capture_attention_rows
from vrh.core.masking import mask_heads

CPU = torch.device("cpu")
SRC = Path(attention.__file__).parent
NEG = torch.finfo(torch.float32).min


# --- allowed_keys on hand-built masks -----------------------------------------------------------------
# Sample 0 has one left-padding token, sample 1 none; causal over 3 queries x 3 keys.
BOOL = torch.tensor([[[[0, 0, 0], [0, 1, 0], [0, 1, 1]]],
                     [[[1, 0, 0], [1, 1, 0], [1, 1, 1]]]], dtype=torch.bool)  # (B=2, 1, N=3, S=3)


def test_bool_mask_is_read_as_is_and_rows_selected():
    got = allowed_keys(BOOL, 3, 3, True, CPU)
    assert got.shape == (2, 1, 3, 3) and torch.equal(got, BOOL)
    rows = allowed_keys(BOOL, 3, 3, True, CPU, queries=torch.tensor([2, 0]))  # (2, 1, 2, 3)
    assert torch.equal(rows, BOOL[:, :, [2, 0]])
    # a mask wider than the keys (a static cache's empty tail) is cut to kv_len
    wide = torch.cat([BOOL, torch.ones(2, 1, 3, 2, dtype=torch.bool)], dim=-1)  # (2, 1, 3, 5)
    assert torch.equal(allowed_keys(wide, 3, 3, True, CPU), BOOL)


def test_additive_masks_give_the_same_visibility_and_biases_are_refused():
    for hidden in (NEG, float("-inf")):
        additive = torch.zeros(BOOL.shape).masked_fill(~BOOL, hidden)  # eager's 0 / min (or -inf)
        assert torch.equal(allowed_keys(additive, 3, 3, True, CPU), BOOL)
    half = torch.zeros(2, 1, 3, 3, dtype=torch.float16).masked_fill(~BOOL, torch.finfo(torch.float16).min)
    assert torch.equal(allowed_keys(half, 3, 3, True, CPU), BOOL)  # the threshold follows the mask's dtype
    biased = torch.zeros(BOOL.shape).masked_fill(~BOOL, NEG)
    biased[1, 0, 2, 0] = -0.5  # an ALiBi-like bias on a visible key: visibility alone would drop it
    with pytest.raises(ValueError, match="additive biases"):
        allowed_keys(biased, 3, 3, True, CPU)


def test_no_mask_causal_is_upper_left_aligned():
    tril = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(allowed_keys(None, 4, 4, True, CPU), tril[None, None])  # (1, 1, 4, 4)
    assert torch.equal(allowed_keys(None, 4, 4, True, CPU, queries=torch.tensor([3, 1])), tril[[3, 1]][None, None])


def test_no_mask_non_causal_and_single_query_see_every_key():
    assert allowed_keys(None, 3, 5, False, CPU).shape == (1, 1, 3, 5)
    assert bool(allowed_keys(None, 3, 5, False, CPU).all())
    decode = allowed_keys(None, 1, 6, True, CPU)  # one query after 5 cached tokens: all 6 keys
    assert decode.shape == (1, 1, 1, 6) and bool(decode.all())


def test_per_head_and_broadcast_query_masks_keep_their_layout():
    per_head = torch.rand(1, 2, 3, 4) > 0.5  # (1, H=2, 3, 4): a per-head mask stays per head
    assert torch.equal(allowed_keys(per_head, 3, 4, True, CPU), per_head)
    one_row = torch.tensor([[[[0, 1, 1, 1]]]], dtype=torch.bool)  # (1, 1, 1, S): same for every query
    got = allowed_keys(one_row, 3, 4, True, CPU, queries=torch.tensor([0, 2]))
    assert got.shape == (1, 1, 2, 4) and torch.equal(got[0, 0], one_row[0, 0].expand(2, 4))


# --- the observer hook ---------------------------------------------------------------------------------
def test_observe_attention_nests_and_restores_on_error():
    def first(call):
        pass

    def second(call):
        pass

    before = active_observers()
    with observe_attention(first):
        with pytest.raises(RuntimeError, match="boom"):
            with observe_attention(second):
                assert active_observers() == (*before, first, second)
                raise RuntimeError("boom")
        assert active_observers() == (*before, first)
    assert active_observers() == before


def test_attention_never_imports_capture_and_capture_reads_only_public_names():
    tree = ast.parse((SRC / "attention.py").read_text())
    imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    imported += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [f"{n.module}.{a.name}" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names]
    assert not [m for m in imported if "capture" in m]
    cap = ast.parse((SRC / "capture.py").read_text())
    from_attention = [a.name for n in ast.walk(cap) if isinstance(n, ast.ImportFrom) and n.module == "vrh.core.attention"
                      for a in n.names]
    assert from_attention and not [name for name in from_attention if name.startswith("_")]
    assert not [n for n in ast.walk(cap) if isinstance(n, ast.Import) and any("attention" in a.name for a in n.names)]


# --- on a tiny model -----------------------------------------------------------------------------------
class LM:
    """The slice of the adapter interface capture and uniform masking use, for a plain Qwen2 LM."""

    def text_config(self, model):
        return model.config

    def num_layers(self, model):
        return len(model.model.layers)

    def num_heads(self, model):
        return model.config.num_attention_heads

    def attention_module(self, model, layer):
        return model.model.layers[layer].self_attn


@pytest.fixture(scope="module")
def model():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0,
                      initializer_range=0.3)
    return Qwen2ForCausalLM._from_config(cfg, attn_implementation="sdpa", dtype=torch.float32).eval()


def _inputs():
    ids = torch.randint(3, 64, (2, 7), generator=torch.Generator().manual_seed(0))  # (B, S)
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, :2] = 0  # left padding: a materialized mask reaches the attention function
    return dict(input_ids=ids, attention_mask=mask)


def test_observer_sees_each_module_once_per_forward(model):
    calls: list[AttentionCall] = []
    with torch.no_grad(), attention.language_model_uses_vrh(model, LM()), observe_attention(calls.append):
        model(**_inputs())
    modules = [LM().attention_module(model, layer) for layer in range(3)]
    assert [c.module for c in calls] == modules
    for c in calls:
        assert c.query.shape == (2, 4, 7, 8) and c.key.shape == (2, 2, 7, 8)  # (B, H, N, D), (B, Hkv, S, D)
        assert c.attention_mask is not None and c.is_causal and c.softcap is None
        assert c.scaling == pytest.approx(8 ** -0.5)


def test_capture_composes_with_uniform_masking(model):
    inputs, positions = _inputs(), [torch.tensor([6]), torch.tensor([2, 6])]
    with torch.no_grad():
        with capture_attention_rows(model, LM(), positions) as plain:
            model(**inputs)
        with mask_heads(model, LM(), [(1, 2)], mode="uniform"):
            masked = model(**inputs).logits
            with capture_attention_rows(model, LM(), positions) as cap:
                both = model(**inputs).logits
    assert torch.equal(both, masked)  # capture does not change the masked output
    for b in range(2):
        # layers 0 and 1 read their q/k before layer 1's masked output exists; layer 2 reads after
        assert torch.equal(cap.rows(b)[:2], plain.rows(b)[:2])
        assert (cap.rows(b)[2] - plain.rows(b)[2]).abs().max() > 1e-4


def test_contexts_leave_nothing_registered_also_on_error(model):
    impl = model.config._attn_implementation
    with pytest.raises(RuntimeError, match="boom"), torch.no_grad():
        with mask_heads(model, LM(), [(0, 1)], mode="uniform"):
            with capture_attention_rows(model, LM(), [torch.tensor([0]), torch.tensor([3])]):
                assert len(active_observers()) == 1 and active_uniform_heads()
                assert model.config._attn_implementation == attention.IMPL_NAME
                model(**_inputs())
                raise RuntimeError("boom")
    assert active_observers() == () and active_uniform_heads() == {}
    assert model.config._attn_implementation == impl == "sdpa"
    with pytest.raises(RuntimeError, match="already active"):
        with capture_attention_rows(model, LM(), [torch.tensor([0])]):
            with capture_attention_rows(model, LM(), [torch.tensor([0])]):
                pass
    assert active_observers() == () and model.config._attn_implementation == "sdpa"
