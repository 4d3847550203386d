"""A cell's folder is what the equivalent vrh command line writes (`vrh study plan --commands`)."""

import shutil

from vrh.cli import main
from vrh.study.execute import command_line
from vrh.study.kinds import build_cells
from vrh.study.spec import load_study

from .folders import folder_content


def test_a_cells_command_line_rewrites_the_same_folder(small_study, tmp_path):
    path, reference = small_study
    out = tmp_path / "study"
    shutil.copytree(reference, out)
    cell = next(c for c in build_cells(load_study(path)) if c.id == "sweep/B/world")
    shutil.rmtree(out / cell.folder)
    argv = command_line(cell, out)
    assert argv[:2] == ["vrh", "sweep"]
    assert main(argv[1:]) == 0
    assert folder_content(out / cell.folder, out) == folder_content(reference / cell.folder, reference)
