"""Read run folders for the report, forgivingly.

A report is often built while runs are still going or after one crashed, and from runs written by commands
the report predates. So loading never raises on a run's *content*: a missing or unreadable
``results.json`` / ``head_scores.json`` becomes ``None`` plus a note in ``Run.problems`` that the report
shows. Only a path that is not a run folder at all (no ``config.json``) is an error, because that is a typo.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from vrh import runs


@dataclass
class Run:
    path: Path
    name: str  # display label, unique within one report
    config: dict[str, Any]
    results: dict[str, Any] | None = None
    head_scores: dict[str, Any] | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def command(self) -> str:
        return str(self.config.get("command", "?"))

    @cached_property
    def samples(self) -> list[dict[str, Any]]:
        p = self.path / runs.SAMPLES
        try:
            return runs.read_jsonl(p) if p.exists() else []
        except (OSError, ValueError) as e:
            self.problems.append(f"{runs.SAMPLES}: {e}")
            return []

    @property
    def model(self) -> str:
        return describe_model(self.config.get("model"))

    @property
    def data(self) -> str:
        d = self.config.get("data")
        if isinstance(d, dict):
            d = d.get("path")
        return Path(str(d)).name if d else "–"

    def title(self, detail: str = "") -> str:
        """Figure title: ``name: model on data (detail)``, leaving out whatever the run does not record."""
        what = " on ".join(x for x in (self.model, self.data) if x != "–")
        return f"{self.name}" + (f": {what}" if what else "") + (f" ({detail})" if detail else "")

    @property
    def res(self) -> dict[str, Any]:
        """results.json, or an empty dict when there is none (so renderers can ``.get`` freely)."""
        return self.results if isinstance(self.results, dict) else {}


def describe_model(model: Any) -> str:
    """Short model label: the checkpoint folder's name (+ model type), whatever form config.json holds."""
    if isinstance(model, dict):
        name = Path(str(model.get("path") or model.get("name") or "?")).name
        mt = model.get("model_type")
        return f"{name} ({mt})" if mt and mt not in name else name
    if model is None:
        return "–"
    return Path(str(model)).name or str(model)


def _read(path: Path, problems: list[str]) -> Any:
    if not path.exists():
        return None
    try:
        return runs.read_json(path)
    except (OSError, ValueError) as e:
        problems.append(f"{path.name} unreadable: {e}")
        return None


def load_run(path: str | Path, name: str | None = None) -> Run:
    path = Path(path)
    if not (path / runs.CONFIG).is_file():
        raise FileNotFoundError(f"{path} is not a vrh run folder (no {runs.CONFIG})")
    problems: list[str] = []
    config = _read(path / runs.CONFIG, problems)
    if not isinstance(config, dict):
        problems.append(f"{runs.CONFIG} is not a JSON object")
        config = {}
    run = Run(path=path, name=name or path.name, config=config, problems=problems)
    run.results = _read(path / runs.RESULTS, problems)
    run.head_scores = _read(path / runs.HEAD_SCORES, problems)
    if run.results is None and run.head_scores is None:
        problems.append("no results yet (unfinished or crashed run?)")
    return run


def load_runs(paths: list[str | Path]) -> list[Run]:
    """Runs in the order given; folders sharing a name are labelled ``parent/name``."""
    paths = [Path(p) for p in paths]
    names = [p.resolve().name for p in paths]
    out = []
    for p, n in zip(paths, names):
        if names.count(n) > 1:
            n = f"{p.resolve().parent.name}/{n}"
        while any(r.name == n for r in out):
            n += "'"
        out.append(load_run(p, n))
    return out


# --- formatting shared by every section ---------------------------------------------------------------
def is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def pct(x: Any, digits: int = 1) -> str:
    """A fraction as a percentage string; missing or non-numeric values show as an en dash."""
    return f"{100 * x:.{digits}f}" if is_num(x) else "–"


def pm(mean: Any, std: Any) -> str:
    if not is_num(mean):
        return "–"
    return f"{pct(mean)} ± {pct(std)}" if is_num(std) else pct(mean)


def num(x: Any, fmt: str = ".3g") -> str:
    return format(x, fmt) if is_num(x) else ("–" if x is None else str(x))


def short(value: Any, limit: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def at(seq: Any, i: int) -> Any:
    """``seq[i]`` or None: results lists may be shorter than ``k`` when a run was cut short."""
    return seq[i] if isinstance(seq, list) and i < len(seq) else None
