"""LLaVA-NeXT specifics: the anyres token layout (base tokens, unpadded grid, a newline per row) proven by
pixel content on multi-tile, wide, tall and odd-sized images; the lmms-eval box format; capture and masking
on the Mistral backbone; and the commands end to end."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vrh.models.adapters import get_adapter
from vrh.core.regions import box_token_mask
from vrh.testing import save_tiny
from vrh.testing.tiny_llava_next import tiny_llava_next

from .checks import assert_capture_matches_eager, assert_masking_is_exact
from .pixel_readers import llava_next_pixels, token_sources


def coord_image(width: int, height: int) -> Image.Image:
    """R = x, G = y, B = 255 (marks pixels of the image, not the processor's zero padding)."""
    y, x = np.mgrid[0:height, 0:width]
    return Image.fromarray(np.stack([x, y, np.full_like(x, 255)], axis=-1).astype(np.uint8))


# 2x2 tiles (wide / tall content), 1x2 tiles, 2x1 tiles, an odd size that is upscaled
SIZES = [(150, 100), (70, 90), (200, 60), (60, 180), (33, 77)]


@pytest.fixture
def next_():
    model, processor = tiny_llava_next()
    return get_adapter("llava_next"), model, processor


def _batch(adapter, processor, sizes, answers=False):
    images = [coord_image(w, h) for w, h in sizes]
    exprs = ["red ball", "man in a hat next to the window", "cup", "dog", "tree"][:len(sizes)]
    prompts = [adapter.grounding_prompt(e) for e in exprs]
    ans = [adapter.format_box((2, 3, 20, 30), {}, im.size) for im in images] if answers else None
    return adapter.build_batch(processor, images, prompts, answers=ans, expressions=exprs if answers else None)


def test_visual_rects_match_pixel_content(next_):
    """Every token's pixels, read where the model's own packing takes them, fill its rectangle: the first and
    last pixel column (row) of a token carry the centres of its rectangle's first and last input-pixel
    column (row), within 1 original pixel; tokens that straddle the canvas padding only have to lie inside."""
    adapter, _, processor = next_
    batch = _batch(adapter, processor, SIZES)
    checked, straddling = 0, 0
    for b, (w, h) in enumerate(SIZES):
        rects, cell, meta = batch.visual_rects[b], batch.cell_tokens[b], batch.meta[b]
        pix = llava_next_pixels(batch, b, processor)
        assert len(pix) == len(rects) == len(batch.visual_positions[b])
        newlines = [k for k, px in enumerate(pix) if px is None]
        assert len(newlines) == meta["token_grid"][0]  # one per grid row, where the model puts them
        assert not cell[newlines].any() and (rects[newlines] == torch.tensor([0.0, 0.0, w, h])).all()
        for k, (px, (x1, y1, x2, y2)) in enumerate(zip(pix, rects.tolist())):
            if px is None:
                continue
            inside = px[..., 2] >= 254  # [P, P] pixels of the image (the canvas padding is 0)
            assert inside.any(), (b, k, "a kept token shows only padding")
            r, g = px[..., 0][inside], px[..., 1][inside]
            if not inside.all():  # clipped at the paste edge: its pixels must still lie in its rectangle
                assert x1 - 1 <= r.min() and r.max() <= x2 and y1 - 1 <= g.min() and g.max() <= y2, (b, k)
                straddling += 1
                continue
            sx, sy = (x2 - x1) / px.shape[1], (y2 - y1) / px.shape[0]  # original px per input px
            errors = [r.min() - (x1 + sx / 2 - 0.5), r.max() - (x2 - sx / 2 - 0.5),
                      g.min() - (y1 + sy / 2 - 0.5), g.max() - (y2 - sy / 2 - 0.5)]
            assert max(abs(e) for e in errors) <= 1.0, (b, k, (x1, y1, x2, y2), errors)
            checked += 1
        # the base tokens (not cells) tile the whole image once, at the coarse base grid
        n_base = meta["base_grid"][0] * meta["base_grid"][1]
        area = (rects[:, 2] - rects[:, 0]) * (rects[:, 3] - rects[:, 1])  # [V]
        assert not cell[:n_base].any() and float(area[:n_base].sum()) == pytest.approx(w * h)
    assert checked >= 100 and straddling >= 1  # the odd sizes do clip some tokens at the paste edge


def test_layout_follows_the_tiling(next_):
    adapter, _, processor = next_
    batch = _batch(adapter, processor, SIZES)
    tiles = [len({s[0] for s in token_sources(processor, (h, w)) if s}) for w, h in SIZES]
    assert tiles == [5, 5, 3, 3, 3]  # base + 2x2, base + 2x2, base + 1x2, base + 2x1, base + 2x1
    grids = [m["token_grid"] for m in batch.meta]
    assert grids == [(4, 6), (6, 4), (1, 6), (6, 3), (6, 3)]  # unpad_image rounds down
    for b, (rows, cols) in enumerate(grids):
        cells = batch.visual_rects[b][batch.cell_tokens[b]]  # [rows * cols, 4], the grid scorers read
        assert len(cells) == rows * cols
        assert len(cells[:, 0].unique()) == cols and len(cells[:, 1].unique()) == rows


def test_only_grid_cells_can_enter_the_key_set(next_):
    adapter, _, processor = next_
    batch = _batch(adapter, processor, SIZES[:1])
    rects, cell = batch.visual_rects[0], batch.cell_tokens[0]
    k = box_token_mask(rects[cell], (0, 0, 150, 100))  # the whole image: every cell
    assert k.all() and len(k) == 4 * 6
    small = box_token_mask(rects[cell], (0, 0, 10, 10))  # one corner: one fine cell, not a coarse base token
    assert small.sum() == 1


def test_box_format_is_lmms_eval_floats(next_):
    adapter = next_[0]
    assert adapter.format_box((15, 25, 90, 75), {}, (150, 100)) == "[0.10, 0.25, 0.60, 0.75]"
    assert adapter.parse_box("[0.1, 0.25, 0.6, 0.75]", {}, (150, 100)) == pytest.approx((15, 25, 90, 75))
    assert adapter.parse_box("The box is [0.10,0.25,0.60,0.75].", {}, (150, 100)) == pytest.approx((15, 25, 90, 75))
    assert adapter.parse_box("[0.6, 0.25, 0.1, 0.75]", {}, (150, 100)) is None  # swapped corners
    assert adapter.grounding_prompt("red ball").endswith("the region this sentence describes: red ball")


def test_refuses_a_processor_it_cannot_map(next_):
    adapter, _, processor = next_
    bad = copy.copy(processor)
    bad.vision_feature_select_strategy = "full"
    with pytest.raises(ValueError, match="vision_feature_select_strategy"):
        _batch(adapter, bad, SIZES[:1])


def test_capture_matches_eager_and_masking_is_exact(next_):
    adapter, model, processor = next_
    batch = _batch(adapter, processor, SIZES[:2], answers=True)
    assert not batch.inputs["attention_mask"].all()  # one sample is left-padded
    queries = [torch.cat([batch.expression_positions[b], batch.answer_positions[b] - 1]).unique() for b in range(2)]
    assert_capture_matches_eager(model, adapter, batch.inputs, queries)
    assert_masking_is_exact(model, adapter, batch.inputs, [(0, 2), (1, 0)])


def test_load_sets_the_answer_separator_from_the_template(tmp_path):
    """Mistral/Vicuna prompts end on "[/INST]" / "ASSISTANT:" (answer after a space); Llama-3's on "\\n\\n"."""
    model, processor = tiny_llava_next()
    save_tiny(model, processor, tmp_path / "mistral")
    adapter = get_adapter("llava_next")
    adapter.load(str(tmp_path / "mistral"))
    assert adapter.answer_sep == " "
    blank_end = copy.copy(processor)
    blank_end.chat_template = processor.chat_template.replace(" [/INST]", " [/INST]\n\n")
    save_tiny(model, blank_end, tmp_path / "llama3_like")
    adapter.load(str(tmp_path / "llama3_like"))
    assert adapter.answer_sep == ""


REAL = Path(__file__).resolve().parents[3] / ".." / "shared" / "real" / "checkpoints" / "llama3_llava_next_8b_hf"


@pytest.mark.skipif(not REAL.is_dir(), reason="the real checkpoint files (../shared/real) are absent")
def test_real_processor_config_without_num_additional_image_tokens():
    """llama3-llava-next-8b's real config and image processor, with a processor config that omits
    ``num_additional_image_tokens`` (as older ones do): refused before load() completes the processor (2,339
    tokens against the 2,340 the map has at 640x480), then 2,340 visual tokens of which 1,728 cells."""
    import json
    from types import SimpleNamespace

    from transformers import AutoConfig, LlavaNextImageProcessorPil, LlavaNextProcessor
    from transformers.models.clip.modeling_clip import CLIPVisionEmbeddings

    from vrh.testing.tiny_models import llava_tokenizer

    config = AutoConfig.from_pretrained(REAL)
    assert config.vision_config.model_type == "clip_vision_model"
    with torch.device("meta"):  # the tower's embeddings only (they hold its class token), without weights
        tower = CLIPVisionEmbeddings(config.vision_config)
    model = SimpleNamespace(config=config, model=SimpleNamespace(vision_tower=tower))
    settings = json.loads((REAL / "processor_config.RECONSTRUCTED.json").read_text())
    older = {k: v for k, v in settings.items() if k not in ("processor_class", "num_additional_image_tokens")}
    tok = llava_tokenizer()
    processor = LlavaNextProcessor(image_processor=LlavaNextImageProcessorPil.from_pretrained(REAL), tokenizer=tok,
                                   chat_template=tok.chat_template, **older)
    adapter = get_adapter("llava_next")
    image, prompt = [coord_image(640, 480)], [adapter.grounding_prompt("red ball")]
    with pytest.raises(ValueError, match="2339 visual tokens but the processor outputs map 2340"):
        adapter.build_batch(processor, image, prompt)
    adapter.on_load(model, processor)
    batch = adapter.build_batch(processor, image, prompt)
    assert processor.num_additional_image_tokens == settings["num_additional_image_tokens"] == 1
    assert len(batch.visual_positions[0]) == 2340 and int(batch.cell_tokens[0].sum()) == 1728


# --- the commands, end to end on the tiny checkpoint -------------------------------------------

def test_detect_and_evaluate_run_end_to_end(detect_then_evaluate):
    out, _, _ = detect_then_evaluate(tiny_llava_next, n=2)
    assert out["num_layers"] == 2 and out["num_heads"] == 4 and out["n_scored"] == 2
