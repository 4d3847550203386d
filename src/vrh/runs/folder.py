"""The run folder being written: artefact names, atomic JSON and JSONL files, the one-writer lock and
what ``--overwrite`` may remove (the policy is in :mod:`vrh.runs`)."""


from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any, cast

import vrh
from vrh.infra.distributed import World, world
from vrh.runs import safe_paths, written
from vrh.runs.config_diff import as_recorded_now, config_differences
from vrh.runs.lock import LOCK, FolderLock, RunFolderInUse, in_use_message
from vrh.runs.records import SampleRecord

CONFIG = "config.json"
SAMPLES = "samples.jsonl"
RESULTS = "results.json"
HEAD_SCORES = "head_scores.json"
SAMPLE_SCORES = "sample_scores.npz"  # detection: per-sample [N, L, H] maps, one array per scorer
OVERLAYS = "overlays.npz"  # detection: per sample id, (L, H, V) mean attention on visual tokens and (V, 4) rects
PAIRS = "pairs.jsonl"  # dpo-pairs: TRL vision preference pairs
EMERGENCE = "emergence.jsonl"  # organism training: one record per tracked step (vrh_lab.organism.emergence)
DETECT_STATE = "detect_state"  # detection, while unfinished: one torch.save file per finished batch
SHARD_GLOB = "samples.rank*-of-*.jsonl"  # data-parallel runs, while unfinished: one samples file per rank
ARTEFACTS = (CONFIG, SAMPLES, RESULTS, HEAD_SCORES, SAMPLE_SCORES, OVERLAYS, PAIRS, EMERGENCE)
MAX_DIFFERENCES = 20  # lines a resume refusal lists (a k-sweep's conditions can all differ)
RUN_MARK = "vrh_run"  # config.json key only RunFolder.write_config writes: how a folder proves it is a vrh run
RUN_FORMAT = 1  # RUN_MARK's value; bump when the folder layout changes
# What a command writes into its run folder beyond ARTEFACTS and sub-runs (removed by --overwrite)
COMMAND_FILES = {"demo": ("data", "report"), "compare": ("compare.md", "compare.png"),
                 "compare-heads": ("compare_heads.md", "compare_heads.png"),  # vrh.analyses.compare_heads
                 "dpo-train": ("model", "checkpoints", "train_log.jsonl")}  # vrh.experiments.dpo

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
def write_json(path: str | os.PathLike, obj: Any, *, root: str | os.PathLike | None = None) -> None:
    """Atomic JSON write (temp file + rename): readers never see half a file. ``root``: the folder vrh was
    given that ``path`` lies in (default: its own folder); no name below it is followed if it is a link
    (:mod:`vrh.runs.safe_paths`)."""
    path = Path(path)
    safe_paths.write_atomic(path.parent if root is None else root, path, json.dumps(obj, indent=1) + "\n")


RUN_JSON_MAX_BYTES = 256 * 2**20  # a run folder's JSON file larger than this is not one vrh wrote (real: KB to MB)


