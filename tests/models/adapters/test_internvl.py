"""InternVL beyond the shared suite: the tile grid recomputed as the processor chooses it (checked against
the tiles it really emits, and by pixel content with the released 448-px settings on non-square,
multi-tile, single-tile and odd-sized images), the token order inside a tile (the model's own pixel
shuffle), the thumbnail marked as no cell, the official prompt and answers, and ``vrh detect`` +
``vrh evaluate`` end to end on a saved tiny checkpoint."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vrh import runs
from vrh.models.adapters import get_adapter
from vrh.models.adapters.internvl import tile_grid, tiling_settings
from vrh.testing import TINY_BUILDERS, save_tiny
from vrh.testing.tiny_internvl import internvl_processor, internvl_tokenizer

from .pixels import check_pixels, coord_image

ADAPTER = get_adapter("internvl")


@pytest.fixture(scope="module")
def real_processor():
    """The released checkpoints' processor settings: 448-px tiles, 256 tokens each, 1-12 tiles."""
    return internvl_processor(internvl_tokenizer())


def test_settings_are_what_the_processor_applies(real_processor):
    """The -hf image processors save crop_to_patches=False; InternVLProcessor's default turns tiling on."""
    assert real_processor.image_processor.crop_to_patches is False
    assert tiling_settings(real_processor) == {"crop_to_patches": True, "min_patches": 1, "max_patches": 12,
                                               "tile_size": (448, 448)}


@pytest.mark.parametrize("size", [(150, 100), (70, 90), (300, 40), (40, 300), (255, 85), (97, 255), (251, 250),
                                  (448, 448), (1000, 999), (1, 7), (640, 480), (2000, 600)])
def test_tile_grid_matches_the_tiles_the_processor_emits(real_processor, size):
    """Recomputed tiles (+ thumbnail) == the tiles in pixel_values; every tile but the thumbnail is the
    matching crop of the image resized to the recomputed canvas."""
    cols, rows, thumb = tile_grid(size, tiling_settings(real_processor))
    y, x = np.mgrid[0:size[1], 0:size[0]]  # [H, W] each
    image = Image.fromarray(np.stack([x * 7 % 256, y * 5 % 256, (x + y) % 256], axis=-1).astype(np.uint8))
    pv = real_processor.image_processor(image, crop_to_patches=True, return_tensors="np")["pixel_values"]
    assert pv.shape[0] == cols * rows + int(thumb)  # [tiles, C, 448, 448]
    assert thumb == (cols * rows > 1)
    canvas = real_processor.image_processor(image.resize((448 * cols, 448 * rows), Image.BICUBIC),
                                            crop_to_patches=False, do_resize=False, return_tensors="np")
    whole = canvas["pixel_values"][0]  # [C, 448*rows, 448*cols]
    for t in range(cols * rows):
        r, c = divmod(t, cols)
        assert np.allclose(pv[t], whole[:, r * 448:(r + 1) * 448, c * 448:(c + 1) * 448], atol=1e-5)


@pytest.mark.parametrize("sizes", [[(255, 85), (61, 241)], [(199, 149), (251, 250)], [(97, 255), (33, 201)]])
def test_rects_match_pixel_content_with_released_settings(real_processor, sizes):
    """Worst edge error <= 1 original pixel on 448-px tiles of 16 x 16 tokens, thumbnail included: wide
    (3 x 1), tall (1 x 4), 4:3 (4 x 3 = 12 tiles), square (a single tile, no thumbnail), odd sizes."""
    images = [coord_image(*s) for s in sizes]
    batch = ADAPTER.build_batch(real_processor, images, [ADAPTER.grounding_prompt("red ball")] * len(images))
    checked, worst = check_pixels("internvl", batch, real_processor)
    assert checked == sum(len(v) for v in batch.visual_positions) and worst <= 1.0
    for b, image in enumerate(images):
        rows, cols = batch.meta[b]["tile_grid"]
        n_cells = rows * cols * 256
        assert len(batch.visual_positions[b]) == n_cells + 256 * batch.meta[b]["thumbnail"]
        assert batch.meta[b]["token_grid"] == (rows * 16, cols * 16)
        cell = batch.cell_tokens[b]
        assert cell[:n_cells].all() and not cell[n_cells:].any()  # the thumbnail is never a cell
        # the cells tile the whole image exactly: areas add up, the outer cells touch the borders
        r = batch.visual_rects[b][:n_cells].double()
        area = ((r[:, 2] - r[:, 0]) * (r[:, 3] - r[:, 1])).sum()
        assert abs(float(area) - image.size[0] * image.size[1]) < 1e-6 * area
        assert r[:, 2].max() == image.size[0] and r[:, 3].max() == image.size[1] and r[:, :2].min() == 0


