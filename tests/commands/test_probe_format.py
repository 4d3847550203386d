"""``vrh probe-format`` (the CLI, in-process) and ``--answer-format`` on the commands that run a model: the probe
names the variant the other commands use, a run records the variant it used in config.json, and a resume with
another one is refused."""

import json

import pytest

from vrh import runs
from vrh.cli import main

from .conftest import FAST


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from vrh.organism.world import write_split

    return str(write_split(tmp_path_factory.mktemp("world"), 8, seed=321))


def test_the_probe_prints_each_variant_and_says_which_one_runs_use(world, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("VRH_NO_PROGRESS", "1")
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps([{"name": "own_norm1000", "box": "norm1000", "about": "organism prompt, 0-1000 read"}]))
    out = tmp_path / "probe.json"
    rc = main(["probe-format", "--model", "organism", "--data", world, "--n", "8", "--max-new-tokens", "24",
               "--variants", str(mine), "--json", str(out)])
    printed = capsys.readouterr().out
    assert rc == 0
    for name in ("* native", "pixels", "norm1", "norm1000", "own_norm1000", "parse rate", "acc@0.5", "[ "):
        assert name in printed, name
    assert ("use 'native' (the llava family's first, marked *); choose another with --answer-format NAME (a variant "
            f"of {mine}: --answer-format {mine}:NAME)") in " ".join(printed.split())
    table = json.loads(out.read_text())
    assert table["default"] == "native" and table["best"] == "native" and table["data"]["n"] == 8
    rows = {v["name"]: v for v in table["variants"]}
    assert rows["native"]["parse_rate"] >= 0.85 and rows["native"]["accuracy"] >= 0.6
    assert rows["own_norm1000"]["origin"] == str(mine) and rows["own_norm1000"]["accuracy"] == 0.0
    assert rows["native"]["example"] == rows["own_norm1000"]["example"]  # one prompt: one generation, read twice


@pytest.mark.parametrize("args, message", [
    (["--variants", "MISSING"], "no answer-format file"),
    (["--n", "0"], "--n must be >= 1"),
])
def test_bad_input_fails_before_the_model_loads(world, tmp_path, capsys, args, message):
    args = [a.replace("MISSING", str(tmp_path / "none.json")) for a in args]
    rc = main(["probe-format", "--model", str(tmp_path / "no_model"), "--data", world, *args])
    assert rc == 2 and message in capsys.readouterr().err  # not the missing model folder


def test_the_probe_takes_no_answer_format(world, capsys):
    with pytest.raises(SystemExit):
        main(["probe-format", "--model", "organism", "--data", world, "--answer-format", "pixels"])
    assert "unrecognized arguments: --answer-format" in capsys.readouterr().err


# --- --answer-format on a run ------------------------------------------------------------------------
def _evaluate(tiny_checkpoint, tiny_dataset, out, tiny_lm, **kw):
    from vrh.analyses import evaluate

    return evaluate.run(evaluate.Config(model=tiny_checkpoint, data=tiny_dataset, out=str(out), n=2, **FAST, **kw),
                        tiny_lm)


def test_a_run_records_its_answer_format_and_a_resume_with_another_is_refused(tiny_checkpoint, tiny_dataset,
                                                                               tiny_lm, tmp_path):
    _evaluate(tiny_checkpoint, tiny_dataset, tmp_path / "own", tiny_lm)
    own = runs.read_config(tmp_path / "own")
    assert own["model"]["answer_format"] == {  # the family's first: Qwen2.5-VL's own prompt and JSON pixels
        "name": "native", "box": "native",
        "prompt": "Locate the {expression} in the image and output its bbox coordinates in JSON format."}
    assert "answer_format" not in own["config"]  # recorded once, resolved, under model
    assert tiny_lm.adapter.answer_format.name == "native"

    _evaluate(tiny_checkpoint, tiny_dataset, tmp_path / "n1000", tiny_lm, answer_format="norm1000")
    rec = runs.read_config(tmp_path / "n1000")["model"]["answer_format"]
    assert rec["name"] == "norm1000" and rec["box"] == "norm1000" and "0 to 1000" in rec["prompt"]
    assert tiny_lm.adapter.answer_format.name == "native"  # the caller's model is not changed by a run

    with pytest.raises(ValueError, match=r"model\.answer_format\.name: native -> norm1000"):
        _evaluate(tiny_checkpoint, tiny_dataset, tmp_path / "own", tiny_lm, answer_format="norm1000", resume=True)


def test_an_unknown_answer_format_fails_before_the_weights_load(tiny_checkpoint, tiny_dataset, tmp_path, capsys,
                                                                monkeypatch):
    import vrh.models.adapters.qwen_vl as qwen

    def never(*a, **k):
        raise AssertionError("the weights loaded")

    monkeypatch.setattr(qwen.Qwen2_5_VLAdapter, "load", never)
    rc = main(["evaluate", "--model", tiny_checkpoint, "--data", tiny_dataset, "--out", str(tmp_path / "e"),
               "--answer-format", "norm7"])
    err = capsys.readouterr().err
    assert rc == 2 and "--answer-format 'norm7': not a variant of qwen2_5_vl (native) nor a shared one" in err
