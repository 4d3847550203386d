"""The study file: one TOML file that declares the paper's matrix (models x grounding benchmarks x VQA sets
x protocol), read into frozen values and checked before any model loads.

Grammar (every table and key; anything else is refused with its line)::

    [study]          name, device, dtype, batch_size, max_new_tokens, threads, share_vision, share_prefix
    [models]         NAME = "hub id | local folder | organism:NAME"   or   NAME = { model = ..., adapter = ...,
                                                                                 answer_format = ... }
    [benchmarks.NAME]  one of: data = "converted.jsonl"
                             | source = "refcoco", snapshot = "folder", split = "val", limit = N
                             | world = "grounding", n = N, seed = S [, layout = "refcoco"]
    [vqa.NAME]       the same kinds (task vqa): data = ... | source = ... | world = "vqa", n, seed
    [detection]      n, n_eval, scorers, seed
    [sweep]          ks, seeds, mask_mode, n, benchmarks, models
    [crosstask]      k, seeds, benchmark (whose heads), models
    [compare]        ks, methods, seeds, n, benchmark, models
    [transfer]       k, seeds, benchmark, pairs = "auto" | [["A", "B"], ...], both_directions
    [stability]      k, n_values, bootstrap, benchmark, models
    [dpo_pairs]      k, n, benchmark, models

The protocol tables (``[detection]`` on) are the cell kinds' (:mod:`vrh.study.kinds`): each kind registers its
table with its keys, defaults and bounds (:class:`vrh.study.cells.CellKind`), and :func:`sections`,
:func:`protocol_keys` and :func:`defaults` are read from the registrations. A protocol table that is absent
makes no cells of its kind (``[detection]`` applies with its defaults). ``models`` in a protocol table
restricts it to those models (default: all). Relative paths are relative to the study file's folder.

Why the checks run here: a study is hours of GPU time, so a typo, a missing file or a k that leaves no room
for k random heads (:func:`vrh.experiments.conditions.check_room`, on each model's grid read from its
``config.json``, not from its weights) must fail in a second, naming the line of the study file. So must
every value a command would refuse at run time (:mod:`vrh.study.values`), a name that would give two cells
one folder (the rules at :data:`RESERVED_MODEL_NAMES`), and each cell's settings value (the command's
options, :func:`vrh.study.checks.check_cells`): ``vrh study plan`` refuses what ``vrh study run`` would.

Transfer pairs ``"auto"``: two models share a language-model backbone when their LM configs agree on the
architecture (model type, layers, heads, KV heads, hidden and intermediate sizes, vocabulary size) and their
tokenizers have the same vocabulary (:mod:`vrh.study.backbones`). Same shape alone is not enough: models
that share no weights can share a shape (organisms A and C do), so the rule is only as good as the
checkpoints' configs; give ``pairs`` explicitly when you know better.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vrh.infra.console import printable
from vrh.options import GenerationOptions, ModelOptions, ShareOptions
from vrh.study import kinds as _kinds  # noqa: F401  (registers the built-in cell kinds)
from vrh.study.cells import STUDY_ENTRIES, Table, study_tables
from vrh.study.datasets import DatasetSpec
from vrh.study.values import RULES

BASE_SECTIONS = ("study", "models", "benchmarks", "vqa")  # then one protocol table per cell kind that has one
STUDY_KEYS = {"name": str, "device": str, "dtype": str, "batch_size": int, "max_new_tokens": int, "threads": int,
              "share_vision": bool, "share_prefix": bool}
MODEL_KEYS = {"model": str, "adapter": str, "answer_format": str}
DATASET_KEYS = {"data": str, "source": str, "snapshot": str, "split": str, "limit": int, "world": str, "n": int,
                "seed": int, "layout": str}
WORLD_LAYOUTS = ("refcoco",)  # published layouts the synthetic world can be written in (vrh.study.datasets)
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")  # a short name becomes a folder name
# Why these name rules: every cell's folder and record file must be its own (vrh.study.cells.check_unique).
# A model's folder sits beside the study folder's own entries, so it may not take their names;
# record files are KIND__MODEL__NAME.json, so a name holds no "__"; and names that differ only in case
# would share a folder on a case-insensitive filesystem (macOS, Windows).
RESERVED_MODEL_NAMES = ("data", "transfer", *STUDY_ENTRIES)
RECORD_SEPARATOR = "__"
MAX_NESTING = 64  # brackets deeper than this in a study file are a broken or hostile file, not a study


class StudyError(ValueError):
    """A study file that cannot run; the message starts with ``FILE:LINE:``."""


@dataclass(frozen=True)
class ModelSpec:
    name: str
    model: str  # hub id, absolute local folder, or organism:NAME
    adapter: str | None = None
    answer_format: str | None = None  # --answer-format of every cell of this model (None: the family's first)


@dataclass(frozen=True)
class RunSettings:
    """``[study]``'s run settings, each cell's model options; what the file does not write is the commands'
    own default (every cell runs with it)."""

    device: str = ModelOptions.device
    dtype: str = ModelOptions.dtype
    batch_size: int = GenerationOptions.batch_size
    max_new_tokens: int = GenerationOptions.max_new_tokens
    threads: int | None = ModelOptions.threads
    share_vision: bool = ShareOptions.share_vision  # the masking cells' work sharing (exact; not fingerprinted)
    share_prefix: bool = ShareOptions.share_prefix


@dataclass(frozen=True)
class Study:
    path: Path
    name: str
    models: tuple[ModelSpec, ...]
    benchmarks: tuple[DatasetSpec, ...]
    vqa: tuple[DatasetSpec, ...]
    protocol: dict[str, Table]  # table name -> its value, defaults filled (only the tables present)
    run: RunSettings = field(default_factory=RunSettings)
    grids: dict[str, tuple[int, int]] = field(default_factory=dict)  # model -> LM (layers, heads), from config
    pairs: tuple[tuple[str, str], ...] = ()  # transfer (A, B): A's heads masked in B, both directions resolved

    def model(self, name: str) -> ModelSpec:
        return next(m for m in self.models if m.name == name)

    def dataset(self, name: str) -> DatasetSpec:
        return next(d for d in (*self.benchmarks, *self.vqa) if d.name == name)


def sections() -> tuple[str, ...]:
    """Every table a study file may hold: the study's own, then each registered cell kind's
    (:func:`vrh.study.cells.study_tables`, so a kind registered later is read with no edit here)."""
    return (*BASE_SECTIONS, *study_tables())


def protocol_keys() -> dict[str, dict[str, Any]]:
    """Protocol table -> its keys and their TOML types, from the cell kinds' registrations."""
    return {table: dict(kind.keys) for table, kind in study_tables().items()}


