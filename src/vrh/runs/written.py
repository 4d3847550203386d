"""What vrh wrote into a folder, so that a later ``--overwrite`` removes exactly that and nothing of the user's.

The one rule every removal in vrh follows: **remove only what vrh wrote, or refuse and name what it found.**
A run folder proves itself by its ``config.json`` (:func:`vrh.runs.folder.is_run_folder`) and holds only
names vrh defines. Every other folder vrh fills (a report's ``--out``, a demo's ``data/`` and ``report/``, a
trained model's ``model/``, TRL's ``checkpoints/``, a study's dataset folder) carries a record of what was
written into it: ``FOLDER/.vrh-written``, one JSON string per line, each a path relative to ``FOLDER``
(``/``-separated). A path ending in ``/`` is a whole tree written by a tool vrh ran (a TRL checkpoint):
removed as a tree.

A path is recorded **before** its file is written (append + flush), so a crash mid-write never leaves a file
of vrh's that the record does not name; a recorded path that was never written is simply skipped. What a
removal refuses (:class:`NotWrittenByVrh`, naming up to five paths): anything in the folder that is not
recorded; a recorded path that is now a symlink (the user's); a folder that is a symlink; a folder without a
record that is not empty. Removal never follows a symlink.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from vrh.runs import safe_paths

MANIFEST = ".vrh-written"  # in the folder it describes
_HEADER = "# files vrh wrote into this folder (one JSON string per line, relative; '/' at the end: a tree)\n"


class NotWrittenByVrh(FileExistsError):
    """A folder holds something vrh did not write (or is a symlink): vrh refuses to remove or overwrite it."""


def relative(folder: Path, path: str | os.PathLike) -> str:
    """``path`` (``folder / name``, or ``name`` relative to ``folder``) as the record writes it; ValueError for a
    path outside ``folder``.

    >>> relative(Path("runs/demo/data"), Path("runs/demo/data/images/a.png")), relative(Path("d"), "b/")
    ('images/a.png', 'b/')
    """
    p = Path(path)
    try:
        rel = p.relative_to(folder)  # ``folder / name``, as callers build it
    except ValueError:
        rel = p
    parts = rel.parts
    if not parts or ".." in parts or rel.is_absolute():
        raise ValueError(f"{path} is not a path inside {folder}")
    return "/".join(parts) + ("/" if str(path).endswith(("/", os.sep)) else "")


class Recorder:
    """Records paths in ``folder`` one at a time, each before its file is written (for a writer of many files:
    one open record, one line per new path). Creating it checks the folder as :func:`record` does; ``shared``:
    the folder may also hold the user's files (a writer that has checked its own names are free: a conversion's
    ``--out``), which a removal then leaves alone only when told ``only`` its names."""

    def __init__(self, folder: str | os.PathLike, *, shared: bool = False):
        self.folder = Path(folder)
        if self.folder.is_symlink():
            raise NotWrittenByVrh(f"{self.folder} is a symlink; vrh writes only into folders it made: choose another "
                                  "folder")
        self.folder.mkdir(parents=True, exist_ok=True)
        manifest = self.folder / MANIFEST
        if manifest.is_symlink():
            raise NotWrittenByVrh(f"{manifest} is a symlink, not vrh's record: choose another folder")
        new = not manifest.exists()
        if new and not shared and any(self.folder.iterdir()):
            raise NotWrittenByVrh(f"{self.folder} is not empty and holds no record of files vrh wrote ({MANIFEST}); "
                                  "vrh writes only into an empty folder or one it filled before: choose another "
                                  "folder")
        self.have = set() if new else recorded(self.folder)
        self._file = safe_paths.open_append(self.folder, manifest, encoding="utf-8")  # never through a link
        if new:
            self._file.write(_HEADER)

    def add(self, *paths: str | os.PathLike) -> None:
        """Record ``paths`` (absolute or relative to the folder) unless they already are; flushed at once."""
        lines = []
        for p in paths:
            rel = relative(self.folder, p)
            if rel not in self.have:
                self.have.add(rel)
                lines.append(json.dumps(rel) + "\n")
        if lines:
            self._file.writelines(lines)
            self._file.flush()  # in the OS before the file is written: a killed process leaves nothing unrecorded

    def close(self) -> None:
        if not self._file.closed:
            os.fsync(self._file.fileno())
            self._file.close()

    def __enter__(self) -> "Recorder":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def record(folder: str | os.PathLike, paths: Iterable[str | os.PathLike]) -> None:
    """Record ``paths`` (files vrh is about to write in ``folder``; a trailing ``/`` marks a whole tree) before
    writing them. Creates ``folder``; refuses one that is a symlink or holds files without a record."""
    paths = list(paths)
    for p in paths:
        relative(Path(folder), p)  # a path outside the folder is refused before the record is touched
    with Recorder(folder) as rec:
        rec.add(*paths)


def recorded(folder: str | os.PathLike) -> set[str]:
    """The paths recorded in ``folder`` (empty without a record); a torn last line is ignored."""
    manifest = Path(folder) / MANIFEST
    if not manifest.is_file() or manifest.is_symlink():
        return set()
    out = set()
    with open(manifest, "rb") as f:
        for raw in _lines(f):
            line = raw.decode("utf-8", "replace")
            if not line.strip() or line.startswith("#"):
                continue
            try:
                p = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line torn by a crash names a file that was not written yet
            if isinstance(p, str) and p and ".." not in p.split("/") and not p.startswith("/"):
                out.add(p)
    return out


MAX_LINE = 64 * 1024  # bytes: a record line longer than this names no path vrh wrote (PATH_MAX is 4096)


def _lines(f, max_len: int = MAX_LINE) -> Iterator[bytes]:
    """The lines of the binary file ``f``, one at a time, each at most ``max_len`` bytes: a longer one (a planted
    or sparse file of a gigabyte without a newline) is skipped as it is read, never held whole."""
    while True:
        line = f.readline(max_len + 1)
        if not line:
            return
        if len(line) > max_len and not line.endswith(b"\n"):
            while line and not line.endswith(b"\n"):
                line = f.readline(max_len + 1)
            continue
        yield line


def has_record(folder: str | os.PathLike) -> bool:
    """Whether ``folder`` is a real folder carrying vrh's record of what it wrote there."""
    folder = Path(folder)
    return folder.is_dir() and not folder.is_symlink() and (folder / MANIFEST).is_file()


