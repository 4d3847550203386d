"""Qwen-VL beyond the shared suite: the real published ``preprocessor_config.json`` files of Qwen2.5-VL-7B-Instruct,
the first upload's (``Qwen2_5_VLImageProcessor``, a class transformers 5 does not know) and the current one's
(``Qwen2VLImageProcessor``), load and give the same inputs (issue 25 item 4)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from vrh.models.adapters import get_adapter
from vrh.models.adapters.base import load_processor
from vrh.testing import save_tiny, tiny_qwen2_5_vl

from .pixels import coord_image

REAL = Path(__file__).resolve().parents[3] / ".." / "shared" / "real" / "checkpoints" / "qwen2_5_vl_7b"
pytestmark = pytest.mark.skipif(not REAL.is_dir(), reason="the real checkpoint files (../shared/real) are absent")
ADAPTER = get_adapter("qwen2_5_vl")


def _checkpoint(tmp_path: Path, preprocessor: str) -> Path:
    """The tiny Qwen2.5-VL saved with the real ``preprocessor`` file in place of its own image-processor settings
    (the released checkpoints keep them in preprocessor_config.json, not in processor_config.json)."""
    model, processor = tiny_qwen2_5_vl()
    ckpt = save_tiny(model, processor, tmp_path / preprocessor)
    config = json.loads((ckpt / "processor_config.json").read_text())
    config.pop("image_processor")
    (ckpt / "processor_config.json").write_text(json.dumps(config))
    shutil.copy(REAL / preprocessor, ckpt / "preprocessor_config.json")
    return ckpt


def test_first_release_preprocessor_config_loads_as_the_current_one(tmp_path):
    images = [coord_image(150, 100), coord_image(70, 90)]
    prompts = [ADAPTER.grounding_prompt("red ball")] * 2
    batches = []
    for name in ("preprocessor_config.first_release.json", "preprocessor_config.json"):
        ckpt = _checkpoint(tmp_path, name)
        processor = load_processor(str(ckpt), ADAPTER.processor_class)
        assert type(processor.image_processor).__name__.startswith("Qwen2VLImageProcessor")
        assert processor.image_processor.size["shortest_edge"] == 3136  # the real file's min_pixels
        batches.append(ADAPTER.build_batch(processor, images, prompts))
        assert json.loads((ckpt / "preprocessor_config.json").read_text()) == json.loads((REAL / name).read_text())
    first, current = batches
    for key in ("input_ids", "pixel_values", "image_grid_thw"):
        assert torch.equal(first.inputs[key], current.inputs[key])
    assert all(torch.equal(a, b) for a, b in zip(first.visual_rects, current.visual_rects))


def test_first_release_checkpoint_loads_through_the_adapter(tmp_path):
    model, processor = ADAPTER.load(str(_checkpoint(tmp_path, "preprocessor_config.first_release.json")))
    batch = ADAPTER.build_batch(processor, [coord_image(150, 100)], [ADAPTER.grounding_prompt("red ball")])
    with torch.no_grad():
        assert model(**batch.inputs).logits.shape[1] == batch.seq_len
