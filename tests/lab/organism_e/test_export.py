"""Organism E's deltas on stand-in parts (conftest): the projector and the adapters' A/B pairs, merged into the
parts composed again, give the trained model's logits; nothing of the parts is in them."""

from dataclasses import replace

import pytest
import torch

pytest.importorskip("peft")

from vrh_lab.organism_e import export, train  # noqa: E402
from vrh_lab.organism_e.model import LoraSpec  # noqa: E402

CFG = train.EConfig(steps=3, align_steps=1, batch=2, warmup=1, curriculum=((0, 2, "single"),), lr=1e-2,
                    lora=LoraSpec(rank=2, alpha=4), eval_n=1, eval_levels=("single",), eval_every=100, threads=1)


def test_the_deltas_rebuild_the_trained_model(stand_in_parts, tmp_path):
    lm, vision = stand_in_parts
    trained = train.train_stage(CFG, tmp_path, lm, vision)
    found = export.delta_state(trained)
    assert not any("vision_tower" in k or "embed_tokens" in k for k in found)
    assert any(k.startswith("lora.") and k.endswith(".B") and torch.count_nonzero(v) for k, v in found.items())
    rebuilt = export.rebuild(lm, vision, found, scale=CFG.lora.alpha / CFG.lora.rank)
    assert export.parity(trained, rebuilt, lm) < 1e-4
    with pytest.raises(AssertionError, match="differs from the trained model"):  # a wrong scale is caught
        export.parity(trained, export.rebuild(lm, vision, found, scale=10.0), lm)


def test_a_frozen_lm_exports_only_the_projector(stand_in_parts, tmp_path):
    lm, vision = stand_in_parts
    trained = train.train_stage(replace(CFG, steps=1, lora=LoraSpec(rank=0)), tmp_path, lm, vision)
    assert all(k.startswith("model.multi_modal_projector.") for k in export.delta_state(trained))
