"""A hub id that cannot be loaded fails at once, in one line, and without touching the network."""

import huggingface_hub
import pytest
from huggingface_hub import constants

from vrh.models import loading as inference
from vrh.models.loading import check_hub_id_available, load_model


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    return tmp_path


@pytest.fixture
def no_probe(monkeypatch):
    """Any hub request fails the test: offline and cached ids must be decided locally."""
    def probe(*a, **k):
        raise AssertionError("the hub was contacted")
    monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", probe)


def fake_cached(cache, repo_id: str, commit: str = "0123abcd") -> None:
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    (repo / "snapshots" / commit).mkdir(parents=True)
    (repo / "snapshots" / commit / "config.json").write_text("{}")


@pytest.mark.parametrize("variable", ["HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"])
def test_uncached_hub_id_offline_fails_in_one_line(empty_cache, no_probe, monkeypatch, variable):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv(variable, "1")
    with pytest.raises(FileNotFoundError) as e:
        load_model("some-org/some-model")
    msg = str(e.value)
    assert "\n" not in msg
    assert "'some-org/some-model'" in msg and "nothing is cached" in msg and str(empty_cache) in msg
    assert f"{variable} is set" in msg and "e.g. /path/to/checkpoint" in msg
    assert "--model" not in msg  # load_model is the Python API: no CLI flag in its words (issue 26 item 25)
    assert "does not exist" not in msg  # not mistaken for a missing local folder


def test_cached_hub_id_passes_without_a_request(empty_cache, no_probe):
    fake_cached(empty_cache, "org/cached")
    check_hub_id_available("org/cached")  # offline (conftest), but cached: no error, no request
    with pytest.raises(FileNotFoundError, match="nothing is cached"):
        check_hub_id_available("org/cached", revision="v2")  # another revision is not cached


def test_unreachable_hub_fails_fast(empty_cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "")
    seen = {}

    def refused(url, timeout):
        seen["timeout"] = timeout
        raise ConnectionError("[Errno 111] Connection\nrefused")
    monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", refused)
    with pytest.raises(FileNotFoundError) as e:
        check_hub_id_available("some-org/some-model")
    msg = str(e.value)
    assert "\n" not in msg and "could not be reached" in msg and "Connection refused" in msg
    assert seen["timeout"] == inference.HUB_PROBE_TIMEOUT_S


def test_reachable_hub_is_left_to_transformers(empty_cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "0")
    calls = []
    monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", lambda url, timeout: calls.append(url))
    check_hub_id_available("some-org/some-model")
    assert len(calls) == 1 and "some-org/some-model" in calls[0]


def test_invalid_id_is_named(empty_cache, no_probe):
    with pytest.raises(FileNotFoundError, match="neither an existing folder nor a valid hub id"):
        load_model("not/a/hub/id")


def test_an_unknown_organism_lists_the_shipped_ones():
    from vrh.models.loading import resolve_model_path

    with pytest.raises(FileNotFoundError, match="no organism 'organism_z' here; this install has organism:organism_a"):
        resolve_model_path("organism:organism_z")
    assert resolve_model_path("organism").endswith("organism_a")


def test_a_typo_of_the_organism_alias_is_pointed_out(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match="did you mean 'organism'\\?"):
        load_model("organsim")
    with pytest.raises(FileNotFoundError, match="did you mean 'organism:organism_a'\\?"):
        load_model("organism_a")


def test_loading_in_a_log_prints_no_library_bars(capfd):
    """Not a terminal (as under pytest): transformers' "Loading weights" bar is silenced, one line per message."""
    load_model("organism")
    assert "Loading weights" not in capfd.readouterr().err
