"""Capture and masking invariants, as the per-family tests check them on their own batches (a shrunk grid,
a biased q/k/v, a padded anyres batch). The shared suite (test_adapters.py) checks the same on its standard
batch for every family."""

from __future__ import annotations

import copy

import torch

from vrh.core.capture import capture_attention_rows
from vrh.core.masking import mask_heads


def eager_attentions(model, inputs) -> tuple[torch.Tensor, ...]:
    """The attention probabilities of an eager copy of ``model``: per layer ``[B, H, S, S]``."""
    eager = copy.deepcopy(model)
    eager.set_attn_implementation("eager")
    with torch.no_grad():
        return eager(**inputs, output_attentions=True).attentions


def assert_capture_matches_eager(model, adapter, inputs, queries: list[torch.Tensor]) -> None:
    """Rows captured during one forward == the eager probabilities at ``queries[b]`` (<= 1e-5), per sample."""
    with torch.no_grad(), capture_attention_rows(model, adapter, queries) as cap:
        model(**inputs)
    att = eager_attentions(model, inputs)
    for b, q in enumerate(queries):
        want = torch.stack([a[b][:, q] for a in att])  # [L, H, Q, S]
        assert (cap.rows(b) - want).abs().max().item() <= 1e-5


def assert_masking_is_exact(model, adapter, inputs, heads: list[tuple[int, int]]) -> None:
    """Masking ``heads`` gives the logits of a copy whose ``o_proj`` input columns for them are zero, the
    heads matter, and the model is left as it was: same weights, no hooks."""
    d = adapter.head_dim(model)
    ref = copy.deepcopy(model)
    for layer, head in heads:
        adapter.o_proj(ref, layer).weight.data[:, head * d:(head + 1) * d] = 0  # [hidden, H*d_head]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        plain = model(**inputs).logits
        with mask_heads(model, adapter, heads):
            masked = model(**inputs).logits
        want = ref(**inputs).logits
    assert torch.allclose(masked, want, atol=1e-5) and not torch.allclose(masked, plain, atol=1e-3)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
    assert all(not adapter.o_proj(model, layer)._forward_pre_hooks for layer in range(adapter.num_layers(model)))
