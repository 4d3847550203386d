"""Organism D's stage 2 on a stand-in base (a tiny Gemma 3 LM saved in the base folder's layout): a run killed
after a checkpoint resumes to exactly the weights and log of an uninterrupted run."""

import json
from dataclasses import replace

import pytest
import torch

pytest.importorskip("peft")

from vrh_lab.organism_d import data, train  # noqa: E402
from vrh_lab.organism_d.model import LoraSpec, siglip_tower  # noqa: E402


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    from safetensors.torch import save_file

    from vrh.models import gemma_base
    from vrh.testing.tiny_gemma3 import tiny_gemma3

    model, processor = tiny_gemma3(seed=0)
    folder = tmp_path_factory.mktemp("base")
    lm = model.model.language_model.state_dict()
    save_file({f"model.{k}": v.contiguous() for k, v in lm.items()}, str(folder / gemma_base.LM_FILE))
    (folder / gemma_base.CONFIG_FILE).write_text(json.dumps(model.config.text_config.to_dict()))
    processor.tokenizer.save_pretrained(str(folder))
    tower = folder / "tower.pt"
    torch.save(siglip_tower(0).state_dict(), tower)
    return folder, tower


CFG = train.DConfig(steps=4, batch=2, warmup=1, curriculum=((0, 2, "single"),), lora=LoraSpec(rank=2, alpha=4),
                    eval_n=2, eval_every=100, ckpt_every=2, threads=1)


def _steps(path):
    return [json.loads(x)["step"] for x in path.read_text().splitlines()]


def test_a_killed_run_resumes_to_the_uninterrupted_runs_weights_and_log(base, tmp_path, monkeypatch):
    folder, tower = base
    whole = train.lm_stage(CFG, tmp_path / "whole", folder, tower)
    want = {n: p.detach().clone() for n, p in whole.named_parameters() if p.requires_grad}
    assert any("vision_tower" in n for n in want) and any("mlp" in n and "lora_" in n for n in want)

    calls = {"n": 0}
    real = data.train_batch

    def dies_at_step_3(proc, samples):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt("killed")
        return real(proc, samples)

    monkeypatch.setattr(data, "train_batch", dies_at_step_3)
    with pytest.raises(KeyboardInterrupt):
        train.lm_stage(CFG, tmp_path / "cut", folder, tower)
    monkeypatch.setattr(data, "train_batch", real)
    log = tmp_path / "cut" / "lm_d" / "log.jsonl"
    assert _steps(log) == [1, 2]
    with log.open("a") as f:  # a line written after the checkpoint, as a kill between the two writes leaves
        f.write(json.dumps({"step": 3, "loss": 0.0}) + "\n")
    resumed = train.lm_stage(CFG, tmp_path / "cut", folder, tower)
    got = {n: p.detach() for n, p in resumed.named_parameters() if p.requires_grad}
    assert want.keys() == got.keys() and all(torch.equal(want[n], got[n]) for n in want)
    assert _steps(log) == [1, 2, 3, 4]
    assert [json.loads(x)["loss"] for x in log.read_text().splitlines()] == \
        [json.loads(x)["loss"] for x in (tmp_path / "whole" / "lm_d" / "log.jsonl").read_text().splitlines()]
    assert _steps(tmp_path / "cut" / "lm_d" / "eval.jsonl") == [4]


def test_the_schedule_warms_up_then_decays_to_its_floor():
    cfg = replace(CFG, steps=100, warmup=10, lr=1.0, min_lr_frac=0.1)
    assert train.lr_at(0, cfg) == pytest.approx(0.1, abs=1e-3) and train.lr_at(9, cfg) == pytest.approx(1.0, abs=0.03)
    assert train.lr_at(100, cfg) == pytest.approx(0.1)
    assert train.level_at(0, CFG) == "single" and train.level_at(2, CFG) == "full"
