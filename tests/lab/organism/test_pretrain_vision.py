"""Stage 1 (vision pretraining): per-patch targets are right, the loss falls, the trained tower loads
into the stage-2 organism (frozen), and an LM starts from another run's checkpoint."""

import re
from dataclasses import replace

import numpy as np
import pytest
import torch

from vrh.organism import world
from vrh_lab.organism.model import VisionArch
from vrh_lab.organism.pretrain_vision import DenseHeads, batch, dense_targets, patch_features, pretrain
from vrh_lab.organism.processor import ImageSpec
from vrh_lab.organism.train import PRESETS, Organisms, train, train_step


def test_dense_targets_mark_the_patches_an_object_covers():
    spec = ImageSpec(112, 16)  # 7 x 7 grid
    red = world.Obj("red", "circle", "medium", (20, 20, 40, 30))  # cols 1-2, row 1
    blue = world.Obj("blue", "square", "small", (90, 90, 104, 104))  # cols 5-6, rows 5-6
    t = dense_targets(world.Scene((red, blue), texture_seed=0), spec)
    grid = t["obj"].reshape(7, 7)
    assert grid.sum() == 2 + 4
    assert grid[1, 1] == grid[1, 2] == 1 and grid[5, 5] == grid[6, 6] == 1 and grid[0, 0] == 0
    colour = t["colour"].reshape(7, 7)
    assert colour[1, 1] == list(world.COLOURS).index("red") and colour[6, 5] == list(world.COLOURS).index("blue")
    assert colour[3, 3] == -100
    np.testing.assert_allclose(t["box"].reshape(7, 7, 4)[1, 2] * 112, red.box)


def test_pretraining_loss_falls_and_resumes(tmp_path):
    arch = VisionArch(hidden=32, layers=1, heads=2, intermediate=64)
    spec = ImageSpec(112, 16)
    from vrh_lab.organism.model import TextArch, build_model
    tower = build_model(arch, TextArch(hidden=32, layers=1, heads=2, intermediate=64), 112, 0).model.vision_tower
    heads = DenseHeads(arch.hidden)
    opt = torch.optim.AdamW(list(tower.parameters()) + list(heads.parameters()), lr=3e-3)
    px, t = batch(0, 0, 16, spec)
    losses = []
    for _ in range(30):  # overfit one batch: the heads read the tower's features
        loss, _ = heads.loss(patch_features(tower, px), t)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < 0.5 * losses[0]
    m = pretrain(arch, tmp_path / "v", steps=2, bs=4)
    assert (tmp_path / "v" / "tower.pt").exists() and (tmp_path / "v" / "heads.pt").exists() and m["steps"] == 2
    assert pretrain(arch, tmp_path / "v", steps=3, bs=4)["steps"] == 3  # resumed, one more step


def test_progress_lines_say_of_how_many_and_when_the_stage_ends(tmp_path, capsys):
    """`vrh organism build`'s first stage printed "vision step 50 ... s/step=0.33" for 11 min, its only ETA "?"."""
    pretrain(VisionArch(hidden=32, layers=1, heads=2, intermediate=64), tmp_path / "v", steps=2, bs=2, log_every=1)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("vision step")]
    assert [line.split()[2] for line in lines] == ["1/2", "2/2"]
    assert all(re.search(r" stage ETA \d+:\d\d:\d\d$", line) for line in lines) and lines[-1].endswith(" 0:00:00")


def test_stage2_uses_the_pretrained_tower_frozen_and_an_lm_from_another_run(tmp_path):
    tiny = PRESETS["tiny"]
    pretrain(tiny.vision_a, tmp_path / "v", steps=1, bs=2)
    cfg = replace(tiny, batch_b=0, vision_init_a=str(tmp_path / "v" / "tower.pt"), freeze_vision=True,
                  steps=2, ckpt_every=2, eval_n=2)
    org = Organisms(cfg)
    ref = torch.load(tmp_path / "v" / "tower.pt")
    k = "embeddings.patch_embedding.weight"
    assert torch.equal(org.a.model.vision_tower.state_dict()[k], ref[k])
    train_step(org)
    assert torch.equal(org.a.model.vision_tower.state_dict()[k], ref[k])  # frozen
    train(cfg, tmp_path / "run_a", workers=0)
    # organism B's run: its own tower, the language model taken from A's run, LM frozen for one step
    cfg_b = replace(cfg, vision_init_a="", freeze_vision=False, seed=1, vision_a=tiny.vision_b,
                    lm_init=str(tmp_path / "run_a" / "ckpt.pt"), lm_freeze_steps=1)
    b = Organisms(cfg_b)
    a_state = torch.load(tmp_path / "run_a" / "ckpt.pt", weights_only=False)["a"]
    w = "model.language_model.layers.0.self_attn.o_proj.weight"
    assert torch.equal(b.a.state_dict()[w], a_state[w])
    train_step(b)
    assert torch.equal(b.a.state_dict()[w], a_state[w])  # LM frozen during the first step
    train_step(b)
    assert not torch.equal(b.a.state_dict()[w], a_state[w])


