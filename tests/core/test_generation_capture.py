"""Rows captured during generate() (vrh.core.generation_capture) against a teacher-forced capture of the same tokens.

Why these cases: a left-padded batch whose answers stop at an EOS at different steps (forced by a logits
processor, whatever a random model emits; one runs to
max_new_tokens, whose last own row needs the extra decode step), on Qwen2.5-VL (mrope, GQA), LLaVA
(plain rope) and Gemma 3 (a sliding-window layer whose cache keeps only its last keys, so decode rows are
right-aligned). The reference re-left-pads prompt + GENERATED ids as the two-pass detection would and runs
one capture_attention_rows forward. Then one-pass detection against two-pass detection on the tiny
checkpoint, where the answer text re-tokenizes to the generated ids.
"""

from __future__ import annotations

import pytest
import torch

from vrh.models.adapters import get_adapter
from vrh.core.capture import MultipleForwardsError, capture_attention_rows, capture_generation_rows
from vrh.data import load_dataset
from vrh.experiments.detection import detect_heads
from vrh.core.generation_capture import generate_with_rows
from vrh.core.layout import VISION, layer_key_space, visual_key_space
from vrh.models.loading import LoadedModel, load_model
from vrh.models.generation import generate_answers
from vrh.testing import TINY_BUILDERS

TOL = 1e-5
MAX_NEW = 10


def _images(n):
    from PIL import Image, ImageDraw

    ims = []
    for i in range(n):
        im = Image.new("RGB", (84, 56), (240, 240, 240))
        ImageDraw.Draw(im).rectangle([4 + 9 * i, 8 + 3 * i, 30 + 9 * i, 30 + 3 * i], fill=(200, 30 + 60 * i, 30))
        ims.append(im)
    return ims


class _StopAt:
    """A logits processor that forces the EOS as generated token ``stops[b]`` of row b (0-based) and forbids
    every EOS id before it: answers of chosen, unequal lengths whatever a random-init model emits."""

    def __init__(self, eos: list[int], stops: list[int]):
        self.eos, self.stops, self.start = eos, stops, None

    def __call__(self, input_ids, scores):
        if self.start is None:
            self.start = input_ids.shape[1]  # the prompt's (padded) length: the first call is the prefill's
        t = input_ids.shape[1] - self.start  # tokens generated so far
        low = torch.finfo(scores.dtype).min
        for b, n in enumerate(self.stops[:len(scores)]):
            if t < n:
                scores[b, self.eos] = low  # no EOS of its own before the chosen step
            elif t == n:
                scores[b] = low
                scores[b, self.eos[0]] = 0.0
        return scores


def _force_stops(monkeypatch, model, stops: list[int]) -> None:
    """Every ``model.generate`` call from now on ends row b after ``stops[b]`` answer tokens (each call gets a
    fresh processor)."""
    from transformers import LogitsProcessorList

    eos = model.generation_config.eos_token_id
    eos = list(eos) if isinstance(eos, (list, tuple)) else [eos]  # Gemma 3 has several
    plain = model.generate

    def generate(*args, **kw):
        return plain(*args, logits_processor=LogitsProcessorList([_StopAt(eos, stops)]), **kw)

    monkeypatch.setattr(model, "generate", generate)


