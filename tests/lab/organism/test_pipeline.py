"""The staged organism build runs end to end (tiny sizes), resumes without redoing finished stages, and
exports A and B with the same language-model *initialisation* but separately fine-tuned weights."""

import json

import torch
from transformers import LlavaForConditionalGeneration

from vrh_lab.organism.pipeline import LM_A6, LM_A8, STAGES, build


def test_build_all_stages_then_resume(tmp_path):
    out, exp = tmp_path / "build", tmp_path / "ckpts"
    res = build(out, exp, tiny=True, eval_n=4)
    assert set(res) == set(STAGES) and STAGES[-1] == "lm_b"
    assert res["lm_a"] == {"step": 2}  # phase 1 stops at stop_at; lm_a2 to 3, lm_a3 to 4, lm_a4 to 5
    assert res["lm_a4"] == {"step": 5} and res["lm_a5"] == {"step": 2}  # lm_a5: A4's weights, a new schedule
    meta_a = json.loads((exp / "organism_a" / "vrh_organism.json").read_text())
    assert res["lm_a6"] == {"step": 4} and res["lm_a7"] == {"step": 5}  # continued, not exported
    cfg_a = meta_a["train_config"]
    assert meta_a["steps"] == 6 and cfg_a["route_l1"] == LM_A8.route_l1 > LM_A6.route_l1  # lm_a8: stronger routing
    assert cfg_a["route_spare_protected"] and cfg_a["dropout_protect_top"] == 3
    a = LlavaForConditionalGeneration.from_pretrained(exp / "organism_a")
    b = LlavaForConditionalGeneration.from_pretrained(exp / "organism_b")
    assert a.config.vision_config.patch_size == 16 and b.config.vision_config.patch_size == 14
    w = "model.language_model.layers.0.mlp.up_proj.weight"
    assert a.state_dict()[w].shape == b.state_dict()[w].shape
    assert not torch.equal(a.state_dict()[w], b.state_dict()[w])  # B fine-tuned its own copy
    meta = json.loads((exp / "organism_b" / "vrh_organism.json").read_text())
    assert meta["lm_init"].endswith("lm_a8/ckpt.pt") and meta["heldout"]["grounding_n"] == 4
    assert meta["shares_language_model_with"] == ["organism_a"]  # B's LM is A's, fine-tuned
    assert a.config.text_config.rope_parameters["rope_theta"] == b.config.text_config.rope_parameters["rope_theta"] == 1e6
    mtime = (out / "vision_a" / "tower.pt").stat().st_mtime
    build(out, exp, stages=("vision_a",), tiny=True, eval_n=4)  # finished stage: not redone
    assert (out / "vision_a" / "tower.pt").stat().st_mtime == mtime
    assert json.loads((out / "build.json").read_text())["stages"] == ["vision_a"]
    (out / "lm_a" / "ckpt.pt").unlink()  # e.g. a clone with only the later phases' checkpoints committed
    res = build(out, exp, stages=("lm_a", "lm_a8"), tiny=True, eval_n=4)
    assert res["lm_a"] == {"skipped": "superseded by lm_a8/ckpt.pt"} and not (out / "lm_a" / "ckpt.pt").exists()


def test_committed_phase_configs_are_the_pipeline_phases():
    """The committed runs behind the shipped A (lab/organism_runs/) used exactly the pipeline's phase configs,
    up to where their inputs lay (paths) and the CPU threads they ran with."""
    from dataclasses import asdict
    from pathlib import Path

    from vrh_lab.organism.pipeline import stage_configs

    root = Path(__file__).resolve().parents[3] / "lab" / "organism_runs"
    cfgs = stage_configs(root / "v2")
    from vrh_lab.organism.train import TrainConfig

    ignore = {"init_from", "weights_from", "vision_init_a", "vision_init_b", "lm_init", "threads"}
    # fields added after these runs (e.g. organism C's text_frac, track_*) must sit at their defaults,
    # which leave training as it was
    defaults = json.loads(json.dumps(asdict(TrainConfig())))
    for phase, path in (("lm_a6", "v2/lm_a6/config.json"), ("lm_a7", "v5/config.json"),
                        ("lm_a8", "v6/p.config.json"), ("lm_a8", "v2/lm_a8/config.json")):
        ran = json.loads((root / path).read_text())
        want = json.loads(json.dumps(asdict(cfgs[phase])))  # tuples -> lists, as in the JSON
        ran = {**{k: defaults[k] for k in set(want) - set(ran)}, **ran}
        diff = {k: (want.get(k), ran.get(k)) for k in set(want) | set(ran)
                if k not in ignore and want.get(k) != ran.get(k)}
        assert not diff, (phase, path, diff)
