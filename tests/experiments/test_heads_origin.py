"""The settings a head ranking was detected under travel with it (issue 46 items 2 and 3,
:mod:`vrh.experiments.heads_origin`): a run reading another run's heads takes its answer format when not given
(saying so), refuses a different one, names the heads' task when it is not its own, and says in one line when the
heads come from another model."""

from __future__ import annotations

import json
import shutil

import pytest

from vrh import runs
from vrh.runs.folder import CONFIG

FAST = dict(max_new_tokens=8, batch_size=4)


@pytest.fixture(scope="module")
def tiny_lm(tiny_checkpoint):
    from vrh.models.loading import load_model

    return load_model(tiny_checkpoint)


@pytest.fixture(scope="module")
def norm_run(tmp_path_factory, tiny_checkpoint, tiny_dataset, tiny_lm):
    """``vrh detect --answer-format norm1000``: heads ranked while the model answered on the 0-1000 grid."""
    from vrh.analyses import detect

    out = tmp_path_factory.mktemp("det_norm") / "det"
    detect.run(detect.Config(model=tiny_checkpoint, data=tiny_dataset, n=4, n_eval=4, out=str(out),
                             answer_format="norm1000", **FAST), tiny_lm)
    assert runs.read_config(out)["model"]["answer_format"]["name"] == "norm1000"
    return out


def _evaluate(tiny_checkpoint, tiny_dataset, tiny_lm, out, heads, **kw):
    from vrh.analyses import evaluate

    return evaluate.run(evaluate.Config(model=tiny_checkpoint, data=tiny_dataset, out=str(out), n=2, k=2,
                                        mask_heads=str(heads), **FAST, **kw), tiny_lm)


def test_evaluate_takes_the_heads_answer_format_and_says_so(norm_run, tiny_checkpoint, tiny_dataset, tiny_lm,
                                                            tmp_path, capsys):
    _evaluate(tiny_checkpoint, tiny_dataset, tiny_lm, tmp_path / "ev", norm_run)
    assert runs.read_config(tmp_path / "ev")["model"]["answer_format"]["name"] == "norm1000"
    err = capsys.readouterr().err
    assert f"evaluate: answer format norm1000, taken from the heads' run {norm_run}" in err
    assert "ranked on" not in err  # one model: no model line


def test_evaluate_refuses_another_answer_format_and_accepts_the_same(norm_run, tiny_checkpoint, tiny_dataset, tiny_lm,
                                                                     tmp_path, capsys):
    with pytest.raises(ValueError, match=r"--answer-format pixels differs from the heads' run .*norm1000.*pass "
                                         r"--answer-format norm1000"):
        _evaluate(tiny_checkpoint, tiny_dataset, tiny_lm, tmp_path / "px", norm_run, answer_format="pixels")
    assert not (tmp_path / "px" / "samples.jsonl").exists()
    _evaluate(tiny_checkpoint, tiny_dataset, tiny_lm, tmp_path / "same", norm_run, answer_format="norm1000")
    assert "taken from the heads' run" not in capsys.readouterr().err


def test_sweep_takes_the_heads_answer_format(norm_run, tiny_checkpoint, tiny_dataset, tiny_lm, tmp_path, capsys):
    from vrh.analyses import sweep

    sweep.run(sweep.Config(model=tiny_checkpoint, data=tiny_dataset, out=str(tmp_path / "sw"), n=2, ks=(0, 1),
                           seeds=(0,), heads=str(norm_run), **FAST), tiny_lm)
    assert runs.read_config(tmp_path / "sw")["model"]["answer_format"]["name"] == "norm1000"
    assert "sweep: answer format norm1000, taken from the heads' run" in capsys.readouterr().err
    with pytest.raises(ValueError, match="differs from the heads' run"):
        sweep.run(sweep.Config(model=tiny_checkpoint, data=tiny_dataset, out=str(tmp_path / "sw2"), n=2, ks=(0, 1),
                               seeds=(0,), heads=str(norm_run), answer_format="native", **FAST), tiny_lm)


