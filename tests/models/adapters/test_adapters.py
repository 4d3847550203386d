"""Shared adapter test suite: every registered adapter, on its tiny real architecture.

The key test is the pixel-content one (:mod:`.pixels`): an image whose pixels encode their own
coordinates goes through the real processor, and every visual token's pixels in ``pixel_values`` must
fill the rectangle ``visual_rects`` claims. The others: token positions checked by decoding them, the
cell-token contract, capture == eager attention and masking == zeroed ``o_proj`` columns on a left-padded
two-image batch, and the box format round trip.

A cross-attention family (Llama 3.2 Vision) runs the same tests: its visual tokens are the cross-attention keys
(:func:`vrh.core.layout.visual_key_space`), so where a test reads visual tokens as text positions it reads
them as keys instead (:func:`_visual_tokens_in_text`, the capture compared per key space).
"""

from __future__ import annotations

import copy
import json
import pkgutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import vrh.models.adapters as adapters_pkg
from vrh.models.adapters import get_adapter, registered_adapters
from vrh.core.capture import capture_attention_rows
from vrh.core.layout import KEY_SPACES, VISION, layer_key_space, visual_key_space
from vrh.core.masking import mask_heads
from vrh.testing import TINY_BUILDERS, save_tiny

from .pixels import READERS, check_pixels, coord_image

NAMES = sorted(registered_adapters())
EXPRESSIONS = ["red ball", "man in a hat next to the window"]


IMAGES = [coord_image(150, 100), coord_image(70, 90)]  # non-square; both get resized by every family


@pytest.fixture(params=NAMES)
def family(request):
    name = request.param
    model, processor = TINY_BUILDERS[name]()
    return name, get_adapter(name), model, processor


def grounding_batch(adapter, processor, answers=True):
    prompts = [adapter.grounding_prompt(e) for e in EXPRESSIONS]
    metas = adapter.build_batch(processor, IMAGES, prompts).meta
    boxes = [(10.0, 20.0, 60.0, 80.0), (5.0, 8.0, 40.0, 50.0)]
    ans = [adapter.format_box(b, m, im.size) for b, m, im in zip(boxes, metas, IMAGES)] if answers else None
    return adapter.build_batch(processor, IMAGES, prompts, answers=ans, expressions=EXPRESSIONS), ans


# --- registration ------------------------------------------------------------------------------

def test_every_adapter_file_registers_and_has_a_tiny_builder():
    registered = registered_adapters().values()
    for mod in pkgutil.iter_modules(adapters_pkg.__path__):
        if mod.name in adapters_pkg.SUPPORT_MODULES:
            continue
        modname = f"vrh.models.adapters.{mod.name}"
        assert any(cls.__module__ == modname for cls in registered), f"{modname} registers no adapter"
    assert set(registered_adapters()) <= set(TINY_BUILDERS), "registered adapter without a tiny builder"
    assert set(registered_adapters()) <= set(READERS), "registered adapter without a pixel reader (pixels.py)"
    for cls in registered:
        for t in cls.model_types:
            assert isinstance(get_adapter(t), cls)


def _visual_tokens_in_text(adapter, model) -> bool:
    """Whether the family's visual tokens are positions of the text sequence (else: cross-attention keys)."""
    return visual_key_space(adapter, model) != VISION


def _image_token_position(processor, batch, b: int) -> int:
    """A cross-attention family's one image token in sample ``b``'s text."""
    found = (batch.inputs["input_ids"][b] == processor.image_token_id).nonzero().flatten()
    assert len(found) == 1
    return int(found[0])


# --- structure ---------------------------------------------------------------------------------

def test_every_adapter_is_what_the_mechanisms_take():
    """core's functions type their ``adapter`` with LanguageModelLayout: every registered family provides it."""
    from vrh.core.layout import LanguageModelLayout

    for name, cls in registered_adapters().items():
        assert isinstance(cls(), LanguageModelLayout), name


def test_structure(family):
    name, adapter, model, _ = family
    cfg = adapter.text_config(model)
    assert adapter.num_layers(model) == cfg.num_hidden_layers == len(adapter.decoder_layers(model))
    assert adapter.num_heads(model) == cfg.num_attention_heads == 4
    assert cfg.num_key_value_heads == 2  # GQA: vrh heads are query heads
    assert model.config.model_type in type(adapter).model_types
    for layer in range(adapter.num_layers(model)):
        o = adapter.o_proj(model, layer)
        assert tuple(o.weight.shape) == (cfg.hidden_size, adapter.num_heads(model) * adapter.head_dim(model))


