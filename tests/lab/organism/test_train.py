"""The organism trainer: loss falls on a tiny config, checkpoints resume, the fast batch path equals the
processor, and an exported organism loads back with the stock transformers classes."""

import re
from dataclasses import replace

import torch
from transformers import AutoProcessor, LlavaForConditionalGeneration

from vrh.organism import world
from vrh_lab.organism.batches import prompt_of, train_batch
from vrh_lab.organism.processor import ImageSpec, build_processor
from vrh_lab.organism.train import PRESETS, Organisms, export, train, train_step


def test_loss_falls_on_tiny_config():
    org = Organisms(replace(PRESETS["tiny"], route_l1=0.01))
    losses = [train_step(org)["ce_a"] for _ in range(25)]
    assert sum(losses[-5:]) / 5 < 0.7 * sum(losses[:5]) / 5


def test_fast_batch_matches_processor():
    spec = ImageSpec()
    proc = build_processor(spec)
    s = world.grounding_sample(0, 7)
    img = world.render(s["scene"])
    ref = proc(images=img, text=prompt_of(s), return_tensors="pt")
    b = train_batch([s], proc.tokenizer, spec)
    n = ref["input_ids"].shape[1]
    assert torch.equal(b.input_ids[0, :n], ref["input_ids"][0])
    assert torch.allclose(b.pixel_values, ref["pixel_values"], atol=1e-5)
    assert int(b.visual.sum()) == spec.num_image_tokens
    assert (b.labels[0] != -100).sum() == 10  # "[ a , b , c , d ]" + EOS


def test_resume_and_export(tmp_path, capsys):
    cfg = replace(PRESETS["tiny"], steps=4, ckpt_every=2, eval_n=4)
    train(cfg, tmp_path / "run", workers=0)
    org = train(replace(cfg, steps=6), tmp_path / "run", workers=0)
    assert org.step == 6
    # a step line says of how many and when the stage ends (`vrh organism build` showed "ETA ?" for a stage)
    steps = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step ")]
    assert steps[0].startswith("step 4/4 ") and steps[-1].startswith("step 6/6 ")
    assert all(re.search(r" stage ETA \d+:\d\d:\d\d$", line) for line in steps)
    export(org, tmp_path / "exp", n_eval=4)
    model = LlavaForConditionalGeneration.from_pretrained(tmp_path / "exp" / "tiny_b")
    proc = AutoProcessor.from_pretrained(tmp_path / "exp" / "tiny_b")
    assert (tmp_path / "exp" / "tiny_b" / "vrh_organism.json").exists()
    # B shares A's language model weights
    a = LlavaForConditionalGeneration.from_pretrained(tmp_path / "exp" / "tiny_a")
    assert torch.equal(a.model.language_model.layers[0].self_attn.o_proj.weight,
                       model.model.language_model.layers[0].self_attn.o_proj.weight)
    enc = proc(images=world.render(world.grounding_sample(0, 0)["scene"]),
               text="USER: <image> where is the red circle ? ASSISTANT:", return_tensors="pt")
    out = model.generate(**enc, max_new_tokens=3, do_sample=False)
    assert out.shape[1] == enc["input_ids"].shape[1] + 3 or out.shape[1] <= enc["input_ids"].shape[1] + 3


def _attention_with_box_mass(batch, masses, layers=2, heads=4):
    """Attentions [L][B, H, S, S] where head (0, 0) of sample b puts masses[b] on its box keys (the rest on
    position 0) and every other head attends to position 0 only."""
    B, S = batch.input_ids.shape
    att = torch.zeros(layers, B, heads, S, S)
    att[..., 0] = 1.0
    for b, m in enumerate(masses):
        keys = batch.box_keys[b].nonzero().squeeze(1)
        att[0, b, 0, :, 0] = 1.0 - m
        att[0, b, 0, :, keys] = m / len(keys)
    return list(att)


