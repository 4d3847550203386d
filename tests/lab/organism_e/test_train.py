"""Organism E's recipe on stand-in parts (conftest): the projector trains alone first, then with the LM's
adapters; a run killed after a checkpoint resumes to exactly the weights and log of an uninterrupted run."""

import json
from dataclasses import replace

import pytest
import torch

pytest.importorskip("peft")

from vrh_lab.organism_e import data, train  # noqa: E402
from vrh_lab.organism_e.model import LoraSpec  # noqa: E402

CFG = train.EConfig(steps=4, align_steps=2, batch=2, warmup=1, curriculum=((0, 2, "single"),),
                    lora=LoraSpec(rank=2, alpha=4), eval_n=2, eval_levels=("single",), eval_every=100,
                    ckpt_every=2, threads=1)


def _records(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_a_killed_run_resumes_to_the_uninterrupted_runs_weights_and_log(stand_in_parts, tmp_path, monkeypatch):
    lm, vision = stand_in_parts
    whole = train.train_stage(CFG, tmp_path / "whole", lm, vision)
    want = {n: p.detach().clone() for n, p in whole.named_parameters() if n in train.trainable_names(whole)}
    assert any("multi_modal_projector" in n for n in want) and any("mlp" in n and "lora_" in n for n in want)

    calls = {"n": 0}
    real = data.train_batch

    def dies_at_step_3(proc, samples):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt("killed")
        return real(proc, samples)

    monkeypatch.setattr(data, "train_batch", dies_at_step_3)
    with pytest.raises(KeyboardInterrupt):
        train.train_stage(CFG, tmp_path / "cut", lm, vision)
    monkeypatch.setattr(data, "train_batch", real)
    log = tmp_path / "cut" / "lm_e" / "log.jsonl"
    assert [r["step"] for r in _records(log)] == [1, 2]
    with log.open("a") as f:  # a line written after the checkpoint, as a kill between the two writes leaves
        f.write(json.dumps({"step": 3, "loss": 0.0}) + "\n")
    resumed = train.train_stage(CFG, tmp_path / "cut", lm, vision)
    got = {n: p.detach() for n, p in resumed.named_parameters() if n in want}
    assert want.keys() == got.keys() and all(torch.equal(want[n], got[n]) for n in want)
    cut, full = _records(log), _records(tmp_path / "whole" / "lm_e" / "log.jsonl")
    assert [r["step"] for r in cut] == [1, 2, 3, 4]
    assert [r["loss"] for r in cut] == [r["loss"] for r in full]
    assert [r["phase"] for r in cut] == ["align", "align", "lora", "lora"]
    assert [r["step"] for r in _records(tmp_path / "cut" / "lm_e" / "eval.jsonl")] == [4]


def test_the_alignment_phase_leaves_the_language_model_as_published(stand_in_parts, tmp_path):
    lm, vision = stand_in_parts
    cfg = replace(CFG, steps=2)
    model = train.train_stage(cfg, tmp_path, lm, vision)
    lora_b = {n: p for n, p in model.named_parameters() if "lora_B" in n}
    assert lora_b and all(torch.count_nonzero(p) == 0 for p in lora_b.values())  # B = 0: adapters unchanged
    fresh = train.build(lm, vision, seed=cfg.seed)
    proj = "model.multi_modal_projector.linear_1.weight"
    assert not torch.equal(dict(model.named_parameters())[proj], dict(fresh.named_parameters())[proj])
    trained = {n.replace(".base_layer", ""): p for n, p in model.named_parameters() if "lora_" not in n}
    for n, p in fresh.named_parameters():  # the tower and the LM's own weights: the parts as loaded
        if "multi_modal_projector" not in n:
            assert torch.equal(trained[n], p), n


def test_the_answer_is_the_organisms_box_format_after_the_adapters_separator(stand_in_parts):
    lm, _ = stand_in_parts
    proc = train.processor(lm)
    s = data.stream_sample(7, 0, "single", 0.0)
    batch = data.train_batch(proc, [s])
    ids, labels = batch["input_ids"][0], batch["labels"][0]
    answer = proc.tokenizer.decode(ids[labels != -100])
    x1, y1, x2, y2 = s["box"]
    assert answer == f" [ {x1} , {y1} , {x2} , {y2} ]<|im_end|>"
    assert int((ids == proc.tokenizer.convert_tokens_to_ids("<image>")).sum()) == 64  # 8 x 8 patches of 14 px
    assert batch["pixel_values"].shape == (1, 3, 112, 112)


def test_the_schedule_and_curriculum():
    cfg = replace(CFG, steps=100, warmup=10, lr=1.0, min_lr_frac=0.1)
    assert train.lr_at(0, cfg) == pytest.approx(0.1, abs=1e-3) and train.lr_at(100, cfg) == pytest.approx(0.1)
    assert train.level_at(0, CFG) == "single" and train.level_at(2, CFG) == "full"
    with pytest.raises(ValueError, match="unknown organism E config keys"):
        train.EConfig.from_dict({"stepz": 3})