def test_single_tile_without_tiling(real_processor):
    """max_patches = 1 (or crop_to_patches off): the image is squashed to one tile, no thumbnail."""
    import copy

    proc = copy.deepcopy(real_processor)
    proc.image_processor.max_patches = 1
    batch = ADAPTER.build_batch(proc, [coord_image(200, 90)], [ADAPTER.grounding_prompt("red ball")])
    assert batch.meta[0]["tile_grid"] == (1, 1) and not batch.meta[0]["thumbnail"]
    assert len(batch.visual_positions[0]) == 256 and batch.cell_tokens[0].all()
    assert check_pixels("internvl", batch, proc)[1] <= 1.0


REAL = Path(__file__).resolve().parents[3] / ".." / "shared" / "real" / "checkpoints" / "internvl3_8b_hf"


@pytest.mark.skipif(not REAL.is_dir(), reason="the real checkpoint files (../shared/real) are absent")
def test_both_released_chat_templates_give_the_same_batch(tmp_path):
    """The -hf checkpoints ship two templates: the current one (``<IMG_CONTEXT>\\n``) and an older 475-byte one
    (``<image>\\n``; InternVL3-78B-hf, some InternVL3.5 -hf) that the processor does not expand. Both, read from
    the real files and loaded from a saved checkpoint, give the same tokens, visual positions and rectangles."""
    model, processor = TINY_BUILDERS["internvl"]()
    images = [coord_image(150, 100), coord_image(40, 40)]
    prompts = [ADAPTER.grounding_prompt(e) for e in ("red ball", "the image on the left")]
    batches = []
    for name in ("chat_template.jinja", "chat_template.475-byte-image-version.jinja"):
        ckpt = save_tiny(model, processor, tmp_path / name)
        (ckpt / "chat_template.jinja").write_text((REAL / name).read_text(encoding="utf-8"), encoding="utf-8")
        loaded = ADAPTER.processor_for(str(ckpt))
        assert loaded.chat_template == (REAL / name).read_text(encoding="utf-8")
        batches.append(ADAPTER.build_batch(loaded, images, prompts, answers=["[[1, 2, 3, 4]]"] * 2,
                                           expressions=["red ball", "image"]))
    new, old = batches
    assert torch.equal(new.inputs["input_ids"], old.inputs["input_ids"])
    for b in range(2):
        assert torch.equal(new.visual_positions[b], old.visual_positions[b]) and len(old.visual_positions[b]) > 0
        assert torch.equal(new.visual_rects[b], old.visual_rects[b])
        assert torch.equal(new.expression_positions[b], old.expression_positions[b])


def test_tile_count_mismatch_is_an_error(real_processor, monkeypatch):
    """If the recomputed grid disagrees with what the processor emitted, build_batch refuses (no silent map)."""
    import vrh.models.adapters.internvl as internvl

    monkeypatch.setattr(internvl, "tile_grid", lambda size, settings: (1, 1, False))  # the processor tiles 3 x 1
    with pytest.raises(ValueError, match="recomputed 1x1 tiles = 1 x 256 tokens, but the processor emitted 1024"):
        ADAPTER.build_batch(real_processor, [coord_image(255, 85)], [ADAPTER.grounding_prompt("red ball")])


