"""Typed readers and writers of a run folder's artefacts (config, results, samples, head scores, per-sample
maps, overlays, emergence logs) and of detection's resumable batch state."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from vrh.runs.folder import (CONFIG, DETECT_STATE, EMERGENCE, HEAD_SCORES, OVERLAYS, RESULTS, RunFolder, SAMPLES,
                             SAMPLE_SCORES, SCHEMA_VERSION, is_batch_state_file, read_json, read_jsonl, write_jsonl)
from vrh.runs import safe_paths
from vrh.runs.records import SampleRecord


# --- typed readers ------------------------------------------------------------------------------------
def read_config(run_dir: str | os.PathLike) -> dict[str, Any]:
    path = Path(run_dir) / CONFIG
    if not path.is_file():
        if not Path(run_dir).exists():
            raise FileNotFoundError(f"run folder {run_dir} does not exist")
        raise FileNotFoundError(f"{run_dir} is not a vrh run folder (no {CONFIG})")
    return read_json(path, expect=dict)


def read_results(run_dir: str | os.PathLike) -> dict[str, Any] | None:
    """``results.json`` or None when the run did not finish."""
    path = Path(run_dir) / RESULTS
    return read_json(path, expect=dict) if path.is_file() else None


def read_samples(run_dir: str | os.PathLike) -> list[SampleRecord]:
    path = Path(run_dir) / SAMPLES
    return cast(list[SampleRecord], read_jsonl(path)) if path.is_file() else []  # the lines, as written


def is_finished(run_dir: str | os.PathLike) -> bool:
    return (Path(run_dir) / RESULTS).is_file()


MODEL_CARD = "vrh_organism.json"  # an organism checkpoint's card, beside its config.json (the lab's export)


def read_model_card(checkpoint: str | os.PathLike) -> dict[str, Any] | None:
    """The card of the checkpoint folder a run's config names (``model.path``): its training config and
    command (docs/organism.md); None where there is none (a real checkpoint, a hub id, a folder this machine
    does not have) or it is unreadable or not a JSON object."""
    try:
        card = read_json(Path(checkpoint) / MODEL_CARD)
    except (OSError, ValueError):
        return None
    return card if isinstance(card, dict) else None


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


class Ranking(list):
    """``(layer, head)`` pairs best first: a list that may also be called, so :attr:`HeadScores.ranking` reads as
    the attribute it sits beside (``hs.ranking[:3]``) and as the method it was (``hs.ranking()``,
    ``hs.ranking(scorer)``: another scorer's).

    >>> r = Ranking([(1, 0), (0, 2)]); r[:1], r() == r
    ([(1, 0)], True)
    """

    def __init__(self, heads=(), of: Any = None):
        super().__init__(heads)
        self._of = of  # scorer name -> that scorer's Ranking

    def __call__(self, scorer: str | None = None) -> Ranking:
        return self if scorer is None or self._of is None else self._of(scorer)


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

    def score_map(self, scorer: str | None = None) -> list[list[float]]:
        """The ``[L][H]`` score map of ``scorer`` (default: the primary one) as stored, for readers without
        torch (the report)."""
        return self.variants[scorer or self.scorer]["scores"]

    @property
    def ranking(self) -> Ranking:
        """The primary scorer's ranking, best first, as a list (``hs.ranking[:3]``); called with a scorer's
        name, that scorer's (``hs.ranking("rand1/sum/mean")``; ``hs.ranking()`` as before)."""
        return Ranking(self._ranking(None), of=lambda scorer: Ranking(self._ranking(scorer)))

    def _ranking(self, scorer: str | None) -> list[tuple[int, int]]:
        name = scorer or self.scorer
        if name not in self.variants:
            raise ValueError(f"detection run has no scorer {name!r}; it has {sorted(self.variants)}")
        return [tuple(h) for h in self.variants[name]["ranking"]]

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
    obj = read_json(path, expect=dict)
    problem = head_scores_problem(obj)
    if problem:
        raise ValueError(f"{path} is not head scores vrh wrote: {problem}")
    return HeadScores.from_json(obj)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def head_scores_problem(obj: dict[str, Any]) -> str | None:
    """What is wrong with a ``head_scores.json`` object, in a few words (None: nothing): the fields every reader
    indexes (scorer, layer and head counts, each variant's ``[L][H]`` numbers and its in-range ranking), checked
    before any of them is used.

    >>> head_scores_problem({"scorer": "vrh", "num_layers": 1, "num_heads": 2, "scores": "oops", "ranking": []})
    "variant 'vrh': scores is a string, not 1 rows of 2 numbers"
    """
    from vrh.infra.json_text import kind

    if not isinstance(obj.get("scorer"), str):
        return f"scorer is {kind(obj.get('scorer'))}, not a name"
    n_layers, n_heads = obj.get("num_layers"), obj.get("num_heads")
    if not (_count(n_layers) and _count(n_heads)):
        return f"num_layers / num_heads are {n_layers!r} / {n_heads!r}, not positive integers"
    variants = obj.get("variants") or {obj["scorer"]: {"scores": obj.get("scores"), "ranking": obj.get("ranking")}}
    if not isinstance(variants, dict) or obj["scorer"] not in variants:
        return f"variants is {kind(variants)} without the scorer {obj['scorer']!r}"
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)  # noqa: E731
    for name, v in variants.items():
        shape = f"{n_layers} rows of {n_heads} numbers"
        scores = v.get("scores") if isinstance(v, dict) else None
        if not (isinstance(scores, list) and len(scores) == n_layers and all(
                isinstance(row, list) and len(row) == n_heads and all(number(x) for x in row) for row in scores)):
            return f"variant {name!r}: scores is {kind(scores)}, not {shape}"
        ranking = v.get("ranking")
        if not isinstance(ranking, list) or not all(
                isinstance(h, list) and len(h) == 2 and all(isinstance(i, int) and not isinstance(i, bool) for i in h)
                and 0 <= h[0] < n_layers and 0 <= h[1] < n_heads for h in ranking):
            return f"variant {name!r}: ranking is not a list of [layer, head] pairs inside {n_layers} x {n_heads}"
    return None


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
    with safe_paths.open_write(path.parent, tmp, "wb", fresh=True) as f:  # a planted link there is not written through
        np.savez(f, **arrays)
    safe_paths.replace(path.parent, tmp, path)


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
    causal test (``acc``, ``acc_top``, ``random``, ``acc_random``); :mod:`vrh_lab.organism.emergence`.
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
    path = folder / f"batch-{index:06d}.pt"
    tmp = path.with_name(path.name + ".tmp")
    with safe_paths.open_write(run_dir, tmp, "wb", fresh=True, mkdir=True) as f:  # detect_state/ never a link
        torch.save(dict(state), f)
        f.flush()
        os.fsync(f.fileno())
    safe_paths.replace(run_dir, tmp, path)
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
    if run.world.is_main and folder.is_dir() and not folder.is_symlink():
        for child in folder.iterdir():
            if is_batch_state_file(child):
                safe_paths.unlink(run.path, child)
        if not any(folder.iterdir()):  # anything else in it is not vrh's: left where it is
            safe_paths.rmdir(run.path, folder)
