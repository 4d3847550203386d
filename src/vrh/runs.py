"""Run folders: the hand-off between vrh's stages, and the one place their contents are defined.

A run folder holds ``config.json`` (fully resolved settings plus versions, git hash, model and data
identity), ``samples.jsonl`` (one line per finished sample, appended and flushed as it finishes, so a crash
loses nothing that finished), ``results.json`` (written last: a folder without it did not finish) and
stage outputs: ``head_scores.json``, ``sample_scores.npz``, ``overlays.npz`` (detection), ``pairs.jsonl``
(dpo-pairs), ``emergence.jsonl`` (an organism's training log of head-score maps, also kept beside an exported
organism checkpoint; ``vrh organism emergence`` makes a run folder of it). Every artefact name lives here,
with a typed reader and writer; every write either succeeds or raises (a failed write fails the run). The
report reads run folders only through this module.

Folder policy (:class:`RunFolder`): a new run refuses a non-empty folder unless told ``overwrite`` or
``resume`` (finished samples are kept and the config must match). ``overwrite`` clears only a folder that
identifies itself as a vrh run (:func:`is_run_folder`: a ``config.json`` carrying the ``vrh_run`` mark that
only :meth:`RunFolder.write_config` writes), and removes only what a run folder can contain
(:func:`run_folder_contents`: the artefacts named here, sub-runs, the extra files of the command that wrote
it); a model checkpoint folder, or a run folder holding anything else, is refused with the names.

One writer per folder: a :class:`RunFolder` holds an exclusive OS lock (``flock`` on ``.vrh-lock``, which
holds the writer's pid) from before it looks at the folder until the run ends (:meth:`RunFolder.release`,
also on ``with`` exit); a crashed process's lock dies with it. A second process gets
:class:`RunFolderInUse` naming the folder and the holder's pid.

Data-parallel runs (:mod:`vrh.distributed`): every rank appends its records to its own
``samples.rank{r}-of-{w}.jsonl`` (:func:`shard_name`); rank 0 alone clears the folder, writes
``config.json`` and the stage outputs, and merges the shards into ``samples.jsonl`` before it writes
``results.json``. A resumed run (any number of processes) counts the records of every shard as finished.
Detection also keeps ``detect_state/batch-NNNNNN.pt``, one file per finished batch (:func:`write_batch_state`),
removed once the run is finished.

Every ``torch.load`` in vrh goes through :func:`load_torch_file` (``weights_only=True``: a planted pickle
cannot run code), and ``.npz`` artefacts keep user strings (sample ids, scorer names) as data, never as
array names (:func:`_write_named_arrays`).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import vrh
from vrh.distributed import World, world

CONFIG = "config.json"
SAMPLES = "samples.jsonl"
RESULTS = "results.json"
HEAD_SCORES = "head_scores.json"
SAMPLE_SCORES = "sample_scores.npz"  # detection: per-sample [N, L, H] maps, one array per scorer
OVERLAYS = "overlays.npz"  # detection: per sample id, (L, H, V) mean attention on visual tokens and (V, 4) rects
PAIRS = "pairs.jsonl"  # dpo-pairs: TRL vision preference pairs
EMERGENCE = "emergence.jsonl"  # organism training: one record per tracked step (vrh.organism.emergence)
DETECT_STATE = "detect_state"  # detection, while unfinished: one torch.save file per finished batch
SHARD_GLOB = "samples.rank*-of-*.jsonl"  # data-parallel runs, while unfinished: one samples file per rank
ARTEFACTS = (CONFIG, SAMPLES, RESULTS, HEAD_SCORES, SAMPLE_SCORES, OVERLAYS, PAIRS, EMERGENCE)
LOCK = ".vrh-lock"  # the writer's lock file (pid inside), present while a run holds the folder
RUN_MARK = "vrh_run"  # config.json key only RunFolder.write_config writes: how a folder proves it is a vrh run
RUN_FORMAT = 1  # RUN_MARK's value; bump when the folder layout changes
# What a command writes into its run folder beyond ARTEFACTS and sub-runs (removed by --overwrite)
COMMAND_FILES = {"demo": ("data", "report"), "compare": ("compare.md", "compare.png")}

# results.json / head_scores.json carry this; bump when a key changes meaning or moves.
# 2: Condition-tagged samples ("condition" label on every masked record), k always an int in a
#    condition and a list only where a command sweeps it, "random_control" block with distinct sets.
SCHEMA_VERSION = 2


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


# --- plain files --------------------------------------------------------------------------------------
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


def shard_name(rank: int, size: int) -> str:
    """The samples file rank ``rank`` of ``size`` appends to in a data-parallel run.

    >>> shard_name(1, 4)
    'samples.rank1-of-4.jsonl'
    """
    return f"samples.rank{rank}-of-{size}.jsonl"


def write_jsonl(path: str | os.PathLike, records: Iterable[Mapping[str, Any]]) -> Path:
    """A whole JSONL file written atomically (temp file + rename): a reader never sees half of it."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def _jsonable(obj: Any) -> Any:
    """As JSON sees it (tuples become lists), for comparing configs."""
    return json.loads(json.dumps(obj))