# --- build_batch -------------------------------------------------------------------------------

def test_build_batch_tokens(family):
    name, adapter, model, processor = family
    batch, answers = grounding_batch(adapter, processor)
    tok = processor.tokenizer
    ids, mask = batch.inputs["input_ids"], batch.inputs["attention_mask"]
    assert ids.shape == mask.shape == (2, batch.seq_len) and batch.batch_size == 2
    assert batch.image_sizes == [im.size for im in IMAGES]
    in_text = _visual_tokens_in_text(adapter, model)
    image_id = adapter.feature_token_id(processor) if in_text else None  # the token carrying a visual feature
    lengths = mask.sum(1)
    assert lengths[0] != lengths[1], "test needs unequal lengths to see padding"
    for b in range(2):
        # left padding: zeros then ones, pad ids where masked, the last position real
        n_pad = batch.seq_len - int(lengths[b])
        assert mask[b, :n_pad].sum() == 0 and mask[b, n_pad:].all()
        assert (ids[b, :n_pad] == tok.pad_token_id).all()
        # visual tokens: exactly the feature tokens, one rectangle each, inside the image
        vis = batch.visual_positions[b]
        if in_text:
            assert torch.equal(vis, (ids[b] == image_id).nonzero().flatten())
            last_visual = int(vis.max())
        else:  # every cross-attention key, in key order; the text holds the image token
            assert torch.equal(vis, torch.arange(len(vis)))
            assert len(vis) == batch.inputs["pixel_values"][b].shape[:2].numel() * model.model.vision_model.num_patches
            last_visual = _image_token_position(processor, batch, b)
        assert batch.visual_rects[b].shape == (len(vis), 4) and len(vis) > 0
        w, h = IMAGES[b].size
        r = batch.visual_rects[b]
        assert (r[:, 0] >= 0).all() and (r[:, 1] >= 0).all() and (r[:, 2] <= w + 1e-4).all() and (r[:, 3] <= h + 1e-4).all()
        # cell tokens: a flag per visual token; the cells form one row-major-addressable grid
        cell = batch.cell_tokens[b]
        assert cell.dtype == torch.bool and cell.shape == vis.shape and cell.any()
        assert _is_grid(r[cell]), "cell tokens must form one rows x cols grid of distinct cells"
        # teacher-forced answer: the last tokens, decoding back to the answer text
        ans = batch.answer_positions[b]
        assert torch.equal(ans, torch.arange(batch.seq_len - len(ans), batch.seq_len))
        assert tok.decode(ids[b, ans], skip_special_tokens=False).strip() == answers[b].strip()
        # expression: the tokens of the referring expression, before the answer and after the image
        expr = batch.expression_positions[b]
        assert tok.decode(ids[b, expr], skip_special_tokens=False).strip() == EXPRESSIONS[b]
        assert expr.min() > last_visual and expr.max() < ans.min()
    # without answers/expressions: no answer positions, empty expression positions
    plain = adapter.build_batch(processor, IMAGES[:1], [adapter.grounding_prompt("red ball")])
    assert plain.answer_positions is None and plain.expression_positions[0].numel() == 0
    with pytest.raises(ValueError):
        adapter.build_batch(processor, IMAGES[:1], ["Where is it?"], expressions=["red ball"])


def _is_grid(rects: torch.Tensor) -> bool:
    """rects [N, 4] are the cells of one rows x cols grid: distinct top-left corners, every (row, column)
    combination present once."""
    xs, ys = torch.unique(rects[:, 0]), torch.unique(rects[:, 1])
    corners = {(float(x), float(y)) for x, y in rects[:, :2].tolist()}
    return len(corners) == len(rects) == len(xs) * len(ys)


def test_cell_token_contract():
    """VisionBatch fills missing cell flags with True and rejects flags of the wrong shape or dtype."""
    from vrh.models.adapters import VisionBatch

    vis = [torch.tensor([3, 4, 5]), torch.tensor([1])]
    rects = [torch.zeros(3, 4), torch.zeros(1, 4)]
    kw = dict(inputs={}, visual_positions=vis, visual_rects=rects, expression_positions=[], answer_positions=None,
              image_sizes=[(1, 1)] * 2)
    assert [c.tolist() for c in VisionBatch(**kw).cell_tokens] == [[True] * 3, [True]]
    with pytest.raises(ValueError, match="cell_tokens"):
        VisionBatch(**kw, cell_tokens=[torch.ones(2, dtype=torch.bool), torch.ones(1, dtype=torch.bool)])
    with pytest.raises(ValueError, match="cell_tokens"):
        VisionBatch(**kw, cell_tokens=[torch.ones(3), torch.ones(1)])


