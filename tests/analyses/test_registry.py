"""An analysis is one folder (issue 47 item 1): a throwaway analysis in a temporary package of its own, named in
VRH_PLUGINS and found by the analysis registry's discovery, reaches ``vrh --help``, its own ``--help``, a run
folder, ``vrh report``, the study file's grammar and the tests that list the analyses, with no file of vrh edited;
without it, nothing of it is left anywhere."""

import sys

import pytest

from vrh import runs
from vrh.analyses import registry
from vrh.cli import main
from vrh.infra import discovery
from vrh.runs import results as results_kinds
from vrh.study import cells

PACKAGE = "throwaway_analysis"
NAME = "throwaway-count"
FILES = {
    "__init__.py": f'''
from vrh.analyses.registry import Analysis, register_analysis
from {PACKAGE}.settings import ThrowawaySettings

register_analysis(Analysis(
    "{NAME}", "a test's throwaway analysis: counts to --n", ThrowawaySettings, place=175,
    run="{PACKAGE}.analysis:run_count", results="{PACKAGE}.results:ThrowawayResults",
    report=((95, "{PACKAGE}.section:count_section"),), cell_kinds=("{PACKAGE}.cell",),
    example_argv=("--n", "2"), example_results={{"n": 2, "counted": [1, 2]}}))
''',
    "settings.py": f'''
from dataclasses import dataclass
from typing import ClassVar

from vrh.options import RunOptions, option


@dataclass(frozen=True, kw_only=True)
class ThrowawaySettings(RunOptions):
    COMMAND: ClassVar[str] = "{NAME}"

    model: str = option(help="checkpoint (not loaded: the analysis only counts)")
    n: int = option(3, help="how far the throwaway counts")
''',
    "results.py": f'''
from dataclasses import dataclass
from typing import ClassVar

from vrh.runs.results import RunResults, results_kind


@results_kind
@dataclass(frozen=True, kw_only=True)
class ThrowawayResults(RunResults):
    COMMAND: ClassVar[str] = "{NAME}"
    n: int | None
    counted: list[int] | None
''',
    "analysis.py": f'''
from vrh import runs
from vrh.options import config_record
from {PACKAGE}.results import ThrowawayResults


def run_count(cfg, lm=None):
    with runs.RunFolder(cfg.out, overwrite=cfg.overwrite, resume=cfg.resume) as run:
        run.write_config({{"command": "{NAME}", "config": config_record(cfg)}})
        res = ThrowawayResults(n=cfg.n, counted=list(range(1, cfg.n + 1)))
        run.write_results(res.to_json())
    return res
''',
    "section.py": f'''
from vrh.report.document import Section, Text


def count_section(runs, k):
    counts = [r for r in runs if r.command == "{NAME}" and r.results]
    if not counts:
        return None
    s = Section("Throwaway counts")
    for run in counts:
        s.add(Text(f"{{run.name}} counted {{run.res.counted}}"))
    return s
''',
    "cell.py": f'''
from vrh.analyses.registry import get_analysis
from vrh.study.cells import Cell, CellKind, register_cell_kind


def count_cells(study):
    if "throwaway_count" not in study.protocol:
        return []
    t = study.protocol["throwaway_count"]
    return [Cell(f"throwaway_count/{{b.name}}", "throwaway_count", None, f"count_{{b.name}}",
                 {{"model": "none", "n": t.n}}, benchmark=b.name) for b in study.benchmarks]


analysis = get_analysis("{NAME}")
register_cell_kind(CellKind("throwaway_count", count_cells, table="throwaway_count", keys={{"n": int}},
                            defaults={{"n": 3}}, settings=analysis.settings, run=analysis.call))
''',
}


def _forget_the_package():
    discovery._PLUGINS_DONE.discard(PACKAGE)
    for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
        del sys.modules[name]


