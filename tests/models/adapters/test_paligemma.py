"""PaliGemma 2 specifics: image tokens first and the answer in the causal suffix (``token_type_ids``), the
bidirectional prefix, Gemma 2's sliding window and logit softcap seen by capture exactly as eager sees them,
SigLIP's row-major patch order, the ``<locNNNN>`` answer format, the eager LM on load, and the commands."""

from __future__ import annotations

import copy

import pytest
import torch

from vrh.models.adapters import get_adapter
from vrh.models.adapters.paligemma import loc_tokens, parse_loc_tokens
from vrh.core.capture import capture_attention_rows
from vrh.testing import save_tiny
from vrh.testing.tiny_paligemma import tiny_paligemma

from .checks import eager_attentions
from .test_adapters import grounding_batch

ADAPTER = get_adapter("paligemma")


@pytest.fixture
def pg():
    return tiny_paligemma()


# --- layout ------------------------------------------------------------------------------------

def test_layout_image_first_then_bos_prompt_newline_and_the_answer_as_suffix(pg):
    _, processor = pg
    batch, answers = grounding_batch(ADAPTER, processor)
    tok, ids, types = processor.tokenizer, batch.inputs["input_ids"], batch.inputs["token_type_ids"]
    for b in range(2):
        start = int((~batch.inputs["attention_mask"][b].bool()).sum())  # first real token
        vis = batch.visual_positions[b]
        assert torch.equal(vis, torch.arange(start, start + 64))  # 8 x 8 image tokens at the very start
        assert ids[b, start + 64] == tok.bos_token_id
        ans = batch.answer_positions[b]
        assert tok.decode(ids[b, ans[0] - 1]) == "\n"  # the prefix ends on the processor's newline
        # the answer (and only it) is the causal suffix; no <eos> after it
        assert torch.equal((types[b] == 1).nonzero().flatten(), ans) and ans[-1] == batch.seq_len - 1
        assert tok.eos_token_id not in ids[b, ans].tolist()
    assert "labels" not in batch.inputs


# --- attention: bidirectional prefix, sliding window, softcap ----------------------------------

def test_capture_sees_the_bidirectional_prefix_and_the_sliding_window(pg):
    """An image token attends to the prompt after it (bidirectional prefix), no prefix token sees the
    answer, and the sliding layer hides the first image tokens from the last answer row, the global one not."""
    model, processor = pg
    batch, _ = grounding_batch(ADAPTER, processor)
    b, vis, expr, ans = 0, batch.visual_positions[0], batch.expression_positions[0], batch.answer_positions[0]
    queries = [torch.cat([vis[:1], expr[-1:], ans[-1:]]), torch.tensor([batch.seq_len - 1])]
    with torch.no_grad(), capture_attention_rows(model, ADAPTER, queries) as cap:
        model(**batch.inputs)
    rows = cap.rows(b)  # [L, H, 3, S]: first image token, last expression token, last answer token
    assert (rows[:, :, 0, expr] > 0).all()  # the image sees the later prompt
    assert (rows[:, :, :2, ans] == 0).all()  # the prefix never sees the answer
    window = model.config.text_config.sliding_window
    assert ans[-1] - vis[0] >= window  # the window cuts this sequence
    assert (rows[0, :, 2, vis[0]] == 0).all() and (rows[1, :, 2, vis[0]] > 0).all()  # layer 0 sliding, 1 global
    eager = eager_attentions(model, batch.inputs)
    want = torch.stack([a[b][:, queries[b]] for a in eager])  # [L, H, 3, S]
    assert (rows - want).abs().max() <= 1e-5


def test_capture_matches_eager_where_the_softcap_bends_the_scores(pg):
    """With large attention logits (q_proj scaled) the cap tanh(s / 50) * 50 changes the rows; capture still
    equals eager, and differs from the same rows computed without the cap."""
    model, processor = pg
    model = copy.deepcopy(model)
    for layer in range(ADAPTER.num_layers(model)):
        ADAPTER.attention_module(model, layer).q_proj.weight.data *= 400
    batch, _ = grounding_batch(ADAPTER, processor)
    queries = [torch.cat([batch.visual_positions[b][:3], batch.answer_positions[b]]) for b in range(2)]
    with torch.no_grad():
        plain = model(**batch.inputs).logits
        with capture_attention_rows(model, ADAPTER, queries) as cap:
            logits = model(**batch.inputs).logits
    assert torch.equal(logits, plain)
    eager = eager_attentions(model, batch.inputs)
    uncapped = copy.deepcopy(model)
    for layer in range(ADAPTER.num_layers(uncapped)):
        ADAPTER.attention_module(uncapped, layer).attn_logit_softcapping = None  # read per module, at init
    with torch.no_grad(), capture_attention_rows(uncapped, ADAPTER, queries) as cap_off:
        uncapped(**batch.inputs)
    for b, q in enumerate(queries):
        want = torch.stack([a[b][:, q] for a in eager])  # [L, H, Q, S]
        assert (cap.rows(b) - want).abs().max() <= 1e-5
        assert (cap.rows(b) - cap_off.rows(b)).abs().max() > 1e-2  # the cap mattered