def test_visual_rects_match_pixel_content(family):
    name, adapter, model, processor = family
    batch, _ = grounding_batch(adapter, processor, answers=False)
    checked, worst = check_pixels(name, batch, processor)
    assert checked >= 8 and worst <= 1.0


def test_llava_rects_with_pad_to_square():
    """LLaVA processors that pad to a square (LlavaImageProcessor do_pad) shift the map; check it too."""
    from transformers import LlavaImageProcessorPil

    _, processor = TINY_BUILDERS["llava"]()
    processor = copy.copy(processor)
    processor.image_processor = LlavaImageProcessorPil(do_pad=True, size={"shortest_edge": 112},
                                                       crop_size={"height": 112, "width": 112})
    adapter = get_adapter("llava")
    batch, _ = grounding_batch(adapter, processor, answers=False)
    assert check_pixels("llava", batch, processor, skip_clipped=True)[0] >= 20
    assert any(((r[:, 2] - r[:, 0]) * (r[:, 3] - r[:, 1]) == 0).any() for r in batch.visual_rects)


def test_llava_full_strategy_marks_cls_as_no_cell():
    """Under the "full" feature strategy LLaVA keeps the CLS token: it sees the whole image, is no cell."""
    _, processor = TINY_BUILDERS["llava"]()
    processor = copy.copy(processor)
    processor.vision_feature_select_strategy = "full"
    batch, _ = grounding_batch(get_adapter("llava"), processor, answers=False)
    for b, image in enumerate(IMAGES):
        cell = batch.cell_tokens[b]
        assert not cell[0] and cell[1:].all() and len(cell) == 1 + 7 * 7
        assert batch.visual_rects[b][0].tolist() == [0, 0, *image.size]


def test_image_tokens_depend_on_pixels(family):
    """Every cell token's input to the LM (``hidden_states[0]`` at its position; for a cross-attention family
    its key in the first cross-attention layer) changes when the image's pixels do (the same image inverted,
    so the token layout is the same): a tiny build whose image features ignore the pixels (Gemma 3's projector
    is all zeros at random init) would make every map test vacuous."""
    name, adapter, model, processor = family
    image = IMAGES[0]
    inverted = Image.fromarray(255 - np.asarray(image))
    batch = adapter.build_batch(processor, [image, inverted], [adapter.grounding_prompt("red ball")] * 2)
    assert torch.equal(batch.visual_positions[0], batch.visual_positions[1])
    vis, cell = batch.visual_positions[0], batch.cell_tokens[0]
    if _visual_tokens_in_text(adapter, model):
        with torch.no_grad():
            embeds = model(**batch.inputs, output_hidden_states=True).hidden_states[0]  # [2, S, hidden]
        change = (embeds[0, vis] - embeds[1, vis]).abs().amax(-1)  # [V] per visual token
    else:
        from vrh.core.attention import language_model_uses_vrh, observe_attention

        first = adapter.attention_module(model, min(adapter.cross_attention_layers(model)))
        keys = []
        with torch.no_grad(), language_model_uses_vrh(model, adapter), observe_attention(
                lambda call: keys.append(call.key.clone()) if call.module is first else None):
            model(**batch.inputs)
        key = keys[0][:, :, vis]  # [2, Hkv, V, D]
        change = (key[0] - key[1]).abs().amax(-1).amax(0)  # [V] per key
    assert bool((change[cell] > 1e-4).all()), (name, int((change[cell] <= 1e-4).sum()), "cell tokens ignore pixels")


