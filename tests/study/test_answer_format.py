"""A study model's ``answer_format``: every cell of that model runs with it (its command line says
``--answer-format``), and the cells of a model without one keep the settings (and fingerprints) they had."""

from pathlib import Path

from vrh.study.execute import check_configs, command_line
from vrh.study.kinds import build_cells
from vrh.study.spec import load_study

from .conftest import write_study


def test_a_models_answer_format_goes_to_each_of_its_cells_and_only_to_them(tmp_path):
    path = write_study(tmp_path)
    path.write_text(path.read_text().replace('B = { model = "organism:organism_b" }',
                                             'B = { model = "organism:organism_b", answer_format = "pixels" }'))
    study = load_study(path)
    assert study.model("B").answer_format == "pixels" and study.model("A").answer_format is None
    cells = [c for c in build_cells(study) if c.model is not None]
    check_configs(cells, Path("out"))  # each cell's settings value takes the option
    for c in cells:
        assert c.settings.get("answer_format") == ("pixels" if c.model == "B" else None), c.id
        assert ("answer_format" in c.settings) == (c.model == "B")  # A's settings as before: same fingerprints
    line = command_line(next(c for c in cells if c.model == "B" and c.kind == "sweep"), Path("out"))
    assert line[line.index("--answer-format") + 1] == "pixels"