def _teacher_forced_rows(lm, images, prompts, prompt_batch, answer_ids, gen_positions):
    """Rows of prompt + generated ids in ONE forward, re-left-padded like a two-pass capture batch; returned
    per sample in generation coordinates (L, H, Q, P + A_b) so they compare entry by entry."""
    P, B = prompt_batch.seq_len, len(answer_ids)
    mask = prompt_batch.inputs["attention_mask"]  # (B, P)
    pad_gen = [P - int(m.sum()) for m in mask]
    lens = [P - pad_gen[b] + len(answer_ids[b]) for b in range(B)]
    W = max(lens)
    pad_tf = [W - n for n in lens]
    inputs = dict(prompt_batch.inputs)
    pad_id = getattr(lm.processor, "tokenizer", lm.processor).pad_token_id
    answer_type = 0  # the token type the adapter's own teacher-forced batch gives answer tokens (PaliGemma: 1)
    if "token_type_ids" in prompt_batch.inputs:
        tf = lm.adapter.build_batch(lm.processor, images[:1], prompts[:1], answers=["1"])
        answer_type = int(tf.inputs["token_type_ids"][0][tf.answer_positions[0][0]])
    for key, v in prompt_batch.inputs.items():  # per-token inputs: ids, mask, token type ids (0 = text)
        if isinstance(v, torch.Tensor) and v.dim() == 2 and v.shape == mask.shape:
            fill = pad_id if key == "input_ids" else 0
            out = torch.full((B, W), fill, dtype=v.dtype)  # (B, W)
            for b in range(B):
                fill_tail = {"input_ids": None, "attention_mask": 1, "token_type_ids": answer_type}.get(key, 0)
                tail = answer_ids[b] if fill_tail is None else torch.full_like(answer_ids[b], fill_tail)
                out[b, pad_tf[b]:] = torch.cat([v[b, pad_gen[b]:], tail.to(v.dtype)])
            inputs[key] = out
        elif isinstance(v, torch.Tensor) and v.dim() > 2 and v.shape[:2] == mask.shape:  # mllama's cross_attention_mask
            out = torch.zeros((B, W, *v.shape[2:]), dtype=v.dtype)  # (B, W, ...): padding rows see nothing
            for b in range(B):  # answer rows see what the last prompt row sees
                tail = v[b, -1:].expand(len(answer_ids[b]), *v.shape[2:])
                out[b, pad_tf[b]:] = torch.cat([v[b, pad_gen[b]:], tail])
            inputs[key] = out
    shifted = [gen_positions[b] - pad_gen[b] + pad_tf[b] for b in range(B)]
    with torch.no_grad(), capture_attention_rows(lm.model, lm.adapter, shifted) as cap:
        lm.model(**inputs)
    if visual_key_space(lm.adapter, lm.model) == VISION:  # keys are the cross-attention keys, not positions
        return [cap.rows(b) for b in range(B)]  # (L, H, Q, V)
    rows = []
    for b in range(B):
        r = cap.rows(b)  # (L, H, Q, W)
        assert not r[..., :pad_tf[b]].any()  # padding keys weigh 0
        full = torch.zeros(*r.shape[:3], P + len(answer_ids[b]))  # (L, H, Q, P + A_b)
        full[..., pad_gen[b]:] = r[..., pad_tf[b]:pad_tf[b] + lens[b]]
        rows.append(full)
    return rows


@pytest.mark.parametrize("family", sorted(TINY_BUILDERS))
def test_rows_during_generation_equal_teacher_forced(family, monkeypatch):
    model, processor = TINY_BUILDERS[family](seed=0)
    lm = LoadedModel(model, processor, get_adapter(family), family)
    exprs = ["the red box", "the red box that sits in the picture", "the box"]
    prompts = [lm.adapter.grounding_prompt(e) for e in exprs]
    images = _images(3)
    _force_stops(monkeypatch, model, [3, 1, MAX_NEW + 5])  # EOS after 3 and 1 tokens; the last runs to the limit
    gen = generate_with_rows(lm, images, prompts, exprs, MAX_NEW)
    lengths = [len(a) for a in gen.answer_ids]
    assert lengths == [3, 1, MAX_NEW]  # stopped at different steps, the last at the limit
    assert gen.texts == generate_answers(lm, images, prompts, MAX_NEW)[0]  # the same answers as plain generate
    prompt_batch = lm.adapter.build_batch(processor, images, prompts, expressions=exprs)
    for b, q in enumerate(gen.queries):  # the scored ids are the generated ones
        assert torch.equal(gen.batch.inputs["input_ids"][b][gen.batch.answer_positions[b]], gen.answer_ids[b])
        assert len(q.out_own) == lengths[b] and len(q.out) == lengths[b]
    want = _teacher_forced_rows(lm, images, prompts, prompt_batch, gen.answer_ids, [q.positions for q in gen.queries])
    for b in range(3):
        got = gen.rows(b)  # (L, H, Q, P + A_b)
        assert got.shape == want[b].shape
        assert (got - want[b]).abs().max() <= TOL, (family, b)
        seen = torch.tensor([layer_key_space(lm.adapter, model, x) == visual_key_space(lm.adapter, model)
                             for x in range(got.shape[0])])  # (L,) layers reading the captured keys; others 0
        assert torch.allclose(got.sum(-1), seen[:, None, None].float().expand(got.shape[:3]), atol=1e-5)  # distributions
    assert gen.num_forwards == 1 and gen.capture.num_forwards >= max(lengths) + 1  # one prefill, then decode steps


