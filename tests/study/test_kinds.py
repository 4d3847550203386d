"""Cell kinds register once (vrh.study.cells.CellKind): a kind registered from a module of its own reaches the
study file's grammar, the plan, the executor and the study's record with no other file edited, and every
registered kind is consistent (its table's defaults and bounds, the same settings type as its command)."""

import importlib
import sys
from pathlib import Path

import pytest

from vrh.study import cells
from vrh.study.cells import cell_kinds, cell_state
from vrh.study.execute import ModelCache, command_line, run_cell, write_study_config
from vrh.study.kinds import build_cells
from vrh.study.spec import StudyError, defaults, load_study, protocol_keys, sections

from .conftest import write_study

TOY_MODULE = '''
from dataclasses import dataclass
from typing import ClassVar

from vrh import runs
from vrh.study import values
from vrh.study.cells import Cell, CellKind, register_cell_kind


@dataclass(frozen=True, kw_only=True)
class ToySettings:
    COMMAND: ClassVar[str] = "toy"
    note: str = "hello"
    repeat: int = 1
    out: str
    resume: bool = False


def run_toy(settings, lm):
    with runs.RunFolder(settings.out, resume=settings.resume) as run:
        run.write_config({"command": settings.COMMAND, "config": {"note": settings.note, "repeat": settings.repeat}})
        run.write_results({"echo": [settings.note] * settings.repeat})


def toy_cells(study):
    if "toy" not in study.protocol:
        return []
    t = study.protocol["toy"]
    return [Cell(f"toy/{b.name}", "toy", None, f"toy_{b.name}", {"note": t.note, "repeat": t.repeat},
                 benchmark=b.name) for b in study.benchmarks]


register_cell_kind(CellKind("toy", toy_cells, table="toy", keys={"note": str, "repeat": int},
                            defaults={"note": "hello"}, rules={"repeat": values.POSITIVE},
                            settings=ToySettings, run=run_toy))
'''


@pytest.fixture
def toy_kind(tmp_path, monkeypatch):
    """Register the toy kind from a module written into a temporary folder; the registry is restored after."""
    monkeypatch.setattr(cells, "_KINDS", dict(cells._KINDS))
    monkeypatch.setattr(cells, "_PLAN", list(cells._PLAN))
    folder = tmp_path / "plugin"
    folder.mkdir()
    (folder / "toy_cell_kind.py").write_text(TOY_MODULE)
    monkeypatch.syspath_prepend(str(folder))
    module = importlib.import_module("toy_cell_kind")
    yield module
    sys.modules.pop("toy_cell_kind", None)


def test_a_kind_registered_from_its_own_module_reaches_the_study_files_keys(tmp_path, toy_kind):
    study = load_study(write_study(tmp_path, extra="\n[toy]\nrepeat = 2\n"))
    assert sections()[-1] == "toy" and protocol_keys()["toy"] == {"note": str, "repeat": int}
    assert defaults()["toy"] == {"note": "hello"}
    assert study.protocol["toy"].note == "hello" and study.protocol["toy"].repeat == 2  # a frozen dataclass
    assert study.protocol["toy"].record() == {"note": "hello", "repeat": 2}

    with pytest.raises(StudyError, match=r"study.toml:\d+: unknown key 'zz' in \[toy\]; allowed: note, repeat"):
        load_study(write_study(tmp_path, extra="\n[toy]\nzz = 1\n"))
    with pytest.raises(StudyError, match="toy.repeat: must be >= 1, got 0"):  # the kind's own bound
        load_study(write_study(tmp_path, extra="\n[toy]\nrepeat = 0\n"))
    with pytest.raises(StudyError, match="toy.note must be str"):
        load_study(write_study(tmp_path, extra="\n[toy]\nnote = 3\n"))


def test_without_the_registration_the_table_is_unknown(tmp_path):
    with pytest.raises(StudyError, match=r"unknown table \[toy\]"):
        load_study(write_study(tmp_path, extra="\n[toy]\nrepeat = 2\n"))


