"""One writer per run folder: an exclusive OS lock on ``FOLDER/.vrh-lock`` (the holder's pid inside), taken by
:class:`vrh.runs.folder.RunFolder` before it looks at the folder and held until the run ends."""

from __future__ import annotations

import os
from pathlib import Path

from vrh.runs import safe_paths

LOCK = ".vrh-lock"  # the writer's lock file (pid inside), present while a run holds the folder


class RunFolderInUse(FileExistsError):
    """Another process holds the run folder's lock."""


try:
    import fcntl
except ImportError:  # not POSIX: runs are not locked
    fcntl = None  # type: ignore[assignment]


class FolderLock:
    """An exclusive ``flock`` on ``FOLDER/.vrh-lock`` (the holder's pid inside), re-entrant within a process.

    Why flock: the OS drops it when the holder dies (kill -9 included), so a crash never leaves a folder
    locked; the file left behind by a crash is only a name, locked again by the next run. Release unlinks
    the file while still holding the lock, so a process that opened it just before must retry on the new
    file (checked by inode), never share the old one."""

    _held: dict[str, "FolderLock"] = {}

    def __init__(self, key: str, path: Path, fd: int):
        self.key, self.path, self.fd, self.count = key, path, fd, 1

    @classmethod
    def acquire(cls, folder: Path) -> "FolderLock | None":
        if fcntl is None:
            return None
        key = os.path.realpath(folder)
        if key in cls._held:  # this process already writes it (a command and its library call)
            cls._held[key].count += 1
            return cls._held[key]
        path = folder / LOCK
        while True:
            fd = safe_paths.open_fd(folder, path, os.O_RDWR | os.O_CREAT)  # a planted link is refused, never truncated
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = _pid_in(fd)
                os.close(fd)
                raise RunFolderInUse(in_use_message(folder, holder)) from None
            try:
                st = os.lstat(path)
                same = st.st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same and st.st_nlink > 1:  # a hard-linked copy's lock file: ours is a new one, theirs left alone
                safe_paths.unlink(folder, path)
                same = False
            if same:
                break
            os.close(fd)  # locked a file its releasing holder had just unlinked: lock the current one
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as e:  # a full disk: the error names the lock file (a bare fd write names nothing)
            os.close(fd)
            raise OSError(e.errno, e.strerror or str(e), str(path)) from None
        cls._held[key] = lock = cls(key, path, fd)
        return lock

    @classmethod
    def holder(cls, folder: Path) -> str | None:
        """The pid of another process that holds ``folder``'s lock, None when none does; takes no lock (it
        tries the lock and lets go at once): :func:`check_out` asks before a model loads."""
        if fcntl is None or os.path.realpath(folder) in cls._held:  # this process's own lock is no refusal
            return None
        try:
            fd = os.open(folder / LOCK, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:  # no lock file (or a link, refused by check_out): no holder
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return _pid_in(fd)
        finally:
            os.close(fd)  # and with it the shared lock taken here, if any
        return None

    def release(self) -> None:
        self.count -= 1
        if self.count > 0 or self.fd < 0:
            return
        self._held.pop(self.key, None)
        safe_paths.unlink(self.path.parent, self.path)
        os.close(self.fd)
        self.fd = -1


def _pid_in(fd: int) -> str:
    return os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"


def in_use_message(folder: Path, holder: str) -> str:
    return (f"run folder {folder} is in use by another vrh process (pid {holder}); wait for it to finish or stop "
            "it, or choose another --out")