def test_siglip_patch_tokens_are_row_major(pg):
    """Token k of the tower is the patch at (k // n, k % n): the real patch embedding, with weights that copy
    each patch's mean R (= x) and G (= y) of a coordinate image and no position embedding."""
    model, processor = pg
    emb = copy.deepcopy(model.model.vision_tower.embeddings)
    p = emb.patch_embedding.kernel_size[0]
    with torch.no_grad():
        emb.patch_embedding.weight.zero_()
        emb.patch_embedding.bias.zero_()
        emb.patch_embedding.weight[0, 0] = 1 / p ** 2  # channel 0 = mean of R
        emb.patch_embedding.weight[1, 1] = 1 / p ** 2  # channel 1 = mean of G
        emb.position_embedding.weight.zero_()
        side = emb.image_size
        y, x = torch.meshgrid(torch.arange(side).float(), torch.arange(side).float(), indexing="ij")
        pixels = torch.stack([x, y, torch.zeros_like(x)])[None]  # [1, 3, S, S]
        out = emb(pixels)  # [1, n*n, D]
    n = side // p
    for k in range(n * n):
        i, j = divmod(k, n)
        assert out[0, k, :2].tolist() == pytest.approx([j * p + (p - 1) / 2, i * p + (p - 1) / 2], abs=1e-3)


# --- answers -----------------------------------------------------------------------------------

@pytest.mark.parametrize("text, box", [
    ("<loc0000><loc0000><loc1023><loc1023> red ball", (0.0, 0.0, 640.0, 480.0)),
    ("<loc0256><loc0512><loc0767><loc1023> cat ; <loc0000><loc0000><loc0010><loc0010> dog",
     (320.3128, 120.1173, 640.0, 359.8827)),  # the first object of several
    ("<loc0930><loc0000><loc0100><loc0512> x <loc0000><loc0000><loc0512><loc0512>",
     (0.0, 0.0, 320.3128, 240.2346)),  # an inverted box is skipped
])
def test_canonical_answers_parse(text, box):
    assert ADAPTER.parse_box(text, {}, (640, 480)) == pytest.approx(box, abs=1e-3)


def test_invalid_answers_give_no_box():
    for text in ("I cannot see it.", "<loc0100><loc0100><loc0200>", "<loc0100><loc0100><loc2000><loc0200>",
                 "[100, 200, 300, 400]"):
        assert parse_loc_tokens(text, (640, 480)) is None, text


def test_format_box_bins_y_first_and_decode_keeps_the_tokens(pg):
    _, processor = pg
    assert loc_tokens((64, 48, 320, 480), (640, 480)) == "<loc0102><loc0102><loc1023><loc0512>"
    text = ADAPTER.format_box((64, 48, 320, 480), {}, (640, 480))
    ids = processor.tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    assert ids.shape[1] == 4  # one token per bin
    decoded = ADAPTER.decode(processor, ids)[0]
    assert ADAPTER.parse_box(decoded, {}, (640, 480)) == pytest.approx((64, 48, 320, 480), abs=0.5)


def test_prompt_is_the_detect_task():
    assert ADAPTER.grounding_prompt("red ball") == "detect red ball"


# --- loading and the commands ------------------------------------------------------------------

def test_load_runs_the_lm_eager_and_the_tower_as_asked(pg, tmp_path):
    model, processor = pg
    save_tiny(model, processor, tmp_path)
    loaded, proc = get_adapter("paligemma").load(str(tmp_path))  # default attn_implementation="sdpa"
    assert loaded.config.text_config._attn_implementation == "eager"
    assert loaded.config.vision_config._attn_implementation == "sdpa"
    assert proc.tokenizer.padding_side == "left" and proc.tokenizer.convert_tokens_to_ids("<loc1023>") > 0


def test_detect_and_evaluate_run_end_to_end(detect_then_evaluate):
    out, _, res = detect_then_evaluate(tiny_paligemma, n=2)
    assert out["num_layers"] == 2 and out["num_heads"] == 4 and out["n_scored"] == 2
    assert res
