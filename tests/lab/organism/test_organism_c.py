"""Organism C (issue 17): its phases run end to end (tiny sizes) with no head-specific term, log the
emergence of retrieval heads, resume, and the text retrieval jobs mark the referent that the answer copies."""

import json
from dataclasses import asdict, replace

import pytest

import torch

from vrh_lab.organism.batches import train_batch
from vrh_lab.organism.emergence import read
from vrh_lab.organism.pipeline import (A_PHASES, C_PHASES, C_PRIME, C_RECIPES, LM_A8, LM_B, LM_C, LM_C3, LM_C_TEXT,
                                       NOT_EXPORTED, build, final_c_phase, stage_configs)
from vrh_lab.organism.processor import ImageSpec, build_tokenizer, format_box
from vrh_lab.organism.text_tasks import text_sample


def test_c_configs_have_no_head_specific_term(tmp_path):
    cfgs = stage_configs(tmp_path)
    for phase in C_PHASES:
        c = cfgs[phase]
        assert c.box_warmstart == 0 and c.route_l1 == 0 and c.dropout_protect_top == 0
        assert not c.route_spare_protected and c.head_dropout == 0 and (not c.lm_init or phase == C_PRIME)
        assert c.seed not in (LM_A8.seed, LM_B.seed)  # an independently initialised LM and data stream
    assert cfgs[C_PRIME].lm_init == str(tmp_path / "lm_c_long" / "ckpt.pt")  # C's LM: C' is C's "B"
    assert cfgs[C_PRIME].lm_freeze_steps > 0 and cfgs[C_PRIME].vision_a.patch_size == 14
    for phases in C_RECIPES.values():  # a phase starts from scratch or from the previous phase of its recipe
        for prev, phase in zip((None, *phases), phases):
            start = cfgs[phase].init_from or cfgs[phase].weights_from
            assert start == (str(tmp_path / prev / "ckpt.pt") if prev else "")
    assert LM_C_TEXT.text_frac == 1.0 and 0 < LM_C.text_frac < 1 and set(C_PHASES).isdisjoint(A_PHASES)
    assert cfgs["lm_c3"].text_frac == 0  # C3: no text phase, no text jobs
    c4 = cfgs["lm_c4"]  # C4: C3 with a deeper LM, probes on every layer
    assert c4.text.layers == 8 and c4.attr_aux_layers == tuple(range(8)) and c4.curriculum == cfgs["lm_c3"].curriculum
    c5, ctl = cfgs["lm_c5"], cfgs["lm_c_restart"]  # C5: C1 continued on the hard world; C1r: its control
    assert c5.contrast_frac > 0 and ctl.contrast_frac == 0 and c5.seed not in (LM_C.seed, LM_C3.seed)
    assert replace(c5, contrast_frac=0) == ctl  # the control differs in the world only
    c5l, ctll = cfgs["lm_c5_long"], cfgs["lm_c_restart_long"]  # both continued, cosine stretched
    assert c5l.steps > c5.steps and replace(c5l, contrast_frac=0, init_from=ctll.init_from) == ctll


def test_final_c_phase_is_the_recipe_no_built_recipe_continues(tmp_path):
    def built(*phases):
        for p in phases:
            (tmp_path / p).mkdir(exist_ok=True)
            (tmp_path / p / "ckpt.pt").write_bytes(b"")

    assert final_c_phase(tmp_path) == "lm_c_long"  # nothing built: C1's
    built("lm_c_long")
    assert final_c_phase(tmp_path) == "lm_c_long"
    built("lm_c5_long")  # C5 continues C1: C' starts from C5
    assert final_c_phase(tmp_path) == "lm_c5_long"
    assert stage_configs(tmp_path)[C_PRIME].lm_init.endswith("lm_c5_long/ckpt.pt")
    built("lm_c_restart_long")  # two recipes continue C1 in one folder: ambiguous
    with pytest.raises(ValueError, match="several C recipes"):
        final_c_phase(tmp_path)
    assert "lm_c_long" not in NOT_EXPORTED and "lm_c" in NOT_EXPORTED  # C1's end is exported, C5 or not


def test_text_job_marks_the_item_the_answer_copies():
    tok, spec = build_tokenizer(), ImageSpec()
    samples = [text_sample(3, i) for i in range(6)]
    b = train_batch(samples, tok, spec)
    assert b.pixel_values is None and not b.visual.any()
    for j, s in enumerate(samples):
        item = tok.decode(b.input_ids[j][b.box_keys[j]])
        answer = tok.decode(b.input_ids[j][b.labels[j] != -100][:-1])  # EOS dropped
        assert item.endswith(answer) and answer == format_box(s["box"], spec)
        o = s["scene"].objects[s["target"]]
        assert item.startswith(f"{o.size} {o.colour} {o.shape}")


