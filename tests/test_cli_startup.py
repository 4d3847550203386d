"""What ``vrh --help`` and each command's ``--help`` import (issue 46 item 20): the whole parser is built on every
call, so a heavy import in one command's arguments cost every call about 1 s of CPU (``vrh report``'s imported
matplotlib and numpy). Checked on ``sys.modules`` in a fresh process, never on time;
``benchmarks/startup.py`` gives the figure."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("torch", "transformers", "numpy", "matplotlib", "PIL", "scipy", "safetensors", "huggingface_hub")
PROBE = ("import contextlib, io, sys, vrh.cli\n"
         "with contextlib.redirect_stdout(io.StringIO()):\n"
         "    try:\n        vrh.cli.main(sys.argv[1:])\n    except SystemExit:\n        pass\n"
         f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))")


def _heavy_after(tmp_path, *argv):
    out = subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=tmp_path, capture_output=True, text=True,
                         check=True)
    return out.stdout.split()


def _commands():
    from vrh.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return sorted(sub.choices)


@pytest.mark.parametrize("argv", [["--help"], ["report", "--help"], ["detect", "--help"], ["demo", "--help"]],
                         ids=lambda a: " ".join(a))
def test_help_imports_none_of_the_heavy_libraries(tmp_path, argv):
    assert _heavy_after(tmp_path, *argv) == []


@pytest.mark.parametrize("argv", [["models"], ["models", "--json"]], ids=lambda a: " ".join(a))
def test_listing_the_families_imports_none_of_the_heavy_libraries(tmp_path, argv):
    """``vrh models`` imports every adapter module to list the families: they import torch (and numpy) only inside
    the functions that run a model or read a processor's outputs (it cost about 2 s of CPU when they did so at
    import)."""
    assert _heavy_after(tmp_path, *argv) == []


def test_every_commands_help_imports_neither_torch_nor_transformers(tmp_path):
    """One process per command would cost a minute; one process building every command's help in turn."""
    code = ("import contextlib, io, sys, vrh.cli\n"
            f"for name in {_commands()!r}:\n"
            "    with contextlib.redirect_stdout(io.StringIO()):\n"
            "        try:\n            vrh.cli.main([name, '--help'])\n        except SystemExit:\n            pass\n"
            "print(' '.join(m for m in ('torch', 'transformers', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert out.stdout.split() == []


def test_the_report_builders_still_answer_from_the_package(tmp_path):
    import vrh.report
    from vrh.report import add_arguments, build_report, report_main
    from vrh.report import build

    assert build_report is build.build_report and report_main is build.report_main
    assert add_arguments is build.add_arguments
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        vrh.report.nope  # noqa: B018


def test_the_startup_benchmark_prints_its_figure_as_json(tmp_path):
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "startup.py"
    out = subprocess.run([sys.executable, str(script), "--repeat", "1"], cwd=tmp_path, capture_output=True,
                         text=True, check=True).stdout.splitlines()
    result = json.loads(out[-1])
    assert set(result["cpu_s"]) == {"python -c pass", "vrh --help", "vrh detect --help", "vrh models"}
    assert result["heavy_imports"] == {"vrh --help": [], "vrh detect --help": [], "vrh models": ["rich"]}