def test_last_own_row_needs_the_extra_step_when_the_answer_runs_to_the_limit(monkeypatch):
    model, processor = TINY_BUILDERS["qwen2_5_vl"](seed=0)
    lm = LoadedModel(model, processor, get_adapter("qwen2_5_vl"), "q")
    monkeypatch.setattr(model.generation_config, "eos_token_id", None)  # nothing stops before MAX_NEW
    prompts = [lm.adapter.grounding_prompt("the red box")]
    gen = generate_with_rows(lm, _images(1), prompts, ["the red box"], 4)
    assert len(gen.answer_ids[0]) == 4 and gen.capture.num_forwards == 5  # 4 answer tokens + the extra step
    P = lm.adapter.build_batch(processor, _images(1), prompts).seq_len
    assert gen.rows(0).shape[-1] == P + 4  # the last answer token's own row is there
    with pytest.raises(IndexError, match="not captured"):
        gen.capture.rows(0, torch.tensor([P + 5]))  # no decode step ran for it
    with pytest.raises(IndexError, match="not captured"):
        gen.capture.rows(0, torch.tensor([0]))  # a prompt position the prefill did not keep


def test_guards(monkeypatch):
    model, processor = TINY_BUILDERS["qwen2_5_vl"](seed=0)
    lm = LoadedModel(model, processor, get_adapter("qwen2_5_vl"), "q")
    batch = lm.adapter.build_batch(processor, _images(1), [lm.adapter.grounding_prompt("the red box")])
    with pytest.raises(MultipleForwardsError), capture_attention_rows(model, lm.adapter, [torch.tensor([0])]):
        model.generate(**batch.inputs, max_new_tokens=2, do_sample=False)  # the teacher-forced guard stays
    with capture_generation_rows(model, lm.adapter, [torch.tensor([0])]), pytest.raises(RuntimeError, match="already"):
        with capture_attention_rows(model, lm.adapter, [torch.tensor([0])]):
            pass
    with pytest.raises(RuntimeError, match="dynamic cache"), \
            capture_generation_rows(model, lm.adapter, [torch.tensor([0])]):
        model.generate(**batch.inputs, max_new_tokens=3, do_sample=False, cache_implementation="static")


def _round_trip_vocab(tok) -> list[int]:
    """Ids whose text does not survive decode + re-encode on its own (half characters, blanks, specials
    other than the EOS)."""
    bad = [i for i in tok.all_special_ids if i != tok.eos_token_id]
    for i in range(len(tok)):
        text = tok.decode([i])
        if i in bad:
            continue
        if not text.strip() or "\ufffd" in text or tok(text, add_special_tokens=False)["input_ids"] != [i]:
            bad.append(i)
    return bad


def test_one_pass_detection_equals_two_pass(tiny_checkpoint, tiny_dataset, monkeypatch):
    lm = load_model(tiny_checkpoint)
    tok = lm.processor.tokenizer
    gc = lm.model.generation_config
    gc.suppress_tokens = _round_trip_vocab(tok)  # so the answer text re-tokenizes to the generated ids
    samples = [s for s in load_dataset(tiny_dataset) if s.task == "grounding"][:5]
    images = [s.load_image() for s in samples]
    prompts = [lm.adapter.grounding_prompt(s.expression) for s in samples]
    _force_stops(monkeypatch, lm.model, [2, 5, 1])  # answers of different lengths in one batch of 3
    gen = generate_with_rows(lm, images, prompts, [s.expression for s in samples], 8)
    for b, text in enumerate(gen.texts):  # the precondition: text and generated ids agree
        assert tok(text, add_special_tokens=False)["input_ids"] == gen.answer_ids[b].tolist(), b
    assert len({len(a) for a in gen.answer_ids}) >= 2

    scorers = ("out/sum/mean", "in/sum/mean", "rand1/sum/mean", "qrhead", "ocr_heads:keys=visual:tokens=all:row=own", "vera",
               "localization_heads")
    kw = dict(scorers=scorers, batch_size=3, max_new_tokens=8, n_overlays=2)
    two = detect_heads(lm, samples, one_pass=False, **kw)
    one = detect_heads(lm, samples, **kw)
    assert one.records == two.records
    assert one.head_scores.extra["capture"] == "generate" and two.head_scores.extra["capture"] == "teacher_forced"
    assert one.head_scores.extra["capture_forwards"] == two.head_scores.extra["capture_forwards"] == 2
    assert one.head_scores.extra["extra_capture_forwards"] == {"null_query": 2}  # QRHead's pass stays teacher-forced
    for name in one.per_sample:
        assert abs(one.per_sample[name] - two.per_sample[name]).max() <= TOL, name
        v1, v2 = one.head_scores.variants[name], two.head_scores.variants[name]
        assert v1["ranking"] == v2["ranking"], name
    for key, (att, rects) in two.overlays.items():
        assert abs(one.overlays[key][0] - att).max() <= TOL and (one.overlays[key][1] == rects).all(), key
    gt = detect_heads(lm, samples[:2], scorers=("out/sum/mean",), answer="gt", one_pass=True, batch_size=2)
    assert gt.head_scores.extra["capture"] == "teacher_forced"  # --answer gt keeps the teacher-forced pass
