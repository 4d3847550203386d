"""The organism trainer: loss falls on a tiny config, checkpoints resume, the fast batch path equals the
processor, and an exported organism loads back with the stock transformers classes."""

from dataclasses import replace

import torch
from transformers import AutoProcessor, LlavaForConditionalGeneration

from vrh.organism import world
from vrh.organism.batches import prompt_of, train_batch
from vrh.organism.processor import ImageSpec, build_processor
from vrh.organism.train import PRESETS, Organisms, export, train, train_step


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


def test_resume_and_export(tmp_path):
    cfg = replace(PRESETS["tiny"], steps=4, ckpt_every=2, eval_n=4)
    train(cfg, tmp_path / "run", workers=0)
    org = train(replace(cfg, steps=6), tmp_path / "run", workers=0)
    assert org.step == 6
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
