"""Run folders: the hand-off between vrh's stages.

A run folder holds ``config.json`` (fully resolved settings plus versions, git hash, model and data
identity), ``samples.jsonl`` (one line per finished sample, appended and flushed as it finishes, so a crash
loses nothing that finished), and stage outputs such as ``results.json`` and ``head_scores.json``.
Every write either succeeds or raises: a failed write fails the run.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import vrh

CONFIG = "config.json"
SAMPLES = "samples.jsonl"
RESULTS = "results.json"
HEAD_SCORES = "head_scores.json"


def git_hash() -> str | None:
    """Commit of the vrh source tree when it is a git checkout (editable installs), else None."""
    src = Path(vrh.__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    dirty = subprocess.run(["git", "-C", str(src), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, timeout=5, check=False).stdout.strip()
    return out.stdout.strip() + ("-dirty" if dirty else "")


def environment() -> dict[str, Any]:
    import torch
    import transformers

    return {
        "vrh": vrh.__version__,
        "git_hash": git_hash(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "platform": platform.platform(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "argv": sys.argv,
    }


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Atomic JSON write (temp file + rename): readers never see half a file."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_json(path: str | os.PathLike) -> Any:
    with open(path) as f:
        return json.load(f)


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Records of a JSONL file; a torn last line (crash mid-write) is ignored, any other bad line raises."""
    lines = Path(path).read_text().splitlines()
    out = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                break
            raise ValueError(f"{path}:{i + 1}: not valid JSON") from None
    return out


class RunFolder:
    """A run folder being written. ``resume=True`` keeps finished samples of an interrupted run."""

    def __init__(self, path: str | os.PathLike, *, resume: bool = False, overwrite: bool = False):
        self.path = Path(path)
        if self.path.exists() and any(self.path.iterdir()) and not (resume or overwrite):
            raise FileExistsError(f"run folder {self.path} is not empty; pass --resume or --overwrite")
        self.path.mkdir(parents=True, exist_ok=True)
        if overwrite and not resume:
            for name in (CONFIG, SAMPLES, RESULTS, HEAD_SCORES):
                (self.path / name).unlink(missing_ok=True)
        self._samples = None

    def write_config(self, config: dict[str, Any]) -> dict[str, Any]:
        full = {**config, "environment": environment()}
        if (self.path / CONFIG).exists():
            old = read_json(self.path / CONFIG)
            # compared as JSON sees them (tuples become lists)
            mine = json.loads(json.dumps({k: v for k, v in full.items() if k != "environment"}))
            theirs = {k: v for k, v in old.items() if k != "environment"}
            if mine != theirs:
                raise ValueError(f"cannot resume {self.path}: its config.json differs from this command's")
        write_json(self.path / CONFIG, full)
        return full

    def finished_samples(self) -> list[dict[str, Any]]:
        p = self.path / SAMPLES
        return read_jsonl(p) if p.exists() else []

    def append_sample(self, record: dict[str, Any]) -> None:
        if self._samples is None:
            # rewrite without a torn last line before appending
            done = self.finished_samples()
            with open(self.path / SAMPLES, "w") as f:
                f.writelines(json.dumps(r) + "\n" for r in done)
            self._samples = open(self.path / SAMPLES, "a")
        self._samples.write(json.dumps(record) + "\n")
        # flushed to the OS per record (a crashed or killed process loses nothing it finished); fsync per
        # record cost ~0.3 s each on slow disks, so the disk sync happens once, on close
        self._samples.flush()

    def write(self, name: str, obj: Any) -> Path:
        write_json(self.path / name, obj)
        return self.path / name

    def close(self) -> None:
        if self._samples is not None:
            os.fsync(self._samples.fileno())
            self._samples.close()
            self._samples = None

    def __enter__(self) -> "RunFolder":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def iter_runs(paths: list[str | os.PathLike]) -> Iterator[tuple[Path, dict[str, Any]]]:
    for p in paths:
        p = Path(p)
        if not (p / CONFIG).exists():
            raise FileNotFoundError(f"{p} is not a vrh run folder (no {CONFIG})")
        yield p, read_json(p / CONFIG)
