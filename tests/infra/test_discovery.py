"""A user's extension outside vrh's folders (vrh.infra.discovery.load_user_plugins; issue 46 item 16): a file
named in VRH_PLUGINS registers its scorer, and the command line takes it like a built-in."""

import pytest

from vrh.infra import discovery
from vrh.scoring import registry as scorers

PLUGIN = '''
from vrh.scoring.base import AccumulatingScorer
from vrh.scoring.registry import register_scorer


@register_scorer("users_own_scorer", help="a user's scorer from a file of their own")
class UsersOwnScorer(AccumulatingScorer):
    def update(self, rows, info, extra=None):
        self._add(rows.sum(dim=(2, 3)))
'''


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    path = tmp_path / "my_scorers.py"
    path.write_text(PLUGIN)
    monkeypatch.setenv(discovery.PLUGIN_ENV, str(path))
    yield path
    scorers._METHODS.pop("users_own_scorer", None)  # leave nothing behind
    discovery._PLUGINS_DONE.discard(str(path.resolve()))


def test_a_scorer_in_a_users_file_reaches_the_registry_and_the_command_line(plugin):
    assert "users_own_scorer" in scorers.scorer_names()
    assert type(scorers.make_scorer("users_own_scorer")).__name__ == "UsersOwnScorer"
    from vrh.experiments.detection import check_scorers

    check_scorers(("out/sum/mean", "users_own_scorer"), 0)  # what vrh detect --scorers checks before loading


def test_a_missing_plugin_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv(discovery.PLUGIN_ENV, str(tmp_path / "absent.py"))
    with pytest.raises(ValueError, match=r"VRH_PLUGINS: no such file .*absent\.py"):
        scorers.scorer_names()
    monkeypatch.setenv(discovery.PLUGIN_ENV, "no_such_module_for_vrh")
    with pytest.raises(ValueError, match=r"no module 'no_such_module_for_vrh'"):
        scorers.scorer_names()