# --- the folder being written -------------------------------------------------------------------------
class RunFolder:
    """A run folder being written.

    ``overwrite=True`` clears a previous run's folder completely; ``resume=True`` keeps its finished
    samples (and requires the same config, see :meth:`write_config`). Without either, a non-empty folder
    is refused with a message naming both flags.

    In a data-parallel run every rank opens the folder (each checks it, rank 0 alone clears it) and
    appends to its own shard; the writes of whole files are rank 0's (other ranks skip them).
    """

    def __init__(self, path: str | os.PathLike, *, resume: bool = False, overwrite: bool = False):
        self.world: World = world()
        if resume and overwrite:
            raise ValueError("--resume and --overwrite exclude each other: resume keeps the run, overwrite deletes it")
        self.path = Path(path)
        self.resume = resume
        self._samples = None
        self._lock: _Lock | None = None
        self.skipped: list[dict[str, Any]] = []  # samples the run left out (id, reason): results.json lists them
        if self.path.exists() and not self.path.is_dir():
            raise FileExistsError(f"--out {self.path} is a file, not a folder")
        # the lock comes first: no other process may change the folder between this look and the config write
        self._lock = self._take_lock()
        try:
            non_empty = any(c.name != LOCK for c in self.path.iterdir())
            if non_empty and not (resume or overwrite):
                raise FileExistsError(f"run folder {self.path} is not empty; pass --overwrite to replace it "
                                      "or --resume to continue the run in it")
            if non_empty and overwrite:
                run_folder_contents(self.path)  # on every rank alike, before any rank waits for another
            if non_empty and resume and (self.path / CONFIG).exists() and not is_run_folder(self.path):
                raise FileExistsError(f"{self.path} is not a vrh run folder (its {CONFIG} was not written by vrh); "
                                      "--resume continues only a vrh run: choose another --out")
            self.world.barrier()  # every rank has looked at the folder before rank 0 changes it
            if self.world.is_main and non_empty and overwrite:
                clear_run_folder(self.path)
            self.world.barrier()
        except BaseException:
            self.release()
            raise
        self._samples_name = shard_name(self.world.rank, self.world.size) if self.world.active else SAMPLES

    def _take_lock(self) -> _Lock | None:
        """Rank 0 creates the folder and locks it; every rank learns whether that worked (data-parallel ranks
        share rank 0's run, so a refusal reaches them all instead of leaving them at a barrier)."""
        lock, err = None, None
        if self.world.is_main:
            created = not self.path.exists()
            try:
                self.path.mkdir(parents=True, exist_ok=True)
                lock = _Lock.acquire(self.path)
            except RunFolderInUse as e:
                err = str(e)
                if created:  # nothing of ours stays behind
                    shutil.rmtree(self.path, ignore_errors=True)
        errs = self.world.all_gather(err) if self.world.active else [err]
        first = next((e for e in errs if e), None)
        if first:
            if lock is not None:
                lock.release()
            raise RunFolderInUse(first)
        return lock

    def release(self) -> None:
        """Close the samples file and give up the folder's lock (idempotent; ``with`` exit calls it)."""
        self.close()
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def write_config(self, config: dict[str, Any]) -> dict[str, Any]:
        """Write ``config.json`` (with the :data:`RUN_MARK` that makes the folder a vrh run); on resume, refuse a
        config that differs, naming the settings that do. A refusal gives up the folder's lock."""
        try:
            return self._write_config(config)
        except BaseException:
            self.release()
            raise

    def _write_config(self, config: dict[str, Any]) -> dict[str, Any]:
        full = {RUN_MARK: RUN_FORMAT, **config, "environment": environment()}
        if (self.path / CONFIG).exists():
            old = read_json(self.path / CONFIG)
            mine = _jsonable({k: v for k, v in full.items() if k not in ("environment", RUN_MARK)})
            theirs = {k: v for k, v in old.items() if k not in ("environment", RUN_MARK)}
            diffs = config_differences(theirs, mine)
            if diffs:  # the user's own settings (config.*) first, one per line
                diffs.sort(key=lambda d: not d.startswith("config."))
                raise ValueError(f"cannot resume {self.path}: {len(diffs)} setting(s) differ from the interrupted "
                                 "run's (rerun with the same settings, or --overwrite to start over):\n  "
                                 + "\n  ".join(diffs))
        if self.world.is_main:
            write_json(self.path / CONFIG, full)
        return full

    def shard_paths(self) -> list[Path]:
        """Per-rank samples files of a data-parallel run not merged yet (any world size), sorted."""
        return sorted(self.path.glob(SHARD_GLOB))

    def finished_samples(self) -> list[dict[str, Any]]:
        """Records of ``samples.jsonl`` and, after them, of every rank's shard; a record that is in two
        files (a merge interrupted between writing and deleting) counts once."""
        p = self.path / SAMPLES
        out = read_jsonl(p) if p.exists() else []
        shards = self.shard_paths()
        if not shards:
            return out
        seen = {_record_key(r) for r in out}
        for shard in shards:
            for rec in read_jsonl(shard):
                if _record_key(rec) not in seen:
                    seen.add(_record_key(rec))
                    out.append(rec)
        return out

    def append_sample(self, record: dict[str, Any]) -> None:
        """Append one finished record to ``samples.jsonl`` (to this rank's shard in a data-parallel run)."""
        path = self.path / self._samples_name
        if self._samples is None:
            # rewrite without a torn last line before appending
            done = read_jsonl(path) if path.exists() else []
            with open(path, "w") as f:
                f.writelines(json.dumps(r) + "\n" for r in done)
            self._samples = open(path, "a")
        self._samples.write(json.dumps(record) + "\n")
        # flushed to the OS per record (a crashed or killed process loses nothing it finished); fsync per
        # record cost ~0.3 s each on slow disks, so the disk sync happens once, on close
        self._samples.flush()

    def merge_shards(self) -> None:
        """Fold every rank's shard into ``samples.jsonl`` (rank 0, atomically, then the shards go).

        A collective in a data-parallel run: every rank calls it, after its last record."""
        self.close()
        self.world.barrier()
        if self.world.is_main and self.shard_paths():
            self.replace_samples(self.finished_samples())
        self.world.barrier()

    def replace_samples(self, records: list[dict[str, Any]]) -> None:
        """Rank 0: ``samples.jsonl`` becomes ``records`` (atomically) and the shards are deleted.

        Detection writes its records in sample order this way after combining the ranks' batches."""
        if not self.world.is_main:
            return
        self.close()
        write_jsonl(self.path / SAMPLES, list(records))
        for shard in self.shard_paths():
            shard.unlink()

    def write(self, name: str, obj: Any) -> Path:
        """Write the JSON artefact ``name`` (rank 0 only in a data-parallel run)."""
        if self.world.is_main:
            write_json(self.path / name, obj)
        return self.path / name

    def note_skipped(self, skipped: Iterable[Mapping[str, Any]]) -> None:
        """Samples the run leaves out (``{"id", "reason"}`` each, e.g. a prompt beyond the model's context):
        :meth:`write_results` lists them under ``skipped_samples``, so no skip goes unreported."""
        seen = {r["id"] for r in self.skipped}
        for r in skipped:
            if r["id"] not in seen:
                seen.add(r["id"])
                self.skipped.append(dict(r))

    def write_results(self, results: dict[str, Any]) -> Path:
        """``results.json`` with the schema version; written last, so its presence marks a finished run.
        In a data-parallel run the ranks' shards are merged first (every rank must call it)."""
        self.merge_shards()
        extra = {"skipped_samples": {"n": len(self.skipped), "samples": self.skipped}} if self.skipped else {}
        return self.write(RESULTS, {"schema_version": SCHEMA_VERSION, **results, **extra})

    def close(self) -> None:
        if self._samples is not None:
            os.fsync(self._samples.fileno())
            self._samples.close()
            self._samples = None

    def __enter__(self) -> "RunFolder":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __del__(self) -> None:  # a RunFolder dropped without `with`: its lock file must not outlive it
        try:
            self.release()
        except Exception:  # noqa: BLE001 - interpreter shutdown; the OS drops the lock with the process
            pass


