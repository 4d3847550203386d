"""Gemma 3 specifics: the soft token (not ``processor.image_token``, the BOI) carries the features; the image's
soft tokens attend to each other bidirectionally and the sliding layer cuts the sequence, both seen by capture
as eager sees them; the projector's 4 x 4 pooling is row-major; pan-and-scan crops proven by pixel content; one
``<bos>``; the ``box_2d`` answer format; and the commands end to end."""

from __future__ import annotations

import copy

import pytest
import torch

from vrh.models.adapters import get_adapter
from vrh.models.adapters.gemma3 import crop_boxes
from vrh.core.capture import capture_attention_rows
from vrh.testing.tiny_gemma3 import tiny_gemma3

from .checks import eager_attentions
from .pixels import check_pixels, coord_image
from .test_adapters import grounding_batch

ADAPTER = get_adapter("gemma3")


@pytest.fixture
def g3():
    return tiny_gemma3()


def test_soft_tokens_sit_between_boi_and_eoi(g3):
    _, processor = g3
    tok = processor.tokenizer
    assert processor.image_token == tok.boi_token and ADAPTER.feature_token_id(processor) == tok.image_token_id
    batch, _ = grounding_batch(ADAPTER, processor)
    for b in range(2):
        vis, ids = batch.visual_positions[b], batch.inputs["input_ids"][b]
        assert len(vis) == 16 and torch.equal(vis, torch.arange(int(vis[0]), int(vis[0]) + 16))
        assert ids[vis[0] - 1] == tok.boi_token_id and ids[vis[-1] + 1] == tok.convert_tokens_to_ids(tok.eoi_token)


def test_capture_sees_the_bidirectional_image_and_the_sliding_window(g3):
    model, processor = g3
    batch, _ = grounding_batch(ADAPTER, processor)
    vis, ans = batch.visual_positions[0], batch.answer_positions[0]
    queries = [torch.stack([vis[0], ans[-1]]), torch.tensor([batch.seq_len - 1])]
    with torch.no_grad(), capture_attention_rows(model, ADAPTER, queries) as cap:
        model(**batch.inputs)
    rows = cap.rows(0)  # [L, H, 2, S]: first soft token, last answer token
    assert (rows[1, :, 0, vis] > 0).all()  # global layer: the first soft token sees the whole image
    assert (rows[:, :, 0, vis[-1] + 1:] == 0).all()  # ... and nothing after it
    window = model.config.text_config.sliding_window
    assert ans[-1] - vis[0] >= window
    assert (rows[0, :, 1, vis[0]] == 0).all() and (rows[1, :, 1, vis[0]] > 0).all()  # layer 0 sliding, 1 global
    att = eager_attentions(model, batch.inputs)  # per layer [B, H, S, S]
    assert (rows - torch.stack([a[0][:, queries[0]] for a in att])).abs().max() <= 1e-5


def test_projector_pools_patches_row_major(g3):
    """Soft token k averages the 4 x 4 patches at rows 4i..4i+3, columns 4j..4j+3, (i, j) = divmod(k, n):
    the model's own projector fed each patch's (row, column), its norm and projection made identities."""
    model, _ = g3
    proj = copy.deepcopy(model.model.multi_modal_projector)
    proj.mm_soft_emb_norm = torch.nn.Identity()
    proj.mm_input_projection_weight = torch.nn.Parameter(torch.eye(2))
    side = proj.patches_per_image
    r, c = torch.meshgrid(torch.arange(side).float(), torch.arange(side).float(), indexing="ij")  # [side, side]
    patches = torch.stack([r, c], dim=-1).reshape(1, side * side, 2)  # [1, P, 2], SigLIP's row-major order
    with torch.no_grad():
        tokens = proj(patches)[0]  # [n*n, 2]
    n, k = proj.tokens_per_side, proj.kernel_size
    assert k == 4 and tokens.shape == (n * n, 2)
    for t in range(n * n):
        i, j = divmod(t, n)
        assert tokens[t].tolist() == pytest.approx([k * i + (k - 1) / 2, k * j + (k - 1) / 2])


def test_pan_and_scan_crops_are_the_cells(g3):
    _, processor = g3
    proc = copy.deepcopy(processor)
    proc.images_kwargs = {**proc.images_kwargs, "pan_and_scan_min_crop_size": 32}  # tiny images: small crops
    adapter = get_adapter("gemma3")
    adapter.pan_and_scan = True
    sizes = [(250, 80), (60, 200), (100, 100)]  # 3 crops across, 3 crops down, none (square)
    batch = adapter.build_batch(proc, [coord_image(*s) for s in sizes], [adapter.grounding_prompt("red ball")] * 3)
    assert [m["crops"] for m in batch.meta] == [3, 3, 0]
    assert [m["token_grid"] for m in batch.meta] == [(4, 12), (12, 4), (4, 4)]
    for b, cell in enumerate(batch.cell_tokens):
        views = 1 + batch.meta[b]["crops"]
        assert len(cell) == 16 * views and cell[16:].all() and bool(cell[:16].all()) == (views == 1)
    checked, worst = check_pixels("gemma3", batch, proc)  # the last crop is narrower (84, 84, 82 px)
    assert checked == 16 * 9 and worst <= 1.0
    assert crop_boxes((250, 80), 3)[-1] == (168, 0, 250, 80)


def test_one_bos_when_the_tokenizer_adds_its_own(g3):
    from tokenizers import processors

    _, processor = g3
    proc = copy.deepcopy(processor)
    tok = proc.tokenizer
    tok._tokenizer.post_processor = processors.TemplateProcessing(
        single="<bos> $A", special_tokens=[("<bos>", tok.bos_token_id)])  # like the released tokenizer
    assert tok("x")["input_ids"][0] == tok.bos_token_id
    batch = ADAPTER.build_batch(proc, [coord_image(50, 40)], [ADAPTER.grounding_prompt("red ball")])
    assert (batch.inputs["input_ids"][0] == tok.bos_token_id).sum() == 1
    assert processor.tokenizer("x")["input_ids"][0] != tok.bos_token_id  # the shared builder is untouched


@pytest.mark.parametrize("text, box", [
    ('{"box_2d": [200, 100, 800, 500]}', (64.0, 96.0, 320.0, 384.0)),
    ('```json\n[\n  {"box_2d": [200, 100, 800, 500], "label": "cat"}\n]\n```', (64.0, 96.0, 320.0, 384.0)),
    ("[200, 100, 800, 500]", (64.0, 96.0, 320.0, 384.0)),
    ('{"box_2d": [800, 100, 200, 500]}', None),  # ymax < ymin
])
def test_box_2d_answers_parse_y_first(text, box):
    got = ADAPTER.parse_box(text, {}, (640, 480))
    assert got == (None if box is None else pytest.approx(box))


def test_format_box_is_box_2d_0_1000():
    assert ADAPTER.format_box((64, 96, 320, 384), {}, (640, 480)) == '{"box_2d": [200, 100, 800, 500]}'
    assert '"box_2d": [ymin, xmin, ymax, xmax]' in ADAPTER.grounding_prompt("cat")


def test_detect_and_evaluate_run_end_to_end(detect_then_evaluate):
    out, _, res = detect_then_evaluate(tiny_gemma3, n=2)
    assert out["num_layers"] == 2 and out["num_heads"] == 4 and out["n_scored"] == 2
    assert res
