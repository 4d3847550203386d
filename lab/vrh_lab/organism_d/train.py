"""Organism D's build: stage 1 pretrains its SigLIP tower on dense per-patch scene parsing (the organisms' own
:func:`vrh_lab.organism.pretrain_vision.pretrain`), stage 2 trains the projector and (D-LoRA) the language model's
low-rank adapters on the world's grounding + VQA mixture (the tower fine-tuned at a fraction of the rate,
every base weight frozen), then the deltas are exported (:mod:`vrh_lab.organism_d.export`). Every stage resumes where a killed run stopped.

    vrh organism build d --out runs/organism_d          # rerun the same command to resume
    vrh organism build d --out runs/organism_d --lora-rank 0 --name organism_d_frozen   # the LM frozen as published

OUT/vision_d/ (tower.pt), OUT/lm_d/ (ckpt.pt: the trainable weights, optimizer and step, written every
``ckpt_every`` steps by rename; log.jsonl: one line per step; eval.jsonl: held-out grounding every ``eval_every``
steps), OUT/export/<name>/ (the deltas, :mod:`vrh_lab.organism_d.export`). The loss is the answer tokens'
cross-entropy, the 262k-way output layer applied at those positions only. Nothing in it names a head.
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
from vrh.models import gemma_base
from vrh.organism import world
from vrh_lab.organism_d import data
from vrh_lab.organism_d.model import VISION_D, LoraSpec, add_lora, build, siglip_tower, trainable_state


@dataclass(frozen=True)
class DConfig:
    name: str = "organism_d"
    seed: int = 7  # tower init, projector draw, training stream
    vision_steps: int = 3000
    steps: int = 600
    batch: int = 8
    lr: float = 1e-3
    warmup: int = 20
    min_lr_frac: float = 0.1
    grad_clip: float = 1.0
    vqa_frac: float = 0.15
    # (start, end, level) phases, world.LEVELS; "full" outside them: one object first (learn to read a box
    # out), then attribute expressions among 2-3 objects, then the whole world
    curriculum: tuple[tuple[int, int, str], ...] = ((0, 100, "single"), (100, 300, "easy"))
    lora: LoraSpec = field(default_factory=LoraSpec)
    tower_lr_mult: float = 0.3  # the stage-1 tower trained on at this fraction of ``lr``; 0 keeps it frozen
    heldout_seed: int = 10_000
    eval_n: int = 32
    final_eval_n: int = 200  # held-out grounding samples measured once training ends (VQA: half as many)
    eval_every: int = 100
    ckpt_every: int = 20
    threads: int = 2

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "DConfig":
        kw = dict(d)
        if "lora" in kw and isinstance(kw["lora"], dict):
            kw["lora"] = LoraSpec(**kw["lora"])
        if "curriculum" in kw:
            kw["curriculum"] = tuple(tuple(p) for p in kw["curriculum"])
        return DConfig(**kw)


def level_at(step: int, cfg: DConfig) -> str:
    return next((lvl for a, b, lvl in cfg.curriculum if a <= step < b), "full")


def lr_at(step: int, cfg: DConfig) -> float:
    warm = min(1.0, (step + 1) / max(1, cfg.warmup))
    cos = 0.5 * (1 + math.cos(math.pi * min(step, cfg.steps) / max(1, cfg.steps)))
    return cfg.lr * warm * (cfg.min_lr_frac + (1 - cfg.min_lr_frac) * cos)


def answer_loss(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean cross-entropy of the answer tokens; logits only where a label is (not over every position)."""
    out = model.model(input_ids=batch["input_ids"], pixel_values=batch["pixel_values"],
                      attention_mask=batch["attention_mask"], token_type_ids=batch["token_type_ids"])
    h = out.last_hidden_state[:, :-1]  # [B, T-1, D]: position t predicts token t+1
    y = batch["labels"][:, 1:]  # [B, T-1]
    sel = y != -100
    logits = model.lm_head(h[sel])  # [N, V]
    return nn.functional.cross_entropy(logits.float(), y[sel])


ANSWER_TOKENS = 40  # '{"box_2d": [741, 393, 946, 598]}' is 26 Gemma tokens (one per digit); 24 cut it short