@pytest.fixture
def throwaway(tmp_path, monkeypatch):
    """The throwaway package on sys.path and in VRH_PLUGINS; every registry it registers into a private copy
    (each completed first), restored afterwards."""
    import vrh.study.spec  # noqa: F401  (the built-in cell kinds registered)

    registry.analyses()
    monkeypatch.setattr(registry, "_ANALYSES", dict(registry._ANALYSES))
    monkeypatch.setattr(results_kinds, "_KINDS", dict(results_kinds._KINDS))
    monkeypatch.setattr(cells, "_KINDS", dict(cells._KINDS))
    monkeypatch.setattr(cells, "_PLAN", list(cells._PLAN))
    folder = tmp_path / "plugins" / PACKAGE
    folder.mkdir(parents=True)
    for name, text in FILES.items():
        (folder / name).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path / "plugins"))
    monkeypatch.setenv(discovery.PLUGIN_ENV, PACKAGE)
    yield
    _forget_the_package()


def _help(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    return " ".join(capsys.readouterr().out.split())  # argparse wraps lines


def test_it_reaches_vrh_help_and_its_own_help(throwaway, capsys):
    assert f"{NAME} a test's throwaway analysis: counts to --n" in _help(capsys)
    own = _help(capsys, NAME)
    assert "--model MODEL" in own and "how far the throwaway counts (default: 3)" in own and "--out OUT" in own


def test_it_writes_its_run_folder_and_the_report_draws_its_section(throwaway, tmp_path, capsys):
    run = tmp_path / "count"
    assert main([NAME, "--model", "m", "--n", "3", "--out", str(run)]) == 0
    assert runs.read_config(run)["command"] == NAME
    assert {k: v for k, v in runs.read_results(run).items() if k != "schema_version"} == {"n": 3, "counted": [1, 2, 3]}
    assert main(["report", str(run), "--out", str(tmp_path / "report")]) == 0
    md = (tmp_path / "report" / "report.md").read_text()
    assert "## Throwaway counts" in md and r"count counted \[1, 2, 3\]" in md and "Other runs" not in md


def test_its_cell_kind_joins_the_study_files_grammar_and_plan(throwaway, tmp_path):
    from tests.study.conftest import write_study
    from vrh.study.execute import command_line
    from vrh.study.kinds import build_cells
    from vrh.study.spec import load_study

    study = load_study(write_study(tmp_path, extra="\n[throwaway_count]\nn = 2\n"))
    assert study.protocol["throwaway_count"].n == 2
    counted = [c for c in build_cells(study) if c.kind == "throwaway_count"]
    assert [c.id for c in counted] == ["throwaway_count/world", "throwaway_count/world_refcoco"]
    assert command_line(counted[0], tmp_path / "s") == ["vrh", NAME, "--model", "none", "--n", "2", "--out",
                                                        str(tmp_path / "s" / "count_world")]


def test_the_tests_that_list_the_analyses_list_it(throwaway, tmp_path):
    from tests.commands.test_locked_out import _argv, _commands_with_a_model_and_an_out
    from tests.test_run_results import (files, test_every_command_that_writes_results_has_a_kind,
                                        test_every_kind_writes_back_what_it_read_key_for_key_in_order)

    assert NAME in _commands_with_a_model_and_an_out() and _argv(NAME, None, None, tmp_path) == ["--n", "2"]
    assert files()[NAME] == {"n": 2, "counted": [1, 2]}
    test_every_command_that_writes_results_has_a_kind()
    test_every_kind_writes_back_what_it_read_key_for_key_in_order(NAME, files()[NAME])


def test_without_the_folder_nothing_of_it_is_left(tmp_path, capsys):
    """Runs after the tests above (file order): the package is gone from VRH_PLUGINS and sys.modules."""
    from tests.study.conftest import write_study
    from vrh.study.spec import StudyError, load_study

    _forget_the_package()
    assert NAME not in registry.analyses() and NAME not in _help(capsys)
    with pytest.raises(SystemExit):
        main([NAME, "--out", str(tmp_path / "x")])
    assert "invalid choice" in capsys.readouterr().err
    with runs.RunFolder(tmp_path / "count") as run:  # a run folder it left: an "Other run" of the report
        run.write_config({"command": NAME})
        run.write_results({"n": 1, "counted": [1]})
    assert main(["report", str(tmp_path / "count"), "--out", str(tmp_path / "report")]) == 0
    assert "Other runs" in (tmp_path / "report" / "report.md").read_text()
    with pytest.raises(StudyError, match=r"unknown table \[throwaway_count\]"):
        load_study(write_study(tmp_path, extra="\n[throwaway_count]\nn = 2\n"))
