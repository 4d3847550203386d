"""Files inside a folder vrh was given, opened, written, renamed and removed without following a symlink.

The rule (the trusted tools' rule): **never follow a link out of the folder you were given.** A run folder, a
report's ``--out``, a study folder or a conversion's ``--out`` may come from someone else (shared, downloaded,
unpacked), so any name in it may be a planted symlink: ``report.html.tmp -> ~/.bashrc``, ``link/ -> /home``.
Every path vrh opens, writes, truncates, renames or unlinks below such a ``root`` goes through this module:

* every component below ``root`` is opened as a directory with ``O_NOFOLLOW`` (``openat`` one component at a
  time, so nothing is looked up twice and a component swapped for a link cannot be followed either); a
  symlink anywhere is refused with :class:`SymlinkRefused`, one line naming it;
* files are opened with ``O_NOFOLLOW``; a temporary name (:func:`write_atomic`) is unlinked first (a planted
  link there loses its link, never its target's contents) and created with ``O_EXCL``;
* removals unlink a symlink itself, never what it points to, and a tree is removed by ``shutil.rmtree`` on a
  directory descriptor (its fd-based walk never follows a link);
* a file appended to in place that has other hard links (a ``cp -al`` or ``rsync --link-dest`` copy of the
  folder) is first copied and renamed over its name (:func:`open_append`), so the other copy never changes.

``root`` itself is the folder the user named and is not checked here (commands refuse a symlinked ``--out``
where that matters). A path is ``root / relative`` or a relative path; ``..`` is refused.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

# POSIX (as vrh's flock): openat through dir_fd, O_NOFOLLOW and O_DIRECTORY are what the rule is made of
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_FILE_FLAGS = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class SymlinkRefused(FileExistsError):
    """A path below a folder vrh was given passes through a symlink (or a non-folder where a folder belongs)."""


def _refused(root: Path, at: Path, what: str = "a symlink") -> SymlinkRefused:
    return SymlinkRefused(f"{at} is {what} inside {root}; vrh never writes or deletes through one: remove it or "
                          "choose another folder")


def parts_below(root: str | os.PathLike, path: str | os.PathLike) -> tuple[str, ...]:
    """The components of ``path`` below ``root`` (``path`` is ``root / ...`` or relative to it); ValueError for a
    path outside ``root``.

    >>> parts_below("runs/r", "runs/r/figures/a.png"), parts_below("runs/r", "results.json")
    (('figures', 'a.png'), ('results.json',))
    """
    p = Path(path)
    try:
        rel = p.relative_to(root)
    except ValueError:
        if p.is_absolute():
            raise ValueError(f"{path} is not inside {root}") from None
        rel = p
    if not rel.parts or ".." in rel.parts:
        raise ValueError(f"{path} is not a path inside {root}")
    return rel.parts


def _lstat_kind(dir_fd: int, name: str) -> int | None:
    try:
        return os.lstat(name, dir_fd=dir_fd).st_mode
    except FileNotFoundError:
        return None


@contextmanager
def parent_fd(root: str | os.PathLike, path: str | os.PathLike, *, mkdir: bool = False) -> Iterator[tuple[int, str]]:
    """``(fd of path's folder, path's last name)``: each folder below ``root`` opened without following a link
    (``mkdir``: folders that do not exist are created). SymlinkRefused when one is a link (or a file);
    FileNotFoundError when one is missing and ``mkdir`` is false."""
    root = Path(root)
    parts = parts_below(root, path)
    fd = os.open(root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        at = root
        for part in parts[:-1]:
            at = at / part
            if mkdir and _lstat_kind(fd, part) is None:
                try:
                    os.mkdir(part, 0o777, dir_fd=fd)
                except FileExistsError:
                    pass  # made meanwhile: opened (and checked) below like any other
            try:
                nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                    mode = _lstat_kind(fd, part)
                    raise _refused(root, at, "a symlink" if mode is not None and stat.S_ISLNK(mode)
                                   else "not a folder") from None
                raise
            os.close(fd)
            fd = nfd
        yield fd, parts[-1]
    finally:
        os.close(fd)


def check(root: str | os.PathLike, path: str | os.PathLike, *, last: bool = True) -> Path:
    """Refuse (:class:`SymlinkRefused`) ``path`` when a component below ``root`` that exists is a symlink (``last``:
    the final one too); return ``path``. For a path handed to a writer vrh does not control (TRL,
    ``save_pretrained``): looked up once, so checked just before the hand-over."""
    root = Path(root)
    at = root
    parts = parts_below(root, path)
    for i, part in enumerate(parts):
        at = at / part
        if i == len(parts) - 1 and not last:
            break
        try:
            mode = os.lstat(at).st_mode
        except FileNotFoundError:
            break
        if stat.S_ISLNK(mode):
            raise _refused(root, at)
    return root.joinpath(*parts)


def _open(root: Path, path: str | os.PathLike, flags: int, *, mkdir: bool, fresh: bool = False,
          audit: bool = True) -> int:
    if audit:  # opened by its name in a folder descriptor: the "open" audit event names only that, this the path
        sys.audit("vrh.safe_paths.open", str(root.joinpath(*parts_below(root, path))), flags)
    with parent_fd(root, path, mkdir=mkdir) as (dfd, name):
        if fresh:  # a temporary name: whatever is there (a stale temp, a planted link) goes, the link not its target
            try:
                os.unlink(name, dir_fd=dfd)
            except FileNotFoundError:
                pass
            except IsADirectoryError:
                raise _refused(root, root.joinpath(*parts_below(root, path)), "a folder") from None
            flags |= os.O_CREAT | os.O_EXCL
        try:
            return os.open(name, flags | _FILE_FLAGS, 0o644, dir_fd=dfd)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise _refused(root, root.joinpath(*parts_below(root, path))) from None
            raise


def open_fd(root: str | os.PathLike, path: str | os.PathLike, flags: int, *, mkdir: bool = False) -> int:
    """``os.open`` of ``path`` below ``root`` with ``flags`` and ``O_NOFOLLOW``, no component a symlink."""
    return _open(Path(root), path, flags, mkdir=mkdir)


def open_write(root: str | os.PathLike, path: str | os.PathLike, mode: str = "w", *, mkdir: bool = False,
               fresh: bool = False, **kwargs: Any) -> IO[Any]:
    """``open(path, mode)`` below ``root`` for writing (``w``/``wb``: truncated, ``a``/``ab``: appended), never
    through a symlink; ``fresh``: a new file (any old one at the name unlinked first, then ``O_EXCL``)."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if mode.startswith("a") else os.O_TRUNC)
    fd = _open(Path(root), path, flags, mkdir=mkdir, fresh=fresh, audit=False)
    return _file(root, path, fd, mode, **kwargs)


