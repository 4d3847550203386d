"""Organism D's lab code on a tiny Gemma 3 (no base package needed): the training batch teaches the answer
tokens only, and the exported deltas (peft's adapters as A/B pairs) rebuild exactly the trained model."""

import copy

import pytest
import torch

pytest.importorskip("peft")

from vrh.models import deltas
from vrh.organism import world  # noqa: E402
from vrh_lab.organism_d import data  # noqa: E402
from vrh_lab.organism_d.export import delta_state  # noqa: E402
from vrh_lab.organism_d.model import LoraSpec, add_lora  # noqa: E402


@pytest.fixture
def tiny():
    from vrh.testing.tiny_gemma3 import tiny_gemma3

    model, processor = tiny_gemma3(seed=0)
    return copy.deepcopy(model), processor


def test_train_batch_labels_only_the_answer_and_the_prompt_is_what_generation_sees(tiny):
    _, proc = tiny
    samples = [world.grounding_sample(3, i) for i in range(2)] + [world.vqa_sample(3, 0)]
    batch = data.train_batch(proc, samples)
    prompts = data.prompt_batch(proc, samples)
    tok = proc.tokenizer
    for b, s in enumerate(samples):
        keep = batch["labels"][b] != -100
        assert tok.decode(batch["input_ids"][b][keep]) == data.answer_of(s) + data.END
        n = int(prompts["attention_mask"][b].sum())  # left-padded prompt; the train row starts with it
        assert torch.equal(batch["input_ids"][b][:n], prompts["input_ids"][b][-n:])
        assert int(batch["token_type_ids"][b].sum()) == proc.image_seq_length  # the soft tokens only
    box = samples[0]["box"]
    assert data.ADAPTER.parse_box(data.answer_of(samples[0]), {}, (112, 112)) == pytest.approx(box, abs=0.1)


def test_add_lora_trains_only_the_projector_and_the_adapters(tiny):
    model = add_lora(copy.deepcopy(tiny[0]), LoraSpec(rank=2, alpha=4))
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n or "multi_modal_projector" in n for n in names)
    targets = {n.split(".lora_")[0].rsplit(".", 1)[1] for n in names if "lora_" in n}
    assert targets == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    n_layers = len(tiny[0].model.language_model.layers)
    assert sum("lora_A" in n for n in names) == 7 * n_layers  # every layer alike: nothing names a head
    frozen = add_lora(copy.deepcopy(tiny[0]), LoraSpec(rank=0))
    assert all("multi_modal_projector" in n for n, p in frozen.named_parameters() if p.requires_grad)
    tower = add_lora(copy.deepcopy(tiny[0]), LoraSpec(rank=0), train_tower=True)
    trained = {n for n, p in tower.named_parameters() if p.requires_grad}
    assert trained and all("multi_modal_projector" in n or "vision_tower" in n for n in trained)
    assert any("vision_tower" in n for n in trained)
    assert not any("language_model" in n for n in trained)


def test_exported_deltas_merge_into_exactly_the_trained_model(tiny):
    base, proc = tiny
    model = add_lora(copy.deepcopy(base), LoraSpec(rank=2, alpha=4))
    with torch.no_grad():  # peft starts B at zero; a trained adapter is not
        for n, p in model.named_parameters():
            if "lora_B" in n or "multi_modal_projector" in n:
                p.normal_(0, 0.2)
    d = delta_state(model)
    assert sum(k.startswith("lora.") for k in d) == 2 * 7 * len(base.model.language_model.layers)
    base_state = {k: v for k, v in base.state_dict().items()}
    merged = deltas.merge(base_state, d, scale=4 / 2)
    rebuilt = copy.deepcopy(base)
    rebuilt.load_state_dict(merged)
    enc = data.prompt_batch(proc, [world.grounding_sample(3, i) for i in range(2)])
    with torch.no_grad():
        want, got = model(**enc).logits, rebuilt(**enc).logits
    assert torch.allclose(want, got, atol=1e-5)
    assert not torch.allclose(base(**enc).logits, got, atol=1e-3)