@torch.no_grad()
def vqa_eval(model: nn.Module, proc, samples: list[dict[str, Any]], bs: int = 16) -> dict[str, Any]:
    """Greedy answers to held-out VQA questions under the VQA task's ``exact`` rule."""
    from vrh.tasks.vqa import judge_answer

    model.eval()
    hits = 0
    for i in range(0, len(samples), bs):
        chunk = samples[i:i + bs]
        enc = data.prompt_batch(proc, chunk)
        gen = model.generate(**enc, max_new_tokens=8, do_sample=False)
        texts = proc.tokenizer.batch_decode(gen[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        hits += sum(judge_answer(t, s["answer"], "exact") == "correct" for s, t in zip(chunk, texts))
    return {"n": len(samples), "accuracy": hits / max(1, len(samples))}


@torch.no_grad()
def grounding_eval(model: nn.Module, proc, samples: list[dict[str, Any]], bs: int = 16) -> dict[str, Any]:
    """Greedy answers on held-out samples, parsed by the Gemma 3 adapter, judged at IoU >= 0.5."""
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
            pred = data.ADAPTER.parse_box(text, {}, (size, size))
            outcomes.append(boxes.judge(pred, s["box"])[0])
            texts.append(text)
    model.train(was)
    return {**boxes.summarize(outcomes), "examples": texts[:3]}


def heldout(cfg: DConfig, n: int) -> list[dict[str, Any]]:
    return [world.grounding_sample(cfg.heldout_seed, i) for i in range(n)]


def vision_stage(cfg: DConfig, out: Path) -> Path:
    """Stage 1 (resumable): the tower's dense pretraining; returns OUT/vision_d/tower.pt."""
    from vrh_lab.organism.pretrain_vision import pretrain, siglip_features

    folder = out / "vision_d"
    if not (folder / "tower.pt").exists():
        pretrain(VISION_D, folder, steps=cfg.vision_steps, bs=64, lr=2e-3, seed=cfg.seed,
                 tower=siglip_tower(cfg.seed), features=siglip_features)
    return folder / "tower.pt"


def lm_stage(cfg: DConfig, out: Path, base: Path, tower_pt: Path) -> nn.Module:
    """Stage 2 (resumable): projector + adapters on the world; returns the trained model."""
    from vrh.runs import load_torch_file

    folder = out / "lm_d"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(asdict(cfg), indent=1))
    model = add_lora(build(base, load_torch_file(tower_pt, what="organism D tower"), seed=cfg.seed), cfg.lora,
                     train_tower=cfg.tower_lr_mult > 0)
    proc = data.processor(base)
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    tower = [p for n, p in params.items() if ".vision_tower." in f".{n}"]
    rest = [p for n, p in params.items() if ".vision_tower." not in f".{n}"]
    groups = [{"params": rest, "mult": 1.0}] + ([{"params": tower, "mult": cfg.tower_lr_mult}] if tower else [])
    opt = torch.optim.AdamW(groups, lr=cfg.lr, weight_decay=0.0, betas=(0.9, 0.98))
    step, ckpt = 0, folder / "ckpt.pt"
    if ckpt.exists():
        st = load_torch_file(ckpt, what="organism D checkpoint")
        with torch.no_grad():
            for n, v in st["trainable"].items():
                params[n].copy_(v)
        opt.load_state_dict(st["opt"])
        step = int(st["step"])
        print(f"resumed organism D at step {step}", flush=True)
    for name in ("log.jsonl", "eval.jsonl"):  # lines past the checkpoint are redone: drop them (none on a fresh run)
        truncate_records(folder / name, step)
    held = heldout(cfg, cfg.eval_n)
    model.train()
    t0 = time.time()
    while step < cfg.steps:
        for g in opt.param_groups:
            g["lr"] = lr_at(step, cfg) * g["mult"]
        level = level_at(step, cfg)
        samples = [data.stream_sample(cfg.seed, step * cfg.batch + j, level,
                                      cfg.vqa_frac if level != "single" else 0.0) for j in range(cfg.batch)]
        loss = answer_loss(model, data.train_batch(proc, samples))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(list(params.values()), cfg.grad_clip)
        opt.step()
        step += 1
        rec = {"step": step, "loss": round(float(loss.detach()), 4), "grad_norm": round(float(norm), 3),
               "lr": lr_at(step - 1, cfg), "level": level, "s": round(time.time() - t0, 2)}
        t0 = time.time()
        append_record(folder / "log.jsonl", rec)
        if step % 10 == 0:
            print(json.dumps(rec), flush=True)
        if step % cfg.ckpt_every == 0 or step == cfg.steps:
            atomic_save({"trainable": trainable_state(model), "opt": opt.state_dict(), "step": step}, ckpt)
        if step % cfg.eval_every == 0 or step == cfg.steps:
            ev = grounding_eval(model, proc, held)
            ev["step"] = step
            append_record(folder / "eval.jsonl", ev)
            print("eval", json.dumps(ev), flush=True)
            t0 = time.time()
    model.eval()
    return model


def heldout_stage(cfg: DConfig, out: Path, model: nn.Module, base: Path) -> dict[str, Any]:
    """The finished model on ``final_eval_n`` held-out grounding samples (the world's seed ``heldout_seed``) and
    half as many VQA samples: OUT/lm_d/heldout.json (computed once per final step: a run continued with more
    steps measures again)."""
    path = out / "lm_d" / "heldout.json"
    if path.exists() and json.loads(path.read_text()).get("step") == cfg.steps:
        return json.loads(path.read_text())
    proc = data.processor(base)
    g = grounding_eval(model, proc, heldout(cfg, cfg.final_eval_n))
    v = vqa_eval(model, proc, [world.vqa_sample(cfg.heldout_seed, i) for i in range(cfg.final_eval_n // 2)])
    rec = {"grounding_n": g["n"], "grounding_acc_iou50": g["accuracy"], "grounding_parse_failure": g["parse_failure"],
           "vqa_n": v["n"], "vqa_acc": v["accuracy"], "seed": cfg.heldout_seed, "step": cfg.steps,
           "examples": g["examples"]}
    path.write_text(json.dumps(rec, indent=1))
    print("held-out", json.dumps(rec), flush=True)
    return rec


def run(cfg: DConfig, out_dir: str | Path, export_to: str | Path | None = None) -> Path:
    """Both stages and the export; returns the exported organism folder."""
    from vrh_lab.organism_d.export import export

    torch.set_num_threads(cfg.threads)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    base = gemma_base.base_folder()
    tower_pt = vision_stage(cfg, out)
    model = lm_stage(cfg, out, base, tower_pt)
    heldout_stage(cfg, out, model, base)
    dest = Path(export_to or out / "export") / cfg.name
    export(model, cfg, dest, out)
    return dest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="vrh organism build d", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="build folder (resumable: rerun the same command)")
    ap.add_argument("--export-to", default=None, help="where the organism folder goes (default OUT/export)")
    ap.add_argument("--config", default=None, help="a JSON file of DConfig fields (default: the shipped recipe)")
    ap.add_argument("--steps", type=int, default=None, help="stage 2 steps (default: the recipe's)")
    ap.add_argument("--lora-rank", type=int, default=None, help="adapter rank; 0 keeps the LM frozen (organism D)")
    ap.add_argument("--name", default=None, help="exported folder name (default: organism_d)")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    a = ap.parse_args(argv)
    cfg = DConfig.from_dict(json.loads(Path(a.config).read_text())) if a.config else DConfig()
    if a.steps is not None:
        cfg = replace(cfg, steps=a.steps)
    if a.lora_rank is not None:
        cfg = replace(cfg, lora=replace(cfg.lora, rank=a.lora_rank))
    if a.name:
        cfg = replace(cfg, name=a.name)
    if a.threads:
        cfg = replace(cfg, threads=a.threads)
    try:
        dest = run(cfg, a.out, a.export_to)
    except gemma_base.BaseModelUnavailable as e:
        print(f"vrh organism build d: {e}", flush=True)
        return 2
    print(f"organism D exported to {dest}", flush=True)
    return 0
