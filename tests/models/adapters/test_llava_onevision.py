"""LLaVA-OneVision beyond the shared suite: the anyres layout (base tokens, unpadded grid, a newline per row)
proven by pixel content on wide, tall and odd-sized images; the ``anyres_max_9`` bilinear shrink proven by the
blended patch centres read through the model's own packing; capture and masking on a shrunk grid; the
lmms-eval box format; the processor / model agreement check; and the commands end to end."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from vrh.models.adapters import get_adapter
from vrh.models.adapters.llava_onevision import max_tiles, shrunk_shape
from vrh.testing import TINY_BUILDERS, save_tiny
from vrh.testing.tiny_llava_onevision import BIG_PINPOINTS, tiny_llava_onevision

from .checks import assert_capture_matches_eager, assert_masking_is_exact
from .pixel_readers import packed_sources
from .pixels import check_pixels, coord_image

ADAPTER = get_adapter("llava_onevision")
SIZES = [(150, 100), (70, 90), (200, 60), (60, 180), (33, 77)]


def _batch(processor, sizes, answers=False):
    images = [coord_image(w, h) for w, h in sizes]
    exprs = ["red ball", "man in a hat next to the window", "cup", "dog", "tree"][:len(sizes)]
    prompts = [ADAPTER.grounding_prompt(e) for e in exprs]
    ans = [ADAPTER.format_box((2, 3, 20, 30), {}, im.size) for im in images] if answers else None
    return ADAPTER.build_batch(processor, images, prompts, answers=ans, expressions=exprs if answers else None)


def test_rects_match_pixel_content():
    """Base, grid and newline tokens where the model's own packing puts them; every token that does not
    straddle the canvas padding fills its rectangle within 1 original pixel."""
    _, processor = TINY_BUILDERS["llava_onevision"]()
    batch = _batch(processor, SIZES)
    checked, worst = check_pixels("llava_onevision", batch, processor)
    n_tokens = sum(int(c.sum()) + 9 for c in batch.cell_tokens)  # every base and grid token
    assert checked == n_tokens and worst <= 1.0
    for b, (w, h) in enumerate(SIZES):
        meta, cell, rects = batch.meta[b], batch.cell_tokens[b], batch.visual_rects[b]
        assert not meta["shrunk"]
        rows, cols = meta["token_grid"]
        assert len(rects) == 9 + rows * (cols + 1)
        newline = torch.zeros(len(rects), dtype=torch.bool)
        newline[9 + cols::cols + 1] = True  # after each grid row
        assert not cell[:9].any() and not cell[newline].any() and cell[9:][~newline[9:]].all()
        assert (rects[newline] == torch.tensor([0.0, 0.0, w, h])).all()
        area = (rects[:9, 2] - rects[:9, 0]) * (rects[:9, 3] - rects[:9, 1])  # the base tokens tile the image
        assert float(area.sum()) == pytest.approx(w * h)


def _patch_centres(batch, b, processor) -> torch.Tensor:
    """[N, g*g, 3] per input patch: mean x and mean y carried by its image pixels (R, G) and the fraction of
    its pixels that are image (B = 255), read from pixel_values only."""
    from transformers.models.llava_onevision.modeling_llava_onevision import image_size_to_num_patches

    ip = processor.image_processor
    g = int(round(processor.num_image_tokens ** 0.5))
    mean, std = np.asarray(ip.image_mean), np.asarray(ip.image_std)
    hw = [int(v) for v in batch.inputs["image_sizes"][b]]
    n = image_size_to_num_patches(hw, ip.image_grid_pinpoints, int(ip.size["height"]))  # the rest pads the batch
    pv = batch.inputs["pixel_values"][b, :n].double().numpy().transpose(0, 2, 3, 1)  # [N, S, S, C]
    pv = (pv * std + mean) * 255
    s = pv.shape[1]
    p = s // g
    patches = pv.reshape(n, g, p, g, p, 3).transpose(0, 1, 3, 2, 4, 5).reshape(n, g * g, p * p, 3)  # [N, g*g, P*P, C]
    inside = patches[..., 2] >= 254  # [N, g*g, P*P]
    count = np.maximum(inside.sum(-1), 1)
    feats = np.stack([(patches[..., 0] * inside).sum(-1) / count, (patches[..., 1] * inside).sum(-1) / count,
                      inside.mean(-1)], axis=-1)  # [N, g*g, 3]
    return torch.from_numpy(feats)


def test_shrunk_grid_tokens_sit_at_their_blend_centres():
    """With pinpoints up to 4 x 4 tiles a 3:2 image exceeds anyres_max_9 and the model shrinks its grid
    bilinearly: each grid token is a blend of patches. Blending every patch's mean (x, y) through the model's
    own ``pack_image_features`` gives the point each token samples; it must be its rectangle's centre (1 px)."""
    _, processor = tiny_llava_onevision(image_grid_pinpoints=BIG_PINPOINTS)
    batch = _batch(processor, [(150, 100), (200, 60)])
    assert batch.meta[0]["shrunk"] and batch.meta[0]["token_grid"] == (7, 10)  # 9 x 12 -> ratio 1.15 -> 7 x 10
    with pytest.raises(ValueError, match="shrinks"):  # the exact-pixel reader refuses a blended grid
        check_pixels("llava_onevision", batch, processor)
    checked = 0
    for b in range(2):
        hw = tuple(int(v) for v in batch.inputs["image_sizes"][b])
        packed = packed_sources(processor, hw, _patch_centres(batch, b, processor))  # [V, 3]
        rects, cell = batch.visual_rects[b].double(), batch.cell_tokens[b]
        assert len(packed) == len(rects)
        newline = (packed == -1).all(-1)
        assert newline.sum() == batch.meta[b]["token_grid"][0] and not cell[newline].any()
        grid = cell & (packed[:, 2] > 0.999)  # grid tokens whose source patches are all image pixels
        centre = (rects[grid, :2] + rects[grid, 2:]) / 2 - 0.5  # original pixel x holds R = x, centred at x + 1/2
        assert (packed[grid, :2] - centre).abs().max() <= 1.0
        checked += int(grid.sum())
        rows, cols = batch.meta[b]["token_grid"]
        cells = rects[cell]
        assert len(cells) == rows * cols and len(cells[:, 0].unique()) == cols and len(cells[:, 1].unique()) == rows
    assert checked >= 60


