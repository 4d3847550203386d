"""LLaVA beyond the shared suite: patches wholly in the padding (pad-to-square, or a centre crop larger than the
resized image) are no cells but keep their place in the patch grid, proven by pixel content, and ``vrh detect``
runs end to end on pad-to-square non-square images, Localization Heads' grid included (issue 25 item 1)."""

from __future__ import annotations

import pytest
import torch

from vrh import runs
from vrh.experiments.detection_batch import grid_shape
from vrh.models.adapters import get_adapter
from vrh.testing import tiny_llava

from .pixels import check_pixels, coord_image

ADAPTER = get_adapter("llava")


@pytest.mark.parametrize("settings, sizes", [
    ({"do_pad": True}, [(84, 56), (40, 100)]),  # wide and tall: padded rows, then padded columns
    ({"resize": 80}, [(80, 80), (100, 80)]),  # a 112-px crop of an 80-px resize: the crop pads all round
])
def test_padding_only_patches_are_no_cells(settings, sizes):
    _, processor = tiny_llava(**settings)
    images = [coord_image(*s) for s in sizes]
    batch = ADAPTER.build_batch(processor, images, [ADAPTER.grounding_prompt("red ball")] * len(images))
    check_pixels("llava", batch, processor, skip_clipped=True)  # a zero-area token shows < 10% image pixels
    for b in range(len(images)):
        rects, cell, meta = batch.visual_rects[b], batch.cell_tokens[b], batch.meta[b]
        area = (rects[:, 2] - rects[:, 0]) * (rects[:, 3] - rects[:, 1])  # [V]
        assert meta["token_grid"] == (7, 7) and len(rects) == 49
        assert torch.equal(cell, area > 0) and 0 < int(cell.sum()) < 49
        assert grid_shape(rects, cell, meta) == (7, 7)  # the patch grid, padding included
        # the cells still cover the image exactly once
        assert float(area[cell].sum()) == pytest.approx(images[b].size[0] * images[b].size[1], rel=1e-5)


def test_detect_runs_on_pad_to_square_non_square_images(tmp_path, tiny_dataset):
    """84 x 56 images padded to a square: 2 of the 7 patch rows are padding only. Detection used to stop with
    "visual tokens do not form a grid: 49 tokens, 6 rows x 7 cols"; K now comes from the 35 cells only, and
    Localization Heads gets the 7 x 7 grid."""
    from vrh.analyses import detect
    from vrh.testing import save_tiny

    model, processor = tiny_llava(do_pad=True)
    ckpt = str(save_tiny(model, processor, tmp_path / "ckpt"))
    out = tmp_path / "det"
    detect.run(detect.Config(model=ckpt, data=tiny_dataset, out=str(out), n=2, answer="gt", batch_size=2,
                             max_new_tokens=4, scorers=("out/sum/mean", "localization_heads")))
    samples = runs.read_jsonl(out / runs.SAMPLES)
    assert len(samples) == 2 and all(s["n_visual_tokens"] == 49 and 0 < s["n_key_tokens"] <= 35 for s in samples)
    hs = runs.read_json(out / runs.HEAD_SCORES)
    assert (hs["num_layers"], hs["num_heads"]) == (2, 4) and len(hs["ranking"]) == 8


@pytest.mark.parametrize("name", ["llava", "llava_next"])
def test_processor_config_without_num_additional_image_tokens_runs(tmp_path, name):
    """Older processor_config.json files omit ``num_additional_image_tokens`` (the processor then assumes 0, one
    token per tile short of what the CLIP tower gives: "2339 visual tokens but the processor outputs map 2340");
    load() fills it from the tower (its class token), as it fills ``patch_size`` and the feature strategy."""
    import json

    from vrh.testing import TINY_BUILDERS, save_tiny

    model, processor = TINY_BUILDERS[name]()
    ckpt = save_tiny(model, processor, tmp_path / "ckpt")
    config = json.loads((ckpt / "processor_config.json").read_text())
    for key in ("num_additional_image_tokens", "patch_size", "vision_feature_select_strategy"):
        del config[key]
    (ckpt / "processor_config.json").write_text(json.dumps(config))
    adapter = get_adapter(name)
    model, loaded = adapter.load(str(ckpt))
    assert (loaded.num_additional_image_tokens, loaded.patch_size, loaded.vision_feature_select_strategy) == (
        1, 16, "default")
    batch = adapter.build_batch(loaded, [coord_image(150, 100)], [adapter.grounding_prompt("red ball")])
    with torch.no_grad():
        assert model(**batch.inputs).logits.shape[1] == batch.seq_len  # the model takes the processor's tokens
