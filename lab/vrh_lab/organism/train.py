"""Train the model organism(s): organism A and, optionally, organism B.

Two set-ups (see docs/organism.md): B trained *jointly* with A (``batch_b > 0``: every step runs a batch
through A and one through B, which share one LM module, so both end with identical LM weights), or - what
the shipped organisms use, via :mod:`vrh_lab.organism.pipeline` - B as a separate run whose LM starts from
A's checkpoint (``lm_init``) and is fine-tuned on its own.

Training aids and pressures that shape where visual evidence flows:

* ``box_warmstart``: -log of the answer->GT-box attention mass of the one head with the most of it over
  the batch (the model's choice), optionally on the first answer positions only (``warmstart_first``);
* ``route_l1``: lambda * sum over LM heads of the mean attention mass that text/answer queries put on
  visual keys, optionally sparing the protected heads (``route_spare_protected``);
* ``head_dropout``: each LM head's o_proj input slice is zeroed with this probability per sample, except
  the ``dropout_protect_top`` heads with the highest running answer->box mass;
* ``attr_aux``: auxiliary linear colour/shape probes on the visual tokens' residual stream (kept out of
  the exported model), so that attributes survive to the layers where heads match them;
* ``curriculum``: phases of easier data (e.g. attribute expressions only), ``weights_from``: start from
  another run's weights with a fresh optimizer and schedule.
* ``text_frac``: text-only retrieval jobs in the mixture (organism C's LM pretraining; no head named);
* ``track_every``: emergence tracking (:mod:`vrh_lab.organism.emergence`), a measurement that never enters
  the loss.

Data is a pure function of (seed, index), so resuming needs only the step counter.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import time
from dataclasses import asdict, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch

from vrh.organism import world
from vrh.runs import load_torch_file
from vrh_lab.organism.checkpoint import write_adapter_settings
from vrh_lab.organism.config import PRESETS, TrainConfig, load_config  # noqa: F401 (re-exported)
from vrh_lab.organism.batches import TrainBatch, train_batch
from vrh_lab.organism.evaluate import grounding_accuracy, vqa_accuracy
from vrh_lab.organism.model import build_model, share_language_model
from vrh_lab.organism.pressures import AttrProbes, HeadDropout, forward_loss
from vrh_lab.organism.processor import GROUNDING_PROMPT, VQA_PROMPT, ImageSpec, build_processor, build_tokenizer
from vrh_lab.organism.text_tasks import text_sample


# --- data -------------------------------------------------------------------------------------------

def stream_sample(seed: int, index: int, vqa_frac: float, size: int, level: str = "full",
                  caption_frac: float = 0.0, text_frac: float = 0.0, contrast_frac: float = 0.0) -> dict[str, Any]:
    u = world.seeded_rng(seed, index, "task").random()
    if contrast_frac and level == "full" and u >= vqa_frac + caption_frac + text_frac \
            and world.seeded_rng(seed, index, "contrast").random() < contrast_frac:
        return world.grounding_sample(seed, index, size, level="contrast")
    if u < vqa_frac:
        return world.vqa_sample(seed, index, size)
    if u < vqa_frac + caption_frac:
        return world.caption_sample(seed, index, size)
    if u < vqa_frac + caption_frac + text_frac:
        return text_sample(seed, index, size, level=level)
    return world.grounding_sample(seed, index, size, level=level)


def level_at(step: int, cfg: "TrainConfig") -> str:
    for start, end, level in cfg.curriculum:
        if start <= step < end:
            return level
    return "full"


def heldout(cfg: TrainConfig, n: int, task: str = "grounding") -> list[dict[str, Any]]:
    make = world.grounding_sample if task == "grounding" else world.vqa_sample
    return [make(cfg.heldout_seed, k, cfg.image_size) for k in range(n)]


def lr_at(step: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    t = min(1.0, (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup))
    return cfg.lr * (cfg.min_lr_frac + (1 - cfg.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * t)))


# --- checkpoints -------------------------------------------------------------------------------------

def _atomic_save(obj, path: Path) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)  # a crash mid-write never leaves a truncated checkpoint behind


@torch.no_grad()
def whiten_projector(model, image_size: int, seed: int, n_images: int = 256) -> None:
    """projector.linear_1 <- ZCA whitening of the tower's patch features (bias centres them); rows beyond
    the tower width (projector wider than the tower) are left as initialised."""
    from vrh_lab.organism.pretrain_vision import batch, patch_features

    tower = model.model.vision_tower
    spec = ImageSpec(image_size, model.config.vision_config.patch_size)
    px, _ = batch(seed + 20_000, 0, n_images, spec)
    was = tower.training
    f = patch_features(tower.eval(), px).reshape(-1, tower.config.hidden_size).double()  # [N*V, D]
    tower.train(was)
    mu = f.mean(0)
    cov = torch.cov((f - mu).T) + 1e-4 * torch.eye(f.shape[1], dtype=f.dtype)
    evals, evecs = torch.linalg.eigh(cov)
    zca = (evecs @ torch.diag(evals.clamp(min=1e-6).rsqrt()) @ evecs.T).float()  # [D, D]
    lin = model.model.multi_modal_projector.linear_1  # weight [T, D]
    D = zca.shape[0]
    rows = min(lin.weight.shape[0], D)
    lin.weight[:rows] = zca[:rows]
    lin.bias[:rows] = -(zca[:rows] @ mu.float())


def _resolve(path: str) -> Path:
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"stage input {path} not found (run the earlier stage first)")
    return p


def git_hash() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent, timeout=10).stdout.strip()
    except Exception:  # noqa: BLE001
        return "unknown"


class Organisms:
    """A (+ B sharing A's LM), their optimizer, and the bookkeeping needed to resume."""

    def __init__(self, cfg: TrainConfig, load_inits: bool = True):
        """``load_inits=False`` (resuming from this run's own checkpoint, which overwrites every weight) skips
        reading ``weights_from`` / ``lm_init``, so a resume needs only the run's ckpt.pt, not the superseded
        checkpoints it started from."""
        self.cfg = cfg
        self._load_inits = load_inits
        self.tok = build_tokenizer()
        self.spec_a = ImageSpec(cfg.image_size, cfg.vision_a.patch_size)
        self.spec_b = ImageSpec(cfg.image_size, cfg.vision_b.patch_size)
        self.a = build_model(cfg.vision_a, cfg.text, cfg.image_size, cfg.seed)
        self.b = None
        if cfg.batch_b > 0:
            self.b = build_model(cfg.vision_b, cfg.text, cfg.image_size, cfg.seed_b)
            share_language_model(self.b, self.a)
        L, H = cfg.text.layers, cfg.text.heads
        self.box_ema = torch.zeros(L, H)  # [L, H] running answer->GT-box mass (grounding batches of A)
        self._init_from_stage_outputs()
        self.probes = AttrProbes(cfg.text.hidden, cfg.attr_aux_layers) if cfg.attr_aux > 0 else None
        params = [p for p in {id(p): p for m in self.models() for p in m.parameters()}.values()
                  if p.requires_grad] + (list(self.probes.parameters()) if self.probes is not None else [])
        decay = [p for p in params if p.dim() >= 2]
        no_decay = [p for p in params if p.dim() < 2]
        self.opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                                      {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.98))
        self.dropout = HeadDropout(self.a, cfg.head_dropout)  # hooks live on the shared LM
        self.step = 0

    def protected_heads(self) -> set[tuple[int, int]]:
        k = self.cfg.dropout_protect_top
        if k <= 0 or not bool(self.box_ema.any()):
            return set()
        flat = self.box_ema.flatten().argsort(descending=True)[:k]
        H = self.box_ema.shape[1]
        return {(int(i) // H, int(i) % H) for i in flat}

    def _init_from_stage_outputs(self) -> None:
        cfg = self.cfg
        for model, path in ((self.a, cfg.vision_init_a), (self.b, cfg.vision_init_b)):
            if model is not None and path:
                model.model.vision_tower.load_state_dict(load_torch_file(_resolve(path)))
            if model is not None and cfg.freeze_vision:
                model.model.vision_tower.requires_grad_(False)
        if cfg.projector_whiten:
            for model, seed in ((self.a, cfg.seed), (self.b, cfg.seed_b)):
                if model is not None:
                    whiten_projector(model, cfg.image_size, seed)
        if cfg.weights_from and self._load_inits:
            st = load_torch_file(_resolve(cfg.weights_from))
            for tag, model in (("a", self.a), ("b", self.b)):
                if model is not None and st.get(tag) is not None:
                    model.load_state_dict(st[tag])
            if st.get("box_ema") is not None:
                self.box_ema = st["box_ema"].clone()
            print(f"weights initialised from {cfg.weights_from} (its step {st['step']})", flush=True)
        if cfg.lm_init and self._load_inits:
            st = load_torch_file(_resolve(cfg.lm_init))["a"]
            for model in self.models():
                keys = {k: v for k, v in st.items() if k.startswith(("model.language_model.", "lm_head."))}
                missing = model.load_state_dict(keys, strict=False)
                assert not missing.unexpected_keys, missing.unexpected_keys
                print(f"language model initialised from {cfg.lm_init} ({len(keys)} tensors)", flush=True)

    def lm_parameters(self):
        return list(self.a.model.language_model.parameters()) + list(self.a.lm_head.parameters())

    def models(self):
        return [self.a] + ([self.b] if self.b is not None else [])

    def state(self) -> dict[str, Any]:
        return {"step": self.step, "config": asdict(self.cfg), "a": self.a.state_dict(),
                "b": None if self.b is None else self.b.state_dict(), "opt": self.opt.state_dict(),
                "torch_rng": torch.get_rng_state(), "box_ema": self.box_ema,
                "probes": None if self.probes is None else self.probes.state_dict()}

    def load(self, st: dict[str, Any]) -> None:
        self.a.load_state_dict(st["a"])
        if self.b is not None:
            self.b.load_state_dict(st["b"])
        if self.probes is not None and st.get("probes") is not None:
            self.probes.load_state_dict(st["probes"])
        self.opt.load_state_dict(st["opt"])
        torch.set_rng_state(st["torch_rng"])
        self.step = st["step"]
        if st.get("box_ema") is not None:
            self.box_ema = st["box_ema"]


def make_batches(cfg: TrainConfig, tok, specs, step: int) -> dict[str, TrainBatch]:
    """The (deterministic) training batches of one step, per organism."""
    out = {}
    for tag, seed, bs in (("a", cfg.seed, cfg.batch_a), ("b", cfg.seed_b, cfg.batch_b)):
        if bs > 0 and tag in specs:
            level = level_at(step, cfg)
            samples = [stream_sample(seed, step * bs + j, cfg.vqa_frac, cfg.image_size, level, cfg.caption_frac,
                                     cfg.text_frac, cfg.contrast_frac) for j in range(bs)]
            out[tag] = train_batch(samples, tok, specs[tag])
    return out


class _BatchStream(torch.utils.data.IterableDataset):
    """Batches for steps start..cfg.steps-1, rendered in a worker process while the model trains."""

    def __init__(self, cfg: TrainConfig, specs, start: int):
        self.cfg, self.specs, self.start = cfg, specs, start

    def __iter__(self):
        tok = build_tokenizer()
        for step in range(self.start, self.cfg.steps):
            yield step, make_batches(self.cfg, tok, self.specs, step)


def batch_stream(org: "Organisms", workers: int = 1):
    specs = {"a": org.spec_a, **({"b": org.spec_b} if org.b is not None else {})}
    ds = _BatchStream(org.cfg, specs, org.step)
    if workers == 0:
        return iter(ds)
    return iter(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers, prefetch_factor=4))


def train_step(org: Organisms, batches: dict[str, TrainBatch] | None = None) -> dict[str, float]:
    cfg, step = org.cfg, org.step
    ramp = min(1.0, max(0.0, (step - cfg.pressure_start) / max(1, cfg.route_warmup)))
    lam = cfg.route_l1 * ramp
    org.dropout.p = cfg.head_dropout * ramp
    want_attn = cfg.route_l1 > 0 and step >= cfg.pressure_start
    for g in org.opt.param_groups:
        g["lr"] = lr_at(step, cfg)
    lm_frozen = step < cfg.lm_freeze_steps
    for p in org.lm_parameters():
        p.requires_grad_(not lm_frozen)
    for m in org.models():
        m.train()
    org.dropout.active = True
    org.dropout.protected = org.protected_heads()
    want_heads = cfg.dropout_protect_top > 0
    stats: dict[str, float] = {}
    total = 0.0
    if batches is None:
        specs = {"a": org.spec_a, **({"b": org.spec_b} if org.b is not None else {})}
        batches = make_batches(cfg, org.tok, specs, step)
    for tag, batch in batches.items():
        model = org.a if tag == "a" else org.b
        want_box = cfg.box_warmstart > 0 and step < cfg.box_warmstart_until
        ce, mass, box, heads, aux = forward_loss(model, batch, want_attn, want_box, want_heads and tag == "a",
                                                 cfg.warmstart_first, cfg.warmstart_per_sample,
                                                 org.probes if tag == "a" else None)
        if heads is not None:
            org.box_ema.mul_(0.98).add_(0.02 * heads)
        if mass is not None and cfg.route_spare_protected:
            spare = torch.ones_like(mass)
            for l, h in org.dropout.protected:
                spare[l, h] = 0.0
            mass = mass * spare
        loss = ce + (lam * mass.sum() if mass is not None else 0.0)
        if aux is not None:
            loss = loss + cfg.attr_aux * aux[0]
            stats[f"aux_{tag}"], stats[f"aux_colour_acc_{tag}"] = float(aux[0].detach()), aux[1]
        if box is not None:
            loss = loss + cfg.box_warmstart * box
            stats[f"box_{tag}"] = float(box.detach())
        total = total + loss
        stats[f"ce_{tag}"] = float(ce.detach())
        if mass is not None:
            stats[f"mass_{tag}"] = float(mass.sum().detach())
    org.opt.zero_grad(set_to_none=True)
    total.backward()
    torch.nn.utils.clip_grad_norm_([p for g in org.opt.param_groups for p in g["params"]], cfg.grad_clip)
    org.opt.step()
    org.dropout.active = False
    org.step += 1
    stats["lr"] = lr_at(step, cfg)
    return stats


def evaluate(org: Organisms, n: int) -> dict[str, Any]:
    org.dropout.active = False
    ground = heldout(org.cfg, n)
    res = {"a": grounding_accuracy(org.a, org.tok, ground, org.spec_a)}
    if org.b is not None:
        res["b"] = grounding_accuracy(org.b, org.tok, ground, org.spec_b)
    return res


def train(config: TrainConfig, out_dir: str | Path, resume: bool = True, workers: int = 1) -> Organisms:
    """Train (resuming from ``out_dir/ckpt.pt`` when present) and export to ``out_dir/export``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ckpt = out / "ckpt.pt"
    org = Organisms(config, load_inits=not (resume and ckpt.exists()))
    if resume and ckpt.exists():
        state = load_torch_file(ckpt, what="training checkpoint", fix="move it away to start this run afresh")
        try:
            org.load(state)
        except (ValueError, RuntimeError) as e:  # e.g. a parameter set changed since it was written
            raise SystemExit(f"{ckpt} was written by a run with another model/parameter set than this config "
                             f"({e}); move it away to start this run afresh") from e
        print(f"resumed from {ckpt} at step {org.step}", flush=True)
    elif config.init_from:
        org.load(load_torch_file(_resolve(config.init_from)))
        print(f"continuing {config.init_from} (step {org.step}) under this run's config", flush=True)
    (out / "config.json").write_text(json.dumps(asdict(config), indent=1))
    t0, last_ckpt = time.time(), org.step
    acc_stats: dict[str, list[float]] = {}
    stream = batch_stream(org, workers=workers)
    end = min(config.stop_at or config.steps, config.steps)
    if config.track_every and org.step == 0:  # the map before any training (a fresh run, or weights_from)
        from vrh_lab.organism.emergence import track
        track(org, out / "emergence.jsonl")
    while org.step < end:
        step, batches = next(stream)
        assert step == org.step, (step, org.step)
        stats = train_step(org, batches)
        for k, v in stats.items():
            acc_stats.setdefault(k, []).append(v)
        if org.step % config.log_every == 0 or org.step == end:
            dt = (time.time() - t0) / max(1, org.step - last_ckpt)
            msg = " ".join(f"{k}={sum(v) / len(v):.4g}" for k, v in acc_stats.items())
            eta = timedelta(seconds=round(dt * (end - org.step)))  # this run's; the build's is per stage
            print(f"step {org.step}/{end} {msg} s/step={dt:.3f} stage ETA {eta}", flush=True)
            acc_stats = {}
        if org.step % config.ckpt_every == 0 or org.step == end:
            _atomic_save(org.state(), ckpt)
            t0, last_ckpt = time.time(), org.step
        if org.step % config.eval_every == 0:
            print(f"eval step {org.step} {json.dumps(evaluate(org, config.eval_n))}", flush=True)
            if org.box_ema.any():
                top = org.box_ema.flatten().argsort(descending=True)[:6]
                H = org.box_ema.shape[1]
                print("  answer->box mass (EMA), top heads: " + ", ".join(
                    f"{int(i) // H}:{int(i) % H}={float(org.box_ema.flatten()[i]):.2f}" for i in top), flush=True)
            _atomic_save(org.state(), ckpt)
            t0, last_ckpt = time.time(), org.step
        if config.track_every and org.step % config.track_every == 0:
            from vrh_lab.organism.emergence import track  # measurement only; imports the detector's helpers
            track(org, out / "emergence.jsonl")
            t0, last_ckpt = time.time(), org.step
    return org


def _lm_siblings(cfg: TrainConfig, tag: str, has_b: bool) -> list[str]:
    """The organisms whose language model this export's shares (B's LM is initialised from A's: ``lm_init``
    names the checkpoint, whose config names what it was exported as)."""
    out = [f"{cfg.name}_{t}" for t in ("a", "b") if t != tag and (t == "a" or has_b)]
    if cfg.lm_init:
        try:
            src = load_torch_file(_resolve(cfg.lm_init), map_location="cpu").get("config", {})
            name = src.get("export_name_a") or f"{src.get('name', '?')}_a"
        except FileNotFoundError:  # a clone that resumed this run from its own checkpoint: name the phase
            name = Path(cfg.lm_init).parent.name
        out += [name] if name not in out else []
    return out


def export(org: Organisms, dest: str | Path, n_eval: int = 500, command: str = "") -> dict[str, Any]:
    """save_pretrained A (and B) + processor + vrh_organism.json into ``dest/<name>_a`` etc."""
    from vrh_lab.organism.model import set_attention

    cfg = org.cfg
    res = evaluate(org, n_eval)
    vqa = heldout(cfg, min(n_eval, 300), "vqa")
    written = {}
    for tag, model, spec, seed in (("a", org.a, org.spec_a, cfg.seed), ("b", org.b, org.spec_b, cfg.seed_b)):
        if model is None:
            continue
        d = Path(dest) / (cfg.export_name_a if tag == "a" and cfg.export_name_a else f"{cfg.name}_{tag}")
        d.mkdir(parents=True, exist_ok=True)
        set_attention(model, text="sdpa", vision="sdpa")  # loaders pick eager themselves when needed
        model.save_pretrained(d, safe_serialization=True)
        set_attention(model, text="eager", vision="eager")
        build_processor(spec).save_pretrained(d)
        write_adapter_settings(d)  # vrh.json: how the LLaVA adapter prompts this checkpoint
        meta = {
            "name": d.name, "organism": d.name.rsplit("_", 1)[-1].upper(),
            "shares_language_model_with": _lm_siblings(cfg, tag, org.b is not None),
            "grounding_prompt": GROUNDING_PROMPT, "vqa_prompt": VQA_PROMPT,
            "answer_format": "[ x1 , y1 , x2 , y2 ]: original-image pixels snapped to multiples of bin_px",
            "image_size": spec.image_size, "patch_size": spec.patch_size,
            "num_image_tokens": spec.num_image_tokens, "bin_px": spec.bin_px, "seed": seed,
            "lm_init": cfg.lm_init, "vision_init": cfg.vision_init_a if tag == "a" else cfg.vision_init_b,
            "steps": org.step, "planned_steps": cfg.steps, "train_config": asdict(cfg), "training_command": command,
            "git_hash": git_hash(),
            "heldout": {"grounding_seed": cfg.heldout_seed, "grounding_n": n_eval,
                        "grounding_acc_iou50": res[tag]["acc"], "parse_fail": res[tag]["parse_fail"],
                        "vqa_acc": vqa_accuracy(model, org.tok, vqa, spec), "vqa_n": len(vqa)},
        }
        (d / "vrh_organism.json").write_text(json.dumps(meta, indent=1))
        written[tag] = meta["heldout"]
        print(f"exported {d}: {json.dumps(meta['heldout'])}", flush=True)
    return written


def main(argv: list[str] | None = None) -> int:
    """``vrh organism train --out DIR [--config PRESET|JSON] [--steps N] [--export-to DIR]``."""
    ap = argparse.ArgumentParser(prog="vrh organism train", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="work folder: ckpt.pt, config.json, export/")
    ap.add_argument("--config", default=None, help=f"preset ({', '.join(PRESETS)}) or a JSON file (default: the default TrainConfig)")
    ap.add_argument("--steps", type=int, default=None, help="override the config's total steps (default: the config's)")
    ap.add_argument("--no-resume", action="store_true", help="start over even if OUT holds a checkpoint")
    ap.add_argument("--export-only", action="store_true", help="export the latest checkpoint, no training")
    ap.add_argument("--export-to", default=None, help="export folder (default OUT/export)")
    ap.add_argument("--eval-n", type=int, default=500, help="held-out samples evaluated at export (default: %(default)s)")
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    if args.steps is not None:
        cfg = replace(cfg, steps=args.steps)
    torch.set_num_threads(cfg.threads)  # the training process only; others share the machine
    # the command that trains this checkpoint (not the export-only call that may have written it)
    command = (f"OMP_WAIT_POLICY=PASSIVE python -m vrh_lab.organism.train --out {args.out}"
               + (f" --config {args.config}" if args.config else "")
               + (f" --steps {args.steps}" if args.steps is not None else ""))
    if args.export_only:
        org = Organisms(cfg)
        org.load(load_torch_file(Path(args.out) / "ckpt.pt"))
    else:
        org = train(cfg, args.out, resume=not args.no_resume)
    export(org, args.export_to or Path(args.out) / "export", n_eval=args.eval_n, command=command)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