def test_grid_places_are_row_major(family):
    """Where the adapter's token grid has one place per visual token (what detection hands to grid scorers), the
    cell tokens' rectangles follow it row-major: top edges rise with the row, left edges with the column."""
    from vrh.experiments.detection_batch import grid_shape

    name, adapter, model, processor = family
    batch, _ = grounding_batch(adapter, processor, answers=False)
    found = 0
    for b in range(batch.batch_size):
        rects, cell = batch.visual_rects[b], batch.cell_tokens[b]
        grid = grid_shape(rects, cell, batch.meta[b])
        if grid is None:
            continue
        rows, cols = grid
        r, c = rects.view(rows, cols, 4), cell.view(rows, cols)  # [rows, cols, 4], [rows, cols]
        for i in range(rows):
            assert bool((r[i, c[i], 0].diff() > 0).all())  # x1 along row i
        for j in range(cols):
            assert bool((r[c[:, j], j, 1].diff() > 0).all())  # y1 down column j
        found += 1
    one_view = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "glm4v", "llava", "paligemma", "gemma3")  # no tiles here
    assert found == batch.batch_size or name not in one_view


# --- capture and masking on the family's real inputs -------------------------------------------

def _query_positions(batch, processor, in_text: bool) -> list[torch.Tensor]:
    """Per sample: some visual tokens (a cross-attention family: the image token and the text row before it,
    which sees no image), the expression, the rows producing the answer, the last token."""
    out = []
    for b in range(batch.batch_size):
        if in_text:
            vis = batch.visual_positions[b]
            seen = [vis[:2], vis[-2:]]
        else:
            image = _image_token_position(processor, batch, b)
            seen = [torch.tensor([image - 1, image])]
        picks = [*seen, batch.expression_positions[b], batch.answer_positions[b] - 1,
                 torch.tensor([batch.seq_len - 1])]
        out.append(torch.unique(torch.cat(picks)))
    return out


def test_capture_matches_eager(family):
    """Rows captured during one sdpa forward == eager attention probabilities (<= 1e-5, float32), on a
    left-padded batch of two images of different sizes, with unchanged logits. Per key space the model has
    (a cross-attention family: the text for its self-attention layers, the vision states for its
    cross-attention layers): that space's layers match eager, the other layers' rows are zero."""
    name, adapter, model, processor = family
    batch, _ = grounding_batch(adapter, processor)
    positions = _query_positions(batch, processor, _visual_tokens_in_text(adapter, model))
    L = adapter.num_layers(model)
    spaces = {space: [layer_key_space(adapter, model, x) == space for x in range(L)] for space in KEY_SPACES}
    with torch.no_grad():
        plain = model(**batch.inputs).logits
        eager = copy.deepcopy(model)
        eager.set_attn_implementation("eager")
        attentions = eager(**batch.inputs, output_attentions=True).attentions  # per layer [B, H, S, S_layer]
    assert len(attentions) == L
    for space, mine in spaces.items():
        if not any(mine):
            continue
        with torch.no_grad(), capture_attention_rows(model, adapter, positions, keys=space) as cap:
            logits = model(**batch.inputs).logits
        assert torch.equal(logits, plain) and cap.num_forwards == 1
        for b, pos in enumerate(positions):
            got = cap.rows(b)  # [L, H, Q_b, S]
            want = torch.stack([a[b][:, pos] for a, m in zip(attentions, mine) if m]).float()  # [L_space, H, Q_b, S]
            assert got[mine].shape == want.shape
            assert (got[mine] - want).abs().max().item() <= 1e-5
            assert got[[not m for m in mine]].abs().sum() == 0  # the other key space's layers
            if space != VISION:
                assert got[..., ~batch.inputs["attention_mask"][b].bool()].abs().sum() == 0  # padding unseen


def test_masking_matches_zeroed_o_proj_columns(family):
    """Masking heads == a copy whose o_proj input columns for those heads are zero; nothing left behind."""
    name, adapter, model, processor = family
    batch, _ = grounding_batch(adapter, processor)
    heads = [(0, 1), (adapter.num_layers(model) - 1, adapter.num_heads(model) - 1)]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    hooks = lambda: [(len(m._forward_pre_hooks), len(m._forward_hooks)) for m in model.modules()]  # noqa: E731
    hooks_before = hooks()
    ref = copy.deepcopy(model)
    d = adapter.head_dim(model)
    with torch.no_grad():
        for layer, head in heads:
            adapter.o_proj(ref, layer).weight[:, head * d:(head + 1) * d] = 0  # [hidden, H*d_head]
        want = ref(**batch.inputs).logits
        with mask_heads(model, adapter, heads):
            got = model(**batch.inputs).logits
        plain = model(**batch.inputs).logits
    assert torch.allclose(got, want, rtol=0, atol=1e-5)
    assert (got - plain).abs().max() > 1e-4  # the heads mattered
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert hooks() == hooks_before