def defaults() -> dict[str, dict[str, Any]]:
    """Protocol table -> the values of the keys the file does not write."""
    return {table: dict(kind.defaults) for table, kind in study_tables().items()}


# --- line numbers -------------------------------------------------------------------------------------
def line_of(text: str, keys: tuple[str, ...]) -> int:
    """1-based line of the key path ``keys`` in the TOML ``text`` (a table header ``[a.b]`` or a
    ``key = ...`` line under it, or inside an inline table on one line); the closest enclosing line found
    when the exact key is not written (a default), 1 when nothing is.

    >>> line_of("[study]\\nname = 'x'\\n[models]\\nA = { model = 'm' }\\n", ("models", "A", "model"))
    4
    """
    lines = text.splitlines()
    header = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
    best, depth = 1, 0
    for i in range(len(keys), 0, -1):  # the longest table header that is a prefix of the path
        want = ".".join(keys[:i])
        hit = next((n for n, ln in enumerate(lines) if (m := header.match(ln)) and _unquote(m.group(1)) == want),
                   None)
        if hit is not None:
            best, depth = hit + 1, i
            break
    rest = keys[depth:]
    start = best if depth else 0
    for i, key in enumerate(rest):
        pat = re.compile(rf"(^|[{{,\s])\"?{re.escape(key)}\"?\s*=")
        # the first key is looked for in the table, a deeper one only on its parent's line (an inline table)
        span = range(start, len(lines)) if i == 0 else range(start, start + 1)
        found = False
        for n in span:
            if n > start and depth and header.match(lines[n]):
                break
            if pat.search(lines[n]):
                best, start, found = n + 1, n, True
                break
        if not found:
            break
    return best


