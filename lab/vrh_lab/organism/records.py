"""The resumable builds' files (organisms D and E): a checkpoint written atomically, and the JSONL records of a
run cut back to what the checkpoint holds when it resumes, so a killed build continues to the same log."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch


def atomic_save(obj: Any, path: Path) -> None:
    """``torch.save`` through a temporary name: a crash mid-write never leaves a truncated checkpoint behind."""
    tmp = path.with_suffix(".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def truncate_records(path: Path, step: int) -> None:
    """Keep the records of steps <= ``step`` (what the checkpoint holds), rewritten by rename."""
    if not path.exists():
        return
    keep = [x for x in path.read_text().splitlines() if x.strip() and json.loads(x)["step"] <= step]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(x + "\n" for x in keep))
    os.replace(tmp, path)


def append_record(path: Path, rec: dict[str, Any]) -> None:
    with path.open("a") as f:
        f.write(json.dumps(rec) + "\n")


def prompt_of(adapter: Any, sample: dict[str, Any]) -> str:
    """A world sample's prompt in ``adapter``'s own words (grounding or VQA)."""
    if sample["task"] == "grounding":
        return adapter.grounding_prompt(sample["expression"])
    return adapter.vqa_prompt(sample["question"])


def answer_of(adapter: Any, sample: dict[str, Any]) -> str:
    """A world sample's answer as ``adapter`` writes it (its box format in the scene's pixels, or the VQA answer)."""
    if sample["task"] == "grounding":
        size = sample["scene"].size
        return adapter.format_box(tuple(float(v) for v in sample["box"]), {}, (size, size))
    return sample["answer"]