def read_json(path: str | os.PathLike, *, expect: type | None = None) -> Any:
    """A JSON file of a run folder (config, results, head scores, ...) through the one JSON reader
    (:func:`vrh.infra.json_text.read_json`): over :data:`RUN_JSON_MAX_BYTES`, not UTF-8, not JSON, nested deeper
    than :data:`~vrh.infra.json_text.MAX_DEPTH` levels or, given ``expect``, of another type is a ValueError naming
    the file, never a traceback (a run folder may come from anyone)."""
    from vrh.infra import json_text

    return json_text.read_json(path, max_bytes=RUN_JSON_MAX_BYTES, max_depth=json_text.MAX_DEPTH, expect=expect)


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Records of a JSONL file; a torn last line (crash mid-write) is ignored, any other bad line raises."""
    return list(iter_jsonl(path))


def iter_jsonl(path: str | os.PathLike) -> Iterator[dict[str, Any]]:
    """The records of a JSONL file one at a time, read line by line (a file is never held whole: a run's
    ``samples.jsonl`` can be large); a torn last line is ignored, any other bad line raises ValueError."""
    bad = None  # the line that did not parse: an error unless it is the last one (torn by a crash)
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, start=1):
            if bad is not None:
                raise ValueError(f"{path}:{bad}: not valid JSON")
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                bad = i
                continue
            yield rec


def shard_name(rank: int, size: int) -> str:
    """The samples file rank ``rank`` of ``size`` appends to in a data-parallel run.

    >>> shard_name(1, 4)
    'samples.rank1-of-4.jsonl'
    """
    return f"samples.rank{rank}-of-{size}.jsonl"


def write_jsonl(path: str | os.PathLike, records: Iterable[Mapping[str, Any]], *,
                root: str | os.PathLike | None = None) -> Path:
    """A whole JSONL file written atomically (temp file + rename): a reader never sees half of it (``root``: as
    :func:`write_json`'s)."""
    path = Path(path)
    root = path.parent if root is None else root
    tmp = path.with_name(path.name + ".tmp")
    with safe_paths.open_write(root, tmp, "w", fresh=True) as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
        f.flush()
        os.fsync(f.fileno())
    safe_paths.replace(root, tmp, path)
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
        self.path = Path(path)
        self.resume = resume
        self._samples: IO[str] | None = None
        self._lock: FolderLock | None = None
        self.skipped: list[dict[str, Any]] = []  # samples the run left out (id, reason): results.json lists them
        if resume and overwrite:
            raise ValueError("--resume and --overwrite exclude each other: resume keeps the run, overwrite deletes it")
        if self.path.exists() and not self.path.is_dir():
            raise FileExistsError(f"--out {self.path} is a file, not a folder")
        # the lock comes first: no other process may change the folder between this look and the config write
        self._lock = self._take_lock()
        try:
            non_empty = check_out(self.path, resume=resume, overwrite=overwrite, locked=True)  # again, under the lock
            self.world.barrier()  # every rank has looked at the folder before rank 0 changes it
            if self.world.is_main and non_empty and overwrite:
                clear_run_folder(self.path)
            self.world.barrier()
        except BaseException:
            self.release()
            raise
        self._samples_name = shard_name(self.world.rank, self.world.size) if self.world.active else SAMPLES

    def _take_lock(self) -> FolderLock | None:
        """Rank 0 creates the folder and locks it; every rank learns whether that worked (data-parallel ranks
        share rank 0's run, so a refusal reaches them all instead of leaving them at a barrier)."""
        lock, err = None, None
        if self.world.is_main:
            # a refused process removes nothing: the folder it found (or just raced to create) is the holder's
            self.path.mkdir(parents=True, exist_ok=True)
            try:
                lock = FolderLock.acquire(self.path)
            except (RunFolderInUse, safe_paths.SymlinkRefused) as e:  # held, or a planted link at the lock's name
                err = (type(e).__name__, str(e))
        errs = self.world.all_gather(err) if self.world.active else [err]
        first = next((e for e in errs if e), None)
        if first:
            if lock is not None:
                lock.release()
            raise (safe_paths.SymlinkRefused if first[0] == "SymlinkRefused" else RunFolderInUse)(first[1])
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
            theirs = as_recorded_now({k: v for k, v in old.items() if k not in ("environment", RUN_MARK)}, mine)
            diffs = config_differences(theirs, mine)
            if diffs:  # the user's own settings (config.*) first, one per line
                diffs.sort(key=lambda d: not d.startswith("config."))
                shown = diffs if len(diffs) <= MAX_DIFFERENCES else \
                    [*diffs[:MAX_DIFFERENCES - 1], f"... and {len(diffs) - MAX_DIFFERENCES + 1} more"]
                raise ValueError(f"cannot resume {self.path}: {len(diffs)} setting(s) differ from the interrupted "
                                 "run's (rerun with the same settings, or --overwrite to start over):\n  "
                                 + "\n  ".join(shown))
        if self.world.is_main:
            write_json(self.path / CONFIG, full, root=self.path)
        return full

    def shard_paths(self) -> list[Path]:
        """Per-rank samples files of a data-parallel run not merged yet (any world size), sorted."""
        return sorted(self.path.glob(SHARD_GLOB))

    def finished_samples(self) -> list[SampleRecord]:
        """Records of ``samples.jsonl`` and, after them, of every rank's shard; a record that is in two
        files (a merge interrupted between writing and deleting) counts once."""
        p = self.path / SAMPLES
        out = cast(list[SampleRecord], read_jsonl(p) if p.exists() else [])  # the lines, as written
        shards = self.shard_paths()
        if not shards:
            return out
        seen = {_record_key(r) for r in out}
        for shard in shards:
            for rec in cast(list[SampleRecord], read_jsonl(shard)):
                if _record_key(rec) not in seen:
                    seen.add(_record_key(rec))
                    out.append(rec)
        return out

    def append_sample(self, record: SampleRecord) -> None:
        """Append one finished record to ``samples.jsonl`` (to this rank's shard in a data-parallel run)."""
        path = self.path / self._samples_name
        if self._samples is None:
            # rewritten without a torn last line before appending, into a new file renamed over the old one: a
            # hard-linked copy of the folder (cp -al, rsync --link-dest) keeps its own samples (docs/guide.md)
            done = read_jsonl(safe_paths.check(self.path, path)) if path.exists() else []
            write_jsonl(path, done, root=self.path)
            self._samples = safe_paths.open_append(self.path, path)
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

    def replace_samples(self, records: list[SampleRecord]) -> None:
        """Rank 0: ``samples.jsonl`` becomes ``records`` (atomically) and the shards are deleted.

        Detection writes its records in sample order this way after combining the ranks' batches."""
        if not self.world.is_main:
            return
        self.close()
        write_jsonl(self.path / SAMPLES, list(records), root=self.path)
        for shard in self.shard_paths():
            safe_paths.unlink(self.path, shard)

    def write(self, name: str, obj: Any) -> Path:
        """Write the JSON artefact ``name`` (rank 0 only in a data-parallel run)."""
        if self.world.is_main:
            write_json(self.path / name, obj, root=self.path)
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


def check_out(path: str | os.PathLike, *, resume: bool = False, overwrite: bool = False, locked: bool = False) -> bool:
    """Refuse a run folder :class:`RunFolder` would refuse with these flags (FileExistsError / ValueError with
    the same message, :class:`RunFolderInUse` while another process holds it), taking no lock and changing
    nothing; return whether it is non-empty. Commands call it before loading the model (minutes on a 7B),
    :class:`RunFolder` again under its lock (``locked``: the run holds it, so its holder is not asked about).
    In a data-parallel run rank 0 alone asks who holds the lock (the others' lock is rank 0's: the run's own);
    a refused rank 0 ends the launch."""
    if resume and overwrite:
        raise ValueError("--resume and --overwrite exclude each other: resume keeps the run, overwrite deletes it")
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise FileExistsError(f"--out {path} is a file, not a folder")
    if (path / LOCK).is_symlink():  # the lock would be written through it (a dangling one creates a file)
        raise FileExistsError(f"run folder {path}: {LOCK} is a symlink; vrh never writes through one: remove it or "
                              "choose another --out")
    holder = FolderLock.holder(path) if path.is_dir() and not locked and world().is_main else None
    if holder is not None:  # first: a folder another run is writing is no case for --overwrite or --resume
        raise RunFolderInUse(in_use_message(path, holder))
    # a run killed before its config.json was in place left only the lock and that file's temporary: not a run yet
    non_empty = path.is_dir() and any(not (c.name == LOCK or (c.name == CONFIG + ".tmp" and c.is_file()
                                                              and not c.is_symlink())) for c in path.iterdir())
    if non_empty and not (resume or overwrite):
        raise FileExistsError(f"run folder {path} is not empty; pass --overwrite to replace it "
                              "or --resume to continue the run in it")
    if non_empty and overwrite:
        run_folder_contents(path)  # on every rank alike, before any rank waits for another
    if non_empty and resume and not is_run_folder(path):
        # resume rewrites results.json, trims a torn samples.jsonl and appends to it: only in a folder vrh made
        raise FileExistsError(f"--resume: {path} is not a vrh run folder (no {CONFIG} written by vrh); --resume "
                              "continues only a run vrh started there: choose another --out")
    if non_empty and resume:
        run_folder_contents(path, what="--resume")  # the same folders --overwrite would refuse
    return non_empty


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


def run_folder_contents(path: str | os.PathLike, what: str = "--overwrite") -> list[Path]:
    """What ``--overwrite`` removes from the vrh run folder ``path``: its artefacts, unmerged shards, detection
    state, temporary files, sub-runs (each a vrh run folder, checked the same way) and the extra files and
    subfolders of the command that wrote it (:data:`COMMAND_FILES`; a subfolder only when everything in it is
    recorded as vrh's, :mod:`vrh.runs.written`). Refuses (FileExistsError, naming them) a folder that is not a
    vrh run, or that holds anything else: nothing a run did not write is ever deleted (``what``: the flag that
    asked, for the message)."""
    path = Path(path)
    if path.is_symlink():
        raise FileExistsError(f"{what}: {path} is a symlink; vrh never removes through one: choose another --out")
    if not is_run_folder(path):
        raise FileExistsError(f"{path} is not empty and is not a vrh run folder (no {CONFIG} written by vrh); "
                              f"refusing to delete its contents for {what}: choose another --out")
    own = set(COMMAND_FILES.get(str(read_json(path / CONFIG).get("command")), ()))
    out, foreign, linked = [], [], []
    for child in sorted(path.iterdir()):
        name = child.name
        if name == LOCK:
            continue
        real_dir = child.is_dir() and not child.is_symlink()
        if name in own and real_dir:
            if written.has_record(child):
                found = [f"{name}/{f}" for f in written.foreign(child)]  # the user sees which file stopped it
            else:
                found = [f"{name}/ (no record of what vrh wrote in it)"] if any(child.iterdir()) else []
            foreign += found
            if not found:
                out.append(child)
            continue
        if name == DETECT_STATE and real_dir:
            found = [f"{name}/{c.name}" for c in sorted(child.iterdir()) if not is_batch_state_file(c)]
            foreign += found
            if not found:
                out.append(child)
            continue
        if child.is_symlink() and what == "--resume" and not name.endswith((".tmp", ".tmp.npz")):
            linked.append(name)  # resume would read it, append to it or replace it: never through a link
            continue
        known = ((name in ARTEFACTS and not real_dir) or (name in own and not child.is_symlink())
                 or (name.endswith((".tmp", ".tmp.npz")) and not real_dir) or child.match(SHARD_GLOB))
        if not known and real_dir and is_run_folder(child):
            run_folder_contents(child, what)  # a sub-run must be clean too
            known = True
        elif not known and real_dir and [c.name for c in child.iterdir()] == [LOCK]:
            known = True  # a sub-run killed before its config.json: nothing but its lock file
        if known:
            out.append(child)
        else:
            foreign.append(name + ("/" if real_dir else ""))
    if linked:
        raise FileExistsError(f"{what}: {path} holds symlinks where the run keeps its files ({', '.join(linked[:5])}); "
                              "vrh never reads or writes through one: remove them, or choose another --out")
    if foreign:
        names = ", ".join(foreign[:5]) + (
            f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise FileExistsError(f"{what}: {path} holds files no vrh run writes ({names}); refusing to delete "
                              "them: move them away or choose another --out")
    return out


def clear_run_folder(path: Path) -> None:
    """Delete what a previous vrh run left in ``path`` (:func:`run_folder_contents`); refuse any other folder."""
    for child in run_folder_contents(path):
        if child.is_dir() and not child.is_symlink():
            if written.has_record(child):
                written.remove_written(child)  # checked above: everything in it is recorded
            elif is_run_folder(child):
                clear_run_folder(child)
                _remove_empty(child)
            else:
                _remove_empty(child)  # detect_state/ (vrh's batch files) or a sub-run killed before its config
        else:
            safe_paths.unlink(path, child)  # a link among vrh's names: the link itself, never its target


def is_batch_state_file(path: Path) -> bool:
    """Whether ``path`` is a file detection writes in ``detect_state/``: ``batch-NNNNNN.pt`` (or its ``.tmp``).

    >>> is_batch_state_file(Path("batch-000012.pt")), is_batch_state_file(Path("notes.txt"))
    (True, False)
    """
    import re

    return (not path.is_symlink() and not path.is_dir()
            and re.fullmatch(r"batch-\d{6}\.pt(\.tmp)?", path.name) is not None)


def _remove_empty(folder: Path) -> None:
    """Remove ``folder``: a detection state folder (checked: only vrh's batch files) or one emptied by a clear."""
    for child in folder.iterdir():
        if child.name == LOCK or (folder.name == DETECT_STATE and is_batch_state_file(child)):
            safe_paths.unlink(folder, child)
    folder.rmdir()
