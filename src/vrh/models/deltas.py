"""Organisms shipped as deltas on a base model from the package index (organism D: Gemma 3 270M).

A delta organism's folder holds what its training produced and nothing of the base:

    vrh_deltas.json      {"base": {...package, sha256...}, "lora": {"rank", "alpha"}, "terms": ...}
    deltas.safetensors   new modules whole (``model.vision_tower.*``, ``model.multi_modal_projector.*``) and
                         low-rank adapters as ``lora.<weight name>.A`` [r, in] / ``lora.<weight name>.B`` [out, r]
    config.json, generation_config.json, processor_config.json, chat_template.jinja, vrh_organism.json

A manifest with ``"deltas_of": NAME`` and ``"adapters": false`` reads the sibling NAME's deltas without their
adapters: ``organism_d_base`` is D's vision side on the base LM exactly as published (the LM before any image
training, for ``vrh text-heads``).

:func:`materialize` rebuilds a full checkpoint folder from the base (:mod:`vrh.models.gemma_base`) and the
deltas, each adapter merged as ``W + (alpha / r) B A``, into ``<cache>/organisms/<name>-<digest>/`` (keyed by the
deltas' and the manifest's bytes, written to a temporary folder and renamed: a crash leaves nothing half
written), with the base's tokenizer. ``--model organism:organism_d`` loads that folder like any checkpoint
(:func:`vrh.models.loading.resolve_model`), through the family's adapter.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

MANIFEST, DELTAS, WEIGHTS = "vrh_deltas.json", "deltas.safetensors", "model.safetensors"
COPIED = ("config.json", "generation_config.json", "processor_config.json", "chat_template.jinja",
          "vrh_organism.json", MANIFEST, "NOTICE.md")
LM_PREFIX = "model.language_model."  # where a causal LM's ``model.`` weights sit in the composed VLM


def is_delta_folder(folder: str | Path) -> bool:
    return (Path(folder) / MANIFEST).exists()


def needs_materializing(path: str | os.PathLike) -> bool:
    """A local folder of deltas without the weights they describe (an organism's export, not the folder
    :func:`materialize` built, which holds the manifest beside ``model.safetensors``)."""
    folder = Path(path)
    return folder.is_dir() and is_delta_folder(folder) and not (folder / WEIGHTS).exists()


def read_manifest(folder: Path) -> dict:
    """``vrh_deltas.json``, checked before use: an object naming its base (``base.sha256``, ``base.version``
    strings), optionally a sibling whose deltas it uses (``deltas_of``: a folder name beside it) and LoRA settings
    (``lora.rank`` / ``lora.alpha`` numbers); anything else one line naming the file.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> _ = (folder / MANIFEST).write_text("{}")
    >>> read_manifest(folder)
    Traceback (most recent call last):
    ...
    ValueError: .../vrh_deltas.json: base is missing, not an object with sha256 and version strings
    """
    from vrh.infra.json_text import read_json

    file = folder / MANIFEST
    manifest = read_json(file, max_bytes=2**20, max_depth=16, expect=dict)
    base = manifest.get("base")
    if not (isinstance(base, dict) and all(isinstance(base.get(k), str) for k in ("sha256", "version"))):
        raise ValueError(f"{file}: base is {'missing' if base is None else repr(base)[:80]}, not an object with "
                         "sha256 and version strings")
    sibling = manifest.get("deltas_of")
    if sibling is not None and not (isinstance(sibling, str) and sibling and Path(sibling).name == sibling
                                    and sibling not in (".", "..")):
        raise ValueError(f"{file}: deltas_of is {sibling!r}, not the name of a folder beside it")
    lora = manifest.get("lora") or {}
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)  # noqa: E731
    if not isinstance(lora, dict) or (lora.get("rank") and not (number(lora["rank"]) and number(lora.get("alpha")))):
        raise ValueError(f"{file}: lora is {repr(lora)[:80]}, not an object with numbers rank and alpha")
    return manifest


def deltas_file(folder: Path) -> Path:
    """The deltas a folder uses: its own, or its ``deltas_of`` sibling's."""
    manifest = read_manifest(folder)
    return (folder.parent / manifest["deltas_of"] if manifest.get("deltas_of") else folder) / DELTAS


def digest(folder: Path) -> str:
    h = hashlib.sha256()
    for path in (folder / MANIFEST, deltas_file(folder)):
        h.update(path.read_bytes())
    return h.hexdigest()[:12]


def merge(base: dict, deltas: dict, scale: float) -> dict:
    """The base's weights (composed names) with the deltas applied: whole tensors replace or add, adapter pairs
    merge into their weight. Raises ValueError for an adapter whose weight the base lacks or a shape mismatch."""
    import torch

    out = dict(base)
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in deltas.items():
        if key.startswith("lora."):
            name, part = key[len("lora."):].rsplit(".", 1)
            pairs.setdefault(name, {})[part] = value
        else:
            out[key] = value
    for name, ab in pairs.items():
        if name not in out or set(ab) != {"A", "B"}:
            raise ValueError(f"adapter {name}: no such base weight, or not one A and one B ({sorted(ab)})")
        w = out[name]
        update = (ab["B"].double() @ ab["A"].double()) * scale  # [out, r] @ [r, in] -> [out, in]
        if update.shape != w.shape:
            raise ValueError(f"adapter {name}: update {tuple(update.shape)} vs weight {tuple(w.shape)}")
        out[name] = (w.double() + update).to(w.dtype)
    return out


def materialize(folder: str | Path, root: Path | None = None) -> Path:
    """The full checkpoint folder of the delta organism at ``folder`` (built on first use)."""
    from safetensors.torch import load_file, save_file

    from vrh.models import gemma_base

    folder = Path(folder)
    manifest = read_manifest(folder)
    want = manifest["base"]["sha256"]
    path, sha = gemma_base.gguf_file()
    if sha != want:
        raise ValueError(f"{folder.name} was trained on the base with sha256 {want[:12]}, but the installed "
                         f"{gemma_base.PIP_PACKAGE} has {sha[:12]}: install version {manifest['base']['version']}")
    dest = (root or gemma_base.cache_root()) / "organisms" / f"{folder.name}-{digest(folder)}"
    if (dest / WEIGHTS).exists():
        return dest
    base = gemma_base.base_folder(root)
    state = {LM_PREFIX + k[len("model."):]: v for k, v in gemma_base.lm_state(base).items()}
    lora = manifest.get("lora") or {}
    scale = float(lora["alpha"]) / float(lora["rank"]) if lora.get("rank") else 0.0
    found = load_file(str(deltas_file(folder)))
    if manifest.get("adapters", True) is False:
        found = {k: v for k, v in found.items() if not k.startswith("lora.")}
    state = merge(state, found, scale)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=dest.name + ".", dir=dest.parent))
    try:
        save_file({k: v.contiguous() for k, v in state.items()}, str(tmp / WEIGHTS), metadata={"format": "pt"})
        for name in COPIED:
            if (folder / name).exists():
                shutil.copy2(folder / name, tmp / name)
        for f in base.iterdir():
            if f.name.startswith("tokenizer") or f.name == "special_tokens_map.json":
                shutil.copy2(f, tmp / f.name)
        try:
            os.replace(tmp, dest)
        except OSError:  # another process finished first
            if not (dest / WEIGHTS).exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest
