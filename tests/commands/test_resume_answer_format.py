"""A run started before ``model.answer_format`` was recorded in config.json still resumes: its config reads as the
family's own (``native``) format, so a resume with the default goes on and one with another variant is refused."""

from __future__ import annotations

import json

import pytest

from vrh import runs
from vrh.runs.folder import CONFIG, RunFolder

from .conftest import FAST


def _evaluate(tiny_checkpoint, tiny_dataset, out, tiny_lm, **kw):
    from vrh.analyses import evaluate

    return evaluate.run(evaluate.Config(model=tiny_checkpoint, data=tiny_dataset, out=str(out), n=2, **FAST, **kw),
                        tiny_lm)


def _forget_answer_format(folder) -> dict:
    """config.json as vrh wrote it before the field existed."""
    config = json.loads((folder / CONFIG).read_text())
    del config["model"]["answer_format"]
    (folder / CONFIG).write_text(json.dumps(config))
    return config


def test_an_older_run_without_the_field_resumes_as_native_and_refuses_another(tiny_checkpoint, tiny_dataset,
                                                                               tiny_lm, tmp_path):
    out = tmp_path / "old"
    _evaluate(tiny_checkpoint, tiny_dataset, out, tiny_lm)
    _forget_answer_format(out)
    with pytest.raises(ValueError, match=r"(?s)cannot resume .*\n  model\.answer_format\.name: native -> norm1000"):
        _evaluate(tiny_checkpoint, tiny_dataset, out, tiny_lm, answer_format="norm1000", resume=True)
    _evaluate(tiny_checkpoint, tiny_dataset, out, tiny_lm, resume=True)  # the family's default: it goes on
    assert runs.read_config(out)["model"]["answer_format"]["name"] == "native"  # and is recorded from now on


def test_the_folder_reads_a_missing_field_as_native_with_the_familys_prompt(tmp_path):
    fmt = {"name": "native", "prompt": "Where is {expression}?", "box": "native"}
    config = {"command": "evaluate", "config": {"n": 2}, "model": {"path": "m", "answer_format": fmt}}
    with RunFolder(tmp_path / "r") as run:
        run.write_config(config)
    _forget_answer_format(tmp_path / "r")
    with RunFolder(tmp_path / "r", resume=True) as run:
        assert run.write_config(config)["model"]["answer_format"] == fmt
    _forget_answer_format(tmp_path / "r")
    other = {**config, "model": {"path": "m", "answer_format": {**fmt, "name": "pixels", "box": "pixels"}}}
    with pytest.raises(ValueError) as refused, RunFolder(tmp_path / "r", resume=True) as run:
        run.write_config(other)
    said = str(refused.value)
    assert "model.answer_format.name: native -> pixels" in said and "model.answer_format.box: native -> pixels" in said
    assert "(absent)" not in said  # an older run is not told it lacks the field: it ran the family's own format
