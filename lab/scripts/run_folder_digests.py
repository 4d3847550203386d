"""One line per file under a folder of vrh run folders: its path and a sha256 of its content, with what differs
between two identical runs left out. Used by run_folder_digests.sh to show that a refactor changes no run folder.

What is left out, and why: in JSON and JSONL files the keys that hold a clock reading or the environment
(``environment``, ``elapsed_seconds``, ``seconds``, ``*_seconds``, ``peak_memory_bytes``, ``time``, ``runtime``,
``train_runtime``, ``*_per_second``); in a report's HTML and Markdown the lines that print such a time;
the lock and temporary files. Everything else (every npz, png, safetensors, the datasets, the record of what
vrh wrote) is digested byte for byte.
Usage: python lab/scripts/run_folder_digests.py FOLDER [SOURCE_ROOT] > digests.txt
SOURCE_ROOT: the folder of the vrh source tree that ran (the organism's checkpoint path is recorded under it, and
two trees compared side by side sit in two folders): written as ``<src>`` before digesting.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

CLOCK_KEYS = re.compile(r"^(environment|elapsed_seconds|seconds|.*_seconds|peak_memory_bytes|time|runtime|"
                        r"train_runtime|.*_per_second|wall_s|started|finished|git_hash)$")
CLOCK_TEXT = re.compile(r"\b\d+(\.\d+)? ?(s|seconds|min)\b|elapsed|peak memory|\d{4}-\d\d-\d\dT\d\d:\d\d")
SKIP = re.compile(r"(\.vrh-lock|\.tmp|times\.txt|\.log)$")


def _clean(obj):
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items() if not CLOCK_KEYS.match(str(k))}
    if isinstance(obj, list):
        return [_clean(v) for v in obj]
    return obj


def digest(path: Path, source_root: str | None = None) -> str:
    data = path.read_bytes()
    if source_root and path.suffix in (".json", ".jsonl", ".html", ".md"):
        data = data.replace(source_root.encode(), b"<src>")
    if path.suffix == ".json":
        try:
            data = json.dumps(_clean(json.loads(data)), sort_keys=True).encode()
        except ValueError:
            pass
    elif path.suffix == ".jsonl":
        lines = []
        for line in data.decode("utf-8", "replace").splitlines():
            try:
                lines.append(json.dumps(_clean(json.loads(line)), sort_keys=True))
            except ValueError:
                lines.append(line)
        data = "\n".join(lines).encode()
    elif path.suffix in (".html", ".md"):
        data = "\n".join(l for l in data.decode("utf-8", "replace").splitlines()
                         if not CLOCK_TEXT.search(l)).encode()
    return hashlib.sha256(data).hexdigest()[:16]


def main(folder: str, source_root: str | None = None) -> None:
    root = Path(folder)
    for path in sorted(root.rglob("*")):
        if path.is_file() and not SKIP.search(path.name):
            print(f"{digest(path, source_root)}  {path.relative_to(root)}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
