"""vrh dpo-train through the CLI: a few steps on the tiny checkpoint, a run folder the report reads, a model
folder that --model accepts, and the errors a user meets first."""

import pytest

pytest.importorskip("trl")

from vrh import runs  # noqa: E402
from vrh.cli import main  # noqa: E402
from vrh.experiments import dpo  # noqa: E402
from tests.experiments.test_dpo import write_pairs  # noqa: E402

STEPS = ["--max-steps", "2", "--lr", "1e-3", "--train-batch-size", "2", "--grad-accum", "1", "--save-steps", "1"]


def test_dpo_train_then_evaluate_the_trained_model_with_model(tmp_path, tiny_checkpoint, tiny_dataset, det_run, capsys):
    pairs = write_pairs(tmp_path / "pairs", tiny_dataset)
    out = tmp_path / "train"
    assert main(["dpo-train", "--model", tiny_checkpoint, "--pairs", str(pairs), "--out", str(out), *STEPS]) == 0
    res = runs.read_results(out)
    assert res["steps"] == 2 and res["n_pairs"] == 4 and res["model_dir"] == str(out / dpo.MODEL_DIR)
    assert res["settings"]["lr"] == 1e-3 and res["trl_version"] and res["peak_memory_bytes"] > 0
    assert runs.read_config(out)["command"] == "dpo-train"
    assert f"-> {out / dpo.MODEL_DIR} (use it as --model)" in capsys.readouterr().out  # the result: stdout
    ev = tmp_path / "eval"
    assert main(["evaluate", "--model", str(out / dpo.MODEL_DIR), "--data", str(tiny_dataset), "--mask-heads",
                 str(det_run), "--k", "0", "--out", str(ev), "--max-new-tokens", "8", "--batch-size", "4"]) == 0
    assert runs.read_config(ev)["model"]["path"] == str(out / dpo.MODEL_DIR)
    assert runs.read_results(ev)["n"] == len(runs.read_detection_split(det_run).eval_ids)

    from vrh.report.build import build_report

    md = build_report([out], tmp_path / "report")["md"].read_text()
    assert "train (dpo-train)" in md and "| optimizer steps | 2 |" in md

    # --resume of the finished training reuses it; with another setting it is refused, naming it
    assert main(["dpo-train", "--model", tiny_checkpoint, "--pairs", str(pairs), "--out", str(out), *STEPS,
                 "--resume"]) == 0
    assert runs.read_results(out)["elapsed_seconds"] == res["elapsed_seconds"]
    capsys.readouterr()
    assert main(["dpo-train", "--model", tiny_checkpoint, "--pairs", str(pairs), "--out", str(out), *STEPS,
                 "--lr", "5e-4", "--resume"]) == 2
    assert "settings.lr: 0.001 -> 0.0005" in capsys.readouterr().err
    # --overwrite removes what the training wrote (model/, train_log.jsonl), and trains again
    assert main(["dpo-train", "--model", tiny_checkpoint, "--pairs", str(pairs), "--out", str(out), *STEPS,
                 "--overwrite"]) == 0


def test_dpo_train_refuses_missing_pairs_in_one_line(tmp_path, tiny_checkpoint, capsys):
    assert main(["dpo-train", "--model", tiny_checkpoint, "--pairs", str(tmp_path / "none"), "--out",
                 str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "vrh dpo-train: error:" in err and "dpo-pairs run folder" in err
    assert not (tmp_path / "o").exists()  # refused before anything was written


def test_paper_defaults_are_the_option_defaults():
    from vrh.commands import dpo_train

    cfg = dpo_train.Config(model="m", pairs="p", out="o")
    assert (cfg.lr, cfg.epochs, cfg.max_steps) == (2e-7, 4.0, -1)


def test_without_trl_the_error_says_how_to_install_it(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "trl", None)  # what `import trl` meets where TRL is not installed
    with pytest.raises(ImportError, match=r"pip install 'vrh\[dpo\]'"):
        dpo.require_trl()
