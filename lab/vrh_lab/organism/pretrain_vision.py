"""Stage 1 of the organism: pretrain its CLIP vision tower on dense per-patch scene parsing.

Real VLMs start from a pretrained vision encoder (CLIP / SigLIP); the LM is then taught to *use* it. The
organism does the same: before any language model exists, the tower learns to say, for every patch, which
object covers it most (its colour, shape, size class) and that object's box. The prediction heads are
linear and are thrown away afterwards; what stays is a tower whose patch features hold those facts
linearly, so that stage 2 only has to learn *routing* (which visual tokens the text asks for) and copying.
Without it, the LM had to learn routing and the readout at once and sat on a text-only plateau for
thousands of steps (docs/organism.md, runs 0-5).

The features trained are exactly the ones LLaVA feeds its projector: ``hidden_states[-1][:, 1:]``
(``vision_feature_layer=-1``, ``default`` strategy drops CLS).

    python -m vrh_lab.organism.pretrain_vision --out organism_work/vision_a --patch-size 16 --hidden 128
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from vrh.organism import world
from vrh_lab.organism.batches import COLOUR_IDX, SHAPE_IDX, SIZE_IDX, dense_targets, pixels  # noqa: F401 (re-exported)
from vrh_lab.organism.model import VisionArch, build_model
from vrh_lab.organism.processor import ImageSpec
from vrh.runs import load_torch_file

class DenseHeads(nn.Module):
    """Linear read-outs from each patch feature (discarded after pretraining)."""

    def __init__(self, hidden: int):
        super().__init__()
        self.obj = nn.Linear(hidden, 1)
        self.colour = nn.Linear(hidden, len(world.COLOURS))
        self.shape = nn.Linear(hidden, len(world.SHAPES))
        self.size = nn.Linear(hidden, len(world.SIZES))
        self.box = nn.Linear(hidden, 4)

    def loss(self, feats: torch.Tensor, t: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        f = feats.reshape(-1, feats.shape[-1])  # [B, V, D] -> [B*V, D]
        obj = t["obj"].reshape(-1)
        ce = nn.functional.cross_entropy
        losses = {
            "obj": nn.functional.binary_cross_entropy_with_logits(self.obj(f).squeeze(-1), obj),
            "colour": ce(self.colour(f), t["colour"].reshape(-1), ignore_index=-100),
            "shape": ce(self.shape(f), t["shape"].reshape(-1), ignore_index=-100),
            "size": ce(self.size(f), t["size"].reshape(-1), ignore_index=-100),
            # L1 in units of the image side, only where an object is
            "box": ((self.box(f) - t["box"].reshape(-1, 4)).abs().sum(-1) * obj).sum() / obj.sum().clamp(min=1) * 10,
        }
        return sum(losses.values()), {k: float(v.detach()) for k, v in losses.items()}

    @torch.no_grad()
    def metrics(self, feats: torch.Tensor, t: dict[str, torch.Tensor]) -> dict[str, float]:
        f = feats.reshape(-1, feats.shape[-1])
        m = t["obj"].reshape(-1) > 0
        out = {"obj_acc": float(((self.obj(f).squeeze(-1) > 0) == m).float().mean())}
        for k in ("colour", "shape", "size"):
            out[f"{k}_acc"] = float((getattr(self, k)(f)[m].argmax(-1) == t[k].reshape(-1)[m]).float().mean())
        out["box_px"] = float((self.box(f)[m] - t["box"].reshape(-1, 4)[m]).abs().mean() * world.IMAGE_SIZE)
        return out


def patch_features(tower, px: torch.Tensor) -> torch.Tensor:
    """[B, V, D]: what LLaVA's projector receives (last hidden state, CLS dropped)."""
    return tower(px, output_hidden_states=True).hidden_states[-1][:, 1:]


def siglip_features(tower, px: torch.Tensor) -> torch.Tensor:
    """[B, V, D]: what Gemma 3's projector receives from a SigLIP tower (its last hidden state; no CLS)."""
    return tower(pixel_values=px).last_hidden_state


def batch(seed: int, step: int, bs: int, spec: ImageSpec) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    scenes = []
    for j in range(bs):
        rng = world.seeded_rng(seed, step * bs + j, "vision")
        scenes.append(world.sample_scene(rng, min_objects=1, max_objects=5, size=spec.image_size))
    px = pixels([world.render(s) for s in scenes], spec)
    ts = [dense_targets(s, spec) for s in scenes]
    t = {k: torch.from_numpy(np.stack([x[k] for x in ts])) for k in ts[0]}
    return px, t