def _file(root: str | os.PathLike, path: str | os.PathLike, fd: int, mode: str, **kwargs: Any) -> IO[Any]:
    """A file object on ``fd`` that carries its path as its name (a failed write, a full disk, is reported with
    it: vrh.cli names the file) and raises the ordinary "open" audit event with that path."""
    try:
        return open(str(Path(root).joinpath(*parts_below(root, path))), mode, opener=lambda _name, _flags: fd,
                    **kwargs)
    except BaseException:
        os.close(fd)
        raise


def open_append(root: str | os.PathLike, path: str | os.PathLike, mode: str = "a", *, mkdir: bool = False,
                **kwargs: Any) -> IO[Any]:
    """``path`` opened for appending, never through a symlink; a file with other hard links is first copied
    (to a fresh temporary, renamed over it), so an append never changes another copy of the folder."""
    root = Path(root)
    fd = _open(root, path, os.O_RDWR | os.O_CREAT | os.O_APPEND, mkdir=mkdir, audit=False)
    if os.fstat(fd).st_nlink > 1:
        try:
            tmp = _tmp_name(path)
            with os.fdopen(os.dup(fd), "rb") as src, open_write(root, tmp, "wb", fresh=True) as dst:
                src.seek(0)
                shutil.copyfileobj(src, dst)
                dst.flush()
                os.fsync(dst.fileno())
            replace(root, tmp, path)
        finally:
            os.close(fd)
        fd = _open(root, path, os.O_RDWR | os.O_APPEND, mkdir=False, audit=False)
    return _file(root, path, fd, mode, **kwargs)


