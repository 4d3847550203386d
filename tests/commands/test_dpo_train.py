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

    from vrh.analyses.reporting import build_report

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
    # another --dtype or --model is another training too, not this one's result under a new name (issue 45 item 9)
    assert main(["dpo-train", "--model", tiny_checkpoint, "--pairs", str(pairs), "--out", str(out), *STEPS,
                 "--dtype", "bfloat16", "--resume"]) == 2
    assert "config.dtype: float32 -> bfloat16" in capsys.readouterr().err
    import shutil

    other = shutil.copytree(tiny_checkpoint, tmp_path / "other_model")
    assert main(["dpo-train", "--model", str(other), "--pairs", str(pairs), "--out", str(out), *STEPS,
                 "--resume"]) == 2
    assert f"config.model: {tiny_checkpoint} -> {other}" in capsys.readouterr().err
    assert runs.read_results(out)["elapsed_seconds"] == res["elapsed_seconds"]  # nothing rewritten
    # --overwrite removes what the training wrote (model/, train_log.jsonl), and trains again
    assert main(["dpo-train", "--model", tiny_checkpoint, "--pairs", str(pairs), "--out", str(out), *STEPS,
                 "--overwrite"]) == 0


def test_dpo_train_refuses_missing_pairs_in_one_line(tmp_path, tiny_checkpoint, capsys):
    assert main(["dpo-train", "--model", tiny_checkpoint, "--pairs", str(tmp_path / "none"), "--out",
                 str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "vrh dpo-train: error:" in err and "dpo-pairs run folder" in err
    assert not (tmp_path / "o").exists()  # refused before anything was written


def _disk_full_at(monkeypatch, where: str, kind: str) -> None:
    """Writes whose path contains ``where`` fail as they do on a full disk: safetensors' writer with a
    SafetensorError (``os error 28``), torch's with a RuntimeError that names neither the cause nor the path
    (then the disk reports no free space)."""
    import shutil

    import torch
    import transformers.modeling_utils as mu

    if kind == "safetensors":
        from safetensors import SafetensorError

        real = mu.safe_save_file

        def save_file(tensors, path, *a, **kw):
            if where in str(path):
                raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
            return real(tensors, path, *a, **kw)

        monkeypatch.setattr(mu, "safe_save_file", save_file)
    else:
        real_save, real_usage = torch.save, shutil.disk_usage

        def save(obj, f, *a, **kw):
            if where in str(f):
                raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")
            return real_save(obj, f, *a, **kw)

        def usage(path):
            u = real_usage(path)
            return type(u)(u.total, u.total, 0) if where.split("/")[0] in str(path) else u

        monkeypatch.setattr(torch, "save", save)
        monkeypatch.setattr(shutil, "disk_usage", usage)


@pytest.mark.parametrize("kind", ["safetensors", "torch"])
def test_a_full_disk_is_a_one_line_error_naming_the_checkpoint_and_resume_continues(
        tmp_path, tiny_checkpoint, tiny_dataset, capsys, monkeypatch, kind):
    """The disk fills up while checkpoint 2 is written: one line naming it (no traceback), exit 2; once there
    is room again, --resume continues from checkpoint 1 (checkpoint 2 is incomplete) to the full training."""
    pairs = write_pairs(tmp_path / "pairs", tiny_dataset)
    out = tmp_path / "train"
    cmd = ["dpo-train", "--model", tiny_checkpoint, "--pairs", str(pairs), "--out", str(out), *STEPS]
    with monkeypatch.context() as m:
        _disk_full_at(m, "checkpoint-2/", kind)
        assert main(cmd) == 2
    err = capsys.readouterr().err
    line = f"vrh dpo-train: error: No space left on device: {out / dpo.CHECKPOINTS / 'checkpoint-2'}"
    assert line in err.splitlines() and "Traceback" not in err
    assert main([*cmd, "--resume"]) == 0
    res = runs.read_results(out)
    assert res["steps"] == 2 and res["resumed_from"] == str(out / dpo.CHECKPOINTS / "checkpoint-1")


def test_overwrite_removes_the_trained_model_only_if_it_holds_nothing_else(tmp_path, tiny_checkpoint,
                                                                            tiny_dataset, capsys):
    """model/ carries vrh's record of its files (vrh.runs.written): a file the user added there is not
    deleted by --overwrite, which refuses and names it."""
    pairs = write_pairs(tmp_path / "pairs", tiny_dataset)
    out = tmp_path / "train"
    cmd = ["dpo-train", "--model", tiny_checkpoint, "--pairs", str(pairs), "--out", str(out), *STEPS]
    assert main(cmd) == 0
    notes = out / dpo.MODEL_DIR / "notes.txt"
    notes.write_text("mine")
    capsys.readouterr()
    assert main([*cmd, "--overwrite"]) == 2
    assert "model/notes.txt" in capsys.readouterr().err and notes.read_text() == "mine"


@pytest.mark.slow
def test_dpo_train_killed_with_sigkill_while_checkpointing_resumes_to_the_uninterrupted_training(
        tmp_path, tiny_checkpoint, tiny_dataset, kill_mid_run):
    """A real kill -9 once checkpoint 2 is being written (of 3 steps, one checkpoint each), then --resume."""
    import os
    import sys

    pairs = write_pairs(tmp_path / "pairs", tiny_dataset)
    steps = ["--max-steps", "3", "--lr", "1e-3", "--train-batch-size", "2", "--grad-accum", "1", "--save-steps", "1"]

    def cmd(out):
        return ["dpo-train", "--model", tiny_checkpoint, "--pairs", str(pairs), "--out", str(out), *steps]

    assert main(cmd(tmp_path / "full")) == 0
    out = tmp_path / "killed"
    kill_mid_run([sys.executable, "-m", "vrh", *cmd(out)], dict(os.environ),
                 lambda: (out / dpo.CHECKPOINTS / "checkpoint-2").is_dir())
    assert main([*cmd(out), "--resume"]) == 0
    a, b = runs.read_results(tmp_path / "full"), runs.read_results(out)
    assert b["steps"] == a["steps"] == 3 and b["last_log"]["num_tokens"] == a["last_log"]["num_tokens"]
    assert b["train_loss"] == pytest.approx(a["train_loss"], abs=1e-5)
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model", "results.json", "train_log.jsonl"]


def test_paper_defaults_are_the_option_defaults():
    from vrh.analyses import dpo_train

    cfg = dpo_train.Config(model="m", pairs="p", out="o")
    assert (cfg.lr, cfg.epochs, cfg.max_steps) == (2e-7, 4.0, -1)


def test_without_trl_the_error_says_how_to_install_it(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "trl", None)  # what `import trl` meets where TRL is not installed
    with pytest.raises(ImportError, match=r"pip install 'vrh\[dpo\]'"):
        dpo.require_trl()