def test_a_registered_kinds_cells_are_planned_run_and_recorded_like_the_built_in_ones(tmp_path, toy_kind):
    study = load_study(write_study(tmp_path, extra="\n[toy]\nrepeat = 2\n"))
    built = build_cells(study)
    toys = [c for c in built if c.kind == "toy"]
    assert [c.id for c in toys] == ["toy/world", "toy/world_refcoco"] and built[-2:] == toys  # last in the plan
    assert all(c.fingerprint for c in toys)
    out = tmp_path / "run"
    assert command_line(toys[0], out) == ["vrh", "toy", "--note", "hello", "--repeat", "2", "--out",
                                          str(out / "toy_world")]

    assert cell_state(out, toys[0]) == ("missing", [])
    run_cell(toys[0], out, ModelCache())  # the kind's library call with its settings value
    assert cell_state(out, toys[0]) == ("done", [])
    import vrh.runs

    assert vrh.runs.read_results(out / "toy_world")["echo"] == ["hello", "hello"]
    write_study_config(study, out, built)
    record = vrh.runs.read_config(out)
    assert "toy_world" in record["subruns"] and "data/world" not in record["subruns"]
    assert {"id": "toy/world", "kind": "toy", "model": None, "benchmark": "world", "folder": "toy_world",
            "source": None} in record["cells"]


def test_a_kind_is_registered_once_with_a_consistent_table(toy_kind):
    from vrh.study.cells import CellKind, register_cell_kind

    with pytest.raises(ValueError, match="registered twice"):
        register_cell_kind(CellKind("toy", lambda study: [], table="other", settings=toy_kind.ToySettings,
                                    run=toy_kind.run_toy))
    with pytest.raises(ValueError, match=r"the table \[toy\] is another kind's"):
        register_cell_kind(CellKind("toy2", lambda study: [], table="toy", settings=toy_kind.ToySettings,
                                    run=toy_kind.run_toy))
    with pytest.raises(ValueError, match=r"keys its table does not have: \['x'\]"):
        register_cell_kind(CellKind("toy3", lambda study: [], table="toy3", keys={"k": int}, defaults={"x": 1},
                                    settings=toy_kind.ToySettings, run=toy_kind.run_toy))
    with pytest.raises(TypeError, match="names its settings type and its library call"):
        register_cell_kind(CellKind("toy4", lambda study: [], settings=toy_kind.ToySettings))
    with pytest.raises(ValueError, match=r"cannot be its table type's fields: \['class', 'record'\]"):
        register_cell_kind(CellKind("toy5", lambda study: [], table="toy5", keys={"record": int, "class": str},
                                    settings=toy_kind.ToySettings, run=toy_kind.run_toy))


# --- properties of every registered kind --------------------------------------------------------------
TABLED = [k for k in cell_kinds().values() if k.table is not None]
RUN_KINDS = [k for k in cell_kinds().values() if k.writes_run_folder]


@pytest.mark.parametrize("kind", TABLED, ids=lambda k: k.name)
def test_each_tables_defaults_have_their_keys_type_and_pass_their_bounds(kind):
    for key, value in kind.defaults.items():
        if value is None:
            continue
        assert isinstance(value, kind.keys[key]), (key, value)
        rule = kind.rules.get(key)
        assert rule is None or rule(value) is None, (key, value, rule(value))


@pytest.mark.parametrize("kind", RUN_KINDS, ids=lambda k: k.name)
def test_a_run_kinds_cells_build_the_same_settings_value_as_its_command(kind):
    """The study runs the command's own library call with the command's own options type: a cell's folder
    is what ``vrh COMMAND`` writes (tests/study/test_commands.py compares the folders)."""
    from vrh.analyses.registry import get_analysis

    assert get_analysis(kind.settings.COMMAND).settings is kind.settings
    assert callable(kind.run)


def test_the_shipped_example_builds_every_cells_settings_value(tmp_path):
    example = Path(__file__).resolve().parents[2] / "examples" / "organism_study.toml"
    built = build_cells(load_study(example))
    for c in built:
        kind = cell_kinds()[c.kind]
        if kind.writes_run_folder:
            settings = kind.configure(c, tmp_path)
            assert isinstance(settings, kind.settings) and settings.out == str(tmp_path / c.folder)
            assert settings.resume  # an interrupted cell continues