def _record_key(rec: Mapping[str, Any]) -> tuple[Any, Any]:
    return rec.get("condition"), rec.get("id")


class RunFolderInUse(FileExistsError):
    """Another process holds the run folder's lock."""


try:
    import fcntl
except ImportError:  # not POSIX: runs are not locked
    fcntl = None  # type: ignore[assignment]


class _Lock:
    """An exclusive ``flock`` on ``FOLDER/.vrh-lock`` (the holder's pid inside), re-entrant within a process.

    Why flock: the OS drops it when the holder dies (kill -9 included), so a crash never leaves a folder
    locked; the file left behind by a crash is only a name, locked again by the next run. Release unlinks
    the file while still holding the lock, so a process that opened it just before must retry on the new
    file (checked by inode), never share the old one."""

    _held: dict[str, "_Lock"] = {}

    def __init__(self, key: str, path: Path, fd: int):
        self.key, self.path, self.fd, self.count = key, path, fd, 1

    @classmethod
    def acquire(cls, folder: Path) -> "_Lock | None":
        if fcntl is None:
            return None
        key = os.path.realpath(folder)
        if key in cls._held:  # this process already writes it (a command and its library call)
            cls._held[key].count += 1
            return cls._held[key]
        path = folder / LOCK
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
                os.close(fd)
                raise RunFolderInUse(f"run folder {folder} is in use by another vrh process (pid {holder}); wait "
                                     "for it to finish or stop it, or choose another --out") from None
            try:
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)  # locked a file its releasing holder had just unlinked: lock the current one
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        cls._held[key] = lock = cls(key, path, fd)
        return lock

    def release(self) -> None:
        self.count -= 1
        if self.count > 0 or self.fd < 0:
            return
        self._held.pop(self.key, None)
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        os.close(self.fd)
        self.fd = -1


