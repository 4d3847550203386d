"""One registration per extension (issue 34 item 1): a scorer, a task, a benchmark source, an answer rule and a
mask mode, each written in a temporary module that no file of vrh names, reach ``--help``, ``vrh compare``'s
default methods, ``vrh data list``, the data format and the VQA judge -- and leave nothing behind.

The scorer, task, rule and source modules sit in a temporary folder added to their package's ``__path__``: the
registries' discovery must find them as it finds a new file in the package's own folder. The mask mode is a
plugin's module, imported by the test (mask modes register from wherever they are defined)."""

import argparse
import sys
from pathlib import Path

import pytest

import vrh.data.sources
import vrh.scoring
import vrh.tasks
from vrh.analyses import registry as analyses
from vrh.cli import main
from vrh.core import masking
from vrh.data import Sample, answer_rule_registry
from vrh.data.sources import registry as sources
from vrh.scoring import registry as scorers
from vrh.runs import results as results_kinds
from vrh.tasks import base as tasks

SCORER = '''
from vrh.scoring.base import AccumulatingScorer
from vrh.scoring.registry import register_scorer


@register_scorer("throwaway_scorer", compare_order=99, help="a test's scorer")
class ThrowawayScorer(AccumulatingScorer):
    def update(self, rows, info, extra=None):
        self._add(rows.sum(dim=(2, 3)))
'''

TASK = '''
from dataclasses import dataclass
from typing import ClassVar

from vrh.tasks.base import Task, register_task


@register_task
@dataclass(frozen=True)
class ThrowawayTask(Task):
    name: ClassVar[str] = "throwaway_task"
    outcomes: ClassVar[tuple[str, ...]] = ("hit", "miss")
    help: ClassVar[str] = "a test's task"

    def prompt(self, adapter, sample):
        return sample.question

    def judge(self, adapter, sample, text, meta):
        return {**self.record(sample, text), "outcome": "hit" if text else "miss"}
'''

RULE = '''
from vrh.data.answer_rule_registry import register_answer_rule
from vrh.tasks.answer_rules import Verdict


@register_answer_rule("throwaway_rule", benchmark="Throwaway-Bench")
def throwaway_rule(pred, gold):
    return Verdict("correct" if pred.strip() == "yes please" else "wrong", pred.strip())
'''

SOURCE = '''
from vrh.data.sources.registry import Source, register_source

register_source(Source(name="throwaway_source", summary="a test's benchmark, converted from nothing",
                       layout="no files at all", task="vqa", splits=("test",), read_rows=lambda src, split, options: iter(()),
                       convert_row=lambda key, row, ctx: []))
'''

MASK_MODE = '''
from contextlib import contextmanager

from vrh.core.masking import register_mask_mode


@register_mask_mode("throwaway_mode", batchable=False, help="a test's ablation")
@contextmanager
def throwaway_mode(model, adapter, heads):
    yield
'''

PACKAGES = {vrh.scoring: {"throwaway_scorer": SCORER}, vrh.tasks: {"throwaway_task": TASK, "throwaway_rule": RULE},
            vrh.data.sources: {"throwaway_source": SOURCE}}
REGISTRIES = ((scorers, "_METHODS"), (tasks, "_TASKS"), (sources, "_SOURCES"), (masking, "_MODES"),
              (answer_rule_registry, "_RULES"), (analyses, "_ANALYSES"), (results_kinds, "_KINDS"))


def _registered() -> dict[str, tuple[str, ...]]:
    return {"scorers": scorers.scorer_names(), "tasks": tasks.task_names(), "sources": sources.source_names(),
            "mask modes": masking.mask_mode_names(), "answer rules": answer_rule_registry.answer_rule_names(),
            "analyses": tuple(analyses.analyses()), "results kinds": tuple(results_kinds._KINDS)}


