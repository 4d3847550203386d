"""Every cell has a folder and a record file of its own (issue 33 item 6): the names that would make two
cells share one are refused when the study is read, naming their line, and a guard refuses any two cells
that still would."""

import re

import pytest

from vrh.study.cells import Cell, check_unique
from vrh.study.kinds import build_cells
from vrh.study.spec import StudyError, load_study

from .conftest import write_study


def _line(err) -> int:
    return int(re.match(r"^.*?\.toml:(\d+): ", str(err)).group(1))


def _line_with(path, text: str) -> int:
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if ln.startswith(text))


def _refused(path, where: str, says: str) -> None:
    with pytest.raises(StudyError) as e:
        load_study(path)
    assert says in str(e.value) and _line(e.value) == _line_with(path, where), str(e.value)


def _with_model(tmp_path, name: str, pair: bool = False):
    path = write_study(tmp_path)
    text = path.read_text().replace('A = "organism:organism_a"',
                                    f'A = "organism:organism_a"\n"{name}" = "organism:organism_b"')
    if pair:
        text = text.replace('pairs = [["A", "B"]]', f'pairs = [["A", "{name}"]]')
    path.write_text(text)
    return path


def test_a_model_named_data_would_write_its_detection_into_a_datasets_folder_and_is_refused(tmp_path):
    """The issue's case: model `data`, benchmarks `world` and `detect_world`: the dataset cell and the
    detection cell were both data/detect_world."""
    path = _with_model(tmp_path, "data")
    path.write_text(path.read_text().replace("[benchmarks.world_refcoco]", "[benchmarks.detect_world]"))
    _refused(path, '"data" = ', "model name 'data' is taken by the study folder's own")


@pytest.mark.parametrize("name", ["transfer", "report", "config.json", "results.json", "Data", "REPORT"])
def test_a_model_may_not_take_a_name_of_the_study_folders_own(tmp_path, name):
    _refused(_with_model(tmp_path, name), f'"{name}" = ', f"model name {name!r} is taken")


@pytest.mark.parametrize("name", ["x_to_B", "to_x", "x_to"])
def test_a_transfer_models_name_may_not_confuse_the_pairs_folder(tmp_path, name):
    """transfer/A_to_B_BENCH: A = "a_to" with B = "b", and A = "a" with B = "to_b", are both a_to_to_b."""
    _refused(_with_model(tmp_path, name, pair=True), f'"{name}" = ', "is in a transfer pair")


def test_such_a_name_outside_the_transfer_pairs_is_fine(tmp_path):
    cells = build_cells(load_study(_with_model(tmp_path, "x_to_y")))
    assert "x_to_y/detect_world" in {c.folder for c in cells}


def test_names_differing_only_in_case_would_share_a_folder_on_macos_and_are_refused(tmp_path):
    _refused(_with_model(tmp_path, "a"), '"a" = ', "model names 'A' and 'a' differ only in case")
    path = write_study(tmp_path)
    path.write_text(path.read_text().replace("[vqa.world_vqa]", "[vqa.World]"))
    _refused(path, "[vqa.World]", "'world' and 'World' differ only in case")


def test_a_name_holding_the_record_separator_is_refused(tmp_path):
    """Records are .study/cells/KIND__MODEL__NAME.json: model a__b on x and model a on b__x would share one."""
    _refused(_with_model(tmp_path, "A__b"), '"A__b" = ', "'__' separates the names")
    path = write_study(tmp_path)
    path.write_text(path.read_text().replace("[vqa.world_vqa]", "[vqa.world__vqa]"))
    _refused(path, "[vqa.world__vqa]", "'__' separates the names")


def _cell(id_: str, folder: str) -> Cell:
    return Cell(id_, id_.split("/")[0], None, folder, {})


@pytest.mark.parametrize("cells, says", [
    ([_cell("data/detect_world", "data/detect_world"), _cell("detect/data/world", "data/detect_world")],
     "share the folder data/detect_world"),
    ([_cell("detect/A/w", "A/detect_w"), _cell("detect/a/w", "a/detect_w")], "share the folder a/detect_w"),
    ([_cell("detect/A/w", "A/x"), _cell("sweep/A/w", "A/x/y")], "is inside cell detect/A/w's"),
    ([_cell("detect/report/w", "report/detect_w")], "the study folder's own entry"),
    ([_cell("detect/a__b/x", "a__b/detect_x"), _cell("detect/a/b__x", "a/detect_b__x")],
     "share the record file detect__a__b__x.json"),
])
def test_the_guard_refuses_cells_that_would_share_a_folder_or_record(cells, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        check_unique(cells)


def test_the_shipped_examples_folders_are_as_before(tmp_path):
    """Existing study folders keep resuming: the example's cell folders are the ones they were."""
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "examples" / "organism_study.toml"
    folders = {c.folder for c in build_cells(load_study(example))}
    assert {"data/world", "A/detect_world", "C_prime/sweep_world_refcoco", "A/crosstask_world_vqa",
            "C/compare_world", "B/stability_world", "transfer/A_to_B_world",
            "transfer/C_prime_to_C_world"} <= folders



@pytest.mark.parametrize("text", ["[1, 2]", "[" * 5000 + "]" * 5000, "not json"])
def test_a_cell_record_that_is_no_json_object_is_no_record(tmp_path, text):
    """A study folder may come from anyone: a record that is a list, nested past the parser or not JSON is no
    record (the cell is redone), not an AttributeError or a RecursionError (issue 45 item 13)."""
    from vrh.study.cells import read_record, record_path

    cell = Cell(id="detect/A/world", kind="detect", model="A", folder="A/detect_world", settings={}, deps=())
    path = record_path(tmp_path, cell)
    path.parent.mkdir(parents=True)
    path.write_text(text)
    assert read_record(tmp_path, cell) is None