def _tmp_name(path: str | os.PathLike) -> Path:
    p = Path(path)
    return p.with_name(p.name + ".tmp")


def write_atomic(root: str | os.PathLike, path: str | os.PathLike, data: bytes | str, *, tmp: str | None = None,
                 mkdir: bool = False) -> Path:
    """Write ``data`` to ``path`` below ``root`` atomically: a fresh ``<name>.tmp`` (or ``tmp``, a name in the
    same folder), synced, renamed over ``path``. Neither name is followed if it is a link."""
    root = Path(root)
    p = Path(path)
    tmp_path = p.with_name(tmp) if tmp else _tmp_name(p)
    with open_write(root, tmp_path, "wb", fresh=True, mkdir=mkdir) as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)
        f.flush()
        os.fsync(f.fileno())
    replace(root, tmp_path, p)
    return p


def replace(root: str | os.PathLike, src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """``os.replace(src, dst)``, both below ``root``, no folder on the way a symlink (a link at ``dst`` is replaced
    itself: rename never follows the last name)."""
    with parent_fd(root, src) as (sfd, sname), parent_fd(root, dst) as (dfd, dname):
        os.replace(sname, dname, src_dir_fd=sfd, dst_dir_fd=dfd)


def unlink(root: str | os.PathLike, path: str | os.PathLike, *, missing_ok: bool = True) -> None:
    """Remove the file (or the symlink itself) at ``path`` below ``root``; no folder on the way may be a link."""
    try:
        with parent_fd(root, path) as (dfd, name):
            os.unlink(name, dir_fd=dfd)
    except FileNotFoundError:
        if not missing_ok:
            raise


def rmdir(root: str | os.PathLike, path: str | os.PathLike) -> None:
    """Remove the empty folder ``path`` below ``root`` (OSError when not empty); never through a link."""
    with parent_fd(root, path) as (dfd, name):
        os.rmdir(name, dir_fd=dfd)


def rmtree(root: str | os.PathLike, path: str | os.PathLike) -> None:
    """Remove the tree ``path`` below ``root``: a link inside it is removed itself, never what it points to; a
    ``path`` that is a link is refused; a missing one is nothing to do."""
    root = Path(root)
    with parent_fd(root, path) as (dfd, name):
        mode = _lstat_kind(dfd, name)
        if mode is None:
            return
        if stat.S_ISLNK(mode):
            raise _refused(root, root.joinpath(*parts_below(root, path)))
        if not stat.S_ISDIR(mode):
            os.unlink(name, dir_fd=dfd)
            return
        shutil.rmtree(name, dir_fd=dfd)  # the fd-based walk (avoids_symlink_attacks): links are unlinked, not followed


def mkdirs(root: str | os.PathLike, path: str | os.PathLike) -> Path:
    """Create the folder ``path`` below ``root`` and the folders above it, none of them a link; return it (``root``
    itself, the folder vrh was given, is created when missing)."""
    Path(root).mkdir(parents=True, exist_ok=True)
    with parent_fd(root, Path(path) / "_", mkdir=True):
        pass
    return Path(root).joinpath(*parts_below(root, path))


def is_symlink_free(root: str | os.PathLike, path: str | os.PathLike) -> bool:
    """Whether no existing component of ``path`` below ``root`` is a symlink."""
    try:
        check(root, path)
    except SymlinkRefused:
        return False
    return True