@pytest.fixture
def extensions(tmp_path, monkeypatch):
    """The temporary modules in place; every registry a private copy, restored afterwards with the packages'
    paths. Every registry is completed first (a built-in module imported during the test would register into
    the copy alone)."""
    _registered()
    for module, attr in REGISTRIES:
        monkeypatch.setattr(module, attr, dict(getattr(module, attr)))
    for package, files in PACKAGES.items():
        folder = tmp_path / package.__name__
        folder.mkdir()
        for name, code in files.items():
            (folder / f"{name}.py").write_text(code)
        monkeypatch.setattr(package, "__path__", [*package.__path__, str(folder)])
    (tmp_path / "throwaway_mask_mode.py").write_text(MASK_MODE)
    monkeypatch.syspath_prepend(str(tmp_path))
    __import__("throwaway_mask_mode")  # a plugin registering its mode
    yield
    for package, files in PACKAGES.items():
        for name in files:
            sys.modules.pop(f"{package.__name__}.{name}", None)
            if hasattr(package, name):
                delattr(package, name)
    sys.modules.pop("throwaway_mask_mode", None)


def _help(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    return " ".join(capsys.readouterr().out.split())  # argparse wraps lines


def test_each_kind_of_extension_reaches_the_cli_help(extensions, capsys):
    text = _help(capsys, "evaluate")
    assert "throwaway_task (a test's task)" in text  # --task
    assert "throwaway_rule (Throwaway-Bench); vrh's rule for data without one" in text  # --answer-rule: each rule
    assert "'throwaway_mode' a test's ablation" in text and "throwaway_mode}" in text  # --mask-mode help, choices
    for command in ("sweep", "compare", "transfer"):
        assert "'throwaway_mode' a test's ablation" in _help(capsys, command), command


def test_a_registered_scorer_joins_compare_defaults(extensions):
    from vrh.analyses import compare
    from vrh.analyses.compare.settings import DESIGN_SPACE, TOKEN_CHOICE
    from vrh.options import add_options, parse_config

    parser = argparse.ArgumentParser()
    add_options(parser, compare.Config)
    cfg = parse_config(compare.Config, parser.parse_args(["--model", "m", "--data", "d", "--out", "x"]))
    assert cfg.methods[-1] == "throwaway_scorer"  # compare_order 99: after the built-in baselines
    assert cfg.methods[:-1] == DESIGN_SPACE + TOKEN_CHOICE + scorers.compare_baselines()[:-1]
    assert scorers.make_scorer("throwaway_scorer").name == "throwaway_scorer"


def test_a_registered_source_is_listed_and_converts(extensions, capsys, tmp_path):
    assert main(["data", "list"]) == 0
    out = capsys.readouterr().out
    assert "throwaway_source  [vqa; splits test (default test)]" in out
    assert "a test's benchmark, converted from nothing" in out and "layout: no files at all" in out
    assert sources.get_source("throwaway_source").task in _registered()["tasks"]


def test_a_registered_rule_is_a_valid_answer_rule_and_scores(extensions):
    from vrh.tasks import get_task

    sample = Sample(id="q", image_path=Path("x.png"), task="vqa", question="?", answer="yes", answer_rule="throwaway_rule")
    vqa = get_task("vqa")
    assert vqa.judge(None, sample, "yes please", {})["outcome"] == "correct"  # the rule, not the exact match
    assert get_task("vqa", answer_rule="lenient").judge(None, sample, "yes please", {})["outcome"] == "wrong"
    assert get_task("throwaway_task").judge(None, Sample(id="t", image_path=Path("x.png"), task="throwaway_task",
                                                         question="?"), "x", {})["outcome"] == "hit"


def test_no_extension_outlives_its_test():
    """Runs after the tests above (file order): the registries hold only what vrh's own files register."""
    assert not [n for names in _registered().values() for n in names if n.startswith("throwaway")]
    assert not [m for m in sys.modules if m.rpartition(".")[2].startswith("throwaway")]


@pytest.mark.parametrize("package", ["vrh.scoring", "vrh.tasks", "vrh.data.sources"])
def test_no_package_file_names_its_extensions(package):
    """The package's ``__init__`` imports no module of the package that registers an extension: the registry's
    discovery does."""
    import ast

    folder = Path(sys.modules[package].__file__).parent
    init = ast.parse((folder / "__init__.py").read_text())
    imported = {n.module for n in ast.walk(init) if isinstance(n, ast.ImportFrom) and n.module}
    imported |= {f"{n.module}.{a.name}" for n in ast.walk(init) if isinstance(n, ast.ImportFrom) and n.module
                 for a in n.names}
    registrants = {f"{package}.{p.stem}" for p in folder.glob("*.py")
                   if any(word in p.read_text() for word in ("@register_", "register_source(", "register_scorer("))
                   and p.stem not in ("registry", "__init__")}
    assert registrants and not imported & registrants