def foreign(folder: str | os.PathLike, only: Iterable[str] | None = None) -> list[str]:
    """What in ``folder`` vrh did not write (relative paths; a folder holding nothing vrh wrote is named once,
    ``dir/``); ``[]`` when everything there is recorded. ``only``: look at these top-level names alone. Never
    follows a symlink."""
    folder = Path(folder)
    if folder.is_symlink():
        return ["."]
    if not folder.is_dir():
        return []
    have = recorded(folder)
    trees = {p for p in have if p.endswith("/")}
    top = set(only) if only is not None else None
    out: list[str] = []

    def walk(d: Path, prefix: str) -> None:
        for child in sorted(d.iterdir(), key=lambda c: c.name):
            rel = prefix + child.name
            if not prefix and (child.name == MANIFEST or (top is not None and child.name not in top)):
                continue
            if child.is_symlink():
                out.append(rel)
            elif child.is_dir():
                if rel + "/" in trees:
                    continue  # a tree a tool vrh ran wrote
                if not any(p.startswith(rel + "/") for p in have):
                    out.append(rel + "/")
                else:
                    walk(child, rel + "/")
            elif rel not in have and not (rel.endswith(".tmp") and rel[:-4] in have):
                out.append(rel)

    walk(folder, "")
    return out


def _names(paths: list[str]) -> str:
    return ", ".join(paths[:5]) + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")


def check_removable(folder: str | os.PathLike, what: str = "--overwrite", only: Iterable[str] | None = None) -> None:
    """Refuse (:class:`NotWrittenByVrh`, naming what was found) a folder :func:`remove_written` would not empty:
    a symlink, a non-empty folder without vrh's record, or one holding anything the record does not name
    (``only``: among these top-level names; the rest of the folder is neither looked at nor removed)."""
    folder = Path(folder)
    if folder.is_symlink():
        raise NotWrittenByVrh(f"{what}: {folder} is a symlink; vrh never removes through one: remove it yourself "
                              "or choose another folder")
    if not folder.is_dir():
        return
    top = set(only) if only is not None else None
    if not (folder / MANIFEST).is_file():
        present = sorted(c.name for c in folder.iterdir() if top is None or c.name in top)
        if present:
            raise NotWrittenByVrh(f"{what}: {folder} holds files vrh has no record of writing ({_names(present)}); "
                                  "refusing to delete them: move them away (or delete them yourself if an older vrh "
                                  "wrote them) or choose another folder")
        return
    bad = foreign(folder, only)
    if bad:
        raise NotWrittenByVrh(f"{what}: {folder} holds files vrh did not write ({_names(bad)}); refusing to delete "
                              "them: move them away or choose another folder")


def remove_written(folder: str | os.PathLike, what: str = "--overwrite", only: Iterable[str] | None = None) -> None:
    """Delete what vrh wrote in ``folder`` (its recorded files and trees, then the folders left empty; without
    ``only`` also the record and ``folder`` itself when nothing is left); refuse first (:func:`check_removable`)
    if anything else is there. ``only``: remove just the recorded paths under these top-level names."""
    folder = Path(folder)
    check_removable(folder, what, only)
    if not folder.is_dir() or not (folder / MANIFEST).is_file():
        return  # nothing of vrh's (an empty folder without a record is not vrh's to remove either)
    top = set(only) if only is not None else None
    for rel in sorted(recorded(folder), key=lambda p: -p.count("/")):
        if top is not None and rel.split("/")[0] not in top:
            continue
        path = folder / rel.rstrip("/")
        for p in (path, path.with_name(path.name + ".tmp")):
            # a link anywhere on the way (not only the last name) is the user's: neither followed nor removed
            if not safe_paths.is_symlink_free(folder, p) or not p.exists():
                continue
            if rel.endswith("/") and p.is_dir():
                safe_paths.rmtree(folder, p)  # a link inside the tree is removed itself, never its target
            elif p.is_file():
                safe_paths.unlink(folder, p)
    if top is None:
        safe_paths.unlink(folder, folder / MANIFEST)
    for d, _dirs, _files in sorted(os.walk(folder), key=lambda t: -len(t[0])):  # deepest first, links not followed
        sub = Path(d)
        if sub != folder and (top is None or sub.relative_to(folder).parts[0] in top):
            try:
                safe_paths.rmdir(folder, sub)
            except OSError:
                pass  # not empty: a record-less leftover cannot be here after check_removable, so a race
    if top is None:
        try:
            folder.rmdir()
        except OSError:
            pass
