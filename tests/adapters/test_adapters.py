"""Shared adapter test suite: every registered adapter, on its tiny real architecture.

The key test is the pixel-content one: an image whose pixels encode their own coordinates (R = x,
G = y, B = 255 marks "inside the original image") goes through the real processor, and every visual
token's patches in ``pixel_values`` must hold coordinates from the rectangle ``visual_rects`` claims.
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

import vrh.adapters as adapters_pkg
from vrh.adapters import get_adapter, registered_adapters
from vrh.testing import TINY_BUILDERS, save_tiny

NAMES = sorted(registered_adapters())
EXPRESSIONS = ["red ball", "man in a hat next to the window"]


def coord_image(width: int, height: int) -> Image.Image:
    """R = x, G = y (both < 256), B = 255: each pixel says where it came from."""
    y, x = np.mgrid[0:height, 0:width]
    return Image.fromarray(np.stack([x, y, np.full_like(x, 255)], axis=-1).astype(np.uint8))


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
        if mod.name == "base":
            continue
        modname = f"vrh.adapters.{mod.name}"
        assert any(cls.__module__ == modname for cls in registered), f"{modname} registers no adapter"
    assert set(registered_adapters()) <= set(TINY_BUILDERS), "registered adapter without a tiny builder"
    for cls in registered:
        for t in cls.model_types:
            assert isinstance(get_adapter(t), cls)


# --- structure ---------------------------------------------------------------------------------

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
    image_id = tok.convert_tokens_to_ids(processor.image_token)
    lengths = mask.sum(1)
    assert lengths[0] != lengths[1], "test needs unequal lengths to see padding"
    for b in range(2):
        # left padding: zeros then ones, pad ids where masked, the last position real
        n_pad = batch.seq_len - int(lengths[b])
        assert mask[b, :n_pad].sum() == 0 and mask[b, n_pad:].all()
        assert (ids[b, :n_pad] == tok.pad_token_id).all()
        # visual tokens: exactly the image placeholders, one rectangle each, inside the image
        vis = batch.visual_positions[b]
        assert torch.equal(vis, (ids[b] == image_id).nonzero().flatten())
        assert batch.visual_rects[b].shape == (len(vis), 4) and len(vis) > 0
        w, h = IMAGES[b].size
        r = batch.visual_rects[b]
        assert (r[:, 0] >= 0).all() and (r[:, 1] >= 0).all() and (r[:, 2] <= w + 1e-4).all() and (r[:, 3] <= h + 1e-4).all()
        # teacher-forced answer: the last tokens, decoding back to the answer text
        ans = batch.answer_positions[b]
        assert torch.equal(ans, torch.arange(batch.seq_len - len(ans), batch.seq_len))
        assert tok.decode(ids[b, ans], skip_special_tokens=False).strip() == answers[b].strip()
        # expression: the tokens of the referring expression, before the answer and after the image
        expr = batch.expression_positions[b]
        assert tok.decode(ids[b, expr], skip_special_tokens=False).strip() == EXPRESSIONS[b]
        assert expr.min() > vis.max() and expr.max() < ans.min()
    # without answers/expressions: no answer positions, empty expression positions
    plain = adapter.build_batch(processor, IMAGES[:1], [adapter.grounding_prompt("red ball")])
    assert plain.answer_positions is None and plain.expression_positions[0].numel() == 0
    with pytest.raises(ValueError):
        adapter.build_batch(processor, IMAGES[:1], ["Where is it?"], expressions=["red ball"])


def _token_pixels(batch, b: int, processor) -> list[np.ndarray]:
    """Per visual token of sample b, its input pixels as [N, 3] in 0-255 (normalization undone), read
    from pixel_values the way each model consumes them."""
    ip = processor.image_processor
    mean, std = np.asarray(ip.image_mean, dtype=np.float64), np.asarray(ip.image_std, dtype=np.float64)
    pv = batch.inputs["pixel_values"].double().numpy()
    out = []
    if "image_grid_thw" in batch.inputs:  # Qwen: [sum_t*h*w, C*T*P*P], m*m consecutive rows per token
        grids = batch.inputs["image_grid_thw"].tolist()
        start = sum(t * h * w for t, h, w in grids[:b])
        t, gh, gw = grids[b]
        m, p = ip.merge_size, ip.patch_size
        rows = pv[start:start + t * gh * gw].reshape(-1, m * m, 3, ip.temporal_patch_size, p, p)  # [V, m*m, C, T, P, P]
        for tok in rows:
            px = tok[:, :, 0].transpose(0, 2, 3, 1).reshape(-1, 3)  # first frame, [m*m*P*P, C]
            out.append((px * std + mean) * 255)
    else:  # LLaVA: [B, C, H, W] crop, patch k = row-major (k // cols, k % cols) after prefix tokens
        p = processor.patch_size
        img = pv[b].transpose(1, 2, 0) * std + mean  # [H, W, C]
        cols = img.shape[1] // p
        n_prefix = len(batch.visual_positions[b]) - (img.shape[0] // p) * cols
        out += [None] * n_prefix
        for k in range((img.shape[0] // p) * cols):
            i, j = divmod(k, cols)
            out.append(img[i * p:(i + 1) * p, j * p:(j + 1) * p].reshape(-1, 3) * 255)
    return out


def _check_pixels(batch, processor, tol: float = 2.0, skip_clipped: bool = False) -> int:
    """Assert each token's pixels come from its rectangle (+- tol px for resampling); count checked.
    ``skip_clipped``: ignore tokens whose rectangle was clipped at padding, where bicubic ringing against
    the pad colour bends the coordinate ramp."""
    checked = 0
    for b in range(batch.batch_size):
        pix = _token_pixels(batch, b, processor)
        rects = batch.visual_rects[b]
        areas = (rects[:, 2] - rects[:, 0]) * (rects[:, 3] - rects[:, 1])
        assert len(pix) == len(rects)
        for px, (x1, y1, x2, y2), a in zip(pix, rects.tolist(), areas.tolist()):
            if px is None:  # prefix token (CLS): covers the whole image by construction
                continue
            inside = px[:, 2] >= 254  # B marks pixels of the original image (not padding)
            if a == 0:
                assert inside.mean() < 0.1, "token claims no image area but shows image pixels"
                continue
            if skip_clipped and a < 0.99 * float(areas.max()):
                continue
            r, g = px[inside, 0], px[inside, 1]
            assert r.size > 0
            assert r.min() >= x1 - tol and r.max() <= x2 + tol, (b, (x1, y1, x2, y2), r.min(), r.max())
            assert g.min() >= y1 - tol and g.max() <= y2 + tol, (b, (x1, y1, x2, y2), g.min(), g.max())
            checked += 1
    return checked


def test_visual_rects_match_pixel_content(family):
    name, adapter, model, processor = family
    batch, _ = grounding_batch(adapter, processor, answers=False)
    assert _check_pixels(batch, processor) >= 8


def test_llava_rects_with_pad_to_square():
    """LLaVA processors that pad to a square (LlavaImageProcessor do_pad) shift the map; check it too."""
    from transformers import LlavaImageProcessorPil

    _, processor = TINY_BUILDERS["llava"]()
    processor = copy.copy(processor)
    processor.image_processor = LlavaImageProcessorPil(do_pad=True, size={"shortest_edge": 112},
                                                       crop_size={"height": 112, "width": 112})
    adapter = get_adapter("llava")
    batch, _ = grounding_batch(adapter, processor, answers=False)
    assert _check_pixels(batch, processor, skip_clipped=True) >= 20
    assert any(((r[:, 2] - r[:, 0]) * (r[:, 3] - r[:, 1]) == 0).any() for r in batch.visual_rects)


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
