"""The training configuration of the organisms: :class:`TrainConfig` (every field is documented in
:mod:`vrh_lab.organism.train`'s docstring), the named presets and how a ``--config`` is read."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vrh.organism import world
from vrh_lab.organism.arch import TextArch, VisionArch


@dataclass(frozen=True)
class TrainConfig:
    name: str = "organism"
    seed: int = 0  # init + data stream of A
    seed_b: int = 1  # init + data stream of B
    steps: int = 12000
    batch_a: int = 40
    batch_b: int = 24  # 0: train A only
    lr: float = 1e-3
    min_lr_frac: float = 0.05  # cosine decays to lr * this
    warmup: int = 300
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    vqa_frac: float = 0.15
    caption_frac: float = 0.0  # region captioning ("what is [ box ] ?" -> "large red circle")
    # text-only retrieval jobs (vrh_lab.organism.text_tasks: the scene written as a list of items; no image):
    # organism C's LM pretraining (1.0) and task mixture. Drawn after VQA and captions, so 0.0 leaves
    # every earlier run's data stream unchanged.
    text_frac: float = 0.0
    # grounding samples of the "full" level drawn from the "contrast" level instead (the referent among
    # look-alikes, world.contrast_scene): organism C's hard world (recipe C5); 0.0 leaves streams unchanged
    contrast_frac: float = 0.0
    head_dropout: float = 0.1
    route_l1: float = 0.0
    # Both pressures start at pressure_start and ramp in linearly over route_warmup steps: applied from
    # step 0 the model learned to ignore the image (visual mass -> 0, accuracy 1% at step 700; docs).
    pressure_start: int = 0
    # Curriculum: (start, end, level) phases, level in world.LEVELS; "full" outside every phase. The
    # full world alone left the model ignoring the image for 700+ steps (docs/organism.md).
    curriculum: tuple[tuple[int, int, str], ...] = ()
    # Warm start of retrieval: for steps < box_warmstart_until, loss += box_warmstart * box_nll (the
    # answer->GT-box attention mass of the best head over the batch). Off afterwards.
    box_warmstart: float = 0.0
    box_warmstart_until: int = 0
    # Warm start and retrieval-head tracking on the positions predicting the first N answer tokens only
    # (0: all answer positions). 2 = the ones predicting "[" and x1, before any coordinate is written.
    warmstart_first: int = 0
    # The warm start's loss per sample: mean over samples of -log(mass) of the chosen head (still chosen
    # by its batch-mean mass) instead of -log(batch-mean mass). The batch-mean form saturates once the
    # head is right on most samples; the per-sample form keeps pulling on the samples it gets wrong
    # (attention supervision of the model's own retrieval head).
    warmstart_per_sample: bool = False
    # Auxiliary attribute probes (a training aid, discarded at export): linear read-outs of the colour and
    # shape of the object under each visual token from the LM's residual stream at the inputs of these
    # layers (0 = the projector's output), loss weight attr_aux. Without it the LM's layers washed colour
    # out of the visual tokens (probe 86% at the LM input, 23% after layer 3; docs/organism.md), so the
    # retrieval heads' keys could not match "red" at all.
    attr_aux: float = 0.0
    attr_aux_layers: tuple[int, ...] = (0, 1, 2, 3)
    route_warmup: int = 1000
    # Head dropout spares the dropout_protect_top heads with the highest running (EMA) answer->GT-box
    # attention mass: every other head is made redundant, retrieval stays concentrated (issue 4).
    dropout_protect_top: int = 0
    # The routing penalty spares the protected heads too: only the *other* heads pay for looking at the
    # image, so cross-modal retrieval concentrates in the model's own best few heads (issue 4).
    route_spare_protected: bool = False
    # Phases: stop this run at stop_at (0: at steps) with the schedule still computed over `steps`; a
    # later run continues from an earlier run's full checkpoint (model, optimizer, step) with init_from.
    stop_at: int = 0
    init_from: str = ""
    # Start every model from another run's ckpt.pt *weights* (and running head statistics) only: a fresh
    # optimizer and schedule at step 0, so the parameter set may differ (e.g. a tower frozen there and
    # trained here).
    weights_from: str = ""
    # Stage 1 output (vrh_lab.organism.pretrain_vision): tower state dicts to start from (paths as given,
    # i.e. relative to the working directory, or absolute); freeze_vision keeps them fixed (LLaVA-style: the LM learns to use the encoder).
    vision_init_a: str = ""
    vision_init_b: str = ""
    freeze_vision: bool = False
    # Initialise the projector's first layer as the ZCA whitening of the (pretrained) tower's patch
    # features: the pretrained features carry box geometry with ~13x the magnitude of colour/shape (probe
    # weight norms 0.19 vs 2.6), and an LM fed them raw stayed blind to colour (docs/organism.md, v2b).
    projector_whiten: bool = False
    # Start the language model (+ embeddings + LM head) from another run's ckpt.pt (its organism A): the
    # "same pretrained LM backbone, separately fine-tuned" setting of the paper's transfer experiment.
    lm_init: str = ""
    lm_freeze_steps: int = 0  # train only projector (+ tower if not frozen) for this many steps first
    export_name_a: str = ""  # export folder name of organism A (default: <name>_a)
    image_size: int = world.IMAGE_SIZE
    text: TextArch = TextArch()
    vision_a: VisionArch = VisionArch()
    vision_b: VisionArch = VisionArch(patch_size=14, hidden=96, layers=3, heads=4, intermediate=384)
    heldout_seed: int = 10_000
    eval_n: int = 256
    eval_every: int = 1000
    ckpt_every: int = 250
    log_every: int = 50
    threads: int = 2
    # Emergence tracking (vrh_lab.organism.emergence): every track_every steps (0: off), the head-score map on
    # a fixed probe set of track_n samples and accuracy with its top track_k heads vs track_seeds draws
    # of track_k random heads zeroed, appended to OUT/emergence.jsonl. Measurement only: no loss term.
    track_every: int = 0
    track_n: int = 64
    track_k: int = 3
    track_seeds: int = 2

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "TrainConfig":
        nested = {"text": TextArch, "vision_a": VisionArch, "vision_b": VisionArch}
        kw = {k: (nested[k](**v) if k in nested and isinstance(v, dict) else v) for k, v in d.items()}
        if "curriculum" in kw:  # JSON lists -> hashable tuples
            kw["curriculum"] = tuple(tuple(p) for p in kw["curriculum"])
        if "attr_aux_layers" in kw:
            kw["attr_aux_layers"] = tuple(kw["attr_aux_layers"])
        return TrainConfig(**kw)


PRESETS: dict[str, TrainConfig] = {
    # the shipped organisms come from the staged build (vrh_lab.organism.pipeline: `vrh organism build`);
    # this preset is for tests and quick experiments
    "tiny": TrainConfig(name="tiny", steps=30, batch_a=16, batch_b=8, lr=3e-3, warmup=5, route_l1=0.0,
                        text=TextArch(hidden=64, layers=2, heads=4, intermediate=128),
                        vision_a=VisionArch(hidden=64, layers=1, heads=2, intermediate=128),
                        vision_b=VisionArch(patch_size=14, hidden=48, layers=1, heads=2, intermediate=96),
                        eval_n=16, eval_every=10_000, ckpt_every=10_000, log_every=10),
}


def load_config(spec: str | None) -> TrainConfig:
    if spec is None:
        raise SystemExit("vrh organism train needs --config PRESET_OR_JSON (presets: " + ", ".join(PRESETS)
                         + "); the shipped organisms are built by `vrh organism build --out DIR`")
    if spec in PRESETS:
        return PRESETS[spec]
    return TrainConfig.from_dict(json.loads(Path(spec).read_text()))