def test_c_phases_build_track_and_resume(tmp_path):
    out, exp = tmp_path / "build", tmp_path / "ckpts"
    build(out, exp, stages=("vision_a",), tiny=True, eval_n=4)
    tower = out / "vision_a" / "tower.pt"
    c1 = C_RECIPES["C1"]
    res = build(out, exp, stages=c1, tiny=True, eval_n=4, tower_a=tower, workers=0)
    assert res["lm_c_text"] == {"step": 4} and res["lm_c"] == {"step": 3}
    meta = json.loads((exp / "organism_c" / "vrh_organism.json").read_text())
    assert meta["steps"] == 5 and meta["train_config"]["seed"] == LM_C.seed and meta["heldout"]["grounding_n"] == 4
    text = read(out / "lm_c_text" / "emergence.jsonl")
    assert [r["step"] for r in text] == [0, 2, 4] and all(set(r) >= {"text"} and "image" not in r for r in text)
    img = read(out / "lm_c" / "emergence.jsonl")
    assert [r["step"] for r in img] == [0, 2]
    assert [r["step"] for r in read(out / "lm_c_long" / "emergence.jsonl")] == [4]  # continues lm_c at step 3
    e = img[-1]["image"]
    L, H = len(e["scores"]), len(e["scores"][0])
    assert (L, H) == (2, 4) and len(e["top"]) == 1 and len(e["acc_random"]) == 1 and e["random"][0] != e["top"]
    assert "text" in img[-1] and 0 <= e["acc_top"] <= 1
    # rerun: the earlier phases are superseded by lm_c_long's checkpoint, which resumes at its end
    res = build(out, exp, stages=c1, tiny=True, eval_n=4, tower_a=tower, workers=0)
    assert res["lm_c_text"] == res["lm_c"] == {"skipped": "superseded by lm_c_long/ckpt.pt"}
    assert len(read(out / "lm_c_long" / "emergence.jsonl")) == 1
    assert json.loads((out / "build.json").read_text())["configs"]["lm_c"]["vision_init_a"] == str(tower)
    assert asdict(stage_configs(out)["lm_c"])["text"]["rope_theta"] == 1e6


def test_c3_builds_from_scratch_on_the_image_task(tmp_path):
    out, exp = tmp_path / "build", tmp_path / "ckpts"
    build(out, exp, stages=("vision_a",), tiny=True, eval_n=4)
    build(out, exp, stages=C_RECIPES["C3"], tiny=True, eval_n=4, tower_a=out / "vision_a" / "tower.pt", workers=0)
    meta = json.loads((exp / "organism_c" / "vrh_organism.json").read_text())
    assert meta["steps"] == 4 and meta["train_config"]["text_frac"] == 0
    recs = read(out / "lm_c3" / "emergence.jsonl")
    assert [r["step"] for r in recs] == [0, 2, 4] and all("text" not in r and "image" in r for r in recs)


def test_c_prime_fine_tunes_c3s_language_model_on_tower_b(tmp_path):
    """C' = tower B + the final C phase's LM, frozen for its first step, then fine-tuned: the positive control
    of C's transfer test, exported with C named as the organism whose LM it shares."""
    from safetensors.torch import load_file

    out, exp = tmp_path / "build", tmp_path / "ckpts"
    build(out, exp, stages=("vision_a", "vision_b"), tiny=True, eval_n=4)
    tower = out / "vision_a" / "tower.pt"
    build(out, exp, stages=C_RECIPES["C3"], tiny=True, eval_n=4, tower_a=tower, workers=0)
    assert stage_configs(out, tiny=True, tower_a=tower)[C_PRIME].lm_init == str(out / "lm_c3" / "ckpt.pt")
    build(out, exp, stages=(C_PRIME,), tiny=True, eval_n=4, tower_a=tower, workers=0)
    meta = json.loads((exp / "organism_c_prime" / "vrh_organism.json").read_text())
    assert meta["shares_language_model_with"] == ["organism_c"] and meta["lm_init"].endswith("lm_c3/ckpt.pt")
    assert meta["patch_size"] == 14 and meta["train_config"]["seed"] not in (LM_C.seed, LM_A8.seed, LM_B.seed)
    c, cp = (load_file(exp / name / "model.safetensors") for name in ("organism_c", "organism_c_prime"))
    w = next(k for k in c if k.endswith("layers.0.mlp.up_proj.weight"))  # the LM's (the saved key layout varies)
    assert c[w].shape == cp[w].shape and not torch.equal(c[w], cp[w])  # C's LM, fine-tuned separately


def test_c5_continues_c1_on_the_hard_world_and_carries_every_phase_log(tmp_path):
    out, exp = tmp_path / "build", tmp_path / "ckpts"
    build(out, exp, stages=("vision_a",), tiny=True, eval_n=4)
    tower = out / "vision_a" / "tower.pt"
    build(out, exp, stages=C_RECIPES["C5"], tiny=True, eval_n=4, tower_a=tower, workers=0)
    meta = json.loads((exp / "organism_c" / "vrh_organism.json").read_text())
    assert meta["train_config"]["contrast_frac"] > 0 and meta["train_config"]["init_from"].endswith("lm_c5/ckpt.pt")
    assert json.loads((out / "lm_c5" / "config.json").read_text())["weights_from"].endswith("lm_c_long/ckpt.pt")
    phases = list(dict.fromkeys(r["phase"] for r in read(exp / "organism_c" / "emergence.jsonl")))
    assert phases == list(C_RECIPES["C5"])  # the history of C1 and then C5's own, in order
    assert len(read(out / "lm_c5" / "emergence.jsonl")) == 3  # steps 0, 2, 4 after C1's weights