def pretrain(arch: VisionArch, out_dir: str | Path, steps: int = 1500, bs: int = 64, lr: float = 2e-3,
             seed: int = 0, image_size: int = world.IMAGE_SIZE, log_every: int = 50,
             tower: torch.nn.Module | None = None, features=patch_features) -> dict[str, Any]:
    """Train the tower of a fresh organism (same init as ``build_model(arch, seed=seed)``); resumable.

    ``tower`` / ``features``: another tower and how its projector input is read (organism D: a SigLIP tower,
    :func:`siglip_features`); the default is the LLaVA organisms' CLIP tower and :func:`patch_features`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    spec = ImageSpec(image_size, arch.patch_size)
    if tower is None:
        from vrh_lab.organism.model import TextArch
        tower = build_model(arch, TextArch(), image_size, seed).model.vision_tower
    heads = DenseHeads(arch.hidden)
    params = list(tower.parameters()) + list(heads.parameters())
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.01, betas=(0.9, 0.98))
    ckpt, step = out / "vision_ckpt.pt", 0
    if ckpt.exists():
        st = load_torch_file(ckpt, what="vision pretraining checkpoint")
        tower.load_state_dict(st["tower"]), heads.load_state_dict(st["heads"]), opt.load_state_dict(st["opt"])
        step = st["step"]
        print(f"resumed vision pretraining at step {step}", flush=True)
    t0 = time.time()
    while step < steps:
        cur = lr * min(1.0, (step + 1) / 100) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * step / steps)))
        for g in opt.param_groups:
            g["lr"] = cur
        px, t = batch(seed, step, bs, spec)
        tower.train()
        loss, parts = heads.loss(features(tower, px), t)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        if step % log_every == 0 or step == steps:
            rate = (time.time() - t0) / log_every
            # of how many, and when the stage ends: the build's own ETA comes only at the next stage's start
            print(f"vision step {step}/{steps} loss={float(loss.detach()):.4f} "
                  + " ".join(f"{k}={v:.3f}" for k, v in parts.items())
                  + f" s/step={rate:.3f} stage ETA {timedelta(seconds=round(rate * (steps - step)))}", flush=True)
            t0 = time.time()
        if step % 250 == 0 or step == steps:
            tmp = ckpt.with_suffix(".tmp")
            torch.save({"tower": tower.state_dict(), "heads": heads.state_dict(), "opt": opt.state_dict(),
                        "step": step}, tmp)
            os.replace(tmp, ckpt)
    tower.eval()
    px, t = batch(seed + 10_000, 0, 256, spec)  # held-out scenes
    with torch.no_grad():
        m = heads.metrics(features(tower, px), t)
    m["steps"] = step
    torch.save(tower.state_dict(), out / "tower.pt")
    torch.save({"heads": heads.state_dict()}, out / "heads.pt")  # the read-outs (lab/scripts/organism_diagnostics.py)
    (out / "vision_metrics.json").write_text(json.dumps(m, indent=1))
    print(f"vision held-out {json.dumps(m)}", flush=True)
    return m


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m vrh_lab.organism.pretrain_vision", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="work folder: tower.pt, heads.pt, log (resumable)")
    ap.add_argument("--patch-size", type=int, default=16, help="ViT patch size in px (default: %(default)s)")
    ap.add_argument("--hidden", type=int, default=128, help="tower width (default: %(default)s)")
    ap.add_argument("--layers", type=int, default=3, help="tower layers (default: %(default)s)")
    ap.add_argument("--heads", type=int, default=4, help="tower attention heads (default: %(default)s)")
    ap.add_argument("--intermediate", type=int, default=512, help="tower MLP width (default: %(default)s)")
    ap.add_argument("--steps", type=int, default=1500, help="training steps (default: %(default)s)")
    ap.add_argument("--batch", type=int, default=64, help="scenes per step (default: %(default)s)")
    ap.add_argument("--lr", type=float, default=2e-3, help="peak learning rate (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=0, help="init and data seed (default: %(default)s)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default: %(default)s)")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    arch = VisionArch(patch_size=a.patch_size, hidden=a.hidden, layers=a.layers, heads=a.heads,
                      intermediate=a.intermediate)
    pretrain(arch, a.out, steps=a.steps, bs=a.batch, lr=a.lr, seed=a.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
