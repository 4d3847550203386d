"""Phi-4-Reasoning-Vision: the model vrh composes, on its own (:mod:`vrh.models.adapters.phi4_vision.modeling`).
The family end to end (loading, the adapter) is tests/models/adapters/test_phi4_vision.py."""

from __future__ import annotations

import copy

import torch

from vrh.models.adapters import get_adapter
from vrh.testing.tiny_phi4_vision import tiny_phi4_vision

from ..pixels import coord_image


def test_features_survive_a_forward_that_records_hidden_states():
    """A forward with ``output_hidden_states=True`` installs transformers' capture hooks on the whole tree; were the
    tower's features read through its own ``hidden_states`` (installed twice then), the next forwards would take
    another layer's states as ``hidden_states[-2]``. The logits stay those of a fresh model."""
    model, processor = copy.deepcopy(tiny_phi4_vision())
    adapter = get_adapter("phi4-siglip")
    batch = adapter.build_batch(processor, [coord_image(70, 90)], [adapter.grounding_prompt("red ball")])
    with torch.no_grad():
        before = model(**batch.inputs).logits
        model(**batch.inputs, output_hidden_states=True)
        after = model(**batch.inputs).logits
    assert torch.equal(before, after)