def test_capture_matches_eager_and_masking_is_exact_on_a_shrunk_grid():
    model, processor = tiny_llava_onevision(image_grid_pinpoints=BIG_PINPOINTS)
    batch = _batch(processor, [(150, 100), (33, 77)], answers=True)
    assert batch.meta[0]["shrunk"] and not batch.inputs["attention_mask"].all()  # one sample is left-padded
    queries = [torch.cat([batch.visual_positions[b][-3:], batch.expression_positions[b],
                          batch.answer_positions[b] - 1]).unique() for b in range(2)]
    assert_capture_matches_eager(model, ADAPTER, batch.inputs, queries)
    assert_masking_is_exact(model, ADAPTER, batch.inputs, [(0, 2), (1, 0)])


def test_shrink_rule_and_settings():
    assert shrunk_shape(9, 12, 3, 9) == (7, 10) and shrunk_shape(9, 9, 3, 9) == (9, 9)
    assert shrunk_shape(10, 10, 3, 9) == (8, 8)  # ratio 10/9 > 1.1; in floats 10 // (10/9) = 8, as in the model
    assert shrunk_shape(243, 162, 27, 9) == (99, 66)  # a released 384-px model: 9 x 6 tiles of 27 x 27
    assert max_tiles("anyres_max_9") == 9
    with pytest.raises(ValueError, match="vision_aspect_ratio"):
        max_tiles("anyres")


def test_load_refuses_a_processor_that_disagrees_with_the_model(tmp_path):
    model, processor = TINY_BUILDERS["llava_onevision"]()
    save_tiny(model, processor, tmp_path / "ok")
    adapter = get_adapter("llava_onevision")
    _, loaded = adapter.load(str(tmp_path / "ok"))  # image-only processor where torchvision is missing
    assert loaded.vision_aspect_ratio == "anyres_max_9" and adapter.answer_sep == ""
    bad = copy.copy(processor)
    bad.vision_aspect_ratio = "anyres_max_4"
    save_tiny(model, bad, tmp_path / "bad")
    with pytest.raises(ValueError, match="vision_aspect_ratio"):
        get_adapter("llava_onevision").load(str(tmp_path / "bad"))


def test_box_format_is_lmms_eval_floats():
    assert ADAPTER.format_box((15, 25, 90, 75), {}, (150, 100)) == "[0.10, 0.25, 0.60, 0.75]"
    assert ADAPTER.parse_box("[0.1, 0.25, 0.6, 0.75]", {}, (150, 100)) == pytest.approx((15, 25, 90, 75))
    assert ADAPTER.grounding_prompt("red ball").endswith("the region this sentence describes: red ball")
    assert ADAPTER.answer_sep == ""  # the Qwen2 template ends the generation prompt on "assistant\n"


def test_detect_and_evaluate_run_end_to_end(detect_then_evaluate):
    out, samples, res = detect_then_evaluate(TINY_BUILDERS["llava_onevision"], n=4)
    assert out["num_layers"] == 2 and out["num_heads"] == 4
    # 84 x 56 images: 3 x 3 base tokens, a 2 x 2 tile canvas unpadded to 4 x 6 cells, 4 newlines
    assert len(samples) == 4 and all(s["n_visual_tokens"] == 37 and 0 < s["n_key_tokens"] <= 24 for s in samples)
    assert res["k"] == 2 and len(res["masked_heads"]) == 2 and 0.0 <= res["accuracy"] <= 1.0
