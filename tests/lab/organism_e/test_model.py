"""Organism E's composition on stand-in parts (conftest): saved as a checkpoint folder, it loads through vrh's
own LLaVA adapter, whose token map puts the 8 x 8 DINOv2 patches of the 112-px image on its 14-px cells, and
whose teacher-forced answer is the recipe's training answer."""

import json

import pytest
import torch

from vrh.models import organism_e_base as parts
from vrh.models.loading import load_model
from vrh.organism import world
from vrh_lab.organism_e import data, model as e_model


def _saved(stand_in_parts, tmp_path):
    lm, vision = stand_in_parts
    m = e_model.build(lm, vision, seed=0)
    m.save_pretrained(tmp_path)
    e_model.processor(lm).save_pretrained(tmp_path)
    (tmp_path / "vrh.json").write_text(json.dumps(data.VRH_SETTINGS))
    return m


def test_the_composed_model_loads_through_the_llava_adapter_with_its_patch_grid(stand_in_parts, tmp_path):
    built = _saved(stand_in_parts, tmp_path)
    loaded = load_model(str(tmp_path))
    assert loaded.adapter.name == "llava" and loaded.adapter.box_template == data.VRH_SETTINGS["box_template"]
    s = world.grounding_sample(0, 3)
    image = world.render(s["scene"])
    prompt = loaded.adapter.grounding_prompt(s["expression"])
    assert prompt == data.prompt_of(s)
    answer = data.answer_of(s)
    batch = loaded.adapter.build_batch(loaded.processor, [image], [prompt], answers=[answer],
                                       expressions=[s["expression"]])
    rects = batch.visual_rects[0]  # [64, 4] original px
    assert len(batch.visual_positions[0]) == 64 and batch.meta[0]["token_grid"] == (8, 8)
    assert torch.equal(rects[0], torch.tensor([0.0, 0.0, 14.0, 14.0]))
    assert torch.equal(rects[9], torch.tensor([14.0, 14.0, 28.0, 28.0]))  # row 1, column 1
    # the adapter's teacher-forced sequence is the recipe's training row (prompt + separator + answer)
    trained = data.train_batch(loaded.processor, [s])
    ids = batch.inputs["input_ids"][0][batch.inputs["attention_mask"][0].bool()]
    assert torch.equal(ids, trained["input_ids"][0][: len(ids)])
    tok = loaded.processor.tokenizer
    assert tok.decode(ids[batch.answer_positions[0]]).strip() == answer
    with torch.no_grad():  # the same weights, the same logits as the model built in memory
        want = built(**{k: v for k, v in batch.inputs.items()}).logits
        got = loaded.model(**batch.inputs).logits
    assert torch.allclose(want, got, atol=1e-5)


@pytest.mark.slow
@pytest.mark.skipif(not parts.available(), reason="organism E's parts are not installed (the organism-e extra)")
def test_the_real_parts_compose_into_a_llava_that_vrh_loads(tmp_path):
    """DINOv2-S/14 + SmolLM2-135M from the packages: 30 x 9 = 270 heads, 64 visual tokens at 112 px."""
    lm, vision = parts.lm_folder(), parts.vision_folder()
    m = e_model.build(lm, vision, seed=0)
    m.save_pretrained(tmp_path)
    e_model.processor(lm).save_pretrained(tmp_path)
    (tmp_path / "vrh.json").write_text(json.dumps(data.VRH_SETTINGS))
    loaded = load_model(str(tmp_path))
    assert (loaded.num_layers, loaded.num_heads) == (30, 9)
    s = world.grounding_sample(0, 3)
    batch = loaded.adapter.build_batch(loaded.processor, [world.render(s["scene"])], [data.prompt_of(s)],
                                       expressions=[s["expression"]])
    assert len(batch.visual_positions[0]) == 64 and batch.meta[0]["token_grid"] == (8, 8)