def test_box_nll_batch_mean_and_per_sample():
    from vrh_lab.organism.pressures import box_nll

    spec = ImageSpec()
    proc = build_processor(spec)
    batch = train_batch([world.grounding_sample(0, i) for i in range(2)], proc.tokenizer, spec)
    att = _attention_with_box_mass(batch, [0.9, 0.1])
    mean_form = float(box_nll(att, batch))
    per_sample = float(box_nll(att, batch, per_sample=True))
    assert abs(mean_form - (-torch.log(torch.tensor(0.5 + 1e-4)))) < 1e-4
    expected = -(torch.log(torch.tensor(0.9 + 1e-4)) + torch.log(torch.tensor(0.1 + 1e-4))) / 2
    assert abs(per_sample - float(expected)) < 1e-4
    assert per_sample > mean_form  # the per-sample form charges the sample the head gets wrong


def test_weights_from_starts_fresh_optimizer_with_other_trainable_set(tmp_path):
    cfg = replace(PRESETS["tiny"], steps=2, batch_b=0, freeze_vision=True, dropout_protect_top=2,
                  ckpt_every=1, eval_n=2)
    first = train(cfg, tmp_path / "run", workers=0)
    nxt = Organisms(replace(cfg, freeze_vision=False, weights_from=str(tmp_path / "run" / "ckpt.pt")))
    assert nxt.step == 0
    for k, v in first.a.state_dict().items():
        assert torch.equal(v, nxt.a.state_dict()[k]), k
    assert torch.equal(nxt.box_ema, first.box_ema) and bool(nxt.box_ema.any())
    tower = next(nxt.a.model.vision_tower.parameters())
    assert tower.requires_grad and any(tower is p for g in nxt.opt.param_groups for p in g["params"])
    before = tower.detach().clone()
    train_step(nxt)
    assert not torch.equal(before, tower.detach())  # the tower frozen in the first run now trains


