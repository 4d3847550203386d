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


def _pickled_checkpoint(src, dst, extra=None):
    """``src`` with its weights as a pickled ``pytorch_model.bin`` (no safetensors), plus ``extra`` entries."""
    import shutil

    import torch
    from safetensors.torch import load_file

    shutil.copytree(src, dst)
    weights = load_file(dst / "model.safetensors")
    (dst / "model.safetensors").unlink()
    torch.save({**weights, **(extra or {})}, dst / "pytorch_model.bin")
    return dst


def test_a_pickled_checkpoint_with_objects_is_refused_in_one_line(tmp_path, tiny_checkpoint, tiny_dataset, capsys):
    """A ``pytorch_model.bin`` holding more than tensors was refused safely by torch, but as a 30-line traceback
    (issue 33 item 10): one line now, saying to convert it to safetensors. Nothing in the pickle ran."""
    import pathlib

    from vrh.cli import main

    marker = tmp_path / "the pickle ran"

    class Payload:
        def __reduce__(self):
            return pathlib.Path.touch, (marker,)

    bad = _pickled_checkpoint(pathlib.Path(tiny_checkpoint), tmp_path / "ck", {"_payload": Payload()})
    with pytest.raises(ValueError, match=r"its pickled weights \(pytorch_model\*.bin, no model.safetensors\) are not "
                                         r"only tensors \(the pickle refers to .+\); vrh never "):
        load_model(str(bad))
    capsys.readouterr()
    assert main(["detect", "--model", str(bad), "--data", tiny_dataset, "--n", "4", "--out", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"vrh detect: error: model {bad}: its pickled weights")
    assert err[0].endswith("convert the checkpoint to safetensors (torch.load(..., weights_only=False), then "
                           "safetensors.torch.save_file into model.safetensors, or save_pretrained) and pass the "
                           "converted folder")
    assert not marker.exists()


def test_a_plain_tensor_pickle_still_loads(tmp_path, tiny_checkpoint):
    import pathlib

    lm = load_model(str(_pickled_checkpoint(pathlib.Path(tiny_checkpoint), tmp_path / "ck")))
    assert lm.num_layers > 0
