"""Organism E's build: DINOv2-S/14 + SmolLM2-135M-Instruct from their packages, trained the way LLaVA is.

The parts are converted from their packages (:mod:`vrh.models.organism_e_base`); the DINOv2 tower stays frozen;
the projector is aligned first with the language model frozen (``align_steps``), then trained with the LM's
low-rank adapters, on the world's grounding + VQA mixture (A's, C's and D's world and answer format). Every step
resumes where a killed run stopped.

    vrh organism build e --out runs/organism_e          # rerun the same command to resume

OUT/lm_e/ (config.json; ckpt.pt: the trainable weights, optimizer and step, written every ``ckpt_every`` steps
by rename; log.jsonl: one line per step; eval.jsonl: held-out grounding every ``eval_every`` steps, at each of
``eval_levels``). The loss is the answer tokens' cross-entropy, the output layer applied at those positions
only. Nothing in it names a head. Shipping E (its deltas) is left until it grounds.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vrh_lab.organism.records import append_record, atomic_save, truncate_records
from vrh.data import boxes
from vrh.models import organism_e_base as parts
from vrh.organism import world
from vrh_lab.organism_e import data
from vrh_lab.organism_e.model import LoraSpec, add_lora, build, processor, set_phase, trainable_names, trainable_state


@dataclass(frozen=True)
class EConfig:
    name: str = "organism_e"
    seed: int = 7  # projector draw, training stream
    image_size: int = 112  # 8 x 8 patches of 14 px
    feature_layer: int = -1  # the tower's hidden state LLaVA reads (-1: the last layer, before the final norm)
    steps: int = 200
    align_steps: int = 50  # the projector alone (the LM frozen as published) before the adapters train
    batch: int = 8
    lr: float = 1e-3
    lora_lr_mult: float = 1.0
    warmup: int = 20
    min_lr_frac: float = 0.1
    grad_clip: float = 1.0
    vqa_frac: float = 0.15  # outside the "single" phase
    # (start, end, level) phases, world.LEVELS; "full" outside them: one object first
    curriculum: tuple[tuple[int, int, str], ...] = ((0, 150, "single"),)
    lora: LoraSpec = field(default_factory=LoraSpec)
    heldout_seed: int = 10_000
    eval_n: int = 32
    eval_levels: tuple[str, ...] = ("single", "full")
    eval_every: int = 50
    ckpt_every: int = 10
    threads: int = 1

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "EConfig":
        kw = dict(d)
        unknown = set(kw) - set(EConfig.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown organism E config keys: {sorted(unknown)}")
        if isinstance(kw.get("lora"), dict):
            kw["lora"] = LoraSpec(**kw["lora"])
        if "curriculum" in kw:
            kw["curriculum"] = tuple(tuple(p) for p in kw["curriculum"])
        if "eval_levels" in kw:
            kw["eval_levels"] = tuple(kw["eval_levels"])
        return EConfig(**kw)


def level_at(step: int, cfg: EConfig) -> str:
    return next((lvl for a, b, lvl in cfg.curriculum if a <= step < b), "full")


def lr_at(step: int, cfg: EConfig) -> float:
    warm = min(1.0, (step + 1) / max(1, cfg.warmup))
    cos = 0.5 * (1 + math.cos(math.pi * min(step, cfg.steps) / max(1, cfg.steps)))
    return cfg.lr * warm * (cfg.min_lr_frac + (1 - cfg.min_lr_frac) * cos)


def answer_loss(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean cross-entropy of the answer tokens; logits only where a label is."""
    out = model.model(input_ids=batch["input_ids"], pixel_values=batch["pixel_values"],
                      attention_mask=batch["attention_mask"])
    h = out.last_hidden_state[:, :-1]  # [B, T-1, D]: position t predicts token t+1
    y = batch["labels"][:, 1:]  # [B, T-1]
    sel = y != -100
    return nn.functional.cross_entropy(model.lm_head(h[sel]).float(), y[sel])  # logits [N, V]


ANSWER_TOKENS = 24  # ' [ 56 , 25 , 85 , 54 ]<|im_end|>' is 18 SmolLM2 tokens (one per digit)


@torch.no_grad()
def grounding_eval(model: nn.Module, proc, samples: list[dict[str, Any]], bs: int = 16) -> dict[str, Any]:
    """Greedy answers on held-out samples, parsed by the LLaVA adapter (E's settings), judged at IoU >= 0.5."""
    was = model.training
    model.eval()
    outcomes, texts = [], []
    for i in range(0, len(samples), bs):
        chunk = samples[i:i + bs]
        enc = data.prompt_batch(proc, chunk)
        gen = model.generate(**enc, max_new_tokens=ANSWER_TOKENS, do_sample=False)
        for s, row in zip(chunk, gen[:, enc["input_ids"].shape[1]:]):
            text = proc.tokenizer.decode(row, skip_special_tokens=True)
            size = s["scene"].size
            outcomes.append(boxes.judge(data.ADAPTER.parse_box(text, {}, (size, size)), s["box"])[0])
            texts.append(text)
    model.train(was)
    return {**boxes.summarize(outcomes), "examples": texts[:3]}