def test_attribute_labels_per_visual_token_follow_the_scene():
    from vrh_lab.organism.pretrain_vision import COLOUR_IDX, SHAPE_IDX, dense_targets

    spec = ImageSpec()
    proc = build_processor(spec)
    samples = [world.grounding_sample(0, i) for i in range(3)]
    b = train_batch(samples, proc.tokenizer, spec)
    assert b.patch_colour.shape == (3, spec.num_image_tokens) == b.patch_shape.shape
    for k, s in enumerate(samples):
        d = dense_targets(s["scene"], spec)
        assert torch.equal(b.patch_colour[k], torch.from_numpy(d["colour"]))
        target = s["scene"].objects[s["target"]]
        x1, y1, x2, y2 = target.box
        centre = (int((y1 + y2) / 2) // spec.patch_size) * spec.grid + int((x1 + x2) / 2) // spec.patch_size
        assert int(b.patch_colour[k, centre]) == COLOUR_IDX[target.colour]
        assert int(b.patch_shape[k, centre]) == SHAPE_IDX[target.shape]
        assert int((b.patch_colour[k] == -100).sum()) > 0  # background patches are ignored


def test_attr_aux_probes_train_and_resume(tmp_path):
    cfg = replace(PRESETS["tiny"], steps=3, batch_b=0, attr_aux=0.5, attr_aux_layers=(0, 2), ckpt_every=1, eval_n=2)
    org = Organisms(cfg)
    stats = train_step(org)
    assert stats["aux_a"] > 0 and 0.0 <= stats["aux_colour_acc_a"] <= 1.0
    assert len(org.probes.colour) == 2
    before = [p.detach().clone() for p in org.probes.parameters()]
    train_step(org)
    assert any(not torch.equal(a, p) for a, p in zip(before, org.probes.parameters()))  # probes are trained
    first = train(cfg, tmp_path / "run", workers=0)
    again = Organisms(cfg)
    again.load(torch.load(tmp_path / "run" / "ckpt.pt", weights_only=False))
    for a, p in zip(first.probes.parameters(), again.probes.parameters()):
        assert torch.equal(a, p)


def test_rope_theta_reaches_the_language_model():
    from vrh_lab.organism.model import TextArch, build_model, VisionArch

    text = TextArch(hidden=32, layers=1, heads=2, intermediate=64, rope_theta=1e6)
    m = build_model(VisionArch(hidden=32, layers=1, heads=2, intermediate=64), text, world.IMAGE_SIZE, 0)
    assert m.config.text_config.rope_parameters["rope_theta"] == 1e6
    inv = m.model.language_model.rotary_emb.inv_freq
    dim = 32 // 2
    assert torch.allclose(inv, 1.0 / (1e6 ** (torch.arange(0, dim, 2).float() / dim)))


def test_resuming_a_checkpoint_of_another_parameter_set_fails_clearly(tmp_path):
    import pytest

    cfg = replace(PRESETS["tiny"], steps=1, batch_b=0, ckpt_every=1, eval_n=2)
    train(cfg, tmp_path / "run", workers=0)
    with pytest.raises(SystemExit, match="move it away"):
        train(replace(cfg, steps=2, attr_aux=0.5, attr_aux_layers=(0, 1)), tmp_path / "run", workers=0)


def test_resume_needs_only_the_runs_own_checkpoint(tmp_path):
    """A phase started from another run's weights (``weights_from``) resumes from its own ckpt.pt even when
    the superseded starting checkpoint is gone (it is not committed), and to the same weights."""
    import shutil

    cfg = replace(PRESETS["tiny"], steps=2, batch_b=0, ckpt_every=1, eval_n=2)
    train(cfg, tmp_path / "start", workers=0)
    nxt = replace(cfg, steps=3, weights_from=str(tmp_path / "start" / "ckpt.pt"))
    train(nxt, tmp_path / "phase", workers=0)
    full = train(replace(nxt, steps=4), tmp_path / "phase", workers=0)
    shutil.rmtree(tmp_path / "start")
    resumed = train(replace(nxt, steps=4), tmp_path / "phase", workers=0)  # resumes at step 4: nothing to do
    assert resumed.step == full.step == 4
    for k, v in full.a.state_dict().items():
        assert torch.equal(v, resumed.a.state_dict()[k]), k


def test_training_forward_without_attention_losses_runs_sdpa_with_eager_loss_and_gradients():
    """No loss reads attention weights (organism C): the forward runs SDPA, with eager's loss and gradients,
    and the model's eager setting is back afterwards (tracking reads the weights)."""
    from vrh_lab.organism.pressures import forward_loss
    from vrh_lab.organism.train import make_batches

    org = Organisms(replace(PRESETS["tiny"], batch_a=6, vqa_frac=0.3, attr_aux=0.3, attr_aux_layers=(0, 1)))
    batch = make_batches(org.cfg, org.tok, {"a": org.spec_a}, 0)["a"]
    model = org.a
    assert model.config.text_config._attn_implementation == "eager"
    seen = []
    hook = model.model.language_model.layers[0].self_attn.register_forward_pre_hook(
        lambda m, a, kw: seen.append(model.config.text_config._attn_implementation), with_kwargs=True)
    try:
        grads = {}
        for need in (False, True):
            model.zero_grad()
            loss, _, _, heads, aux = forward_loss(model, batch, False, want_heads=need, probes=org.probes)
            (loss + aux[0]).backward()
            grads[need] = (float(loss.detach()), [p.grad.clone() for p in org.lm_parameters() if p.grad is not None])
            assert (heads is not None) == need
    finally:
        hook.remove()
    assert seen == ["sdpa", "eager"] and model.config.text_config._attn_implementation == "eager"
    assert abs(grads[False][0] - grads[True][0]) < 1e-5
    assert len(grads[False][1]) == len(grads[True][1]) > 0
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(grads[False][1], grads[True][1]))


def test_contrast_frac_replaces_only_full_world_grounding_samples():
    from vrh_lab.organism.train import stream_sample

    args = (0.15, 112)
    plain = [stream_sample(2, i, *args, "full", 0.1, 0.15) for i in range(200)]
    assert plain == [stream_sample(2, i, *args, "full", 0.1, 0.15, 0.0) for i in range(200)]  # unchanged
    mixed = [stream_sample(2, i, *args, "full", 0.1, 0.15, 0.5) for i in range(200)]
    changed = [i for i, (a, b) in enumerate(zip(plain, mixed)) if a != b]
    assert all(plain[i]["task"] == "grounding" and mixed[i]["kind"] == "attribute" for i in changed)
    n_ground = sum(s["task"] == "grounding" for s in plain)
    assert 0.3 * n_ground < len(changed) < 0.7 * n_ground
    curriculum = [stream_sample(2, i, *args, "easy", 0.1, 0.15, 0.5) for i in range(50)]
    assert curriculum == [stream_sample(2, i, *args, "easy", 0.1, 0.15) for i in range(50)]
