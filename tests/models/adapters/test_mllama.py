"""Llama 3.2 Vision (mllama): the image reaches the language model only through cross-attention layers, so its
visual tokens are cross-attention keys. Beyond the shared suite: the key order proved through the model, the
rectangles by pixel probe over several tilings (padded tiles included), capture == eager on the
cross-attention rows of every query, the text rows before ``<|image|>`` (never answer rows), masking of
cross-attention heads (and why the tiny build sets the tanh gates), the random control's pool, and detect ->
evaluate end to end.
"""

from __future__ import annotations

import copy
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from vrh.core.attention import language_model_uses_vrh, observe_attention
from vrh.core.capture import capture_attention_rows
from vrh.core.layout import SEQUENCE, VISION, visual_key_space
from vrh.models.adapters import get_adapter
from vrh.models.loading import LoadedModel
from vrh.testing import TINY_BUILDERS

from .checks import assert_masking_is_exact, eager_attentions
from .pixels import check_pixels, coord_image

ADAPTER = get_adapter("mllama")
PER_TILE = 17  # CLS + 4 x 4 patches of 7 px on a 28-px tile
# width x height -> the tiling the processor picks (rows, cols) on 28-px tiles, <= 4 of them
TILINGS = {(150, 100): (2, 2), (20, 20): (1, 1), (100, 28): (1, 4), (40, 90): (3, 1), (60, 30): (1, 2)}


@pytest.fixture(scope="module")
def tiny():
    return TINY_BUILDERS["mllama"]()


def batch_of(processor, sizes, answers=None):
    images = [coord_image(w, h) for w, h in sizes]
    prompts = [ADAPTER.grounding_prompt("red ball")] * len(images)
    return ADAPTER.build_batch(processor, images, prompts, answers=answers,
                               expressions=["red ball"] * len(images)), images


def own_tiles(batch, b: int) -> int:
    nh, nw = batch.meta[b]["tile_grid"]
    return nh * nw


def test_structure_cross_attention_layers_and_modules(tiny):
    model, _ = tiny
    assert ADAPTER.cross_attention_layers(model) == (1, 3) and visual_key_space(ADAPTER, model) == VISION
    layers = model.model.language_model.layers
    for layer in range(4):
        want = layers[layer].cross_attn if layer in (1, 3) else layers[layer].self_attn
        assert ADAPTER.attention_module(model, layer) is want and ADAPTER.o_proj(model, layer) is want.o_proj


