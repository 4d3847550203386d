"""`vrh study` on the command line: plan's states, a bad study file as one line with its line number."""

import pytest

from vrh.cli import main

from .conftest import write_study


def test_plan_lists_every_cell_with_its_state_and_dependencies(small_study, capsys):
    path, out = small_study
    assert main(["study", "plan", str(path), "--out", str(out)]) == 0
    from vrh.study.kinds import build_cells
    from vrh.study.spec import load_study

    lines = capsys.readouterr().out.splitlines()
    n = len(build_cells(load_study(path)))
    assert lines[0].endswith(f": {n} done") and len(lines) == n + 1
    transfer = next(ln for ln in lines if "transfer/A_to_B/world" in ln).split()
    assert transfer[0] == "done" and transfer[-3:] == ["data/world,", "detect/A/world,", "detect/B/world"]


def test_plan_commands_are_vrh_command_lines(small_study, capsys):
    path, out = small_study
    assert main(["study", "plan", str(path), "--out", str(out), "--commands"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "# data/world: prepared by vrh study run"
    assert any(ln.startswith("vrh transfer ") and "--heads-b" in ln for ln in lines)


def test_a_bad_study_file_is_one_line_naming_its_line(tmp_path, capsys):
    path = write_study(tmp_path, ks="[0, 2, 17]")
    assert main(["study", "run", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"vrh study: error: {path}:") and "sweep.ks 17" in err
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_the_study_lines_of_the_readme_and_docs_parse_as_written():
    import re
    import shlex
    from pathlib import Path

    from vrh.cli import build_parser

    root = Path(__file__).resolve().parents[2]
    parser, n = build_parser(), 0
    for page in (root / "README.md", root / "docs" / "study.md"):
        text = re.sub(r"\\\n\s*", " ", page.read_text())  # continuation lines joined
        for line in re.findall(r"^vrh study .*$", text, flags=re.M):
            args = parser.parse_args(shlex.split(line.split(" #")[0])[1:])  # SystemExit on anything invalid
            assert args.command == "study"
            n += 1
    assert n >= 6


@pytest.mark.parametrize("action", ["run", "plan"])  # plan refuses what run would refuse
def test_an_out_folder_that_is_not_a_study_is_refused_untouched(tmp_path, capsys, action):
    path = write_study(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    assert main(["study", action, str(path), "--out", str(other)]) == 2
    assert "is not a vrh study folder" in capsys.readouterr().err
    assert sorted(p.name for p in other.iterdir()) == ["notes.txt"]


def test_the_study_name_cannot_steer_the_terminal(tmp_path, capsys):
    """An escape sequence, a NUL, a BEL and a right-to-left override in the name are printed as escapes."""
    path = write_study(tmp_path)
    path.write_text(path.read_text().replace('name = "small"', 'name = "s\\u001b[2J\\u0000\\u0007\\u202eevil"'))
    assert main(["study", "plan", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("study s\\x1b[2J\\x00\\x07\\u202eevil: ")
    assert not any(ch in out for ch in "\x1b\x00\x07\u202e")
