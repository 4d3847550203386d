"""GLM-4.1V / GLM-4.6V specifics: the answer after the thinking block, the README's answer strings, the
GLM-4.6V classes through the same adapter, capture and masking on GLM's biased q/k/v, and the commands."""

from __future__ import annotations

import copy

import pytest
import torch
from PIL import Image

from vrh.models.adapters import get_adapter
from vrh.testing import save_tiny
from vrh.testing.tiny_glm4v import tiny_glm4v, tiny_glm46v

from .checks import assert_capture_matches_eager, assert_masking_is_exact

SIZE = (150, 100)


@pytest.fixture
def glm():
    model, processor = tiny_glm4v()
    return get_adapter("glm4v"), model, processor


@pytest.mark.parametrize("text, norm", [
    ("<think>The user wants the red ball.</think><|begin_of_box|>[150,250,600,750]<|end_of_box|>",
     (150, 250, 600, 750)),
    ("<|begin_of_box|>[[150,250,600,750]]<|end_of_box|>", (150, 250, 600, 750)),  # README: brackets vary
    ("<|begin_of_box|><150,250,600,750><|end_of_box|>", (150, 250, 600, 750)),
    ("<think>Is it [1,2,3,4]? No.</think><answer><|begin_of_box|>(150,250,600,750)<|end_of_box|></answer>",
     (150, 250, 600, 750)),  # GLM-4.1V-Thinking wraps the answer in <answer>; the box inside the think is skipped
    ("<think>\n</think>\nThe ball: [150, 250, 600, 750]", (150, 250, 600, 750)),  # box tokens stripped
])
def test_canonical_answers_parse(glm, text, norm):
    adapter = glm[0]
    w, h = SIZE
    want = (norm[0] * w / 1000, norm[1] * h / 1000, norm[2] * w / 1000, norm[3] * h / 1000)
    assert adapter.parse_box(text, {}, SIZE) == pytest.approx(want)


def test_box_inside_an_unfinished_thought_is_no_answer(glm):
    adapter = glm[0]
    assert adapter.parse_box("<think>the ball is at [150,250,600,750] or", {}, SIZE) is None
    # the box before the thinking block closed is not the answer; the one after it is
    got = adapter.parse_box("[1,2,3,4]</think><|begin_of_box|>[0,0,500,500]<|end_of_box|>", {}, SIZE)
    assert got == pytest.approx((0, 0, 75, 50))


def test_format_box_and_prompt(glm):
    adapter = glm[0]
    assert adapter.format_box((15, 25, 90, 75), {}, SIZE) == "<|begin_of_box|>[100,250,600,750]<|end_of_box|>"
    assert adapter.grounding_prompt("the red ball") == (
        "Help me to locate the red ball in the image and give me its bounding boxes.")


def test_generation_prompt_skips_thinking_and_decode_keeps_box_tokens(glm):
    adapter, _, processor = glm
    chat = adapter.chat_text(processor, "where?")
    assert chat.endswith("<|assistant|>\n<think></think>\n")
    thinking = copy.copy(adapter)
    thinking.thinking = True
    assert thinking.chat_text(processor, "where?").endswith("<|assistant|>\n")
    tok = processor.tokenizer
    ids = tok("<think>x</think><|begin_of_box|>[1,2,3,4]<|end_of_box|><|user|>", return_tensors="pt").input_ids
    padded = torch.cat([ids, torch.full((1, 2), tok.pad_token_id)], dim=1)  # [1, T + 2]
    assert adapter.decode(processor, padded) == ["<think>x</think><|begin_of_box|>[1,2,3,4]<|end_of_box|>"]


def test_glm46v_classes_load_through_the_same_adapter(tmp_path):
    model, processor = tiny_glm46v()
    assert model.config.model_type == "glm46v"
    save_tiny(model, processor, tmp_path)
    adapter = get_adapter("glm46v")
    model2, processor2 = adapter.load(str(tmp_path))
    assert type(model2).__name__ == "Glm46VForConditionalGeneration"
    assert type(processor2).__name__ == "Glm46VProcessor"
    images = [Image.new("RGB", (150, 100), (9, 9, 9))]
    batch = adapter.build_batch(processor2, images, [adapter.grounding_prompt("red ball")])
    assert len(batch.visual_positions[0]) == batch.meta[0]["token_grid"][0] * batch.meta[0]["token_grid"][1]
    with torch.no_grad():
        assert torch.allclose(model(**batch.inputs).logits, model2(**batch.inputs).logits, atol=1e-5)


def _batch(adapter, processor):
    images = [Image.new("RGB", (150, 100), (200, 30, 30)), Image.new("RGB", (70, 90), (30, 30, 200))]
    prompts = [adapter.grounding_prompt(e) for e in ("red ball", "man in a hat")]
    answers = [adapter.format_box((10, 20, 60, 80), {}, (150, 100)), adapter.format_box((5, 8, 40, 50), {}, (70, 90))]
    return adapter.build_batch(processor, images, prompts, answers=answers, expressions=["red ball", "man in a hat"])


def test_capture_matches_eager_with_qkv_bias(glm):
    adapter, model, processor = glm
    assert model.model.language_model.layers[0].self_attn.q_proj.bias is not None  # the GLM quirk under test
    batch = _batch(adapter, processor)
    assert not batch.inputs["attention_mask"].all()  # one sample is left-padded
    queries = [torch.cat([batch.expression_positions[b], batch.answer_positions[b] - 1]).unique() for b in range(2)]
    assert_capture_matches_eager(model, adapter, batch.inputs, queries)


def test_masking_equals_zeroed_o_proj_columns(glm):
    adapter, model, processor = glm
    assert_masking_is_exact(model, adapter, _batch(adapter, processor).inputs, [(0, 1), (1, 3)])


# --- the commands, end to end on the tiny checkpoint -------------------------------------------

def test_detect_and_evaluate_run_end_to_end(detect_then_evaluate):
    out, _, res = detect_then_evaluate(tiny_glm4v, n=2)
    assert out["num_layers"] == 2 and out["num_heads"] == 4 and out["n_scored"] == 2
    assert res