def test_vqa_names_the_heads_task_and_takes_no_box_format(norm_run, tiny_checkpoint, tiny_dataset, tiny_lm, tmp_path,
                                                          capsys):
    _evaluate(tiny_checkpoint, tiny_dataset, tiny_lm, tmp_path / "vqa", norm_run, task="vqa")
    err = capsys.readouterr().err
    assert f"evaluate: the heads of {norm_run} were ranked on the grounding task; this run is vqa" in err
    assert "taken from the heads' run" not in err  # a VQA prompt asks for no box


def _other_model(run, tmp_path):
    """A copy of ``run`` whose config.json says another checkpoint ranked the heads."""
    copy = tmp_path / "other_model_heads"
    shutil.copytree(run, copy)
    config = json.loads((copy / CONFIG).read_text())
    config["model"]["path"] = "Qwen/Qwen2.5-VL-7B-Instruct"
    (copy / CONFIG).write_text(json.dumps(config))
    return copy


def test_heads_of_another_model_get_one_line_naming_both(norm_run, tiny_checkpoint, tiny_dataset, tiny_lm, tmp_path,
                                                         capsys):
    other = _other_model(norm_run, tmp_path)
    _evaluate(tiny_checkpoint, tiny_dataset, tiny_lm, tmp_path / "x", other)
    lines = [line for line in capsys.readouterr().err.splitlines() if "ranked on" in line]
    assert len(lines) == 1
    assert "Qwen/Qwen2.5-VL-7B-Instruct" in lines[0] and tiny_lm.path in lines[0] and "vrh transfer" in lines[0]
    # another model's format is not this one's to take
    assert runs.read_config(tmp_path / "x")["model"]["answer_format"]["name"] == "native"


def test_text_heads_cross_heads_of_another_model_say_so(norm_run, tiny_lm, tmp_path, capsys):
    from vrh.experiments.heads_origin import adopt

    other = _other_model(norm_run, tmp_path)
    assert adopt(tiny_lm, None, str(other), command="text-heads", option="--cross-heads", task=None,
                 uses_answer_format=False) is tiny_lm
    err = capsys.readouterr().err
    assert err.count("ranked on") == 1 and "text-heads: --cross-heads" in err and "vrh transfer" in err


def test_the_dpo_loop_takes_the_heads_answer_format_for_its_pairs_and_trained_models(norm_run, tiny_checkpoint,
                                                                                    tiny_dataset, tiny_lm, monkeypatch):
    pytest.importorskip("trl")
    import vrh.experiments.dpo_comparison as dc
    from vrh.analyses import dpo

    seen = {}

    class Stop(Exception):
        pass

    def stub(lm, cfg, *args, **kwargs):  # what the loop would build its pairs with and reload its models in
        seen["lm"], seen["cfg"] = lm, cfg
        raise Stop

    monkeypatch.setattr(dc, "run_comparison", stub)
    with pytest.raises(Stop):
        dpo.run(dpo.Config(model=tiny_checkpoint, data=tiny_dataset, heads=str(norm_run), out="unused", n=2, **FAST),
                tiny_lm)
    assert seen["lm"].adapter.answer_format.name == "norm1000"
    assert seen["cfg"].answer_format.name == "norm1000"  # dpo_comparison reloads the trained models with it


def test_stability_takes_the_heads_answer_format(norm_run, tiny_checkpoint, tiny_lm, tmp_path, capsys):
    from vrh.analyses import stability

    stability.run(stability.Config(heads=str(norm_run), model=tiny_checkpoint, k=2, n_values=(2,), bootstrap=2,
                                   seeds=(0,), n_eval=2, accuracy_draws=1, out=str(tmp_path / "st"), **FAST), tiny_lm)
    assert runs.read_config(tmp_path / "st")["model"]["answer_format"]["name"] == "norm1000"
    assert "stability: answer format norm1000, taken from the heads' run" in capsys.readouterr().err