def test_tile_tokens_are_row_major_cells_in_the_model():
    """Token k of a tile merges the 2 x 2 ViT patches at rows 2i..2i+1, columns 2j..2j+1 with
    (i, j) = divmod(k, n). Proven through the model's own ``get_image_features`` (CLS drop, reshape, pixel
    shuffle) with a vision tower that outputs each patch's (row, column) and an identity projector."""
    import copy
    from types import SimpleNamespace

    model, _ = TINY_BUILDERS["internvl"]()
    model = copy.deepcopy(model)
    side = model.config.vision_config.image_size[0] // model.config.vision_config.patch_size[0]  # patches per side
    r, c = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")  # [side, side]
    coords = torch.stack([r, c], dim=-1).reshape(1, side * side, 2).float()  # [1, P, 2] ViT order, row-major
    hidden = torch.cat([torch.full((1, 1, 2), -1.0), coords], dim=1)  # [1, 1 + P, 2] CLS first

    class CoordTower(torch.nn.Module):
        def forward(self, pixel_values, **kwargs):
            return SimpleNamespace(last_hidden_state=hidden.expand(len(pixel_values), -1, -1),
                                   hidden_states=[hidden.expand(len(pixel_values), -1, -1)])

    model.model.vision_tower = CoordTower()
    model.model.multi_modal_projector = torch.nn.Identity()
    out = model.model.get_image_features(pixel_values=torch.zeros(1, 3, 8, 8), vision_feature_layer=-1,
                                         vision_feature_select_strategy="default")
    tokens = out.pooler_output  # [1, (side/2)^2, 4 * 2]
    n = side // 2
    assert tokens.shape == (1, n * n, 8)
    for k in range(n * n):
        i, j = divmod(k, n)
        got = {tuple(v) for v in tokens[0, k].reshape(4, 2).long().tolist()}  # the merged patches' (row, col)
        assert got == {(2 * i + a, 2 * j + b) for a in (0, 1) for b in (0, 1)}, (k, got)


# --- prompt and answers ------------------------------------------------------------------------

def test_prompt_is_the_official_one():
    assert ADAPTER.grounding_prompt("the man in red") == (
        "Please provide the bounding box coordinate of the region this sentence describes: <ref>the man in red</ref>")


@pytest.mark.parametrize("text, box", [
    ("[[100, 200, 500, 800]]", (64.0, 96.0, 320.0, 384.0)),
    ("<ref>the man in red</ref><box>[[100, 200, 500, 800]]</box>", (64.0, 96.0, 320.0, 384.0)),
    ("[[0.1, 0.2, 0.5, 0.8]]", (64.0, 96.0, 320.0, 384.0)),  # four numbers summing below 4: 0-1 fractions
    ("[[0, 0, 1000, 1000]]", (0.0, 0.0, 640.0, 480.0)),
    ("[[0, 0, 1200, 1000]]", (0.0, 0.0, 768.0, 480.0)),  # not clipped: scored as written (GroundingTask clip)
])
def test_canonical_answers_parse(text, box):
    assert ADAPTER.parse_box(text, {}, (640, 480)) == pytest.approx(box)


def test_format_box_is_integer_0_1000():
    assert ADAPTER.format_box((64, 96, 320, 384), {}, (640, 480)) == "[[100, 200, 500, 800]]"


# --- end to end ----------------------------------------------------------------------------------

def test_detect_and_evaluate_run_end_to_end(tmp_path, tiny_dataset):
    """`vrh detect` then `vrh evaluate` on a saved tiny InternVL: complete run folders, K drawn from cells."""
    from vrh.cli import main

    model, processor = TINY_BUILDERS["internvl"]()
    ckpt = str(save_tiny(model, processor, tmp_path / "ckpt"))
    det, ev = tmp_path / "det", tmp_path / "ev"
    assert main(["detect", "--model", ckpt, "--data", tiny_dataset, "--n", "4", "--out", str(det),
                 "--max-new-tokens", "6", "--batch-size", "2", "--answer", "gt", "--scorers", "out/sum/mean"]) == 0
    hs = runs.read_json(det / runs.HEAD_SCORES)
    assert (hs["num_layers"], hs["num_heads"]) == (2, 4) and len(hs["ranking"]) == 8
    samples = runs.read_jsonl(det / runs.SAMPLES)
    assert len(samples) == 4
    # 84 x 56 images: 3 x 2 tiles of 4 x 4 cells + a 4 x 4 thumbnail; K only from the 96 cells
    assert all(s["n_visual_tokens"] == 112 and 0 < s["n_key_tokens"] <= 96 for s in samples)
    assert main(["evaluate", "--model", ckpt, "--data", tiny_dataset, "--mask-heads", str(det), "--k", "2",
                 "--out", str(ev), "--max-new-tokens", "6"]) == 0
    res = runs.read_json(ev / runs.RESULTS)
    assert res["k"] == 2 and len(res["masked_heads"]) == 2 and 0.0 <= res["accuracy"] <= 1.0
