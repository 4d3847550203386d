"""``[study]``'s ``share_vision`` / ``share_prefix``: turned off, every masking cell runs with the share off (its
command line says ``--no-share-...``), detection cells are untouched, and no cell's fingerprint changes (the
shares are exact: a finished cell is not run again); left on, the cells' settings are what they were."""

from pathlib import Path

import pytest

from vrh.study.execute import check_configs, command_line
from vrh.study.kinds import build_cells
from vrh.study.spec import StudyError, load_study

from .conftest import write_study


def _cells(path):
    return [c for c in build_cells(load_study(path)) if c.model is not None]


def test_a_share_turned_off_reaches_every_masking_cell_and_no_fingerprint(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    default = _cells(write_study(tmp_path / "a"))
    path = write_study(tmp_path / "b")
    path.write_text(path.read_text().replace("[study]\n", "[study]\nshare_prefix = false\n", 1))
    off = _cells(path)
    check_configs(off, Path("out"))  # each cell's settings value takes the option
    assert [c.fingerprint for c in off] == [c.fingerprint for c in default]
    masking = [c for c in off if c.kind != "detect"]
    assert {c.kind for c in masking} >= {"sweep", "compare", "transfer", "stability"}
    for c in off:
        assert c.settings.get("share_prefix", True) is (c.kind == "detect"), c.id
        assert "share_vision" not in c.settings
    assert all("share_prefix" not in c.settings for c in default)
    line = command_line(next(c for c in masking if c.kind == "sweep"), Path("out"))
    assert "--no-share-prefix" in line and "--no-share-vision" not in line and "False" not in line


def test_a_share_that_is_not_a_bool_is_refused(tmp_path):
    path = write_study(tmp_path)
    path.write_text(path.read_text().replace("[study]\n", "[study]\nshare_vision = 0\n", 1))
    with pytest.raises(StudyError, match="share_vision must be bool"):
        load_study(path)