def heldout(cfg: EConfig, n: int, level: str) -> list[dict[str, Any]]:
    return [world.grounding_sample(cfg.heldout_seed, i, level=level) for i in range(n)]


def train_stage(cfg: EConfig, out: Path, lm_folder: Path, vision_folder: Path) -> nn.Module:
    """Both phases (resumable); returns the trained model."""
    from vrh.runs import load_torch_file

    folder = out / "lm_e"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(asdict(cfg), indent=1))
    model = add_lora(build(lm_folder, vision_folder, seed=cfg.seed, feature_layer=cfg.feature_layer), cfg.lora)
    proc = processor(lm_folder, cfg.image_size)
    named = dict(model.named_parameters())
    names = trainable_names(model)
    proj = [named[n] for n in names if "lora_" not in n]
    lora = [named[n] for n in names if "lora_" in n]
    groups = [{"params": proj, "mult": 1.0}] + ([{"params": lora, "mult": cfg.lora_lr_mult}] if lora else [])
    opt = torch.optim.AdamW(groups, lr=cfg.lr, weight_decay=0.0, betas=(0.9, 0.98))
    step, ckpt = 0, folder / "ckpt.pt"
    if ckpt.exists():
        st = load_torch_file(ckpt, what="organism E checkpoint")
        with torch.no_grad():
            for n, v in st["trainable"].items():
                named[n].copy_(v)
        opt.load_state_dict(st["opt"])
        step = int(st["step"])
        print(f"resumed organism E at step {step}", flush=True)
    for name in ("log.jsonl", "eval.jsonl"):  # lines past the checkpoint are redone: drop them
        truncate_records(folder / name, step)
    held = {level: heldout(cfg, cfg.eval_n, level) for level in cfg.eval_levels}
    model.train()
    t0 = time.time()
    while step < cfg.steps:
        adapters = step >= cfg.align_steps and bool(lora)
        set_phase(model, adapters)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, cfg) * g["mult"]
        level = level_at(step, cfg)
        samples = [data.stream_sample(cfg.seed, step * cfg.batch + j, level,
                                      cfg.vqa_frac if level != "single" else 0.0) for j in range(cfg.batch)]
        loss = answer_loss(model, data.train_batch(proc, samples))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_([p for p in proj + lora if p.grad is not None], cfg.grad_clip)
        opt.step()
        step += 1
        rec = {"step": step, "loss": round(float(loss.detach()), 4), "grad_norm": round(float(norm), 3),
               "lr": lr_at(step - 1, cfg), "level": level, "phase": "lora" if adapters else "align",
               "s": round(time.time() - t0, 2)}
        t0 = time.time()
        append_record(folder / "log.jsonl", rec)
        print(json.dumps(rec), flush=True)
        if step % cfg.ckpt_every == 0 or step == cfg.steps:
            atomic_save({"trainable": trainable_state(model), "opt": opt.state_dict(), "step": step}, ckpt)
        if step % cfg.eval_every == 0 or step == cfg.steps:
            for level, samples_ in held.items():
                t_eval = time.time()
                ev = grounding_eval(model, proc, samples_)
                ev.update(step=step, level=level, s=round(time.time() - t_eval, 1))
                append_record(folder / "eval.jsonl", ev)
                print("eval", json.dumps(ev), flush=True)
            t0 = time.time()
    model.eval()
    return model


def run(cfg: EConfig, out_dir: str | Path) -> nn.Module:
    torch.set_num_threads(cfg.threads)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return train_stage(cfg, out, parts.lm_folder(), parts.vision_folder())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="vrh organism build e", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="build folder (resumable: rerun the same command)")
    ap.add_argument("--config", default=None, help="a JSON file of EConfig fields (default: the pilot's recipe)")
    ap.add_argument("--steps", type=int, default=None, help="training steps (default: the recipe's)")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default 1)")
    a = ap.parse_args(argv)
    try:
        cfg = EConfig.from_dict(json.loads(Path(a.config).read_text())) if a.config else EConfig()
    except (OSError, ValueError, TypeError) as e:
        print(f"vrh organism build e: {a.config}: {e}", flush=True)
        return 2
    if a.steps is not None:
        cfg = replace(cfg, steps=a.steps)
    if a.threads:
        cfg = replace(cfg, threads=a.threads)
    try:
        run(cfg, a.out)
    except parts.PartsUnavailable as e:
        print(f"vrh organism build e: {e}", flush=True)
        return 2
    print(f"organism E trained in {a.out} (not exported: E ships once it grounds)", flush=True)
    return 0