def test_head_dropout_spares_the_protected_retrieval_heads():
    org = Organisms(replace(PRESETS["tiny"], batch_b=0, head_dropout=1.0, dropout_protect_top=1,
                            pressure_start=0, route_warmup=1))
    stats = train_step(org)  # fills the running answer->box mass
    assert org.box_ema.abs().sum() > 0 and stats["ce_a"] > 0
    (l, h), = org.protected_heads()
    assert float(org.box_ema[l, h]) == float(org.box_ema.max())
    seen = {}
    o = org.a.model.language_model.layers[l].self_attn.o_proj
    handle = o.register_forward_pre_hook(lambda m, a: seen.setdefault("x", a[0].detach()))
    try:
        org.dropout.active, org.dropout.p, org.dropout.protected = True, 1.0, {(l, h)}
        from vrh_lab.organism.train import make_batches
        batch = make_batches(org.cfg, org.tok, {"a": org.spec_a}, 0)["a"]
        org.a(input_ids=batch.input_ids, attention_mask=batch.attention_mask, pixel_values=batch.pixel_values)
    finally:
        handle.remove()
        org.dropout.active = False
    D = org.dropout.D
    x = seen["x"].view(*seen["x"].shape[:-1], org.dropout.H, D)
    # p = 1 drops every head but the protected one (dropout's hook was registered first, so this one saw
    # its output)
    assert x[..., h, :].abs().sum() > 0
    others = [j for j in range(org.dropout.H) if j != h]
    assert x[..., others, :].abs().sum() == 0


def test_routing_penalty_can_spare_the_protected_heads():
    import copy

    cfg = replace(PRESETS["tiny"], batch_b=0, route_l1=0.1, pressure_start=0, route_warmup=1,
                  head_dropout=0.0, dropout_protect_top=2)
    org = Organisms(cfg)
    train_step(org)  # fills box_ema, so two heads are protected from now on
    twin = copy.deepcopy(org)
    twin.cfg = replace(cfg, route_spare_protected=True)
    paid, spared = train_step(org)["mass_a"], train_step(twin)["mass_a"]
    assert len(org.protected_heads()) == 2
    assert 0 < spared < paid  # the protected heads' visual attention is no longer charged


def test_answer_box_mass_first_positions_only():
    from vrh_lab.organism.batches import train_batch
    from vrh_lab.organism.pressures import answer_box_mass

    org = Organisms(replace(PRESETS["tiny"], batch_b=0))
    s = world.grounding_sample(0, 3)
    b = train_batch([s], org.tok, org.spec_a)
    S = b.input_ids.shape[1]
    predicting = ((b.labels[0] != -100).nonzero().squeeze(1) - 1).tolist()  # positions predicting answer tokens
    box_key = int(b.box_keys[0].nonzero()[0])
    other_key = int((b.visual[0] & ~b.box_keys[0]).nonzero()[0])
    att = torch.zeros(1, 1, S, S)  # [B, H, S, S]
    att[0, 0, :, other_key] = 1.0
    att[0, 0, predicting[0], :] = 0.0
    att[0, 0, predicting[0], box_key] = 1.0  # only the position predicting "[" looks at the box
    assert float(answer_box_mass([att], b, first=1)[0, 0, 0]) == 1.0
    assert abs(float(answer_box_mass([att], b)[0, 0, 0]) - 1 / len(predicting)) < 1e-6


def test_projector_whitening_decorrelates_the_tower_features():
    from vrh_lab.organism.pretrain_vision import batch, patch_features

    org = Organisms(replace(PRESETS["tiny"], projector_whiten=True))
    px, _ = batch(5, 0, 64, org.spec_a)  # other images than the ones whitened on
    with torch.no_grad():
        f = patch_features(org.a.model.vision_tower.eval(), px)
        h = org.a.model.multi_modal_projector.linear_1(f).reshape(-1, f.shape[-1])  # [N*V, D]
    cov = torch.cov(h.T)
    assert h.mean(0).abs().max() < 0.3
    assert (cov - torch.eye(cov.shape[0])).abs().max() < 0.5  # unwhitened: variances differ by orders
    raw = torch.cov(f.reshape(-1, f.shape[-1]).T).diagonal()
    assert raw.max() / raw.min() > 5


def test_caption_samples_mark_their_box_for_the_warm_start():
    from vrh_lab.organism.batches import train_batch

    org = Organisms(replace(PRESETS["tiny"], batch_b=0))
    s = world.caption_sample(0, 2)
    b = train_batch([s], org.tok, org.spec_a)
    assert s["task"] == "vqa" and s["answer"].split()[1] in world.COLOURS
    assert 0 < int(b.box_keys.sum()) <= 9 and not (b.box_keys & ~b.visual).any()
    assert b.labels[0][b.labels[0] != -100].numel() == 4  # size colour shape + EOS


class _Payload:
    marker = ""

    def __reduce__(self):  # unpickling this creates the marker file: a checkpoint that runs code
        return (open, (self.marker, "w"))


def test_planted_checkpoints_run_no_code_and_name_the_file(tmp_path):
    marker = tmp_path / "pwned"
    _Payload.marker = str(marker)
    arch = VisionArch(hidden=32, layers=1, heads=2, intermediate=64)
    (tmp_path / "v").mkdir()
    torch.save({"tower": {}, "step": 0, "x": _Payload()}, tmp_path / "v" / "vision_ckpt.pt")
    with pytest.raises(ValueError, match="vision_ckpt.pt: not a readable vision pretraining checkpoint"):
        pretrain(arch, tmp_path / "v", steps=1, bs=2)
    (tmp_path / "t").mkdir()
    torch.save({"step": 0, "x": _Payload()}, tmp_path / "t" / "ckpt.pt")
    with pytest.raises(ValueError, match="ckpt.pt: not a readable training checkpoint.*move it away"):
        train(replace(PRESETS["tiny"], steps=1), tmp_path / "t")
    weights = tmp_path / "w.pt"
    torch.save({"a": {}, "x": _Payload()}, weights)
    with pytest.raises(ValueError, match="w.pt: not a readable checkpoint"):
        Organisms(replace(PRESETS["tiny"], weights_from=str(weights)))
    assert not marker.exists()
