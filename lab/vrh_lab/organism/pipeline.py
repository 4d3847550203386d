"""The organism's staged build, as real VLMs are built: pretrain the vision encoders, then teach a language
model to use one (organism A), then give that language model a second encoder (organism B).

Stages (each resumable; rerunning the command continues where the last session stopped):

1. ``vision_a`` / ``vision_b``: :mod:`vrh_lab.organism.pretrain_vision` (dense per-patch scene parsing) for
   tower A (16-px patches, 49 tokens) and tower B (14-px patches, 64 tokens, narrower, other seed).
2. ``lm_a``: :mod:`vrh_lab.organism.train` on the world (grounding + VQA), tower A frozen, LM from scratch,
   box warm start (one head, the model's choice), then mild sparsity pressures (routing L1 and head
   dropout that spares the current retrieval heads), up to step 3500;
   ``lm_a2``: the same run continued with targeted pressure (only non-retrieval heads pay for looking at
   the image, stronger head dropout) to step 4250; ``lm_a3``: the warm start again, on the positions
   that predict the first coordinate only, to step 4750; ``lm_a4``: + region captioning, to step 6500;
   ``lm_a5``: A4's weights with a new schedule, RoPE base 1e6, auxiliary attribute probes on the visual
   tokens, per-sample warm start, an attribute-only curriculum, pressures off (A4 matched colour and
   shape at chance), to step 1750; ``lm_a6``: the pressures back on, to step 3250; ``lm_a7``: the same,
   cosine stretched to step 6000; ``lm_a8``: a strong routing penalty on every head but the model's
   own top-3 retrieval heads, to step 9000; exported as ``organism_a``.
3. ``lm_b``: tower B (frozen) + a new projector + the language model of ``lm_a8``'s checkpoint; the LM is
   frozen while the projector aligns, then fine-tuned with B's own data stream and seed: two VLMs on one
   LM backbone, fine-tuned separately (the paper's transfer setting).

    vrh organism build --out runs/organism_build --export-to runs/organisms

Organism C (issue 17; not in the default stage list): an independently initialised LM (seed 2) on tower A,
trained with no term, mask or schedule that refers to particular heads (docs/organism.md, "Organism C"):
``lm_c_text``: the LM alone on text-only retrieval jobs (the scene written as a list of items,
:mod:`vrh_lab.organism.text_tasks`), ``lm_c``: its weights + tower A (frozen) + a new projector on the image
task with a few-distractor curriculum, VQA, captions and text jobs in the mixture and the auxiliary
attribute probes; exported as ``organism_c``. Both track emergence (``emergence.jsonl``).

    vrh organism build --out lab/organism_runs/vC --stages lm_c_text,lm_c \
        --tower-a lab/organism_runs/v2/vision_a/tower.pt
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, replace
from datetime import timedelta
from pathlib import Path

# no torch at import (the training modules are imported in build): `vrh organism build --help` answers at once
from vrh_lab.organism.arch import TextArch, VisionArch
from vrh_lab.organism.config import TrainConfig

VISION_A = VisionArch(patch_size=16, hidden=128, layers=3, heads=4, intermediate=512)
VISION_B = VisionArch(patch_size=14, hidden=96, layers=3, heads=4, intermediate=384)
VISION_STEPS = 2000

LM_A = TrainConfig(
    name="organism", seed=0, steps=5000, batch_a=64, batch_b=0, lr=1.5e-3, min_lr_frac=0.05, warmup=200,
    vqa_frac=0.15, head_dropout=0.1, route_l1=0.01, pressure_start=2500, route_warmup=1000,
    box_warmstart=0.3, box_warmstart_until=2000, dropout_protect_top=3, freeze_vision=True,
    text=TextArch(), vision_a=VISION_A, export_name_a="organism_a", stop_at=3500,
    eval_n=256, eval_every=500, ckpt_every=250, log_every=25, threads=2)

# phase 2 of A: continue lm_a's checkpoint with stronger, targeted pressure (docs/organism.md, run v2b)
LM_A2 = replace(
    LM_A, steps=7000, stop_at=4250, route_l1=0.03, route_spare_protected=True, head_dropout=0.2,
    pressure_start=0, route_warmup=1)

# phase 3 of A: the warm start again, now on the positions that predict "[" and x1 only (the earlier one
# also counted positions after x1, which can find the box from the coordinates already written)
LM_A3 = replace(LM_A2, stop_at=4750, box_warmstart=0.3, box_warmstart_until=5500, warmstart_first=2)

# phase 4 of A: + region captioning (25% of samples): VQA on colour/shape sat at chance (28%/31% at step
# 4500), i.e. the LM never read attributes from visual tokens, so it could not match them either
LM_A4 = replace(LM_A3, stop_at=0, steps=6500, caption_frac=0.25, lr=3e-3)  # lr 6.8e-4 at step 4750
STOP_A5 = 1750

# phase 5 of A (v4, docs/organism.md): A4 grounded by size and position but matched colour and shape at
# chance. Measured causes: the projector's GELU and the LM's layers wash colour out of the visual tokens
# (probe 99% at the tower, 23% after LM layer 3), and a head_dim-16 head has only ~6 rotary dims that
# can match content at any distance. So: A4's weights (fresh optimizer and schedule), RoPE base 1e6,
# auxiliary colour/shape probes on the visual tokens at the inputs of LM layers 0-3, the warm start per
# sample (attention supervision of the model's chosen head), an attribute-expression-only curriculum for
# the first 800 steps, pressures off while the model learns to match attributes.
LM_A5 = replace(
    LM_A4, steps=2500, stop_at=STOP_A5, lr=1e-3, warmup=100, box_warmstart_until=2500, warmstart_per_sample=True,
    attr_aux=0.3, curriculum=((0, 800, "attribute"),), route_l1=0.0, head_dropout=0.0, eval_every=250,
    eval_n=128, text=TextArch(rope_theta=1e6))

# phase 6 of A: the same run continued (optimizer, weights, step) with A4's targeted pressures back on, so
# that retrieval concentrates again in the model's own top-3 heads; the cosine is stretched to 3250 steps
# (lr 2.6e-4 -> 4.9e-4 at step 1750) to give the pressures room; exported as organism_a
LM_A6 = replace(LM_A5, stop_at=0, steps=3250, box_warmstart_until=3250, route_l1=LM_A4.route_l1,
                head_dropout=LM_A4.head_dropout)

# phase 7 of A (lab/organism_runs/v5): A6 was still rising when its schedule ended (85.2% at 3250, n = 128),
# so the same run continues with the cosine stretched to 6000 steps (89.4% held-out, n = 500)
LM_A7 = replace(LM_A6, steps=6000, box_warmstart_until=6000)

# phase 8 of A (lab/organism_runs/v6): A7's retrieval was spread: masking its top-3 heads cost 32 points, the
# top-6 57 (heads 4-6 score 0.08-0.17). A routing penalty 10x stronger on every head but the model's own
# top-3 retrieval heads (ramped in over 300 steps), to step 9000
LM_A8 = replace(LM_A7, steps=9000, box_warmstart_until=9000, route_l1=0.3, pressure_start=6000, route_warmup=300)

# the phases of A in order; each continues the previous one's checkpoint, the last is exported as organism_a
A_PHASES = ("lm_a", "lm_a2", "lm_a3", "lm_a4", "lm_a5", "lm_a6", "lm_a7", "lm_a8")
STAGES = ("vision_a", "vision_b", *A_PHASES, "lm_b")

# B: A's last phase's recipe (pressures from step 0), its own tower, seed and data stream
LM_B = replace(
    LM_A8, pressure_start=0, route_warmup=1, seed=1, steps=1000, lr=1e-3, warmup=100, vision_a=VISION_B,
    lm_freeze_steps=200, stop_at=0, box_warmstart=0.0, box_warmstart_until=0, curriculum=(), export_name_a="organism_b")


# Organism C, recipe C1 (docs/organism.md): every aid treats all heads alike. Phase 1: the LM learns
# content-addressed retrieval on text (copy the box of the named item from a written list), attribute
# expressions in 2-3 then 2-5 item lists first; no image (tower A loaded, frozen and unused).
LM_C_TEXT = TrainConfig(
    name="organism_c", seed=2, steps=1500, batch_a=64, batch_b=0, lr=1.5e-3, min_lr_frac=0.05, warmup=100,
    vqa_frac=0.0, caption_frac=0.0, text_frac=1.0, head_dropout=0.0, route_l1=0.0, freeze_vision=True,
    curriculum=((0, 300, "easy"), (300, 800, "attribute")), text=TextArch(rope_theta=1e6), vision_a=VISION_A,
    export_name_a="organism_c", eval_n=128, eval_every=100_000, ckpt_every=250, log_every=25, threads=1,
    track_every=250, track_n=64, track_k=3, track_seeds=2)

# Phase 2: the text-pretrained LM's weights (fresh optimizer and schedule) + tower A + a new projector on
# the image task: single-object scenes, then 2-3 objects, then attribute expressions in 2-5, then the full
# world; VQA, region captions and text jobs in the mixture (all heads see the same data); the auxiliary
# colour/shape probes on the visual tokens' residual stream (A5's, no attention term). Exported.
LM_C = replace(
    LM_C_TEXT, steps=6000, lr=1e-3, warmup=200, vqa_frac=0.15, caption_frac=0.1, text_frac=0.15, attr_aux=0.3,
    curriculum=((0, 300, "single"), (300, 1000, "easy"), (1000, 2000, "attribute")), eval_every=500)

# C1 continued: lm_c stops at 4000 (its accuracy was still rising 10 points per 1000 steps, held-out 49% at
# 4000 with the lr at 31% of its peak) and lm_c_long continues its full checkpoint with the cosine stretched
# to 10000 steps (as A's lm_a7 stretched lm_a6). Exported as organism_c.
LM_C = replace(LM_C, stop_at=4000)
LM_C_LONG = replace(LM_C, steps=10_000, stop_at=0)

# Recipe C3 (the ablation of C1's text phase, and a longer few-distractor curriculum): the LM from scratch
# (seed 2, C1's initialisation) directly on the image task; single-object scenes (0-500), attribute
# expressions in 2-3 objects (500-2000) and in 2-5 (2000-4000), then the full world; no text jobs;
# the same aids otherwise (VQA, captions, attribute probes, RoPE base 1e6). Its own build folder.
LM_C3 = replace(
    LM_C_TEXT, steps=10_000, lr=1e-3, warmup=200, vqa_frac=0.15, caption_frac=0.1, text_frac=0.0, attr_aux=0.3,
    curriculum=((0, 500, "single"), (500, 2000, "easy"), (2000, 4000, "attribute")), eval_every=500)

# Recipe C4 (a deeper LM): C3's data, curriculum and aids with 8 decoder layers instead of 4 (64 heads, the
# same width and head_dim 16): room for the two-hop circuit content retrieval needs (gather the expression
# at the answer position, then match it against the visual tokens) without squeezing it into layers 0-1,
# where C1 put it. The attribute probes read the inputs of every layer. Its own build folder.
LM_C4 = replace(LM_C3, text=TextArch(layers=8, rope_theta=1e6), attr_aux_layers=tuple(range(8)))

# Recipe C5 (a harder world): C1's final checkpoint (weights; a fresh optimizer and a second cosine cycle,
# its own data stream) trained on a world where 30% of the grounding scenes put the referent among
# look-alikes (world.contrast_scene: distractors that copy it but for one or two attributes), so that
# the attribute a shape-only shortcut skips must be matched. C1's misses were mostly colour: colour-only
# expressions 29% held-out against shape-only 70%, while its VQA matched colour ("what shape is the
# red object?" 84.5%) (docs/organism.md). Everything else as C1's last phase; no head named.
LM_C5 = replace(LM_C_LONG, seed=5, steps=3000, lr=5e-4, warmup=100, curriculum=(), contrast_frac=0.3,
                eval_every=250)
# Its control (recipe C1r): the same continuation of C1 on C1's world (no contrast scenes), so that what
# C5 gains over it is the harder world's, not the second learning-rate cycle's.
LM_C_RESTART = replace(LM_C5, contrast_frac=0.0)
# Both continued (session 7): at step 3000 they held 82.2% / 81.0% (n = 500), colour-only expressions
# 29% -> 88% in both, i.e. the second cycle, not the hard world, fixed colour; each run's full checkpoint
# continues with its cosine stretched to 5000 steps (as lm_c_long stretched lm_c). At 5000: C5 83.8%,
# C1r 85.0% (n = 500); C1r ships as organism_c (build folder lab/organism_runs/vC1r).
LM_C5_LONG = replace(LM_C5, steps=5000)
LM_C_RESTART_LONG = replace(LM_C_RESTART, steps=5000)

# each recipe of C: its phases in order (each continues the previous one; the last is exported as
# organism_c). Recipes may share their first phases (C5 and C1r continue C1).
C_RECIPES = {"C1": ("lm_c_text", "lm_c", "lm_c_long"), "C3": ("lm_c3",), "C4": ("lm_c4",),
             "C5": ("lm_c_text", "lm_c", "lm_c_long", "lm_c5", "lm_c5_long"),
             "C1r": ("lm_c_text", "lm_c", "lm_c_long", "lm_c_restart", "lm_c_restart_long")}
C_FINALS = tuple(phases[-1] for phases in C_RECIPES.values())

# C' (the positive control of C's transfer test, as B is A's): tower B (frozen) + a new projector + the
# language model of the build folder's final C phase; the LM frozen for 200 steps while the projector
# aligns, then fine-tuned for 1000 steps with its own seed (3) and data stream; C's aids (probes, VQA,
# captions), no head-specific term. Its LM shape is the C phase's. Exported as organism_c_prime.
LM_C_PRIME = replace(LM_C3, seed=3, steps=1000, lr=1e-3, warmup=100, vision_a=VISION_B, lm_freeze_steps=200,
                     curriculum=(), eval_every=250, export_name_a="organism_c_prime")
C_PRIME = "lm_c_prime"
C_PHASES = (*dict.fromkeys(p for phases in C_RECIPES.values() for p in phases), C_PRIME)


def final_c_phase(out: Path) -> str:
    """The last phase of the C recipe built in ``out`` (the one whose final phase has a checkpoint and is
    not continued by another built recipe; C1's when none has one yet)."""
    done = [phases[-1] for phases in C_RECIPES.values() if (out / phases[-1] / "ckpt.pt").exists()]
    continued = {p for phases in C_RECIPES.values() if phases[-1] in done for p in phases[:-1]}
    done = [p for p in done if p not in continued]
    if len(done) > 1:
        raise ValueError(f"{out} holds the final checkpoints of several C recipes ({', '.join(done)}); "
                         "build C' in the folder of the one it should start from")
    return done[0] if done else C_RECIPES["C1"][-1]


# phases continued by a later phase of the same organism (their checkpoints are not exported; a phase
# that ends one recipe of C is exported even where another recipe continues it)
NOT_EXPORTED = (*A_PHASES[:-1], *dict.fromkeys(p for phases in C_RECIPES.values() for p in phases[:-1]
                                               if p not in C_FINALS))


# a seconds-long version of every stage, for tests of the pipeline itself
TINY = {"vision_a": VisionArch(hidden=32, layers=1, heads=2, intermediate=64),
        "vision_b": VisionArch(patch_size=14, hidden=24, layers=1, heads=2, intermediate=48),
        "text": TextArch(hidden=32, layers=2, heads=4, intermediate=64), "vision_steps": 2, "lm_steps": 3}


def stage_configs(out: Path, tiny: bool = False, tower_a: str | Path | None = None) -> dict[str, TrainConfig]:
    """Every LM phase's config under build folder ``out``; ``tower_a``: where C finds tower A (default
    ``out/vision_a/tower.pt``; C reuses A's pretrained tower, e.g. ``lab/organism_runs/v2/vision_a/tower.pt``);
    C' takes tower B from beside it (``.../vision_b/tower.pt``)."""
    a = replace(LM_A, vision_init_a=str(out / "vision_a" / "tower.pt"))
    a2 = replace(LM_A2, vision_init_a=a.vision_init_a, init_from=str(out / "lm_a" / "ckpt.pt"))
    a3 = replace(LM_A3, vision_init_a=a.vision_init_a, init_from=str(out / "lm_a2" / "ckpt.pt"))
    a4 = replace(LM_A4, vision_init_a=a.vision_init_a, init_from=str(out / "lm_a3" / "ckpt.pt"))
    a5 = replace(LM_A5, vision_init_a=a.vision_init_a, init_from="", weights_from=str(out / "lm_a4" / "ckpt.pt"))
    a6 = replace(LM_A6, vision_init_a=a.vision_init_a, init_from=str(out / "lm_a5" / "ckpt.pt"))
    a7 = replace(LM_A7, vision_init_a=a.vision_init_a, init_from=str(out / "lm_a6" / "ckpt.pt"))
    a8 = replace(LM_A8, vision_init_a=a.vision_init_a, init_from=str(out / "lm_a7" / "ckpt.pt"))
    b = replace(LM_B, vision_init_a=str(out / "vision_b" / "tower.pt"), lm_init=str(out / A_PHASES[-1] / "ckpt.pt"))
    tower_c = str(tower_a) if tower_a else str(out / "vision_a" / "tower.pt")
    c_text = replace(LM_C_TEXT, vision_init_a=tower_c)
    c = replace(LM_C, vision_init_a=tower_c, weights_from=str(out / "lm_c_text" / "ckpt.pt"))
    c_long = replace(LM_C_LONG, vision_init_a=tower_c, weights_from="", init_from=str(out / "lm_c" / "ckpt.pt"))
    c3 = replace(LM_C3, vision_init_a=tower_c)
    c4 = replace(LM_C4, vision_init_a=tower_c)
    c5 = replace(LM_C5, vision_init_a=tower_c, init_from="", weights_from=str(out / "lm_c_long" / "ckpt.pt"))
    c_restart = replace(LM_C_RESTART, vision_init_a=tower_c, init_from="", weights_from=c5.weights_from)
    c5_long = replace(LM_C5_LONG, vision_init_a=tower_c, init_from=str(out / "lm_c5" / "ckpt.pt"), weights_from="")
    c_restart_long = replace(LM_C_RESTART_LONG, vision_init_a=tower_c,
                             init_from=str(out / "lm_c_restart" / "ckpt.pt"), weights_from="")
    if tiny:
        small = dict(text=TINY["text"], steps=TINY["lm_steps"], batch_a=4, eval_n=4, eval_every=10_000,
                     ckpt_every=10_000, log_every=1, warmup=1, pressure_start=1, lm_freeze_steps=0,
                     box_warmstart_until=1)
        a = replace(a, vision_a=TINY["vision_a"], **small, stop_at=2)
        a2 = replace(a2, vision_a=TINY["vision_a"], **small, stop_at=3)
        a3 = replace(a3, vision_a=TINY["vision_a"], **{**small, "steps": 5, "box_warmstart_until": 4}, stop_at=4)
        a4 = replace(a4, vision_a=TINY["vision_a"], **{**small, "steps": 5, "box_warmstart_until": 4})
        tiny_rope = replace(TINY["text"], rope_theta=1e6)
        small = {**small, "attr_aux_layers": (0, 1)}  # the tiny LM has 2 layers
        a5 = replace(a5, vision_a=TINY["vision_a"], **{**small, "text": tiny_rope, "steps": 4,
                                                       "box_warmstart_until": 4, "curriculum": ((0, 1, "attribute"),)},
                     stop_at=2)
        late = {**small, "vision_a": TINY["vision_a"], "text": tiny_rope}
        a6 = replace(a6, **{**late, "steps": 4, "box_warmstart_until": 4})
        a7 = replace(a7, **{**late, "steps": 5, "box_warmstart_until": 5})
        a8 = replace(a8, **{**late, "steps": 6, "box_warmstart_until": 6, "pressure_start": 5, "route_warmup": 1})
        b = replace(b, vision_a=TINY["vision_b"], **{**small, "text": tiny_rope, "lm_freeze_steps": 1,
                                                     "box_warmstart_until": 0})
        c_small = {**small, "vision_a": TINY["vision_a"], "text": replace(TINY["text"], rope_theta=1e6),
                   "steps": 4, "track_every": 2, "track_n": 4, "track_k": 1, "track_seeds": 1}
        c_text = replace(c_text, **{**c_small, "curriculum": ((0, 2, "easy"),)})
        c = replace(c, **{**c_small, "curriculum": ((0, 1, "single"), (1, 2, "easy"))}, stop_at=3)
        c_long = replace(c_long, **{**c_small, "steps": 5, "curriculum": ((0, 1, "single"), (1, 2, "easy"))})
        c3 = replace(c3, **{**c_small, "curriculum": ((0, 1, "single"), (1, 2, "easy"))})
        c4 = replace(c4, **{**c_small, "curriculum": ((0, 1, "single"),),
                            "text": replace(TINY["text"], layers=3, rope_theta=1e6), "attr_aux_layers": (0, 1, 2)})
        c5 = replace(c5, **c_small, curriculum=())
        c_restart = replace(c_restart, **c_small, curriculum=())
        c5_long = replace(c5_long, **{**c_small, "steps": 6}, curriculum=())
        c_restart_long = replace(c_restart_long, **{**c_small, "steps": 6}, curriculum=())
    cs = {"lm_c_text": c_text, "lm_c": c, "lm_c_long": c_long, "lm_c3": c3, "lm_c4": c4, "lm_c5": c5,
          "lm_c5_long": c5_long, "lm_c_restart": c_restart, "lm_c_restart_long": c_restart_long}
    # C' takes the LM shape of the final C phase built in out
    c_src = final_c_phase(out)
    src = cs[c_src]
    c_prime = replace(LM_C_PRIME, vision_init_a=str(Path(tower_c).parent.parent / "vision_b" / "tower.pt"),
                      lm_init=str(out / c_src / "ckpt.pt"), text=src.text, attr_aux_layers=src.attr_aux_layers)
    if tiny:
        c_prime = replace(c_prime, **{**c_small, "vision_a": TINY["vision_b"], "text": src.text,
                                      "attr_aux_layers": src.attr_aux_layers, "lm_freeze_steps": 1,
                                      "curriculum": ()})
    return {**cs, C_PRIME: c_prime,
            "lm_a": a, "lm_a2": a2, "lm_a3": a3, "lm_a4": a4, "lm_a5": a5, "lm_a6": a6, "lm_a7": a7, "lm_a8": a8,
            "lm_b": b}


def vision_stage(stage: str, tiny: bool = False) -> tuple[VisionArch, int, int]:
    """(arch, seed, steps) of a vision stage."""
    if tiny:
        return TINY[stage], (0 if stage == "vision_a" else 1), TINY["vision_steps"]
    return (VISION_A, 0, VISION_STEPS) if stage == "vision_a" else (VISION_B, 1, VISION_STEPS)


def _superseded_by(out: Path, phase: str) -> str | None:
    """The latest phase of A (or C) after ``phase`` whose checkpoint exists under ``out``, if any."""
    phases = next((p for p in C_RECIPES.values() if phase in p), A_PHASES)
    later = [p for p in phases[phases.index(phase) + 1:] if (out / p / "ckpt.pt").exists()]
    return later[-1] if later else None


def stage_steps(stage: str, cfgs: dict[str, TrainConfig], tiny: bool = False) -> int:
    """Training steps ``stage`` runs: a vision stage's steps; an LM phase's from where it starts (the step
    the phase it continues stopped at, ``init_from``; else 0) to its ``stop_at`` (0: its ``steps``)."""
    if stage in ("vision_a", "vision_b"):
        return vision_stage(stage, tiny)[2]
    cfg = cfgs[stage]
    before = cfgs.get(Path(cfg.init_from).parent.name) if cfg.init_from else None
    start = (before.stop_at or before.steps) if before is not None else 0
    return max((cfg.stop_at or cfg.steps) - start, 0)


class BuildProgress:
    """One line per stage of a build: which stage of how many, the build's steps done of its total, and an
    ETA from this session's own rate (seconds per step of the stages it ran from their start; a skipped,
    finished or resumed stage counts as done, and does not enter the rate)."""

    def __init__(self, steps: dict[str, int], clock=time.monotonic):
        self.steps, self.clock = steps, clock
        self.start = clock()
        self.done = 0  # steps of the stages behind us
        self.ran_steps, self.ran_seconds = 0, 0.0  # the stages this session trained: the rate
        self._stage_start = self.start

    def begin(self, stage: str) -> str:
        self._stage_start = self.clock()
        names = list(self.steps)
        total = sum(self.steps.values())
        left = total - self.done
        rate = self.ran_seconds / self.ran_steps if self.ran_steps else None
        eta = f"ETA {timedelta(seconds=round(rate * left))} at {rate:.2f} s/step" if rate is not None else "ETA ?"
        return (f"== stage {names.index(stage) + 1}/{len(names)} {stage} ({self.steps[stage]:,} steps; build "
                f"{self.done:,}/{total:,} steps done, {timedelta(seconds=round(self._stage_start - self.start))} "
                f"elapsed, {eta})")

    def end(self, stage: str, ran: bool) -> str:
        took = self.clock() - self._stage_start
        self.done += self.steps[stage]
        if ran and self.steps[stage]:
            self.ran_steps += self.steps[stage]
            self.ran_seconds += took
        return f"== stage {stage} done in {took:.0f} s"


def build(out_dir: str | Path, export_to: str | Path | None = None, stages: tuple[str, ...] = (),
          lm_a_steps: int | None = None, lm_b_steps: int | None = None, eval_n: int = 500,
          tiny: bool = False, tower_a: str | Path | None = None, workers: int = 1) -> dict:
    from vrh_lab.organism.emergence import copy_to_checkpoint
    from vrh_lab.organism.pretrain_vision import pretrain
    from vrh_lab.organism.train import export, train

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stages = stages or STAGES
    cfgs = stage_configs(out, tiny, tower_a)
    if lm_a_steps:
        cfgs["lm_a"] = replace(cfgs["lm_a"], steps=lm_a_steps)
    if lm_b_steps:
        cfgs["lm_b"] = replace(cfgs["lm_b"], steps=lm_b_steps)
    command = (f"vrh organism build --out {out_dir}" + (f" --export-to {export_to}" if export_to else "")
               + (f" --stages {','.join(stages)}" if set(stages) & set(C_PHASES) else "")
               + (f" --tower-a {tower_a}" if tower_a else ""))
    results: dict = {}
    unknown = [s for s in stages if s not in ("vision_a", "vision_b") and s not in cfgs]
    if unknown:
        raise ValueError(f"unknown stage {unknown[0]!r}; stages: {', '.join(STAGES + C_PHASES)}")
    progress = BuildProgress({s: stage_steps(s, cfgs, tiny) for s in stages})
    for stage in stages:
        print(progress.begin(stage), flush=True)
        ran = True
        if stage in ("vision_a", "vision_b"):
            arch, seed, steps = vision_stage(stage, tiny)
            done = out / stage / "vision_metrics.json"
            if done.exists() and json.loads(done.read_text()).get("steps") == steps:
                results[stage] = json.loads(done.read_text())
                ran = False
            else:
                results[stage] = pretrain(arch, out / stage, steps=steps, bs=4 if tiny else 64, seed=seed)
        elif stage in NOT_EXPORTED and (later := _superseded_by(out, stage)):
            # a later phase's checkpoint exists (e.g. the committed one): this phase's output is not needed
            results[stage] = {"skipped": f"superseded by {later}/ckpt.pt"}
            print(f"skipped: {later}/ckpt.pt exists", flush=True)
            ran = False
        elif stage in cfgs:
            ran = not (out / stage / "ckpt.pt").exists()  # a resumed phase ran only part of its steps: not a rate
            org = train(cfgs[stage], out / stage, workers=workers)
            if stage in NOT_EXPORTED:  # continued by the next phase, not exported
                results[stage] = {"step": org.step}
            else:
                dest = Path(export_to) if export_to else out / "export"
                results[stage] = export(org, dest, n_eval=eval_n, command=command)
                # the recipe's emergence logs, in phase order, travel with its checkpoint
                # (vrh organism emergence CHECKPOINT --out RUN makes a report-ready run folder of them)
                recipe = next((p for p in (*C_RECIPES.values(), A_PHASES) if stage in p), (stage,))
                copy_to_checkpoint([out / p for p in recipe], dest / cfgs[stage].export_name_a)
        print(progress.end(stage, ran), flush=True)
    (out / "build.json").write_text(json.dumps(
        {"command": command, "stages": list(stages), "results": results,
         "configs": {k: asdict(v) for k, v in cfgs.items()}}, indent=1, default=str))
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="vrh organism build", description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--out", required=True, help="build folder (one subfolder per stage, resumable)")
    ap.add_argument("--export-to", default=None, help="where organism_a/ and organism_b/ go (default OUT/export)")
    ap.add_argument("--stages", default="",
                    help=f"comma list of {','.join(STAGES)} (default: all) or of organism C's {','.join(C_PHASES)}")
    ap.add_argument("--tower-a", default=None,
                    help="tower A for organism C's phases (default OUT/vision_a/tower.pt)")
    ap.add_argument("--workers", type=int, default=1,
                    help="batch-rendering worker processes per LM phase (0: render in the training process) (default: %(default)s)")
    ap.add_argument("--lm-a-steps", type=int, default=None,
                    help="override the step count of A's first LM phase, lm_a (default: its own schedule)")
    ap.add_argument("--lm-b-steps", type=int, default=None,
                    help="override the step count of B's LM phase (default: its own schedule)")
    ap.add_argument("--eval-n", type=int, default=500,
                    help="held-out samples evaluated when a stage is exported (default: %(default)s)")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads (default: %(default)s)")
    a = ap.parse_args(argv)
    import torch

    torch.set_num_threads(a.threads)
    build(a.out, a.export_to, tuple(s for s in a.stages.split(",") if s), a.lm_a_steps, a.lm_b_steps, a.eval_n,
          tower_a=a.tower_a, workers=a.workers)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