def is_run_folder(path: str | os.PathLike) -> bool:
    """Whether ``path`` holds a ``config.json`` that vrh wrote: one with the :data:`RUN_MARK`, or (runs
    written before the mark) a ``command`` with vrh's ``environment`` record. A model checkpoint's
    ``config.json`` is neither."""
    file = Path(path) / CONFIG
    try:
        cfg = read_json(file) if file.is_file() else None
    except (OSError, ValueError):
        return False
    if not isinstance(cfg, dict):
        return False
    env = cfg.get("environment")
    legacy = isinstance(cfg.get("command"), str) and isinstance(env, dict) and "vrh" in env and "argv" in env
    return cfg.get(RUN_MARK) is not None or legacy


def run_folder_contents(path: str | os.PathLike) -> list[Path]:
    """What ``--overwrite`` removes from the vrh run folder ``path``: its artefacts, unmerged shards, detection
    state, temporary files, sub-runs (each a vrh run folder, checked the same way) and the extra files of the
    command that wrote it (:data:`COMMAND_FILES`). Refuses (FileExistsError, naming them) a folder that is
    not a vrh run, or that holds anything else: nothing a run did not write is ever deleted."""
    path = Path(path)
    if not is_run_folder(path):
        raise FileExistsError(f"{path} is not empty and is not a vrh run folder (no {CONFIG} written by vrh); "
                              "refusing to delete its contents for --overwrite: choose another --out")
    own = set(COMMAND_FILES.get(str(read_json(path / CONFIG).get("command")), ()))
    out, foreign = [], []
    for child in sorted(path.iterdir()):
        name = child.name
        if name == LOCK:
            continue
        known = (name in ARTEFACTS or name in own or name.endswith((".tmp", ".tmp.npz")) or child.match(SHARD_GLOB)
                 or (name == DETECT_STATE and child.is_dir() and not child.is_symlink()))
        if not known and child.is_dir() and not child.is_symlink() and is_run_folder(child):
            run_folder_contents(child)  # a sub-run must be clean too
            known = True
        (out if known else foreign).append(child)
    if foreign:
        names = ", ".join(c.name for c in foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise FileExistsError(f"--overwrite: {path} holds files no vrh run writes ({names}); refusing to delete "
                              "them: move them away or choose another --out")
    return out


def clear_run_folder(path: Path) -> None:
    """Delete what a previous vrh run left in ``path`` (:func:`run_folder_contents`); refuse any other folder."""
    for child in run_folder_contents(path):
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def config_differences(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Human-readable differences between two JSON configs: ``"config.k: 3 -> 5"`` per differing leaf.

    >>> config_differences({"a": 1, "b": {"c": 2}}, {"a": 1, "b": {"c": 3}, "d": 0})
    ['b.c: 2 -> 3', 'd: (absent) -> 0']
    """
    out = []
    for key in sorted(set(old) | set(new), key=str):
        a, b = old.get(key, "(absent)"), new.get(key, "(absent)")
        name = f"{prefix}{key}"
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            out += config_differences(a, b, name + ".")
        elif a != b:
            short = lambda v: (json.dumps(v) if not isinstance(v, str) else v)[:80]  # noqa: E731
            out.append(f"{name}: {short(a)} -> {short(b)}")
    return out


# --- typed readers ------------------------------------------------------------------------------------
def read_config(run_dir: str | os.PathLike) -> dict[str, Any]:
    path = Path(run_dir) / CONFIG
    if not path.is_file():
        if not Path(run_dir).exists():
            raise FileNotFoundError(f"run folder {run_dir} does not exist")
        raise FileNotFoundError(f"{run_dir} is not a vrh run folder (no {CONFIG})")
    return read_json(path)


def read_results(run_dir: str | os.PathLike) -> dict[str, Any] | None:
    """``results.json`` or None when the run did not finish."""
    path = Path(run_dir) / RESULTS
    return read_json(path) if path.is_file() else None


def read_samples(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    path = Path(run_dir) / SAMPLES
    return read_jsonl(path) if path.is_file() else []


def is_finished(run_dir: str | os.PathLike) -> bool:
    return (Path(run_dir) / RESULTS).is_file()


@dataclass
class DetectionSplit:
    """Which samples of which dataset a detection run scored, and which it held out for evaluation."""

    data_path: str | None
    data_sha256: str | None
    detect_ids: list[str]
    eval_ids: list[str]
    task: str = "grounding"


def read_detection_split(run_dir: str | os.PathLike) -> DetectionSplit:
    cfg = read_config(run_dir)
    if "eval_ids" not in cfg:
        raise ValueError(f"{run_dir} is not a detection run (its {CONFIG} has no eval_ids)")
    data = cfg.get("data") or {}
    detect_ids = cfg.get("detect_ids")
    if detect_ids is None:  # runs written before detect_ids was recorded: the scored samples
        detect_ids = [r["id"] for r in read_samples(run_dir)]
    return DetectionSplit(data.get("path"), data.get("sha256"), list(detect_ids), list(cfg["eval_ids"]),
                          data.get("task", "grounding"))


@dataclass
class HeadScores:
    """``head_scores.json`` of a detection run: every scorer's ``[L][H]`` map and ranking.

    ``scorer`` is the primary scorer (the first requested); ``variants`` maps every scorer name to
    ``{"scores": [L][H], "ranking": [[l, h], ...], "n_positive_heads": n}``.
    """

    scorer: str
    num_layers: int
    num_heads: int
    n_scored: int
    variants: dict[str, dict[str, Any]]
    skipped: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)  # forward counts, timing, ...

    def scores(self, scorer: str | None = None):
        """The ``[L, H]`` score map (float tensor) of ``scorer`` (default: the primary one)."""
        import torch

        name = scorer or self.scorer
        if name not in self.variants:
            raise ValueError(f"detection run has no scorer {name!r}; it has {sorted(self.variants)} "
                             f"(detect with --scorers to add one)")
        return torch.tensor(self.variants[name]["scores"], dtype=torch.float32)

    def ranking(self, scorer: str | None = None) -> list[tuple[int, int]]:
        return [tuple(h) for h in self.variants[scorer or self.scorer]["ranking"]]

    def to_json(self) -> dict[str, Any]:
        primary = self.variants[self.scorer]
        return {"schema_version": SCHEMA_VERSION, "scorer": self.scorer, "num_layers": self.num_layers,
                "num_heads": self.num_heads, "n_scored": self.n_scored, "scores": primary["scores"],
                "ranking": primary["ranking"], "variants": self.variants, "skipped": self.skipped,
                "warnings": self.warnings, **self.extra}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "HeadScores":
        known = {"schema_version", "scorer", "num_layers", "num_heads", "n_scored", "scores", "ranking",
                 "variants", "skipped", "warnings"}
        variants = obj.get("variants") or {obj["scorer"]: {"scores": obj["scores"], "ranking": obj["ranking"]}}
        return cls(scorer=obj["scorer"], num_layers=int(obj["num_layers"]), num_heads=int(obj["num_heads"]),
                   n_scored=int(obj.get("n_scored", 0)), variants=variants, skipped=list(obj.get("skipped", [])),
                   warnings=list(obj.get("warnings", [])), extra={k: v for k, v in obj.items() if k not in known})


def write_head_scores(run: RunFolder, hs: HeadScores) -> Path:
    return run.write(HEAD_SCORES, hs.to_json())


def read_head_scores(run_dir: str | os.PathLike) -> HeadScores:
    path = Path(run_dir) / HEAD_SCORES
    if not path.is_file():
        if not (Path(run_dir) / CONFIG).is_file():
            raise FileNotFoundError(f"{run_dir} is not a vrh run folder (no {CONFIG}); a detection run "
                                    "folder (vrh detect --out) is expected")
        raise FileNotFoundError(f"{run_dir} has no {HEAD_SCORES}: not a detection run, or it did not finish")
    return HeadScores.from_json(read_json(path))


def _write_named_arrays(path: Path, names: Sequence[str], fields: Mapping[str, Sequence[Any]]) -> None:
    """``np.savez`` of arrays that belong to user-named items (sample ids, scorer names): the names are stored
    as data (a ``names`` string array), the arrays under positional keys ``<field>_<i>``. Why: a name used as
    an array key collides with ``savez``'s own parameters (``file``, ``allow_pickle``) and with the keys of
    other names (``a`` and ``a/rects``). The write goes to a temporary file and is renamed."""
    import numpy as np

    arrays: dict[str, Any] = {"format": np.asarray(NPZ_FORMAT), "names": np.asarray(list(names), dtype=np.str_)}
    for key, values in fields.items():
        arrays.update({f"{key}_{i}": np.asarray(v) for i, v in enumerate(values)})
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


def _read_named_arrays(z: Any, fields: Sequence[str]) -> dict[str, tuple[Any, ...]] | None:
    """``{name: (array of each field)}`` of a file :func:`_write_named_arrays` wrote; None for an older file
    (names as keys)."""
    if "format" not in z.files or "names" not in z.files:
        return None
    names = [str(n) for n in z["names"]]
    return {n: tuple(z[f"{f}_{i}"] for f in fields) for i, n in enumerate(names)}


NPZ_FORMAT = 2  # 2: names as data (_write_named_arrays); 1: names as array keys (read only)


def write_sample_scores(run: RunFolder, per_sample: Mapping[str, Any]) -> Path:
    """Per-sample ``[N, L, H]`` maps keyed by scorer name."""
    path = run.path / SAMPLE_SCORES
    if run.world.is_main:
        _write_named_arrays(path, list(per_sample), {"scores": list(per_sample.values())})
    return path


def _npz_key(name: str) -> str:  # format 1 kept scorer names as keys, with "/" and ":" replaced
    return name.replace("/", "|").replace(":", ";")


def read_sample_scores(run_dir: str | os.PathLike, scorer: str):
    """The ``[N, L, H]`` per-sample maps (float tensor) of one scorer of a detection run."""
    import numpy as np
    import torch

    path = Path(run_dir) / SAMPLE_SCORES
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: a detection run's per-sample maps are needed")
    with np.load(path, allow_pickle=False) as z:
        named = _read_named_arrays(z, ("scores",))
        if named is None:  # format 1
            named = {f.replace("|", "/").replace(";", ":"): (z[f],) for f in z.files}
        if scorer not in named:
            raise ValueError(f"{path} has no scorer {scorer!r}; it has {sorted(named)}")
        return torch.from_numpy(named[scorer][0])


def write_overlays(run: RunFolder, overlays: Mapping[str, tuple[Any, Any]]) -> Path | None:
    """Overlay arrays per sample id: ``(L, H, V)`` mean attention of the output tokens on the visual tokens and
    ``(V, 4)`` image rectangles of those tokens (any string id round-trips, see :func:`_write_named_arrays`)."""
    if not overlays:
        return None
    path = run.path / OVERLAYS
    if run.world.is_main:
        _write_named_arrays(path, list(overlays), {"attention": [a for a, _ in overlays.values()],
                                                   "rects": [r for _, r in overlays.values()]})
    return path


def read_overlays(run_dir: str | os.PathLike) -> dict[str, tuple[Any, Any]]:
    """``{sample id: ((L, H, V) attention, (V, 4) rects)}`` of a detection run (empty when none)."""
    import numpy as np

    path = Path(run_dir) / OVERLAYS
    if not path.is_file():
        return {}
    with np.load(path, allow_pickle=False) as z:
        named = _read_named_arrays(z, ("attention", "rects"))
        if named is not None:
            return named
        ids = [f for f in z.files if not f.endswith("/rects")]  # format 1
        return {i: (z[i], z[i + "/rects"]) for i in ids if i + "/rects" in z.files}


def _emergence_path(path: str | os.PathLike | RunFolder) -> Path:
    path = path.path if isinstance(path, RunFolder) else Path(path)
    return path / EMERGENCE if path.is_dir() or path.suffix != ".jsonl" else path


def write_emergence(run_or_path: RunFolder | str | os.PathLike, records: Iterable[Mapping[str, Any]]) -> Path:
    """Write emergence records (atomically) as ``emergence.jsonl`` of a run folder, or of any folder (an
    exported organism checkpoint); a path ending in ``.jsonl`` is the file itself. Rank 0 only in a
    data-parallel run."""
    path = _emergence_path(run_or_path)
    if isinstance(run_or_path, RunFolder) and not run_or_path.world.is_main:
        return path
    return write_jsonl(path, list(records))


def read_emergence(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of an emergence log (a folder holding ``emergence.jsonl``, or the file), in order.

    Each record is one tracked training step: ``step``, ``phase``, ``k``, ``n`` and per task (``image``,
    ``text``) an ``[L][H]`` ``scores`` map with ``above_threshold``, ``top`` and, on the first task, the
    causal test (``acc``, ``acc_top``, ``random``, ``acc_random``); :mod:`vrh.organism.emergence`.
    Order: phases as they first appear, steps ascending within a phase; a step tracked twice (a resumed
    run re-tracks it) keeps its last record; a torn last line (a crash mid-append) is ignored."""
    file = _emergence_path(path)
    if not file.is_file():
        raise FileNotFoundError(f"{path}: no {EMERGENCE} (an organism phase folder, an exported organism "
                                f"with a training log, or a `vrh organism emergence` run folder is expected)")
    phases: dict[str, int] = {}
    by: dict[tuple[int, Any], dict[str, Any]] = {}
    for rec in read_jsonl(file):
        if not isinstance(rec, dict) or "step" not in rec:
            raise ValueError(f"{file}: a record without a step: {str(rec)[:80]}")
        phase = phases.setdefault(str(rec.get("phase", "")), len(phases))
        by[(phase, rec["step"])] = rec
    return [by[key] for key in sorted(by)]


EMERGENCE_TASKS = ("image", "text")  # the task entries an emergence record may hold, in the order tracked


def emergence_causal_task(rec: Mapping[str, Any]) -> str | None:
    """The task of an emergence record's causal test (its first tracked task holding one: text in a
    text-only phase, else image); None when the record has none."""
    return next((t for t in EMERGENCE_TASKS if isinstance(rec.get(t), dict) and "acc_top" in rec[t]), None)


def iter_runs(paths: list[str | os.PathLike]) -> Iterator[tuple[Path, dict[str, Any]]]:
    for p in paths:
        yield Path(p), read_config(p)


# --- detection's resumable state ----------------------------------------------------------------------
def write_batch_state(run_dir: str | os.PathLike, index: int, state: Mapping[str, Any]) -> Path:
    """Keep detection's state of finished batch ``index`` (records, scorer states, overlays, counts) in
    ``detect_state/batch-NNNNNN.pt``: written to a temp file, synced, renamed, so a file that exists is whole
    (a kill -9 mid-write leaves only a ``.tmp`` that is ignored)."""
    import torch

    folder = Path(run_dir) / DETECT_STATE
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"batch-{index:06d}.pt"
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        torch.save(dict(state), f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def read_batch_states(run_dir: str | os.PathLike) -> dict[int, dict[str, Any]]:
    """Batch index -> state of every batch :func:`write_batch_state` finished in ``run_dir``; a file that is
    not one (torn by a failing disk, or planted) is a one-line error naming it."""
    folder = Path(run_dir) / DETECT_STATE
    if not folder.is_dir():
        return {}
    out = {}
    for path in sorted(folder.glob("batch-*.pt")):
        try:
            index = int(path.stem.split("-")[1])
        except (IndexError, ValueError):
            raise ValueError(f"{path}: not a detection batch state (expected batch-NNNNNN.pt); remove it") from None
        state = load_torch_file(path, what="detection batch state",
                                fix="delete it and rerun with --resume to recompute that batch")
        if not isinstance(state, dict) or not {"ids", "records", "scorers"} <= set(state):
            raise ValueError(f"{path}: not a detection batch state; delete it and rerun with --resume to "
                             "recompute that batch")
        out[index] = state
    return out


def load_torch_file(path: str | os.PathLike, *, what: str = "checkpoint", fix: str = "", **kwargs: Any) -> Any:
    """``torch.load(path, weights_only=True)``: tensors, numbers, strings and containers only, so a planted
    pickle cannot run code. Any failure (a torn file, a pickle of other objects) is one ValueError naming
    the file and what it should have been; ``fix`` says what to do about it."""
    import pickle

    import torch

    try:
        return torch.load(path, weights_only=True, **kwargs)
    except FileNotFoundError:
        raise
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError, TypeError, AttributeError,
            KeyError, IndexError) as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if "weights_only" in reason or "Weights only load failed" in reason:
            reason = "it holds objects other than tensors and plain data, which vrh never loads"
        raise ValueError(f"{path}: not a readable {what} ({reason})" + (f"; {fix}" if fix else "")) from None


def clear_batch_states(run: RunFolder) -> None:
    """Remove ``detect_state/`` (rank 0) once the run's final artefacts are written."""
    folder = run.path / DETECT_STATE
    if run.world.is_main and folder.is_dir():
        shutil.rmtree(folder)
