"""Comparing two study folders: the same files with the same content, up to what differs between any two
runs of the same settings (wall times, the environment record, absolute paths of the folder itself)."""

import json
from pathlib import Path

import numpy as np

VOLATILE = {"environment", "elapsed_seconds", "seconds", "created", "finished", "timestamp", "time"}
SKIP_DIRS = {".study", "report"}  # the study's own bookkeeping (what ran, resumed); a report built from it
SKIP_FILES = {".lock"}


def _clean(obj, root: str):
    if isinstance(obj, dict):
        return {k: _clean(v, root) for k, v in obj.items() if k not in VOLATILE}
    if isinstance(obj, list):
        return [_clean(v, root) for v in obj]
    if isinstance(obj, str):
        return obj.replace(root, "<DIR>")
    return obj


def folder_content(root: Path, study: Path | None = None) -> dict[str, object]:
    """relative path -> comparable content of every file under ``root`` (a study folder, or a cell's folder
    inside the study folder ``study``), the study folder's own path written ``<DIR>``; the top-level
    results.json (the study's bookkeeping) is left out."""
    root = Path(root)
    here = str(study or root)
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if not p.is_file() or rel.parts[0] in SKIP_DIRS or p.name in SKIP_FILES or str(rel) == "results.json":
            continue
        if p.suffix == ".json":
            out[str(rel)] = _clean(json.loads(p.read_text()), here)
        elif p.suffix == ".jsonl":
            out[str(rel)] = sorted(json.dumps(_clean(json.loads(line), here), sort_keys=True)
                                   for line in p.read_text().splitlines() if line.strip())
        elif p.suffix == ".npz":
            with np.load(p, allow_pickle=False) as z:
                out[str(rel)] = {k: z[k].tolist() for k in sorted(z.files)}
        elif p.suffix in (".md", ".txt"):
            out[str(rel)] = p.read_text().replace(here, "<DIR>")
        else:
            out[str(rel)] = p.stat().st_size > 0  # images, parquet: present and non-empty
    return out


def differences(a: Path, b: Path) -> list[str]:
    ca, cb = folder_content(a), folder_content(b)
    diffs = [f"only in {a.name if k in ca else b.name}: {k}" for k in sorted(set(ca) ^ set(cb))]
    diffs += [f"differs: {k}" for k in sorted(set(ca) & set(cb)) if ca[k] != cb[k]]
    return diffs