def _unquote(dotted: str) -> str:
    return ".".join(p.strip().strip('"').strip("'") for p in dotted.split("."))


# --- reading ------------------------------------------------------------------------------------------
def refuse(study: Study, keys: tuple[str, ...], message: str) -> StudyError:
    """A :class:`StudyError` at the line of ``keys`` in ``study``'s file, for a check made after reading."""
    return _Reader(study.path, study.path.read_text()).fail(keys, message)


def check_device_here(study: Study) -> None:
    """``[study].device`` is usable on this machine (a CUDA device on a CPU-only torch, an index beyond the
    GPUs present are refused): for ``vrh study run`` when the cells run here, before anything is written.
    Not part of :func:`load_study`: a study may be planned, or its jobs submitted, where it does not run."""
    from vrh.models.loading import check_device

    try:
        check_device(study.run.device)
    except ValueError as e:
        raise refuse(study, ("study", "device"), str(e).replace("--device", "study.device", 1)) from None


class _Reader:
    def __init__(self, path: Path, text: str):
        self.path, self.text = path, text

    def fail(self, keys: tuple[str, ...], message: str) -> StudyError:
        # printable: a value quoted from the file must not steer the terminal
        return StudyError(printable(f"{self.path}:{line_of(self.text, keys)}: {message}"))

    def table(self, value: Any, keys: tuple[str, ...]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(keys, f"[{'.'.join(keys)}] must be a table")
        return value

    def check_keys(self, table: dict[str, Any], allowed: dict[str, Any], keys: tuple[str, ...]) -> None:
        for key, value in table.items():
            if key not in allowed:
                raise self.fail((*keys, key), f"unknown key {key!r} in [{'.'.join(keys)}]; allowed: "
                                              + ", ".join(sorted(allowed)))
            want = allowed[key]
            if isinstance(value, bool) and want is not bool:
                ok = False
            else:
                ok = isinstance(value, want)
            if not ok:
                names = " or ".join(t.__name__ for t in (want if isinstance(want, tuple) else (want,)))
                raise self.fail((*keys, key), f"{'.'.join((*keys, key))} must be {names}, got {value!r}")

    def path_value(self, value: str, keys: tuple[str, ...], must: str = "exist") -> str:
        p = Path(value).expanduser()
        p = p if p.is_absolute() else (self.path.parent / p)
        if not p.exists():
            raise self.fail(keys, f"{'.'.join(keys)}: {p} does not {must}")
        return str(p.resolve())

    def check_values(self, table: dict[str, Any], rules: dict[str, Any], keys: tuple[str, ...]) -> None:
        """Each written value against its rule (:data:`vrh.study.values.RULES`, a cell kind's ``rules``)."""
        for key, value in table.items():
            rule = rules.get(key)
            problem = rule(value) if rule is not None else None
            if problem:
                raise self.fail((*keys, key), f"{'.'.join((*keys, key))}: {problem}")


def load_study(path: str | Path) -> Study:
    """Read and check the study file ``path`` (TOML); raises :class:`StudyError` naming the line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"study file {path} not found")
    text = path.read_text()
    r = _Reader(path, text)
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise StudyError(printable(f"{path}: not valid TOML: {e}")) from None
    except RecursionError:  # tomllib recurses once per nested array or inline table
        where = deep_line(text)
        raise StudyError(printable(f"{path}:{'' if where is None else f'{where}:'} values nested too deeply to "
                                   f"read (more than {MAX_NESTING} levels of [ ] or {{ }}; a study needs 2)")) from None
    known = sections()
    for key in raw:
        if key not in known:
            raise r.fail((key,), f"unknown table [{key}]; a study has " + ", ".join(f"[{s}]" for s in known))
    st = r.table(raw.get("study", {}), ("study",))
    r.check_keys(st, STUDY_KEYS, ("study",))
    r.check_values(st, RULES["study"], ("study",))
    run = RunSettings(**{k: v for k, v in st.items() if k != "name"})
    models = _models(r, raw)
    benchmarks = _datasets(r, raw, "benchmarks", "grounding")
    vqa = _datasets(r, raw, "vqa", "vqa")
    if not benchmarks:
        raise r.fail(("benchmarks",), "a study needs at least one grounding benchmark ([benchmarks.NAME])")
    taken: dict[str, DatasetSpec] = {}
    for d in (*benchmarks, *vqa):
        other = taken.get(d.name.casefold())
        if other is not None and other.name == d.name:
            raise r.fail((("vqa" if d.task == "vqa" else "benchmarks"), d.name),
                         f"{d.name!r} names both a benchmark and a VQA set; names must differ")
        if other is not None:
            raise r.fail((("vqa" if d.task == "vqa" else "benchmarks"), d.name),
                         f"{other.name!r} and {d.name!r} differ only in case: their folders would be one on a "
                         "case-insensitive filesystem (macOS, Windows); rename one")
        taken[d.name.casefold()] = d
    protocol = {}
    for name, kind in study_tables().items():
        if name not in raw and not kind.always:
            continue
        table = r.table(raw.get(name, {}), (name,))
        r.check_keys(table, kind.keys, (name,))
        r.check_values(table, kind.rules, (name,))
        protocol[name] = kind.read_table(table)
    study = Study(path=path.resolve(), name=st.get("name", path.stem), models=models, benchmarks=benchmarks,
                  vqa=vqa, protocol=protocol, run=run)
    from vrh.study.checks import check_cells, check_study  # the checks that need vrh's registries and configs

    grids, pairs = check_study(study, r)
    study = dataclasses.replace(study, grids=grids, pairs=pairs)
    check_cells(study, r)
    return study


def deep_line(text: str, limit: int = MAX_NESTING) -> int | None:
    """The 1-based line where brackets (``[``, ``{``; outside strings and comments) first nest deeper than
    ``limit`` in the TOML ``text``; None when they never do.

    >>> deep_line("a = 1\\nb = [[[\\n'[[[['\\n]]]", limit=2), deep_line("[t]\\nx = [[1]] # [[[", limit=2)
    (2, None)
    """
    depth, line, i, n = 0, 1, 0, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
        elif c == "#":
            i = text.find("\n", i)
            i = n if i < 0 else i
            continue
        elif text.startswith(('"""', "'''"), i):
            end = text.find(text[i:i + 3], i + 3)
            end = n if end < 0 else end + 3
            line += text.count("\n", i, end)
            i = end
            continue
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] not in (c, "\n"):
                j += 2 if c == '"' and text[j] == "\\" else 1
            i = j + 1 if j < n and text[j] == c else j
            continue
        elif c in "[{":
            depth += 1
            if depth > limit:
                return line
        elif c in "]}":
            depth = max(0, depth - 1)
        i += 1
    return None


def _models(r: _Reader, raw: dict[str, Any]) -> tuple[ModelSpec, ...]:
    table = r.table(raw.get("models", {}), ("models",))
    if not table:
        raise r.fail(("models",), "a study needs at least one model ([models] NAME = \"hub id or folder\")")
    out = []
    for name, value in table.items():
        keys = ("models", name)
        if not NAME_RE.match(name):
            raise r.fail(keys, f"model name {name!r}: letters, digits, '_', '.', '-' only (it names folders)")
        if name.casefold() in RESERVED_MODEL_NAMES:
            raise r.fail(keys, f"model name {name!r} is taken by the study folder's own "
                               + ", ".join(RESERVED_MODEL_NAMES) + " (a model's cells go in a folder of its name); "
                               "rename the model")
        _check_separator(r, name, keys)
        twin = next((m.name for m in out if m.name.casefold() == name.casefold()), None)
        if twin is not None:
            raise r.fail(keys, f"model names {twin!r} and {name!r} differ only in case: their folders would be one "
                               "on a case-insensitive filesystem (macOS, Windows); rename one")
        value = {"model": value} if isinstance(value, str) else r.table(value, keys)
        r.check_keys(value, MODEL_KEYS, keys)
        if "model" not in value:
            raise r.fail(keys, f"[models.{name}] needs model = \"hub id, local folder or organism:NAME\"")
        out.append(ModelSpec(name=name, model=_model_ref(r, value["model"], (*keys, "model")),
                             adapter=value.get("adapter"), answer_format=value.get("answer_format")))
    return tuple(out)


def _model_ref(r: _Reader, model: str, keys: tuple[str, ...]) -> str:
    """organism:NAME must resolve; a value that looks like a path (starts with . / ~, or exists) must be a
    checkpoint folder; anything else is a hub id."""
    if model == "organism" or model.startswith("organism:"):
        from vrh.models.loading import resolve_model_path

        try:
            resolve_model_path(model, materialize=False)
        except FileNotFoundError as e:
            raise r.fail(keys, str(e)) from None
        return model
    p = Path(model).expanduser()
    local = model.startswith((".", "/", "~")) or (r.path.parent / p).exists()
    if not local:
        return model
    folder = Path(r.path_value(model, keys))
    if not (folder / "config.json").is_file():
        raise r.fail(keys, f"{'.'.join(keys)}: {folder} is not a checkpoint folder (no config.json)")
    return str(folder)


def _datasets(r: _Reader, raw: dict[str, Any], section: str, task: str) -> tuple[DatasetSpec, ...]:
    out = []
    for name, value in r.table(raw.get(section, {}), (section,)).items():
        keys = (section, name)
        if not NAME_RE.match(name):
            raise r.fail(keys, f"name {name!r}: letters, digits, '_', '.', '-' only (it names folders)")
        _check_separator(r, name, keys)
        value = r.table(value, keys)
        r.check_keys(value, DATASET_KEYS, keys)
        kinds = [k for k in ("data", "source", "world") if k in value]
        if len(kinds) != 1:
            raise r.fail(keys, f"[{section}.{name}] needs exactly one of data = \"file.jsonl\", source = \"NAME\" "
                               f"(with snapshot), world = \"{task}\"; got {kinds or 'none'}")
        kind = kinds[0]
        allowed = {"data": {"data"}, "source": {"source", "snapshot", "split", "limit"},
                   "world": {"world", "n", "seed", "layout"}}[kind]
        for key in value:
            if key not in allowed:
                raise r.fail((*keys, key), f"{key!r} does not apply to a {kind} entry; it takes "
                                           + ", ".join(sorted(allowed)))
        r.check_values(value, RULES["dataset"], keys)
        spec = dict(value)
        if kind == "data":
            spec["data"] = r.path_value(value["data"], (*keys, "data"))
        elif kind == "source":
            if "snapshot" not in value:
                raise r.fail(keys, f"[{section}.{name}] source = {value['source']!r} needs snapshot = \"folder\"")
            spec["snapshot"] = r.path_value(value["snapshot"], (*keys, "snapshot"))
            if _too_wide(Path(spec["snapshot"])):
                raise r.fail((*keys, "snapshot"), f"{section}.{name}.snapshot {spec['snapshot']} is a filesystem root "
                                                  "or holds your home folder: converting reads every file under "
                                                  "it; give the dataset's own folder")
        else:
            if value["world"] != task:
                raise r.fail((*keys, "world"), f"world = {value['world']!r} in [{section}]: must be {task!r}")
            for key in ("n", "seed"):
                if key not in value:
                    raise r.fail(keys, f"[{section}.{name}] world needs {key} = ...")
            if value.get("layout") is not None and (task != "grounding" or value["layout"] not in WORLD_LAYOUTS):
                raise r.fail((*keys, "layout"), f"layout {value['layout']!r}: the world is written in a "
                                                f"grounding layout, one of {list(WORLD_LAYOUTS)}")
            spec.pop("world")
        out.append(DatasetSpec(name=name, task=task, kind=kind, **spec))
    return tuple(out)


def _check_separator(r: _Reader, name: str, keys: tuple[str, ...]) -> None:
    if RECORD_SEPARATOR in name:
        raise r.fail(keys, f"name {name!r}: {RECORD_SEPARATOR!r} separates the names in the study's record files "
                           "(.study/cells/KIND__MODEL__NAME.json), so a name may not hold it")


def _too_wide(folder: Path) -> bool:
    """Whether ``folder`` is a filesystem root, or the home folder or one above it (a snapshot there would
    be a walk of the whole disk or of everything the user has)."""
    if folder.parent == folder:
        return True
    try:
        home = Path.home().resolve()
    except (RuntimeError, OSError):  # no home folder known
        return False
    return folder == home or folder in home.parents