# --- answers -----------------------------------------------------------------------------------

def test_format_parse_round_trip(family):
    name, adapter, model, processor = family
    batch, _ = grounding_batch(adapter, processor, answers=False)
    for b, image in enumerate(IMAGES):
        w, h = image.size
        box = (0.1 * w, 0.25 * h, 0.7 * w, 0.9 * h)
        text = adapter.format_box(box, batch.meta[b], image.size)
        back = adapter.parse_box(text, batch.meta[b], image.size)
        assert back is not None, text
        # answer frames are integer grids: 0-1000 (Qwen2/3), resized pixels (Qwen2.5), pixels (LLaVA)
        tol = max(w, h) / 1000 + max(w / batch.meta[b].get("resized_size", (w, h))[0],
                                     h / batch.meta[b].get("resized_size", (w, h))[1]) + 0.5
        assert np.allclose(back, box, atol=tol), (text, back, box)
    assert adapter.parse_box("I cannot see it.", batch.meta[0], IMAGES[0].size) is None


def test_generate_runs(family):
    name, adapter, model, processor = family
    batch, _ = grounding_batch(adapter, processor, answers=False)
    with torch.no_grad():
        out = model.generate(**batch.inputs, max_new_tokens=3, do_sample=False,
                             pad_token_id=processor.tokenizer.pad_token_id)
    assert out.shape[0] == 2 and out.shape[1] <= batch.seq_len + 3
    texts = adapter.decode(processor, out[:, batch.seq_len:])
    assert len(texts) == 2 and all(isinstance(t, str) for t in texts)


def test_from_pretrained_round_trip(family, tmp_path):
    name, adapter, model, processor = family
    save_tiny(model, processor, tmp_path)
    fresh = get_adapter(model.config.model_type)
    model2, processor2 = fresh.load(str(tmp_path))
    assert type(model2) is type(model) and processor2.tokenizer.padding_side == "left"
    b1, _ = grounding_batch(adapter, processor)
    b2, _ = grounding_batch(fresh, processor2)
    assert torch.equal(b1.inputs["input_ids"], b2.inputs["input_ids"])
    assert all(torch.equal(x, y) for x, y in zip(b1.visual_rects, b2.visual_rects))
    with torch.no_grad():
        l1, l2 = model(**b1.inputs).logits, model2(**b2.inputs).logits
    assert torch.allclose(l1, l2, atol=1e-5)


def test_llava_checkpoint_settings(tmp_path):
    """A checkpoint's vrh.json sets LLaVA's grounding prompt and box format (the model organism's way)."""
    model, processor = TINY_BUILDERS["llava"]()
    save_tiny(model, processor, tmp_path)
    settings = {"grounding_prompt": "where is the {expression} ?", "box_template": "[ {x1} , {y1} , {x2} , {y2} ]"}
    (Path(tmp_path) / "vrh.json").write_text(json.dumps(settings))
    adapter = get_adapter("llava")
    adapter.load(str(tmp_path))
    assert adapter.grounding_prompt("red ball") == "where is the red ball ?"
    assert adapter.format_box((8, 12, 40, 44), {}, (112, 112)) == "[ 8 , 12 , 40 , 44 ]"
    assert adapter.parse_box("[ 8 , 12 , 40 , 44 ]", {}, (112, 112)) == (8.0, 12.0, 40.0, 44.0)
    assert get_adapter("llava").grounding_prompt("x") != "where is the x ?"  # instances stay independent


def test_expression_is_located_at_the_templates_slot_not_inside_its_fixed_words(family):
    """An expression that also occurs in the prompt template's own words ("left", "image", "box") must be
    found where the template put it."""
    name, adapter, model, processor = family
    for expr in ("left", "image", "box", "the"):
        prompt = adapter.grounding_prompt(expr)
        batch = adapter.build_batch(processor, IMAGES[:1], [prompt], expressions=[expr])
        pos = batch.expression_positions[0]
        tok = getattr(processor, "tokenizer", processor)
        text = tok.decode(batch.inputs["input_ids"][0][pos])
        assert expr in text, (name, expr, text)
        assert adapter.expression_offset(prompt, expr) == adapter.grounding_prompt("\x00").find("\x00"), (name, expr)
