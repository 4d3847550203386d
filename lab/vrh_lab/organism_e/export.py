"""Organism E as deltas (:mod:`vrh.models.deltas`' scheme): the projector whole and the adapters' A/B matrices
(rank 8 on every linear map of the 30 layers: 2.44 M adapter + 0.55 M projector weights, 12.0 MB of float32,
over the 8 MB a shipped file may have; rank 4: 7.1 MB), nothing of the two parts. :func:`rebuild` composes the parts again and merges the deltas (``W + (alpha / r) B A``); the
parity check compares its logits with the trained model's.

Not shipped yet: E ships once it grounds (docs/organism.md, "Organism E (pilot)"); ``vrh.models.deltas.materialize``
then needs E's parts as a second kind of base.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from vrh.models import deltas
from vrh.organism import world
from vrh_lab.organism_e import data
from vrh_lab.organism_e.model import build, processor

PARITY_ATOL = 1e-3  # logits, trained model (unmerged adapters) vs the rebuilt one (merged), float32


def delta_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The projector whole and each adapter as ``lora.<weight name>.A`` [r, in] / ``.B`` [out, r]."""
    out = {f"model.multi_modal_projector.{k}": v for k, v in model.model.multi_modal_projector.state_dict().items()}
    for name, module in model.named_modules():
        if hasattr(module, "lora_A") and "default" in getattr(module, "lora_A", {}):
            out[f"lora.{name}.weight.A"] = module.lora_A["default"].weight
            out[f"lora.{name}.weight.B"] = module.lora_B["default"].weight
    return {k: v.detach().float().contiguous().clone() for k, v in out.items()}


def rebuild(lm_folder: Path, vision_folder: Path, found: dict[str, torch.Tensor], scale: float) -> nn.Module:
    """The parts composed again (:func:`vrh_lab.organism_e.model.build`) with the deltas merged in."""
    model = build(lm_folder, vision_folder)
    state = deltas.merge(dict(model.state_dict()), found, scale)
    model.load_state_dict(state, strict=True)
    return model.eval()


@torch.no_grad()
def parity(trained: nn.Module, rebuilt: nn.Module, lm_folder: Path, n: int = 4) -> float:
    """Max |logit difference| on ``n`` held-out grounding prompts; AssertionError above :data:`PARITY_ATOL`."""
    enc = data.prompt_batch(processor(lm_folder), [world.grounding_sample(10_000, i) for i in range(n)])
    trained.eval()
    diff = float((trained(**enc).logits - rebuilt(**enc).logits).abs().max())  # [n, T, V] each
    if diff > PARITY_ATOL:
        raise AssertionError(f"organism E rebuilt from its deltas differs from the trained model: {diff:.2e}")
    return diff