def test_rectangles_by_pixel_probe_across_tilings(tiny):
    """Every tiling the sizes give, one with each count of padded tiles: each key's pixels fill its rectangle;
    a padded tile's keys and a CLS are no cells; the cells form the canvas grid over the resized image."""
    _, processor = tiny
    batch, images = batch_of(processor, list(TILINGS))
    checked, worst = check_pixels("mllama", batch, processor)
    assert checked >= 40 and worst <= 1.0
    for b, size in enumerate(TILINGS):
        assert tuple(batch.meta[b]["tile_grid"]) == TILINGS[size]
        cell, rects = batch.cell_tokens[b], batch.visual_rects[b]
        assert len(cell) == 4 * PER_TILE and torch.equal(batch.visual_positions[b], torch.arange(4 * PER_TILE))
        own = own_tiles(batch, b)
        assert not cell[own * PER_TILE:].any() and not rects[own * PER_TILE:].any()  # padded tiles: no cells, 0 area
        assert not cell[torch.arange(own) * PER_TILE].any()  # the CLS of each own tile
        new_w, new_h = batch.meta[b]["resized_size"]
        assert int(cell.sum()) == -(-new_w // 7) * -(-new_h // 7)  # patches holding image pixels
    assert {own_tiles(batch, b) for b in range(batch.batch_size)} == {1, 2, 3, 4}


def test_key_order_through_the_model(tiny):
    """Key ``tile * 17 + 1 + 4 i + j`` is patch (i, j) of that tile: with the tower's attention outputs zeroed,
    each state depends on its own patch only, and changing the pixels of one patch changes that key alone in
    the first cross-attention layer."""
    model, processor = tiny
    model = copy.deepcopy(model)
    with torch.no_grad():
        for name, module in model.model.vision_model.named_modules():
            if name.endswith("self_attn.o_proj"):
                module.weight.zero_()
                if module.bias is not None:
                    module.bias.zero_()
    batch, _ = batch_of(processor, [(150, 100)])
    first = ADAPTER.attention_module(model, 1)

    def keys(inputs) -> torch.Tensor:
        seen = []
        with torch.no_grad(), language_model_uses_vrh(model, ADAPTER), observe_attention(
                lambda call: seen.append(call.key.clone()) if call.module is first else None):
            model(**inputs)
        return seen[0][0]  # (Hkv, V, D)

    plain = keys(batch.inputs)
    for tile, i, j in [(0, 0, 0), (1, 2, 3), (3, 1, 0)]:
        inputs = dict(batch.inputs, pixel_values=batch.inputs["pixel_values"].clone())
        inputs["pixel_values"][0, 0, tile, :, 7 * i:7 * (i + 1), 7 * j:7 * (j + 1)] += 1.0
        changed = ((keys(inputs) - plain).abs().amax(dim=(0, 2)) > 1e-6).nonzero().flatten().tolist()
        assert changed == [tile * PER_TILE + 1 + 4 * i + j], (tile, i, j, changed)


def test_cross_rows_match_eager_and_padded_tiles_get_nothing(tiny):
    """On a left-padded batch of a 1-tile and a 4-tile image: the captured rows of every query (text before the
    image, the image token, the expression, the answer) equal eager's on the cross-attention layers; after the
    image token the padded tiles get no weight; the rows before it are fully masked, which mllama turns into
    attention over every key, padded tiles included (so they must never be scored)."""
    model, processor = tiny
    batch, _ = batch_of(processor, [(20, 20), (150, 100)], answers=["[0.10, 0.20, 0.50, 0.60]"] * 2)
    queries = [torch.arange(batch.seq_len) for _ in range(2)]
    with torch.no_grad(), capture_attention_rows(model, ADAPTER, queries) as cap:
        model(**batch.inputs)
    att = eager_attentions(model, batch.inputs)
    for b in range(2):
        rows = cap.rows(b)  # (L, H, S_text, V)
        for layer in range(4):
            if layer in (1, 3):
                assert (rows[layer] - att[layer][b]).abs().max() <= 1e-5
            else:
                assert not rows[layer].any()  # a self-attention head never sees a vision state
        image = batch.meta[b]["image_token_position"]
        padded = slice(own_tiles(batch, b) * PER_TILE, None)
        real = batch.inputs["attention_mask"][b].bool()
        after, before = torch.arange(batch.seq_len) >= image, torch.arange(batch.seq_len) < image
        assert not rows[[1, 3]][:, :, after][..., padded].any()
        if own_tiles(batch, b) < 4:
            assert rows[[1, 3]][:, :, before & real][..., padded].sum() > 0  # image-blind rows: all keys
        for kind in ("expression_positions", "answer_positions"):
            assert int(getattr(batch, kind)[b].min()) > image


def test_rows_before_the_image_are_never_answer_or_expression_rows(tiny):
    """A chat template that puts the text before the image would score image-blind rows: refused."""
    _, processor = tiny
    processor = copy.copy(processor)
    processor.chat_template = processor.chat_template.replace(
        "{% for content in message['content'] %}", "{% for content in message['content'] | reverse %}")
    with pytest.raises(ValueError, match="before <.image.>"):
        batch_of(processor, [(20, 20)])


def test_masking_cross_heads_equals_zeroed_cross_attn_o_proj_columns(tiny):
    """Cross-attention heads (and a self-attention one) masked == their cross_attn.o_proj input columns zeroed;
    with transformers' zero gates (tanh(0) = 0) masking a cross-attention head changes nothing, which is why the
    tiny build sets them."""
    model, processor = tiny
    batch, _ = batch_of(processor, [(150, 100), (40, 90)], answers=["[0.1, 0.2, 0.5, 0.6]"] * 2)
    assert_masking_is_exact(model, ADAPTER, batch.inputs, [(1, 0), (3, 2)])
    assert_masking_is_exact(model, ADAPTER, batch.inputs, [(0, 1), (3, 3)])
    closed, _ = TINY_BUILDERS["mllama"](gate=0.0)
    with pytest.raises(AssertionError):
        assert_masking_is_exact(closed, ADAPTER, batch.inputs, [(1, 0), (3, 2)])  # the heads do not matter


def test_uniform_masking_of_a_cross_head_averages_the_values_it_may_see(tiny):
    """The uniform mode on a cross-attention head: its o_proj input slice is the mean of its value vectors over
    the keys its row may see (after the image token: the image's own tiles)."""
    from vrh.core.masking import mask_heads

    model, processor = tiny
    batch, _ = batch_of(processor, [(60, 30)])
    attn, layer, head = ADAPTER.attention_module(model, 3), 3, 2
    seen = {}

    def grab(module, args):
        seen["x"] = args[0].detach().clone()  # (B, S, H * d_head)

    handle = attn.o_proj.register_forward_pre_hook(grab)
    try:
        with torch.no_grad(), mask_heads(model, ADAPTER, [(layer, head)], mode="uniform"):
            model(**batch.inputs)
    finally:
        handle.remove()
    with torch.no_grad():  # the cross-attention states, as MllamaModel.forward builds them
        cross = model.model.vision_model(pixel_values=batch.inputs["pixel_values"],
                                         aspect_ratio_ids=batch.inputs["aspect_ratio_ids"],
                                         aspect_ratio_mask=batch.inputs["aspect_ratio_mask"]).last_hidden_state
        cross = model.model.multi_modal_projector(cross).reshape(1, -1, model.config.text_config.hidden_size)
        value = attn.v_proj(cross).view(1, -1, 2, 16)[0, :, head // 2]  # (V, d_head): the head's KV head
    own = torch.arange(value.shape[0]) < own_tiles(batch, 0) * PER_TILE
    want = value[own].mean(0)  # (d_head,)
    got = seen["x"][0, -1, head * 16:(head + 1) * 16]  # the last row, after the image token
    assert torch.allclose(got, want, atol=1e-5)


def test_random_control_draws_cross_attention_heads_by_default(tiny):
    """``--random-from visual`` (default): the self-attention layers join --exclude-layers, so random heads are
    cross-attention heads; ``all`` leaves the pool whole; a model without cross-attention is untouched."""
    from vrh.experiments import conditions as cond
    from vrh.experiments.settings import EvaluateSettings
    from vrh.experiments.setup import fit_random_pool

    model, processor = tiny
    lm = LoadedModel(model, processor, ADAPTER, "mllama")
    cfg = EvaluateSettings(model="x", data="d", out="o")
    fitted = fit_random_pool(cfg, lm)
    assert fitted.exclude_layers == (0, 2)
    drawn = {h for s in range(20) for h in cond.random_outside(4, 4, 3, s, exclude_layers=fitted.exclude_layers).heads}
    assert {layer for layer, _ in drawn} == {1, 3}
    assert fit_random_pool(replace(cfg, exclude_layers=(1,)), lm).exclude_layers == (0, 1, 2)
    assert fit_random_pool(replace(cfg, random_from="all"), lm).exclude_layers == ()
    qwen, qproc = TINY_BUILDERS["qwen2_vl"]()
    assert fit_random_pool(cfg, LoadedModel(qwen, qproc, get_adapter("qwen2_vl"), "q")) is cfg


def test_capture_over_the_text_keys_is_the_self_attention_rows(tiny):
    """``keys="sequence"``: the self-attention layers' rows (== eager), the cross-attention layers' zero."""
    model, processor = tiny
    batch, _ = batch_of(processor, [(60, 30)])
    q = [torch.tensor([batch.seq_len - 2, batch.seq_len - 1])]
    with torch.no_grad(), capture_attention_rows(model, ADAPTER, q, keys=SEQUENCE) as cap:
        model(**batch.inputs)
    att = eager_attentions(model, batch.inputs)
    rows = cap.rows(0)  # (L, H, 2, S)
    assert not rows[[1, 3]].any()
    assert (rows[[0, 2]] - torch.stack([att[0][0][:, q[0]], att[2][0][:, q[0]]])).abs().max() <= 1e-5


def test_a_scorer_of_text_keys_refuses_and_one_of_visual_keys_runs(tiny, tiny_dataset):
    """The rows are over the cross-attention keys: OCR Heads' prompt keys are refused, naming the variant that
    reads the visual keys, which runs and gives the self-attention heads 0."""
    from vrh.data import load_dataset
    from vrh.experiments.detection import detect_heads

    model, processor = tiny
    lm = LoadedModel(model, processor, ADAPTER, "mllama")
    samples = [s for s in load_dataset(tiny_dataset) if s.task == "grounding"][:1]
    kw = dict(answer="gt", batch_size=1, progress=False, n_overlays=0)
    with pytest.raises(ValueError, match="ocr_heads:keys=visual"):
        detect_heads(lm, samples, scorers=("ocr_heads",), **kw)
    scores = detect_heads(lm, samples, scorers=("ocr_heads:keys=visual",), **kw).head_scores.scores()
    assert not scores[[0, 2]].any()


def test_a_key_space_no_layer_reads_is_refused(tiny):
    """``keys`` must name a key space; asking a decoder-only model for the vision keys finds no layer."""
    model, processor = tiny
    with pytest.raises(ValueError, match="keys must be one of"):
        with capture_attention_rows(model, ADAPTER, [torch.tensor([0])], keys="cross"):
            pass
    qwen, qproc = TINY_BUILDERS["qwen2_vl"]()
    qa = get_adapter("qwen2_vl")
    batch = qa.build_batch(qproc, [coord_image(60, 60)], [qa.grounding_prompt("x")])
    with torch.no_grad(), capture_attention_rows(qwen, qa, [torch.tensor([0])], keys=VISION) as cap:
        qwen(**batch.inputs)
    with pytest.raises(RuntimeError, match="reads the key space asked for"):
        cap.rows(0)


@pytest.mark.slow
def test_detect_then_evaluate_end_to_end(detect_then_evaluate, tiny_dataset, tmp_path):
    """`vrh detect` then `vrh evaluate` on a saved tiny mllama: cross-attention heads scored, self-attention heads
    0, head_scores.json naming the cross-attention layers; a random evaluation and a sweep's random controls
    draw cross-attention heads."""
    from vrh import runs
    from vrh.analyses import evaluate, sweep
    from vrh.analyses.reporting import build_report

    out, samples, res = detect_then_evaluate(TINY_BUILDERS["mllama"], n=4)
    assert out["num_layers"] == 4 and out["num_heads"] == 4
    # 84 x 56 images: 1 x 2 tiles of 28 px (56 x 37 resized), 4 x 17 keys, 8 x 6 patches hold image pixels
    assert len(samples) == 4 and all(s["n_visual_tokens"] == 68 and 0 < s["n_key_tokens"] <= 48 for s in samples)
    hs = runs.read_head_scores(tmp_path / "det")
    scores = hs.scores()
    assert hs.extra["cross_attention_layers"] == [1, 3]
    assert not scores[[0, 2]].any() and (scores[[1, 3]] > 0).all()
    assert {layer for layer, _ in hs.ranking()[:8]} == {1, 3}
    assert res["k"] == 2 and {h[0] for h in res["masked_heads"]} <= {1, 3}
    rnd = tmp_path / "rnd"
    evaluate.run(evaluate.Config(model=str(tmp_path / "ckpt"), data=tiny_dataset, out=str(rnd), n=4, batch_size=2,
                                 max_new_tokens=4, random=True, k=3, seed=1))
    config = json.loads((rnd / "config.json").read_text())
    assert config["config"]["exclude_layers"] == [0, 2]
    assert {h[0] for h in json.loads((rnd / "results.json").read_text())["masked_heads"]} <= {1, 3}
    sw = tmp_path / "sweep"
    sweep.run(sweep.Config(model=str(tmp_path / "ckpt"), data=tiny_dataset, heads=str(tmp_path / "det"),
                           out=str(sw), ks=(0, 2), seeds=(0, 1), n=4, batch_size=2, max_new_tokens=4))
    conditions = json.loads((sw / "results.json").read_text())["conditions"]
    random_heads = [h for c in conditions if c["kind"] == "random" for h in c["heads"]]
    assert len(random_heads) == 4 and {layer for layer, _ in random_heads} <= {1, 3}
    md = build_report([tmp_path / "det"], tmp_path / "report")["md"].read_text()
    assert "Cross-attention model: layers 1, 3 (8 heads) read the image" in md


REAL = Path(__file__).resolve().parents[3] / ".." / "shared" / "real" / "checkpoints" / "llama3_2_11b_vision"


@pytest.mark.skipif(not REAL.is_dir(), reason="the real checkpoint files (../shared/real) are absent")
def test_inspect_real_11b_config(tmp_path):
    """`vrh models --inspect` on Llama-3.2-11B-Vision's assembled config: 40 layers x 32 heads, 8 of them
    cross-attention layers (256 heads), 4 x 1601 keys per image whatever its size, and the cells of its tiling."""
    from vrh.models.inspect import inspect_checkpoint
    from vrh.testing.builders import stand_in_tokenizer

    shutil.copy(REAL / "config.assembled.json", tmp_path / "config.json")
    shutil.copy(REAL / "preprocessor_config.json", tmp_path / "preprocessor_config.json")
    shutil.copy(REAL / "chat_template.initial.json", tmp_path / "chat_template.json")
    found = inspect_checkpoint(str(tmp_path), image_sizes=((560, 560), (1120, 560), (640, 480)),
                               stand_in=stand_in_tokenizer)
    assert (found.adapter, found.num_layers, found.num_heads, found.head_dim) == ("mllama", 40, 32, 128)
    assert found.cross_attention_layers == [3, 8, 13, 18, 23, 28, 33, 38]
    assert found.attention_classes.count("MllamaTextCrossAttention") == 8
    # 640 x 480 fits a 1 x 2 canvas unscaled: 46 x 35 patches of 14 px hold image pixels
    assert [(v.tokens, v.cells) for v in found.visual] == [(6404, 1600), (6404, 3200), (6404, 1610)]
    assert "8 x 32 = 256 heads read the image" in found.format()
